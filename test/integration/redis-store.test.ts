import Redis from 'ioredis';
import { counterKey, counterKeyPrefix } from '../../src/limiter/keys';
import type { Algorithm } from '../../src/limiter/types';
import type { RedisStore } from '../../src/store/redis-store';
import type { CounterRequest } from '../../src/store/store';
import { FakeClock } from '../helpers/fake-clock';
import { connectStore, startRedis, type RedisServer } from '../helpers/redis';

const DAY = 86_400_000;
const PREFIX = 'rl:';

describe('the redis store on a single redis', () => {
  let redis: RedisServer;
  let store: RedisStore;
  let admin: Redis;

  beforeAll(async () => {
    redis = await startRedis();
    store = await connectStore({ type: 'single', url: redis.url, keyPrefix: PREFIX });
    admin = new Redis({ host: '127.0.0.1', port: redis.port, lazyConnect: true });
    await admin.connect();
  });

  afterAll(async () => {
    admin?.disconnect();
    await store?.close();
    await redis?.stop();
  });

  beforeEach(async () => {
    await admin.flushall();
  });

  async function allKeys(): Promise<string[]> {
    const keys: string[] = [];
    let cursor = '0';
    do {
      const [next, batch] = await admin.scan(cursor, 'COUNT', 1000);
      keys.push(...batch);
      cursor = next;
    } while (cursor !== '0');
    return keys.sort();
  }

  it('decides by redis time: two stores whose local clocks differ by minutes decide identically', async () => {
    const early = await connectStore({ type: 'single', url: redis.url, keyPrefix: PREFIX, clock: new FakeClock(Date.now() - 7 * 60_000) });
    const late = await connectStore({ type: 'single', url: redis.url, keyPrefix: PREFIX, clock: new FakeClock(Date.now() + 9 * 60_000) });
    try {
      const c = (hits: number): CounterRequest => ({ key: 'shared', limit: 5, windowMs: DAY, algorithm: 'fixed_window', hits });
      const [t] = await admin.time();
      const redisNow = Number(t) * 1000;
      const a = await early.decide([c(2)]);
      const b = await late.decide([c(2)]);
      expect(a[0]).toMatchObject({ allowed: true, remaining: 3 });
      expect(b[0]).toMatchObject({ allowed: true, remaining: 1 });
      // Both reset at the end of the same Redis day, whatever the local clocks say.
      const endOfDay = redisNow - (redisNow % DAY) + DAY;
      for (const d of [a[0], b[0]]) expect(Math.abs(redisNow + d.resetMs - endOfDay)).toBeLessThan(2_000);
      expect(Math.abs(a[0].resetMs - b[0].resetMs)).toBeLessThan(1_000);
      expect((await early.decide([c(2)]))[0].allowed).toBe(false);
      expect((await late.decide([c(2)]))[0].allowed).toBe(false);
      expect((await late.decide([c(1)]))[0]).toMatchObject({ allowed: true, remaining: 0 });
    } finally {
      await early.close();
      await late.close();
    }
  });

  it('gives every key it writes a TTL, two windows for sliding windows', async () => {
    const algorithms: Algorithm[] = ['sliding_window', 'fixed_window', 'sliding_log'];
    const calls: Promise<unknown>[] = [];
    for (let i = 0; i < 60; i++) {
      const algorithm = algorithms[i % 3];
      const windowMs = [1_000, 60_000, 3_600_000][i % 3 === 0 ? i % 2 : 2];
      const counters: CounterRequest[] = [
        { key: `mixed|${algorithm}|${i % 7}`, limit: 3, windowMs, algorithm, hits: 1 + (i % 2) },
        { key: `other|${i % 4}`, limit: 100, windowMs: 60_000, algorithm: algorithms[(i + 1) % 3], hits: i % 3 },
      ];
      calls.push(store.decide(counters, { countDenied: i % 5 === 0 }));
    }
    await Promise.all(calls);
    const keys = await allKeys();
    expect(keys.length).toBeGreaterThan(10);
    for (const key of keys) {
      const ttl = await admin.pttl(key);
      expect({ key, ttl: ttl > 0 }).toEqual({ key, ttl: true });
      expect(key.startsWith(`${PREFIX}{`)).toBe(true);
    }
    // A sliding window's current counter must outlive the next window (it is read as "previous").
    await store.decide([{ key: 'ttl', limit: 5, windowMs: 60_000, algorithm: 'sliding_window', hits: 1 }]);
    const [swKey] = (await allKeys()).filter((k) => k.startsWith(`${PREFIX}{ttl}:`));
    expect(await admin.pttl(swKey)).toBeGreaterThan(2 * 60_000 - 1_000);
  });

  it('names keys <prefix>{<counter key>}:<window> and keeps the log in <prefix>{<counter key>}', async () => {
    await store.decide([
      { key: 'sw', limit: 5, windowMs: 60_000, algorithm: 'sliding_window', hits: 1 },
      { key: 'fw', limit: 5, windowMs: 60_000, algorithm: 'fixed_window', hits: 1 },
      { key: 'sl', limit: 5, windowMs: 60_000, algorithm: 'sliding_log', hits: 1 },
    ]);
    const [t] = await admin.time();
    const window = Math.floor((Number(t) * 1000) / 60_000);
    const keys = await allKeys();
    expect(keys).toHaveLength(3);
    expect(keys).toContain(`${PREFIX}{sl}`);
    expect(keys.filter((k) => /^rl:\{(sw|fw)\}:\d+$/.test(k))).toHaveLength(2);
    for (const k of keys.filter((x) => x !== `${PREFIX}{sl}`)) expect(Math.abs(Number(k.split(':').pop()) - window)).toBeLessThanOrEqual(1);
    expect(await admin.type(`${PREFIX}{sl}`)).toBe('zset');
  });

  it('keeps descriptors with special characters apart', async () => {
    const prefix = counterKeyPrefix('edge', 'sliding_window', 60_000);
    const descriptors = [
      [{ key: 'a_b', value: 'c' }],
      [{ key: 'a', value: 'b_c' }],
      [{ key: 'a', value: 'b:c' }],
      [{ key: 'a:b', value: 'c' }],
      [{ key: 'a', value: '{b}' }],
      [{ key: 'a', value: 'b}' }],
      [{ key: 'a', value: 'b|c=d' }],
      [{ key: 'a', value: 'b' }, { key: 'c', value: 'd' }],
      [{ key: 'a', value: 'b|c=d' }, { key: 'e', value: '' }],
      [{ key: 'a', value: '%7C' }],
      [{ key: 'a', value: 'ü\n\u0000' }],
      [{ key: 'a', value: '' }],
    ];
    const keys = descriptors.map((entries) => counterKey(prefix, entries));
    for (const key of keys) {
      const d = await store.decide([{ key, limit: 1, windowMs: 60_000, algorithm: 'sliding_window', hits: 1 }]);
      // Each is the first hit on its own counter.
      expect({ key, allowed: d[0].allowed }).toEqual({ key, allowed: true });
    }
    expect(await allKeys()).toHaveLength(descriptors.length);
  });

  it('makes one script call per decide, whatever the number of counters', async () => {
    const counters = (n: number): CounterRequest[] =>
      Array.from({ length: n }, (_, i) => ({ key: `rt|${n}|${i}`, limit: 100, windowMs: 60_000, algorithm: (['sliding_window', 'fixed_window', 'sliding_log'] as const)[i % 3], hits: 1 }));
    for (const n of [1, 2, 5, 12]) await store.decide(counters(n)); // loads every script variant
    await admin.config('RESETSTAT');
    const calls = 10;
    for (let i = 0; i < calls; i++) for (const n of [1, 2, 5, 12]) await store.decide(counters(n));
    const stats = await admin.info('commandstats');
    const callsOf = (cmd: string): number => Number(new RegExp(`cmdstat_${cmd}:calls=(\\d+)`).exec(stats)?.[1] ?? 0);
    expect(callsOf('evalsha') + callsOf('eval')).toBe(calls * 4);
    expect(callsOf('evalsha')).toBe(calls * 4);
  });

  it('reloads its script after redis forgets it', async () => {
    const c: CounterRequest = { key: 'flush', limit: 3, windowMs: 60_000, algorithm: 'sliding_window', hits: 1 };
    expect((await store.decide([c]))[0].remaining).toBe(2);
    await admin.script('FLUSH');
    expect((await store.decide([c]))[0].remaining).toBe(1);
  });

  it('batches concurrent calls into shared round trips', async () => {
    await admin.config('RESETSTAT');
    const decisions = await Promise.all(
      Array.from({ length: 100 }, (_, i) => store.decide([{ key: `batch|${i % 10}`, limit: 1_000, windowMs: 60_000, algorithm: 'sliding_window', hits: 1 }])),
    );
    expect(decisions.every((d) => d[0].allowed)).toBe(true);
    const stats = await admin.info('all');
    const calls = (cmd: string): number => Number(new RegExp(`cmdstat_${cmd}:calls=(\\d+)`).exec(stats)?.[1] ?? 0);
    expect(calls('evalsha') + calls('eval')).toBe(100);
    // 100 script calls arrived in far fewer socket reads: they were pipelined.
    expect(Number(/total_reads_processed:(\d+)/.exec(stats)?.[1])).toBeLessThan(30);
    const clients = (await admin.client('LIST')) as string;
    expect(clients.split('\n').filter((l) => l.includes('name=slidegate'))).toHaveLength(1);
  });
});
