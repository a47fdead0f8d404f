import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { silentLogger, type Logger } from '../../src/log';
import { startService, type Service } from '../../src/main';
import { loadSettings } from '../../src/settings/settings';
import { rlsClient, type RlsClient } from './grpc-client';

/**
 * The real service, in-process: memory store, gRPC on 127.0.0.1:0, config from a fresh temp dir.
 * Side ports (HTTP, debug) are 0 too, so parallel test files never collide.
 */

export interface TestService {
  /** host:port of the gRPC server. */
  readonly addr: string;
  readonly client: RlsClient;
  readonly service: Service;
  readonly configDir: string;
  /** Writes (or replaces) one config file in the config dir. */
  writeConfig(file: string, yaml: string): void;
  /** Closes the client and the service, and removes the config dir. */
  stop(): Promise<void>;
}

export interface TestServiceOptions {
  /** Config files by name; may be empty (the service then starts NOT_SERVING). */
  readonly config?: Readonly<Record<string, string>>;
  /** Environment overrides on top of the test defaults. */
  readonly env?: Readonly<Record<string, string>>;
  readonly logger?: Logger;
}

/** Every listener on 127.0.0.1 and a port the system picks (the service reports the bound ones). */
export const LOOPBACK_ANY_PORT: Readonly<Record<string, string>> = Object.freeze({
  GRPC_HOST: '127.0.0.1',
  GRPC_PORT: '0',
  HOST: '127.0.0.1',
  PORT: '0',
  DEBUG_HOST: '127.0.0.1',
  DEBUG_PORT: '0',
});

export async function startTestService(options: TestServiceOptions = {}): Promise<TestService> {
  const configDir = fs.mkdtempSync(path.join(os.tmpdir(), 'slidegate-test-'));
  const writeConfig = (file: string, yaml: string): void => fs.writeFileSync(path.join(configDir, file), yaml);
  for (const [file, yaml] of Object.entries(options.config ?? {})) writeConfig(file, yaml);
  const settings = loadSettings({
    CONFIG_PATH: configDir,
    BACKEND_TYPE: 'memory',
    ...LOOPBACK_ANY_PORT,
    SHUTDOWN_GRACE_MS: '2000',
    // No statsd agent listens in tests; the statsd tests turn it on with their own.
    USE_STATSD: 'false',
    // Every test service warms up, briefly: the path runs everywhere without slowing the suite.
    WARM_UP_CALLS: '1000',
    ...options.env,
  });
  let service: Service;
  try {
    service = await startService(settings, { logger: options.logger ?? silentLogger() });
  } catch (err) {
    fs.rmSync(configDir, { recursive: true, force: true });
    throw err;
  }
  const addr = `127.0.0.1:${service.grpcPort}`;
  const client = rlsClient(addr);
  return {
    addr,
    client,
    service,
    configDir,
    writeConfig,
    stop: async () => {
      client.close();
      await service.close();
      fs.rmSync(configDir, { recursive: true, force: true });
    },
  };
}
