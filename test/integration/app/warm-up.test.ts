import { StoreUnavailableError } from '../../../src/limiter/store';
import { silentLogger } from '../../../src/log';
import { DenialCache } from '../../../src/store/denial-cache';
import { MemoryStore } from '../../../src/store/memory-store';
import type { CounterDecision, Store } from '../../../src/limiter/store';
import { WARM_UP_DOMAIN, warmUp, type WarmUpOptions } from '../../../src/app/warm-up';
import { descriptor } from '../../helpers/grpc-client';
import { redisCli, startRedis, type RedisServer } from '../../helpers/redis';
import { startTestService, type TestService } from '../../helpers/service';
import { TOP_DOCUMENT_KIND } from '../../../src/top/live-top';
import { TRANSPORT_DEFAULTS } from '../../helpers/transport-defaults';

/**
 * The start-up warm-up (src/app/warm-up.ts): its calls are answered through the real HTTP/2 layer and
 * store, denials and the denial cache included; it is bounded in time whatever the store does; and
 * the service it warms reports none of it.
 */

const LIMITER: WarmUpOptions['limiter'] = { shadowMode: false, defaultAlgorithm: 'sliding_window', countDenied: false, nearLimitRatio: 0.8 };
const TRANSPORT: WarmUpOptions['transport'] = { grpcMaxMessageBytes: 4 * 1024 * 1024, ...TRANSPORT_DEFAULTS };

const options = (store: Store, o: Partial<WarmUpOptions> = {}): WarmUpOptions => ({
  calls: 2_000,
  maxMs: 10_000,
  store,
  limiter: LIMITER,
  transport: TRANSPORT,
  replayMaxKeys: 100,
  logger: silentLogger(),
  ...o,
});

/** A store whose every call fails, or never answers. */
function brokenStore(decide: () => Promise<CounterDecision[]>): Store {
  return { name: 'broken', decide, isHealthy: () => false, close: () => Promise.resolve() };
}

describe('warmUp', () => {
  it('answers every call over HTTP/2, with denials answered from the denial cache', async () => {
    const memory = new MemoryStore({ maxKeys: 10_000, sweepIntervalMs: 0 });
    let cacheHits = 0;
    const store = new DenialCache({ store: memory, maxKeys: 1_000, onHit: () => cacheHits++ });
    // Time enough for every call on a loaded machine: this is about answers, not speed.
    const result = await warmUp(options(store, { maxMs: 60_000 }));
    expect(result).toMatchObject({ answered: 2_000, failed: 0 });
    // One key of the warm-up's config allows 1 call a second: its repeats are cached denials.
    expect(cacheHits).toBeGreaterThan(0);
    expect(memory.size).toBeGreaterThan(16);
    await memory.close();
  });

  it('counts the calls the store fails, and still returns', async () => {
    const result = await warmUp(
      options(
        brokenStore(() => Promise.reject(new StoreUnavailableError('down'))),
        { calls: 300 },
      ),
    );
    expect(result).toMatchObject({ answered: 0, failed: 300 });
  });

  it('gives up on a store that never answers once its time is up', async () => {
    const t0 = Date.now();
    const result = await warmUp(
      options(
        brokenStore(() => new Promise<CounterDecision[]>(() => undefined)),
        { calls: 1_000_000, maxMs: 300 },
      ),
    );
    expect(result.answered).toBe(0);
    // maxMs plus the margin for calls in flight (500 ms), plus slack for a busy machine.
    expect(Date.now() - t0).toBeLessThan(3_000);
  });

  it('stops at its time limit however many calls it was asked for', async () => {
    const memory = new MemoryStore({ maxKeys: 10_000, sweepIntervalMs: 0 });
    const t0 = Date.now();
    const result = await warmUp(options(memory, { calls: 100_000_000, maxMs: 300 }));
    expect(Date.now() - t0).toBeLessThan(3_000);
    expect(result.answered).toBeGreaterThan(0);
    expect(result.answered).toBeLessThan(100_000_000);
    await memory.close();
  });
});

describe('a service that warms up on Redis', () => {
  let redis: RedisServer;
  let svc: TestService;

  beforeAll(async () => {
    redis = await startRedis();
    svc = await startTestService({
      config: { 'edge.yaml': 'domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1}\n' },
      env: { BACKEND_TYPE: 'redis', REDIS_URL: redis.url, STORE_TIMEOUT_MS: '500', WARM_UP_CALLS: '3000' },
    });
  });

  afterAll(async () => {
    await svc?.stop();
    await redis?.stop();
  });

  it('leaves only short-lived counters of its own domain in Redis', () => {
    // Every key and its TTL from one script (a redis-cli process per key took 9 s): key, TTL, key, ...
    const listing = redisCli(
      redis.port,
      'EVAL',
      "local out = {} for _, k in ipairs(redis.call('KEYS', '*')) do out[#out + 1] = k; out[#out + 1] = redis.call('PTTL', k) end return out",
      '0',
    )
      .split('\n')
      .filter(Boolean);
    const keys = listing.filter((_, i) => i % 2 === 0);
    expect(keys.length).toBeGreaterThan(0);
    for (const [i, key] of keys.entries()) {
      // Besides the warm-up's counters: the live view this service publishes (short-lived too, src/top).
      if (!key.startsWith(`{${TOP_DOCUMENT_KIND}}|`)) expect(key).toContain(WARM_UP_DOMAIN);
      const ttl = Number(listing[2 * i + 1]);
      // 1-second windows: gone within a few seconds (-2: already expired between the two calls; 0:
      // expiring in this millisecond). -1 (no TTL) is what must never appear.
      expect(ttl === -2 || (ttl >= 0 && ttl <= 3_000)).toBe(true);
    }
  });

  it('reports none of its calls in the metrics', async () => {
    const text = await (await fetch(`http://127.0.0.1:${svc.service.httpPort}/metrics`)).text();
    expect(text).not.toContain(WARM_UP_DOMAIN);
    for (const series of ['ratelimit_service_total_requests', 'ratelimit_service_local_cache_hits', 'ratelimit_service_store_errors_total']) {
      const values = text
        .split('\n')
        .filter((l) => l.startsWith(series))
        .map((l) => Number(l.split(' ').pop()));
      expect(values.every((v) => v === 0)).toBe(true);
    }
  });

  it('then serves the configured limits as usual', async () => {
    const req = { domain: 'edge', descriptors: [descriptor([['user', 'ann']])] };
    expect((await svc.client.shouldRateLimit(req)).overallCode).toBe('OK');
    expect((await svc.client.shouldRateLimit(req)).overallCode).toBe('OVER_LIMIT');
  });
});
