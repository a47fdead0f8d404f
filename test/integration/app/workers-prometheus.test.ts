import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { request } from '../../helpers/http-request';
import { freePort, startRedis, type RedisServer } from '../../helpers/redis';
import { LOOPBACK_ANY_PORT } from '../../helpers/service';

/**
 * USE_PROMETHEUS under WORKERS=2 (the built service, a real redis-server): every scrape of
 * PROMETHEUS_ADDR answers for both workers together, whichever worker takes it.
 */

const MAIN_JS = path.resolve(__dirname, '../../../dist/src/main.js');

let redis: RedisServer;
let child: ChildProcess;
let configDir: string;
let httpPort: number;
let prometheusPort: number;

beforeAll(async () => {
  if (!fs.existsSync(MAIN_JS)) throw new Error(`${MAIN_JS} is missing: build first (npx tsc -p tsconfig.json)`);
  redis = await startRedis();
  configDir = fs.mkdtempSync(path.join(os.tmpdir(), 'slidegate-workers-prom-'));
  fs.writeFileSync(path.join(configDir, 'edge.yaml'), 'domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 10}\n');
  httpPort = await freePort();
  prometheusPort = await freePort();
  child = spawn(process.execPath, [MAIN_JS], {
    env: {
      PATH: process.env.PATH,
      ...LOOPBACK_ANY_PORT,
      PORT: String(httpPort),
      CONFIG_PATH: configDir,
      WORKERS: '2',
      BACKEND_TYPE: 'redis',
      REDIS_URL: redis.url,
      USE_STATSD: 'false',
      USE_PROMETHEUS: 'true',
      PROMETHEUS_ADDR: `127.0.0.1:${prometheusPort}`,
      STORE_TIMEOUT_MS: '1000',
      WARM_UP_CALLS: '0',
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const deadline = Date.now() + 15_000;
  // Both workers serve once several fresh connections in a row find the service healthy.
  for (let streak = 0; streak < 6;) {
    if (Date.now() > deadline) throw new Error('service did not become healthy');
    const ok = await request(httpPort, 'GET', '/healthcheck').then(
      (r) => r.status === 200,
      () => false,
    );
    streak = ok ? streak + 1 : 0;
    if (!ok) await new Promise((r) => setTimeout(r, 100));
  }
}, 30_000);

afterAll(async () => {
  if (child && child.exitCode === null) {
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    await exited;
  }
  await redis?.stop();
  if (configDir) fs.rmSync(configDir, { recursive: true, force: true });
});

it('sums both workers in every scrape of PROMETHEUS_ADDR', async () => {
  const body = JSON.stringify({ domain: 'edge', descriptors: [{ entries: [{ key: 'user', value: 'w' }] }] });
  const statuses = [];
  for (let i = 0; i < 14; i++) statuses.push((await request(httpPort, 'POST', '/json', body)).status);
  expect(statuses.filter((s) => s === 200)).toHaveLength(10);
  expect(statuses.filter((s) => s === 429)).toHaveLength(4);
  for (let i = 0; i < 4; i++) {
    const { status, text } = await request(prometheusPort, 'GET', '/metrics');
    expect(status).toBe(200);
    expect(text).toContain('ratelimit_service_rate_limit_total_hits{domain="edge",key1="user"} 14');
    expect(text).toContain('ratelimit_service_rate_limit_over_limit{domain="edge",key1="user"} 4');
  }
});
