import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { request } from '../../helpers/http-request';
import { freePort, startRedis, type RedisServer } from '../../helpers/redis';
import { LOOPBACK_ANY_PORT } from '../../helpers/service';

/**
 * Two replicas of the built service on one real redis-server, the first with WORKERS=2: each
 * process publishes its live view to Redis every second, and /top on any process of either replica
 * answers with all of them merged, within 3 s of the last call.
 */

const MAIN_JS = path.resolve(__dirname, '../../../dist/src/main.js');
const EDGE = 'domain: edge\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 5}\n';

interface Replica {
  readonly child: ChildProcess;
  readonly httpPort: number;
  readonly debugPort: number;
}

let redis: RedisServer;
let configDir: string;
const replicas: Replica[] = [];

async function startReplica(workers: number): Promise<Replica> {
  const httpPort = await freePort();
  const debugPort = await freePort();
  const child = spawn(process.execPath, [MAIN_JS], {
    env: {
      PATH: process.env.PATH,
      ...LOOPBACK_ANY_PORT,
      PORT: String(httpPort),
      DEBUG_PORT: String(debugPort),
      CONFIG_PATH: configDir,
      WORKERS: String(workers),
      BACKEND_TYPE: 'redis',
      REDIS_URL: redis.url,
      USE_STATSD: 'false',
      STORE_TIMEOUT_MS: '1000',
      WARM_UP_CALLS: '0',
      // No cached denials: every call reaches Redis, so the two replicas agree on each count.
      LOCAL_DENIAL_CACHE_MAX_KEYS: '0',
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const replica = { child, httpPort, debugPort };
  replicas.push(replica);
  const deadline = Date.now() + 20_000;
  // Every worker serves once several fresh connections in a row find the service healthy.
  for (let streak = 0; streak < 3 * workers;) {
    if (Date.now() > deadline) throw new Error('replica did not become healthy');
    const ok = await request(httpPort, 'GET', '/healthcheck').then(
      (r) => r.status === 200,
      () => false,
    );
    streak = ok ? streak + 1 : 0;
    if (!ok) await new Promise((r) => setTimeout(r, 100));
  }
  return replica;
}

const call = (replica: Replica, value: string) =>
  request(replica.httpPort, 'POST', '/json', JSON.stringify({ domain: 'edge', descriptors: [{ entries: [{ key: 'api_key', value }] }] }));

interface TopReply {
  replicas: number;
  incomplete?: true;
  entries: { descriptor: [string, string][]; allowed: number; denied: number }[];
}

const summary = (reply: TopReply) => ({ replicas: reply.replicas, entries: reply.entries.map((e) => [e.descriptor[0][1], e.allowed, e.denied]) });

beforeAll(async () => {
  if (!fs.existsSync(MAIN_JS)) throw new Error(`${MAIN_JS} is missing: build first (npx tsc -p tsconfig.json)`);
  redis = await startRedis();
  configDir = fs.mkdtempSync(path.join(os.tmpdir(), 'slidegate-top-replicas-'));
  fs.writeFileSync(path.join(configDir, 'edge.yaml'), EDGE);
  await Promise.all([startReplica(2), startReplica(1)]);
}, 45_000);

afterAll(async () => {
  await Promise.all(
    replicas.map(async ({ child }) => {
      if (child.exitCode !== null) return;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
    }),
  );
  await redis?.stop();
  if (configDir) fs.rmSync(configDir, { recursive: true, force: true });
});

it('answers with the merged counts of both replicas (and both workers of one) on every process within 3 s', async () => {
  const [a, b] = replicas;
  const statuses: number[] = [];
  for (let i = 0; i < 30; i++) statuses.push((await call(a, 'mallory')).status);
  for (let i = 0; i < 30; i++) statuses.push((await call(b, 'mallory')).status);
  for (let i = 0; i < 4; i++) statuses.push((await call(b, 'alice')).status);
  // One limit in Redis for both replicas: 5 of mallory's 60 calls pass.
  expect(statuses.filter((s) => s === 429)).toHaveLength(55);
  const sent = Date.now();
  const want = {
    replicas: 2,
    entries: [
      ['mallory', 5, 55],
      ['alice', 4, 0],
    ],
  };
  // Each reads on a fresh connection: across polls, both workers of replica a answer.
  for (const replica of [a, b]) {
    let last: unknown;
    for (;;) {
      const reply = await request(replica.debugPort, 'GET', '/top?domain=edge');
      expect(reply.status).toBe(200);
      last = summary(JSON.parse(reply.text) as TopReply);
      if (JSON.stringify(last) === JSON.stringify(want)) break;
      if (Date.now() - sent > 3_000) throw new Error(`replica on ${replica.debugPort}: after 3 s /top says ${JSON.stringify(last)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  // And it stays so on every process: several fresh connections to the replica with two workers.
  for (let i = 0; i < 6; i++) {
    const reply = await request(a.debugPort, 'GET', '/top?domain=edge');
    expect(summary(JSON.parse(reply.text) as TopReply)).toEqual(want);
  }
}, 30_000);
