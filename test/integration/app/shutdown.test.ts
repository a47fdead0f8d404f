import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as http from 'node:http';
import * as http2 from 'node:http2';
import * as net from 'node:net';
import { descriptor, grpc, grpcCode, rlsClient } from '../../helpers/grpc-client';
import { rawCommand, startRedis, type RedisServer } from '../../helpers/redis';
import { LOOPBACK_ANY_PORT } from '../../helpers/service';
import { MAIN, spawnService, waitForServing } from '../../helpers/service-process';

/**
 * SIGTERM against the built service (`node dist/src/main.js`) with calls in flight. To hold calls
 * in flight deterministically, Redis is paused (CLIENT PAUSE) while they are sent: they wait inside
 * the service for their store round trip when the signal arrives. Every one of them must still be
 * answered, new connections must be refused, health must turn NOT_SERVING, and the process must exit 0
 * within SHUTDOWN_GRACE_MS.
 */

const GRACE_MS = 5_000;
const PAUSE_MS = 1_500;

const EDGE = `
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000}
`;

let redis: RedisServer;
let configDir: string;

beforeAll(async () => {
  if (!fs.existsSync(MAIN)) throw new Error(`${MAIN} is missing: build first (npx tsc -p tsconfig.json, or make test)`);
  redis = await startRedis();
  configDir = fs.mkdtempSync(path.join(os.tmpdir(), 'slidegate-shutdown-'));
  fs.writeFileSync(path.join(configDir, 'edge.yaml'), EDGE);
});

afterAll(async () => {
  await redis?.stop();
  if (configDir) fs.rmSync(configDir, { recursive: true, force: true });
});

describe('SIGTERM', () => {
  it('answers every call in flight, refuses new ones, goes NOT_SERVING and exits 0 within the grace period', async () => {
    const svc = await spawnService({
      CONFIG_PATH: configDir,
      BACKEND_TYPE: 'redis',
      REDIS_URL: redis.url,
      // Longer than the pause, so held calls wait for Redis instead of failing.
      STORE_TIMEOUT_MS: '5000',
      ...LOOPBACK_ANY_PORT,
      LOG_LEVEL: 'info',
      LOG_FORMAT: 'json',
      SHUTDOWN_GRACE_MS: String(GRACE_MS),
    });
    const address = `127.0.0.1:${svc.grpcPort}`;
    const client = rlsClient(address);
    try {
      await waitForServing(client);
      const warm = await client.shouldRateLimit({ domain: 'edge', descriptors: [descriptor([['user', 'warm']])] });
      expect(warm.overallCode).toBe('OK');
      const watch = client.healthWatch('');
      expect(await watch.next()).toBe('SERVING');

      expect(await rawCommand(redis.port, `CLIENT PAUSE ${PAUSE_MS} ALL`)).toMatch(/^\+OK/);
      const calls = Array.from({ length: 50 }, (_, i) =>
        client.shouldRateLimit({ domain: 'edge', descriptors: [descriptor([['user', `in-flight-${i}`]])] }, { deadlineMs: 10_000 }),
      );
      const json = fetch(`http://127.0.0.1:${svc.httpPort}/json`, {
        method: 'POST',
        body: JSON.stringify({ domain: 'edge', descriptors: [{ entries: [{ key: 'user', value: 'http-in-flight' }] }] }),
      });
      // Let every call reach the service and queue behind the paused Redis.
      await new Promise((r) => setTimeout(r, 300));

      const signalledAt = Date.now();
      svc.child.kill('SIGTERM');

      expect(await watch.next()).toBe('NOT_SERVING');
      // The listening sockets are closed: a new connection is refused on both ports.
      const late = rlsClient(address);
      try {
        // Refused at once; the deadline only bounds a loaded machine (1 s ran out at load average 13).
        expect(await grpcCode(late.shouldRateLimit({ domain: 'edge', descriptors: [descriptor([['user', 'late']])] }, { deadlineMs: 4_000 }))).toBe(
          grpc.status.UNAVAILABLE,
        );
      } finally {
        late.close();
      }
      await expect(fetch(`http://127.0.0.1:${svc.httpPort}/healthcheck`)).rejects.toThrow();

      const responses = await Promise.all(calls);
      expect(responses.map((r) => r.overallCode)).toEqual(Array(50).fill('OK'));
      const jsonReply = await json;
      expect(jsonReply.status).toBe(200);
      expect(JSON.parse(await jsonReply.text()).overallCode).toBe('OK');

      const exit = await svc.exited;
      expect(exit.code).toBe(0);
      expect(exit.at - signalledAt).toBeLessThan(GRACE_MS);
      watch.cancel();
    } finally {
      client.close();
      svc.child.kill('SIGKILL');
    }
  }, 60_000);
});

/** Resolves once `socket` has connected. */
function connected(socket: net.Socket): Promise<net.Socket> {
  return new Promise((resolve, reject) => socket.once('connect', () => resolve(socket)).once('error', reject));
}

/** One HTTP/1.1 request on a keep-alive agent, whose connection then stays open and idle. */
function keepAliveRequest(port: number, agent: http.Agent, path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port, path, agent }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      })
      .on('error', reject);
  });
}

describe.each(['http2', 'grpc-js'])('SIGTERM with idle clients connected (GRPC_TRANSPORT=%s)', (transport) => {
  // Long enough that waiting it out cannot pass for an early exit, even on a loaded machine.
  const LONG_GRACE_MS = 10_000;

  it('exits 0 as soon as nothing is in flight, not after SHUTDOWN_GRACE_MS', async () => {
    const svc = await spawnService({
      CONFIG_PATH: configDir,
      BACKEND_TYPE: 'memory',
      GRPC_TRANSPORT: transport,
      WARM_UP_CALLS: '0',
      ...LOOPBACK_ANY_PORT,
      LOG_LEVEL: 'info',
      LOG_FORMAT: 'json',
      SHUTDOWN_GRACE_MS: String(LONG_GRACE_MS),
    });
    const agent = new http.Agent({ keepAlive: true });
    const client = rlsClient(`127.0.0.1:${svc.grpcPort}`);
    const sockets: net.Socket[] = [];
    let h2: http2.ClientHttp2Session | undefined;
    try {
      await waitForServing(client);
      // Idle HTTP/1.1 keep-alive connections, after one request each, on the HTTP and debug ports.
      expect(await keepAliveRequest(svc.httpPort, agent, '/healthcheck')).toBe(200);
      expect(await keepAliveRequest(svc.debugPort, agent, '/rlconfig')).toBe(200);
      // An idle HTTP/2 client on the gRPC port, after one call (the grpc-js client above is another).
      h2 = http2.connect(`http://127.0.0.1:${svc.grpcPort}`);
      h2.on('error', () => undefined);
      await new Promise<void>((resolve) => h2!.once('remoteSettings', () => resolve()));
      // Connections that never send a byte, on every port (a proxy's preconnect, a port scan).
      for (const port of [svc.grpcPort, svc.httpPort, svc.debugPort]) sockets.push(await connected(net.connect(port, '127.0.0.1')));
      for (const s of sockets) s.on('error', () => undefined);

      const signalledAt = Date.now();
      svc.child.kill('SIGTERM');
      const exit = await svc.exited;
      expect(exit.code).toBe(0);
      expect(exit.at - signalledAt).toBeLessThan(LONG_GRACE_MS / 2);
    } finally {
      client.close();
      agent.destroy();
      h2?.destroy();
      for (const s of sockets) s.destroy();
      svc.child.kill('SIGKILL');
    }
  }, 60_000);
});
