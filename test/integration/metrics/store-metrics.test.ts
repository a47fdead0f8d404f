import { descriptor, grpc, grpcCode, type RlsRequestInput } from '../../helpers/grpc-client';
import { redisCli, startRedis, type RedisServer } from '../../helpers/redis';
import { startTestService, type TestService } from '../../helpers/service';

/**
 * The store's own events on /metrics, with the service on a real Redis: store errors by kind,
 * local denial-cache hits, and calls answered by the failure policy.
 */

const EDGE = `
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1}
`;

const req = (user: string): RlsRequestInput => ({ domain: 'edge', descriptors: [descriptor([['user', user]])] });

/** The value of one sample line of a Prometheus exposition; 0 when the series is absent. */
function sample(text: string, series: string): number {
  const line = text.split('\n').find((l) => l.startsWith(series + ' '));
  return line === undefined ? 0 : Number(line.slice(series.length + 1));
}

async function scrape(svc: TestService): Promise<string> {
  return (await fetch(`http://127.0.0.1:${svc.service.httpPort}/metrics`)).text();
}

function redisService(redis: RedisServer, env: Record<string, string> = {}): Promise<TestService> {
  return startTestService({
    config: { 'edge.yaml': EDGE },
    env: { BACKEND_TYPE: 'redis', REDIS_URL: redis.url, STORE_TIMEOUT_MS: '500', ...env },
  });
}

/**
 * Store errors of kind `disconnected` in `text`, `before` + `calls` since Redis was killed at
 * `killedAt`: the calls, and the overrides' background read (OVERRIDES_SYNC_INTERVAL, 1 s) when one
 * fell meanwhile.
 */
function expectDisconnected(text: string, before: number, calls: number, killedAt: number): void {
  const n = sample(text, 'ratelimit_service_store_errors_total{kind="disconnected"}');
  expect(n).toBeGreaterThanOrEqual(before + calls);
  expect(n).toBeLessThanOrEqual(before + calls + Math.ceil((Date.now() - killedAt) / 1_000));
}

describe('store metrics with the redis store', () => {
  let redis: RedisServer;
  let svc: TestService;

  beforeAll(async () => {
    redis = await startRedis();
    svc = await redisService(redis);
  });

  afterAll(async () => {
    await svc?.stop();
    await redis?.stop();
  });

  it('counts a denial answered from the local cache as a local cache hit', async () => {
    const before = sample(await scrape(svc), 'ratelimit_service_local_cache_hits');
    expect((await svc.client.shouldRateLimit(req('alice'))).overallCode).toBe('OK');
    // Denied by Redis, and remembered.
    expect((await svc.client.shouldRateLimit(req('alice'))).overallCode).toBe('OVER_LIMIT');
    expect(sample(await scrape(svc), 'ratelimit_service_local_cache_hits')).toBe(before);
    // Denied from the cache: no round trip.
    expect((await svc.client.shouldRateLimit(req('alice'))).overallCode).toBe('OVER_LIMIT');
    expect((await svc.client.shouldRateLimit(req('alice'))).overallCode).toBe('OVER_LIMIT');
    const text = await scrape(svc);
    expect(sample(text, 'ratelimit_service_local_cache_hits')).toBe(before + 2);
    // Per rule, as the reference server's over_limit_with_local_cache: a subset of over_limit.
    expect(sample(text, 'ratelimit_service_rate_limit_over_limit_with_local_cache{domain="edge",descriptor="user"}')).toBe(2);
    expect(sample(text, 'ratelimit_service_rate_limit_over_limit{domain="edge",descriptor="user"}')).toBe(3);
  });

  it('answers an attack on one key locally: the same denials, no Redis call, every call counted', async () => {
    const evalCalls = (): number => Number(/cmdstat_evalsha:calls=(\d+)/.exec(redisCli(redis.port, 'INFO', 'commandstats'))?.[1] ?? 0);
    for (let i = 0; i < 3; i++) await svc.client.shouldRateLimit(req('mallory'));
    const before = { evals: evalCalls(), text: await scrape(svc) };
    const answers = [];
    // Repeats of a request the denial cache answered are replayed from its bytes (src/limiter/replay.ts).
    for (let i = 0; i < 20; i++) answers.push(await svc.client.shouldRateLimit(req('mallory')));
    expect(evalCalls()).toBe(before.evals);
    for (const a of answers) {
      expect(a.overallCode).toBe('OVER_LIMIT');
      expect(a.statuses[0]).toMatchObject({ code: 'OVER_LIMIT', currentLimit: { requestsPerUnit: 1, unit: 'HOUR' }, limitRemaining: 0 });
    }
    // The reset counts down: never up, and within the hour.
    const resets = answers.map((a) => Number(a.statuses[0].durationUntilReset!.seconds) * 1e3 + a.statuses[0].durationUntilReset!.nanos / 1e6);
    for (let i = 1; i < resets.length; i++) expect(resets[i]).toBeLessThanOrEqual(resets[i - 1]);
    expect(resets[0]).toBeGreaterThan(0);
    expect(resets[0]).toBeLessThanOrEqual(3_600_000);
    const text = await scrape(svc);
    const grew = (series: string): number => sample(text, series) - sample(before.text, series);
    expect(grew('ratelimit_service_local_cache_hits')).toBe(20);
    expect(grew('ratelimit_service_rate_limit_over_limit_with_local_cache{domain="edge",descriptor="user"}')).toBe(20);
    expect(grew('ratelimit_service_rate_limit_total_hits{domain="edge",descriptor="user"}')).toBe(20);
    expect(grew('ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}')).toBe(20);
  });

  it('counts store errors by kind once redis is killed', async () => {
    const series = 'ratelimit_service_store_errors_total{kind="disconnected"}';
    const before = sample(await scrape(svc), series);
    await redis.server.kill();
    const killedAt = Date.now();
    for (let i = 0; i < 3; i++) expect(await grpcCode(svc.client.shouldRateLimit(req(`bob-${i}`)))).toBe(grpc.status.UNAVAILABLE);
    const text = await scrape(svc);
    expectDisconnected(text, before, 3, killedAt);
    expect(sample(text, 'ratelimit_service_should_rate_limit_error{err_type="redis_error"}')).toBeGreaterThanOrEqual(3);
  });
});

describe('store metrics with a failure policy', () => {
  let redis: RedisServer;
  let svc: TestService;

  beforeAll(async () => {
    redis = await startRedis();
    svc = await redisService(redis, { STORE_FAILURE_POLICY: 'allow' });
  });

  afterAll(async () => {
    await svc?.stop();
    await redis?.stop();
  });

  it('counts calls the policy answered while redis is down, and the store errors behind them', async () => {
    expect((await svc.client.shouldRateLimit(req('carol'))).overallCode).toBe('OK');
    await redis.server.kill();
    const killedAt = Date.now();
    for (let i = 0; i < 2; i++) expect((await svc.client.shouldRateLimit(req(`dave-${i}`))).overallCode).toBe('OK');
    const text = await scrape(svc);
    expect(sample(text, 'ratelimit_service_store_fallbacks_total{policy="allow"}')).toBe(2);
    expectDisconnected(text, 0, 2, killedAt);
    // Answered by the policy: not failed calls.
    expect(sample(text, 'ratelimit_service_should_rate_limit_error{err_type="redis_error"}')).toBe(0);
  });
});
