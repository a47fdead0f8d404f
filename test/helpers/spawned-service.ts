import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { LOOPBACK_ANY_PORT } from './service';

/**
 * The built service (dist/src/main.js) in a process of its own, on loopback ports the system picks:
 * for tests that measure the process (its RSS) or that must survive the service misbehaving.
 */

const MAIN_JS = path.resolve(__dirname, '../../dist/src/main.js');

export interface SpawnedService {
  readonly child: ChildProcess;
  readonly grpcPort: number;
  readonly httpPort: number;
  readonly debugPort: number;
  /** Every JSON log line so far. */
  readonly lines: readonly Record<string, unknown>[];
  /** The process's resident set size, bytes (from /proc). */
  rssBytes(): number;
  /** CPU time the process has used, user and system, seconds (from /proc). */
  cpuSeconds(): number;
  /** SIGTERM, then SIGKILL after 5 s; resolves once it has exited. */
  stop(): Promise<void>;
}

export interface SpawnOptions {
  /** Config files by name. */
  readonly config: Readonly<Record<string, string>>;
  readonly env?: Readonly<Record<string, string>>;
}

/** Starts the service; resolves once its gRPC and HTTP ports listen (rejects if it exits first). */
export async function spawnService(options: SpawnOptions): Promise<SpawnedService> {
  if (!fs.existsSync(MAIN_JS)) throw new Error(`${MAIN_JS} is missing: build first (npx tsc -p tsconfig.json)`);
  const configDir = fs.mkdtempSync(path.join(os.tmpdir(), 'slidegate-spawned-'));
  for (const [file, text] of Object.entries(options.config)) fs.writeFileSync(path.join(configDir, file), text);
  const child = spawn(process.execPath, [MAIN_JS], {
    env: {
      PATH: process.env.PATH,
      CONFIG_PATH: configDir,
      BACKEND_TYPE: 'memory',
      ...LOOPBACK_ANY_PORT,
      USE_STATSD: 'false',
      WARM_UP_CALLS: '0',
      LOG_FORMAT: 'json',
      LOG_LEVEL: 'info',
      SHUTDOWN_GRACE_MS: '1000',
      ...options.env,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: Record<string, unknown>[] = [];
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  exited.finally(() => fs.rmSync(configDir, { recursive: true, force: true })).catch(() => undefined);
  const ports = await new Promise<{ grpc: number; http: number; debug: number }>((resolve, reject) => {
    let buffered = '';
    let grpc: number | undefined;
    child.stdout!.on('data', (chunk: Buffer) => {
      buffered += chunk.toString();
      const parts = buffered.split('\n');
      buffered = parts.pop()!;
      for (const part of parts) {
        const line = JSON.parse(part) as Record<string, unknown>;
        lines.push(line);
        if (line.msg === 'gRPC listening') grpc = line.port as number;
        if (line.msg === 'HTTP listening') {
          const portOf = (where: unknown): number => Number(String(where).slice(String(where).lastIndexOf(':') + 1));
          resolve({ grpc: grpc ?? 0, http: portOf(line.http), debug: portOf(line.debug) });
        }
      }
    });
    child.once('exit', (code) => reject(new Error(`service exited with ${code}: ${JSON.stringify(lines)}`)));
  });
  return {
    child,
    grpcPort: ports.grpc,
    httpPort: ports.http,
    debugPort: ports.debug,
    lines,
    rssBytes: () => {
      const status = fs.readFileSync(`/proc/${child.pid}/status`, 'utf8');
      return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) * 1024;
    },
    cpuSeconds: () => {
      // utime and stime, the 14th and 15th fields, in clock ticks (100 a second on Linux); the name before them may hold spaces.
      const stat = fs.readFileSync(`/proc/${child.pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      return (Number(fields[11]) + Number(fields[12])) / 100;
    },
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const kill = setTimeout(() => child.kill('SIGKILL'), 5_000);
      child.kill('SIGTERM');
      await exited;
      clearTimeout(kill);
    },
  };
}
