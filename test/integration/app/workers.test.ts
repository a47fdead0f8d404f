import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as http2 from 'node:http2';
import * as os from 'node:os';
import * as path from 'node:path';
import { protoRoot } from '../../../src/wire/proto';
import { freePort, startRedis, type RedisServer } from '../../helpers/redis';

/**
 * WORKERS=2 against a real redis-server: the built service (dist/src/main.js) forks two workers that
 * share the gRPC port, and together they admit exactly the limit; SIGTERM stops everything with exit 0.
 */

const MAIN_JS = path.resolve(__dirname, '../../../dist/src/main.js');
const RLS_PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';
const CHECK_PATH = '/grpc.health.v1.Health/Check';
const root = protoRoot();
const RequestType = root.lookupType('envoy.service.ratelimit.v3.RateLimitRequest');
const ResponseType = root.lookupType('envoy.service.ratelimit.v3.RateLimitResponse');
const HealthRequest = root.lookupType('grpc.health.v1.HealthCheckRequest');
const HealthResponse = root.lookupType('grpc.health.v1.HealthCheckResponse');

function frame(payload: Uint8Array): Buffer {
  const prefix = Buffer.alloc(5);
  prefix.writeUInt32BE(payload.length, 1);
  return Buffer.concat([prefix, payload]);
}

/** One unary call on a raw session; resolves to the response message bytes, rejects on a non-OK status. */
function unary(session: http2.ClientHttp2Session, pathName: string, body: Buffer): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ':method': 'POST', ':path': pathName, 'content-type': 'application/grpc', te: 'trailers' });
    const chunks: Buffer[] = [];
    let status: string | undefined;
    let message: string | undefined;
    stream.on('response', (h) => {
      status = h['grpc-status'] as string | undefined;
      message = h['grpc-message'] as string | undefined;
    });
    stream.on('trailers', (t) => {
      status = t['grpc-status'] as string | undefined;
      message = t['grpc-message'] as string | undefined;
    });
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => (status === '0' ? resolve(Buffer.concat(chunks).subarray(5)) : reject(new Error(`grpc-status ${status}: ${message}`))));
    stream.on('error', reject);
    stream.end(body);
  });
}

function connect(port: number): Promise<http2.ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://127.0.0.1:${port}`);
    session.once('connect', () => resolve(session));
    session.once('error', reject);
  });
}

