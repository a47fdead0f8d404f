import { descriptor, grpcCode, type RlsRequestInput } from '../../helpers/grpc-client';
import { startCluster, startRedis, type RedisClusterSetup, type RedisServer } from '../../helpers/redis';
import { startTestService, type TestService } from '../../helpers/service';

/**
 * Several service instances sharing one Redis enforce one limit: the mesh case the Redis store
 * exists for. Instances run in-process on their own ports, each with its own Redis client.
 */

const CONFIG = `
domain: mesh
descriptors:
  - key: route
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: tenant
    descriptors:
      - key: route
        rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: token
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: token_bucket, burst: 100}
  - key: leaky
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: leaky_bucket, burst: 100}
  - key: big_bucket
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: token_bucket, burst: 1000}
  - key: sub
    rate_limit: {unit: hour, requests_per_unit: 100, sub_windows: 4}
  - key: strict
    rate_limit: {unit: hour, requests_per_unit: 100, sub_windows: 60, strict: true}
  - key: strict_two
    rate_limit: {unit: hour, requests_per_unit: 100, strict: true}
`;

/** Rules of every other algorithm and mode, each admitting exactly 100 at once (10 an hour refill a bucket too slowly to matter). */
const MODE_KEYS = ['token', 'leaky', 'sub', 'strict', 'strict_two'] as const;

async function startInstances(count: number, env: Record<string, string>): Promise<TestService[]> {
  const instances: TestService[] = [];
  try {
    for (let i = 0; i < count; i++) {
      instances.push(
        await startTestService({
          config: { 'mesh.yaml': CONFIG },
          // Correctness under load is the point here, not latency: a generous store deadline.
          env: { BACKEND_TYPE: 'redis', STORE_TIMEOUT_MS: '2000', CACHE_KEY_PREFIX: 'mesh:', ...env },
        }),
      );
    }
  } catch (err) {
    await Promise.all(instances.map((s) => s.stop()));
    throw err;
  }
  return instances;
}

/** Fires `total` concurrent calls round-robin over the instances; returns how many were admitted. */
async function burst(instances: readonly TestService[], total: number, request: RlsRequestInput): Promise<{ ok: number; over: number; failed: number }> {
  const results = await Promise.all(
    Array.from({ length: total }, async (_, i) => {
      try {
        return (await instances[i % instances.length].client.shouldRateLimit(request, { deadlineMs: 10_000 })).overallCode;
      } catch {
        return 'FAILED';
      }
    }),
  );
  return {
    ok: results.filter((c) => c === 'OK').length,
    over: results.filter((c) => c === 'OVER_LIMIT').length,
    failed: results.filter((c) => c === 'FAILED').length,
  };
}

describe('service instances sharing one redis', () => {
  let redis: RedisServer;
  let instances: TestService[] = [];

  beforeAll(async () => {
    redis = await startRedis();
    instances = await startInstances(3, { REDIS_URL: redis.url });
  });

  afterAll(async () => {
    await Promise.all(instances.map((s) => s.stop()));
    await redis?.stop();
  });

  it('admit exactly 100 of 300 concurrent calls on a limit of 100', async () => {
    for (const s of instances) expect(await s.client.healthCheck('')).toBe('SERVING');
    const result = await burst(instances, 300, { domain: 'mesh', descriptors: [descriptor([['route', '/checkout']])] });
    expect(result).toEqual({ ok: 100, over: 200, failed: 0 });
    // The denial is shared too: every instance now denies.
    for (const s of instances) {
      expect((await s.client.shouldRateLimit({ domain: 'mesh', descriptors: [descriptor([['route', '/checkout']])] })).overallCode).toBe('OVER_LIMIT');
    }
  });

  it.each(MODE_KEYS)('admit exactly 100 of 300 concurrent calls on a %s rule of 100', async (key) => {
    const result = await burst(instances, 300, { domain: 'mesh', descriptors: [descriptor([[key, 'shared']])] });
    expect(result).toEqual({ ok: 100, over: 200, failed: 0 });
    for (const s of instances) {
      expect((await s.client.shouldRateLimit({ domain: 'mesh', descriptors: [descriptor([[key, 'shared']])] })).overallCode).toBe('OVER_LIMIT');
    }
  });

  it('answer UNAVAILABLE, not a verdict, when redis is gone', async () => {
    await redis.server.kill();
    try {
      const code = await grpcCode(instances[0].client.shouldRateLimit({ domain: 'mesh', descriptors: [descriptor([['route', '/gone']])] }));
      expect(code).toBe(14); // UNAVAILABLE
    } finally {
      await redis.server.start();
    }
  });
});

describe('service instances sharing one redis cluster', () => {
  let cluster: RedisClusterSetup;
  let instances: TestService[] = [];

  beforeAll(async () => {
    cluster = await startCluster({ masters: 3 });
    instances = await startInstances(2, { REDIS_TYPE: 'cluster', REDIS_URL: cluster.url });
  });

  afterAll(async () => {
    await Promise.all(instances.map((s) => s.stop()));
    await cluster?.stop();
  });

  it('admit exactly 100 of 300 concurrent calls on a limit of 100', async () => {
    const result = await burst(instances, 300, { domain: 'mesh', descriptors: [descriptor([['route', '/cart']])] });
    expect(result).toEqual({ ok: 100, over: 200, failed: 0 });
  });

  it.each(MODE_KEYS)('admit exactly 100 of 300 concurrent calls on a %s rule of 100', async (key) => {
    const result = await burst(instances, 300, { domain: 'mesh', descriptors: [descriptor([[key, 'cluster']])] });
    expect(result).toEqual({ ok: 100, over: 200, failed: 0 });
  });

  it("take back a bucket's tokens when another slot denies the call", async () => {
    // The window rule denies 200 calls; their charge on the bucket (another slot) is refunded.
    const result = await burst(instances, 300, { domain: 'mesh', descriptors: [descriptor([['route', '/refund']]), descriptor([['big_bucket', 'refund']])] });
    expect(result).toEqual({ ok: 100, over: 200, failed: 0 });
    const check = await instances[0].client.shouldRateLimit({
      domain: 'mesh',
      descriptors: [descriptor([['big_bucket', 'refund']], { hitsAddend: { value: 0 } })],
    });
    expect(check.statuses[0]).toMatchObject({ code: 'OK', limitRemaining: 900 });
  });

  it('admit exactly 100 when every call also carries a descriptor in another slot', async () => {
    const result = await burst(instances, 300, {
      domain: 'mesh',
      descriptors: [
        descriptor([['route', '/pay']]),
        descriptor([
          ['tenant', 'acme'],
          ['route', '/pay'],
        ]),
      ],
    });
    expect(result).toEqual({ ok: 100, over: 200, failed: 0 });
  });
});
