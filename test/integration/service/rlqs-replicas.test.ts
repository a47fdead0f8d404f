import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { EnvoyQuotaClient } from '../../helpers/envoy-quota-client';
import { rlsClient } from '../../helpers/grpc-client';
import { admittedBetween, driveLoad, windowExtremes } from '../../helpers/quota-load';
import { startRedis, type RedisServer } from '../../helpers/redis';
import { LOOPBACK_ANY_PORT, startTestService } from '../../helpers/service';
import { MAIN, spawnService, waitForServing } from '../../helpers/service-process';

/**
 * One global limit across replicas: each replica publishes its proxies' demand to the shared Redis
 * and divides the limit by everyone's; proxies that behave as Envoy's filter (200 ms reports)
 * measure what is admitted per window.
 */

const LIMIT = 100;
const CONFIG = `domain: quota
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: ${LIMIT}}
`;
const REPORT_MS = 200;

let redis: RedisServer;
let configDir: string;
beforeAll(async () => {
  redis = await startRedis();
  configDir = fs.mkdtempSync(path.join(os.tmpdir(), 'slidegate-rlqs-'));
  fs.writeFileSync(path.join(configDir, 'quota.yaml'), CONFIG);
});
afterAll(async () => {
  await redis.stop();
  fs.rmSync(configDir, { recursive: true, force: true });
});

test('two replicas on one Redis, two proxies on each offering the whole limit, admit between 0.8 and 1.25 times the limit per window', async () => {
  const env = { GRPC_TRANSPORT: 'grpc-js', BACKEND_TYPE: 'redis', REDIS_URL: redis.url };
  const replicas = await Promise.all([
    startTestService({ config: { 'quota.yaml': CONFIG }, env }),
    startTestService({ config: { 'quota.yaml': CONFIG }, env }),
  ]);
  const proxies = [0, 0, 1, 1].map((r) => new EnvoyQuotaClient({ targets: [replicas[r].addr], domain: 'quota', reportIntervalMs: REPORT_MS }));
  try {
    const log = await driveLoad(
      proxies.map((proxy) => ({ proxy, bucket: { tenant: 'replicas' }, rate: LIMIT })),
      6_000,
    );
    const { min, max } = windowExtremes(log, 1_000, 1_500, 6_000);
    const perProxy = proxies.map((_, i) => admittedBetween(log, 1_500, 6_000, [i]));
    console.log('two replicas, 4 proxies x 100/s, limit 100/s', { min, max, perProxy });
    expect(max).toBeLessThanOrEqual(1.25 * LIMIT);
    expect(min).toBeGreaterThanOrEqual(0.8 * LIMIT);
    // Each replica sees the other's proxies: the four shares are alike.
    for (const n of perProxy) expect(n).toBeGreaterThan((0.5 * 4.5 * LIMIT) / 4);
  } finally {
    for (const p of proxies) p.close();
    await Promise.all(replicas.map((r) => r.stop()));
  }
});

test("a SIGTERM'd replica's proxies reconnect to the other, which continues the same budget without exceeding it", async () => {
  // The built service, as make test leaves it.
  if (!fs.existsSync(MAIN)) throw new Error(`${MAIN} is missing: build first (npx tsc -p tsconfig.json, or make test)`);
  const env = {
    CONFIG_PATH: configDir,
    BACKEND_TYPE: 'redis',
    REDIS_URL: redis.url,
    ...LOOPBACK_ANY_PORT,
    LOG_LEVEL: 'info',
    LOG_FORMAT: 'json',
    USE_STATSD: 'false',
    SHUTDOWN_GRACE_MS: '2000',
  };
  const [a, b] = await Promise.all([spawnService(env), spawnService(env)]);
  const addrA = `127.0.0.1:${a.grpcPort}`;
  const addrB = `127.0.0.1:${b.grpcPort}`;
  for (const addr of [addrA, addrB]) {
    const client = rlsClient(addr);
    await waitForServing(client);
    client.close();
  }
  // Two proxies on each replica; a new stream goes to the other server in the list.
  const proxies = [
    [addrA, addrB],
    [addrA, addrB],
    [addrB, addrA],
    [addrB, addrA],
  ].map((targets) => new EnvoyQuotaClient({ targets, domain: 'quota', reportIntervalMs: REPORT_MS }));
  try {
    const load = driveLoad(
      proxies.map((proxy) => ({ proxy, bucket: { tenant: 'failover' }, rate: LIMIT })),
      8_000,
    );
    await new Promise((r) => setTimeout(r, 3_000));
    a.child.kill('SIGTERM');
    const log = await load;
    const exit = await a.exited;
    const whole = windowExtremes(log, 1_000, 1_500, 8_000);
    const after = windowExtremes(log, 1_000, 4_500, 8_000);
    const movedAfter = admittedBetween(log, 4_500, 8_000, [0, 1]);
    console.log('SIGTERM at 3 s, 4 proxies x 100/s, limit 100/s', { whole, after, movedAfter, streams: proxies.map((p) => p.stats.streamsOpened) });
    expect(exit.code).toBe(0);
    expect(whole.max).toBeLessThanOrEqual(1.25 * LIMIT);
    expect(after.min).toBeGreaterThanOrEqual(0.8 * LIMIT);
    // The proxies that were on the stopped replica go on admitting through the other.
    expect(movedAfter).toBeGreaterThan((0.5 * 3.5 * LIMIT) / 2);
    expect(proxies[0].stats.streamsOpened).toBe(2);
  } finally {
    for (const p of proxies) p.close();
    a.child.kill('SIGKILL');
    b.child.kill('SIGTERM');
    await b.exited;
  }
}, 40_000);
