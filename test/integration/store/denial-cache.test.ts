import type { DenialCache } from '../../../src/store/denial-cache';
import { descriptor, type RlsRequestInput } from '../../helpers/grpc-client';
import { sleep, startRedis, type RedisServer } from '../../helpers/redis';
import { startTestService, type TestService } from '../../helpers/service';

/**
 * The local denial cache in front of a real Redis, on the running service: its answers are the
 * store's for every descriptor, a counter named twice does not poison it, it holds at most
 * LOCAL_CACHE_SIZE_IN_BYTES, and a wall-clock step back does not stretch its denials.
 */

const CONFIG = `domain: edge
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: fast
    rate_limit: {unit: second, requests_per_unit: 1}
`;

const CACHE_BYTES = 20_000;

let redis: RedisServer;
let svc: TestService;

beforeAll(async () => {
  redis = await startRedis();
  svc = await startTestService({
    config: { 'edge.yaml': CONFIG },
    env: { BACKEND_TYPE: 'redis', REDIS_URL: redis.url, STORE_TIMEOUT_MS: '500', WORKERS: '1', LOCAL_CACHE_SIZE_IN_BYTES: String(CACHE_BYTES) },
  });
});

afterAll(async () => {
  await svc?.stop();
  await redis?.stop();
});

const cache = (): DenialCache => svc.service.store as DenialCache;

it('reports for every descriptor what Redis reports, also once the cache answers', async () => {
  const request: RlsRequestInput = { domain: 'edge', descriptors: [descriptor([['a', 'x']]), descriptor([['b', 'y']])] };
  const answers = [];
  for (let i = 0; i < 4; i++) answers.push(await svc.client.shouldRateLimit(request));
  expect(answers.map((r) => r.overallCode)).toEqual(['OK', 'OVER_LIMIT', 'OVER_LIMIT', 'OVER_LIMIT']);
  // b: 10 per minute, charged once (the denied calls charge nothing): 9 left, and 8 for each later call's one hit.
  expect(answers.map((r) => r.statuses[1].limitRemaining)).toEqual([9, 8, 8, 8]);
  expect(answers.map((r) => r.statuses[1].code)).toEqual(['OK', 'OK', 'OK', 'OK']);
  // a alone is known denied: answered by the cache, as Redis would.
  const alone = await svc.client.shouldRateLimit({ domain: 'edge', descriptors: [descriptor([['a', 'x']])] });
  expect(alone.statuses[0]).toMatchObject({ code: 'OVER_LIMIT', limitRemaining: 0 });
});

it('lets a counter named once be decided by Redis after a call naming it twice was denied', async () => {
  const twice = await svc.client.shouldRateLimit({ domain: 'edge', descriptors: [descriptor([['k', 'v']]), descriptor([['k', 'v']])] });
  expect(twice.statuses.map((s) => s.code)).toEqual(['OK', 'OVER_LIMIT']);
  // Nothing was charged (the call was denied): one hit is allowed.
  const once = await svc.client.shouldRateLimit({ domain: 'edge', descriptors: [descriptor([['k', 'v']])] });
  expect(once.overallCode).toBe('OK');
});

it('holds at most LOCAL_CACHE_SIZE_IN_BYTES of denials', async () => {
  for (let i = 0; i < 150; i++) {
    const value = `${i}-`.padEnd(200, 'z');
    // Two hits against a limit of 1: denied at once, and remembered.
    const res = await svc.client.shouldRateLimit({ domain: 'edge', descriptors: [descriptor([['a', value]], { hitsAddend: { value: 2 } })] });
    expect(res.overallCode).toBe('OVER_LIMIT');
  }
  expect(cache().bytes).toBeLessThanOrEqual(CACHE_BYTES);
  expect(cache().size).toBeGreaterThan(20);
  expect(cache().size).toBeLessThan(100);
});

describe('after the wall clock steps back an hour', () => {
  afterEach(() => jest.restoreAllMocks());

  it('lets a denial end when Redis would allow again, not an hour later', async () => {
    const fast = { domain: 'edge', descriptors: [descriptor([['fast', 'f']])] };
    const post = (): Promise<Response> => fetch(`http://127.0.0.1:${svc.service.httpPort}/json`, { method: 'POST', body: JSON.stringify(fast) });
    // Denied once the window holds a hit (two calls straddling a second may both pass).
    let status = 200;
    for (let i = 0; i < 5 && status === 200; i++) status = (await post()).status;
    expect(status).toBe(429);
    const now = Date.now();
    jest.spyOn(Date, 'now').mockImplementation(() => now - 3_600_000);
    expect((await post()).status).toBe(429);
    // 1 per second: a second later Redis allows again.
    await sleep(1_100);
    expect((await post()).status).toBe(200);
  });
});