/** Waits until several fresh connections in a row (so both workers, handed connections in turn) answer SERVING. */
async function waitServing(port: number, child: ChildProcess, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  const body = frame(HealthRequest.encode({ service: 'ratelimit' }).finish());
  let streak = 0;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`service exited with ${child.exitCode}`);
    try {
      const session = await connect(port);
      try {
        const reply = HealthResponse.decode(await unary(session, CHECK_PATH, body)) as unknown as { status: number };
        streak = reply.status === 1 ? streak + 1 : 0;
        if (streak >= 6) return;
        if (streak > 0) continue;
      } finally {
        session.close();
      }
    } catch {
      streak = 0;
    }
    if (Date.now() > deadline) throw new Error('service did not become SERVING');
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('WORKERS=2 with the Redis backend', () => {
  let redis: RedisServer;
  let child: ChildProcess;
  let configDir: string;
  let grpcPort: number;
  let httpPort: number;
  let stderr = '';

  beforeAll(async () => {
    if (!fs.existsSync(MAIN_JS)) throw new Error(`${MAIN_JS} is missing: build first (npx tsc -p tsconfig.json, or make test)`);
    redis = await startRedis();
    configDir = fs.mkdtempSync(path.join(os.tmpdir(), 'slidegate-workers-'));
    fs.writeFileSync(path.join(configDir, 'edge.yaml'), 'domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 100}\n');
    grpcPort = await freePort();
    httpPort = await freePort();
    child = spawn(process.execPath, [MAIN_JS], {
      env: {
        PATH: process.env.PATH,
        WORKERS: '2',
        BACKEND_TYPE: 'redis',
        REDIS_URL: redis.url,
        CONFIG_PATH: configDir,
        GRPC_HOST: '127.0.0.1',
        GRPC_PORT: String(grpcPort),
        HOST: '127.0.0.1',
        PORT: String(httpPort),
        DEBUG_HOST: '127.0.0.1',
        DEBUG_PORT: '0',
        LOG_LEVEL: 'warn',
        SHUTDOWN_GRACE_MS: '2000',
        // This test is about counting, not latency: a cold process answering a 300-call burst may miss the 10 ms default.
        STORE_TIMEOUT_MS: '1000',
      },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    child.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
    await waitServing(grpcPort, child, 10_000);
  }, 20_000);

  afterAll(async () => {
    if (child && child.exitCode === null) child.kill('SIGKILL');
    await redis?.stop();
    if (configDir) fs.rmSync(configDir, { recursive: true, force: true });
  });

  it('admits exactly 100 of 300 concurrent calls spread over both workers', async () => {
    const body = frame(RequestType.encode({ domain: 'edge', descriptors: [{ entries: [{ key: 'user', value: `w-${Date.now()}` }] }] }).finish());
    // Separate connections, so the primary hands them to both workers.
    const sessions = await Promise.all(Array.from({ length: 6 }, () => connect(grpcPort)));
    try {
      const replies = await Promise.all(Array.from({ length: 300 }, (_, i) => unary(sessions[i % sessions.length], RLS_PATH, body)));
      const codes = replies.map((r) => (ResponseType.decode(r) as unknown as { overallCode: number }).overallCode);
      expect(codes.filter((c) => c === 1)).toHaveLength(100);
      expect(codes.filter((c) => c === 2)).toHaveLength(200);
    } finally {
      for (const s of sessions) s.close();
    }
  });

  it('answers every scrape of /metrics for both workers together', async () => {
    // A new connection per scrape: the primary hands connections to the workers in turn.
    const scrape = (): Promise<string> =>
      new Promise((resolve, reject) => {
        http
          .get({ host: '127.0.0.1', port: httpPort, path: '/metrics', agent: false }, (res) => {
            let body = '';
            res.on('data', (c: Buffer) => (body += c.toString()));
            res.on('end', () => (res.statusCode === 200 ? resolve(body) : reject(new Error(`HTTP ${res.statusCode}: ${body}`))));
          })
          .on('error', reject);
      });
    const value = (text: string, series: string): number => {
      const line = text.split('\n').find((l) => l.startsWith(series + ' '));
      if (line === undefined) throw new Error(`no ${series} in:\n${text.slice(0, 2000)}`);
      return Number(line.slice(series.length + 1));
    };
    const rule = '{domain="edge",descriptor="user"}';
    for (let i = 0; i < 6; i++) {
      const text = await scrape();
      // The 300 calls of the test above, wherever they landed.
      expect(value(text, `ratelimit_service_rate_limit_total_hits${rule}`)).toBe(300);
      expect(value(text, `ratelimit_service_rate_limit_over_limit${rule}`)).toBe(200);
      expect(value(text, `ratelimit_service_rate_limit_within_limit${rule}`)).toBe(100);
      expect(value(text, 'ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"}')).toBe(300);
    }
  });

  it('replaces a worker that crashes, and keeps answering meanwhile', async () => {
    const workerPids = (): number[] => {
      try {
        return execFileSync('pgrep', ['-P', String(child.pid)], { encoding: 'utf8' })
          .trim()
          .split('\n')
          .filter(Boolean)
          .map(Number);
      } catch {
        return [];
      }
    };
    const before = workerPids();
    expect(before).toHaveLength(2);
    process.kill(before[0], 'SIGKILL');
    const deadline = Date.now() + 10_000;
    let after = workerPids();
    while (!(after.length === 2 && !after.includes(before[0])) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      after = workerPids();
    }
    expect(after).toHaveLength(2);
    expect(after).not.toContain(before[0]);
    await waitServing(grpcPort, child, 10_000);
  });

  it('exits 0 on SIGTERM once both workers have stopped', async () => {
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const t0 = Date.now();
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(Date.now() - t0).toBeLessThan(5_000);
    // The one error line is the crash report of the worker killed above.
    expect(stderr.match(/FATAL/g) ?? []).toHaveLength(0);
  });
});
