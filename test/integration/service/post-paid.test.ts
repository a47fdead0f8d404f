import { descriptor, type RlsClient } from '../../helpers/grpc-client';
import { sleep, startRedis, type RedisServer } from '../../helpers/redis';
import { startTestService, type TestService } from '../../helpers/service';

/**
 * A token budget charged after the response, as envoy-llm.yaml drives it on the wire: before each
 * request a check (the descriptor's hits_addend 0), once its stream is done the response's token
 * count (hits_addend n, apply_on_stream_done). The rule counts denied requests, so a charge over the
 * budget is recorded, not lost, the next check is denied, and once the usage has drained checks pass
 * again. On the real service over gRPC, with the memory store and with a redis-server; in front of
 * Redis the local denial cache is on (the default): a charge made while it answers the checks must
 * still be recorded.
 */

const RULES = `
domain: llm
descriptors:
  - key: api_key
    count_denied_requests: true
    rate_limits:
      - {name: per_2s, unit: second, unit_multiplier: 2, requests_per_unit: 1000}
      - {name: per_day, unit: day, requests_per_unit: 1200}
  - key: single_key
    count_denied_requests: true
    rate_limit: {unit: second, unit_multiplier: 2, requests_per_unit: 1000}
`;

const ms = (d: { seconds: number; nanos: number } | null): number => (d ? Number(d.seconds) * 1000 + d.nanos / 1e6 : NaN);

describe.each(['memory', 'redis'])('a post-paid token budget on the wire (%s store)', (backend) => {
  let redis: RedisServer | undefined;
  let svc: TestService;
  let client: RlsClient;

  beforeAll(async () => {
    if (backend === 'redis') redis = await startRedis();
    const env: Record<string, string> = redis === undefined ? {} : { BACKEND_TYPE: 'redis', REDIS_URL: redis.url, STORE_TIMEOUT_MS: '1000' };
    svc = await startTestService({ config: { 'llm.yaml': RULES }, env });
    client = svc.client;
  });

  afterAll(async () => {
    await svc?.stop();
    await redis?.stop();
  });

  /** What Envoy sends for one API key: the check before a request (0), or the charge after it. */
  const call = async (key: string, hits: number, descriptorKey = 'api_key') => {
    const res = await client.shouldRateLimit({ domain: 'llm', descriptors: [descriptor([[descriptorKey, key]], { hitsAddend: { value: hits } })] });
    const [s] = res.statuses;
    return { overall: res.overallCode, name: s.currentLimit?.name, remaining: s.limitRemaining, resetMs: ms(s.durationUntilReset) };
  };

  it('checks OK, records 700 then 500 past the 1,000, denies the next check, and passes checks again once the window drains', async () => {
    const key = `team-${Date.now()}`;
    const started = Date.now();
    expect(await call(key, 0)).toMatchObject({ overall: 'OK', name: 'per_2s', remaining: 1_000 });
    expect(await call(key, 700)).toMatchObject({ overall: 'OK', name: 'per_2s', remaining: 300 });
    // Over the 2 s budget: answered OVER_LIMIT (too late to stop anything), but recorded.
    expect(await call(key, 500)).toMatchObject({ overall: 'OVER_LIMIT', name: 'per_2s' });
    const denied = await call(key, 0);
    expect(denied).toMatchObject({ overall: 'OVER_LIMIT', name: 'per_2s', remaining: 0 });
    // 1,200 in this window weigh below 1,001 some way into the next one: at most two windows away.
    expect(denied.resetMs).toBeGreaterThan(0);
    expect(denied.resetMs).toBeLessThanOrEqual(4_000);

    await sleep(denied.resetMs + 100);
    expect(await call(key, 0)).toMatchObject({ overall: 'OK' });

    // Two windows on, the 2 s budget is whole again; the day's holds both charges: 1,200 of 1,200.
    await sleep(Math.max(0, started + 4_100 - Date.now()));
    expect(await call(key, 0)).toMatchObject({ overall: 'OK', name: 'per_day', remaining: 0 });
    expect(await call(key, 1)).toMatchObject({ overall: 'OVER_LIMIT', name: 'per_day' });
  });

  it('records a charge made while its checks are answered from remembered denials', async () => {
    const key = `solo-${Date.now()}`;
    expect(await call(key, 1_200, 'single_key')).toMatchObject({ overall: 'OVER_LIMIT' });
    const before = await call(key, 0, 'single_key');
    expect(before.overall).toBe('OVER_LIMIT');
    // The denial cache now knows the counter denied; 1,000 more tokens must still reach the store.
    expect(await call(key, 1_000, 'single_key')).toMatchObject({ overall: 'OVER_LIMIT' });
    const after = await call(key, 0, 'single_key');
    // 2,200 instead of 1,200 in the window: 759 ms longer to drain below 1,001 (less the time between the checks).
    expect(after.resetMs).toBeGreaterThan(before.resetMs + 500);
  });
});
