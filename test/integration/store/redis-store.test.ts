import Redis from 'ioredis';
import { counterKey, counterKeyPrefix } from '../../../src/limiter/keys';
import type { Algorithm } from '../../../src/limiter/types';
import { MAX_BATCH_KEYS, MAX_BATCH_REQUESTS, type RedisStore } from '../../../src/store/redis/redis-store';
import type { CounterRequest } from '../../../src/limiter/store';
import { connectStore, startRedis, type RedisServer } from '../../helpers/redis';

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

  it('decides by redis time: local clocks minutes apart change nothing', async () => {
    // Two stores as on two hosts whose clocks disagree: only Date is faked (timers, hrtime and
    // performance stay real, so the client and the call deadline work as usual).
    const early = await connectStore({ type: 'single', url: redis.url, keyPrefix: PREFIX });
    const late = await connectStore({ type: 'single', url: redis.url, keyPrefix: PREFIX });
    const real = Date.now();
    jest.useFakeTimers({
      doNotFake: [
        'hrtime',
        'nextTick',
        'performance',
        'queueMicrotask',
        'setImmediate',
        'clearImmediate',
        'setInterval',
        'clearInterval',
        'setTimeout',
        'clearTimeout',
      ],
    });
    const on = <T>(localMs: number, call: () => Promise<T>): Promise<T> => {
      jest.setSystemTime(localMs);
      return call();
    };
    try {
      const c = (hits: number): CounterRequest => ({ key: 'shared', limit: 5, windowMs: DAY, algorithm: 'fixed_window', hits });
      const [t] = await admin.time();
      const redisNow = Number(t) * 1000;
      const a = await on(real - 7 * 60_000, () => early.decide([c(2)]));
      const b = await on(real + 9 * 60_000, () => late.decide([c(2)]));
      expect(a[0]).toMatchObject({ allowed: true, remaining: 3 });
      expect(b[0]).toMatchObject({ allowed: true, remaining: 1 });
      // Both reset at the end of the same Redis day, whatever the local clocks say.
      const endOfDay = redisNow - (redisNow % DAY) + DAY;
      for (const d of [a[0], b[0]]) expect(Math.abs(redisNow + d.resetMs - endOfDay)).toBeLessThan(2_000);
      expect(Math.abs(a[0].resetMs - b[0].resetMs)).toBeLessThan(1_000);
      // A sliding window too: a local clock a day ahead sees the same window, not an empty one.
      const s = (hits: number): CounterRequest => ({ key: 'sliding', limit: 3, windowMs: 60_000, algorithm: 'sliding_window', hits });
      expect((await on(real, () => early.decide([s(3)])))[0].allowed).toBe(true);
      expect((await on(real + DAY, () => late.decide([s(1)])))[0].allowed).toBe(false);
      expect((await on(real - DAY, () => early.decide([s(1)])))[0].allowed).toBe(false);
      expect((await on(real - 7 * 60_000, () => early.decide([c(2)])))[0].allowed).toBe(false);
      expect((await on(real + 9 * 60_000, () => late.decide([c(2)])))[0].allowed).toBe(false);
      expect((await on(real + 9 * 60_000, () => late.decide([c(1)])))[0]).toMatchObject({ allowed: true, remaining: 0 });
    } finally {
      jest.useRealTimers();
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
      [
        { key: 'a', value: 'b' },
        { key: 'c', value: 'd' },
      ],
      [
        { key: 'a', value: 'b|c=d' },
        { key: 'e', value: '' },
      ],
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

  async function scriptCalls(): Promise<number> {
    const stats = await admin.info('commandstats');
    const callsOf = (cmd: string): number => Number(new RegExp(`cmdstat_${cmd}:calls=(\\d+)`).exec(stats)?.[1] ?? 0);
    return callsOf('evalsha') + callsOf('eval');
  }

  it('makes at most one script call per decide, and exactly one for a lone call whatever the number of counters', async () => {
    const counters = (n: number): CounterRequest[] =>
      Array.from({ length: n }, (_, i) => ({
        key: `rt|${n}|${i}`,
        limit: 100,
        windowMs: 60_000,
        algorithm: (['sliding_window', 'fixed_window', 'sliding_log'] as const)[i % 3],
        hits: 1,
      }));
    await store.decide(counters(1)); // loads the script on this connection
    await admin.config('RESETSTAT');
    await store.decide(counters(5));
    const stats = await admin.info('commandstats');
    expect(/cmdstat_evalsha:calls=(\d+)/.exec(stats)?.[1]).toBe('1');
    expect(stats).not.toContain('cmdstat_eval:');
    await admin.config('RESETSTAT');
    const calls = 10;
    for (let i = 0; i < calls; i++) for (const n of [1, 2, 5, 12]) await store.decide(counters(n));
    expect(await scriptCalls()).toBe(calls * 4);
  });

  it('coalesces 100 concurrent calls into far fewer script calls, in shared round trips', async () => {
    await admin.config('RESETSTAT');
    const decisions = await Promise.all(
      Array.from({ length: 100 }, (_, i) => store.decide([{ key: `batch|${i % 10}`, limit: 1_000, windowMs: 60_000, algorithm: 'sliding_window', hits: 1 }])),
    );
    expect(decisions.every((d) => d[0].allowed)).toBe(true);
    // Each counter was charged once per call: 10 calls on each of the 10 keys.
    const checks = await Promise.all(
      Array.from({ length: 10 }, (_, k) => store.decide([{ key: `batch|${k}`, limit: 1_000, windowMs: 60_000, algorithm: 'sliding_window', hits: 0 }])),
    );
    expect(checks.map((d) => d[0].remaining)).toEqual(Array.from({ length: 10 }, () => 990));
    expect(await scriptCalls()).toBeLessThanOrEqual(2 + Math.ceil(100 / MAX_BATCH_REQUESTS));
    const stats = await admin.info('all');
    expect(Number(/total_reads_processed:(\d+)/.exec(stats)?.[1])).toBeLessThan(30);
    const clients = (await admin.client('LIST')) as string;
    expect(clients.split('\n').filter((l) => l.includes('name=slidegate'))).toHaveLength(1);
  });

  it('cuts a large batch into script calls of at most MAX_BATCH_REQUESTS calls and MAX_BATCH_KEYS counters', async () => {
    await admin.config('RESETSTAT');
    const one = (i: number): CounterRequest[] => [{ key: `cut|${i % 7}`, limit: 10_000, windowMs: 60_000, algorithm: 'fixed_window', hits: 1 }];
    await Promise.all(Array.from({ length: 3 * MAX_BATCH_REQUESTS }, (_, i) => store.decide(one(i))));
    expect(await scriptCalls()).toBe(3);
    await admin.config('RESETSTAT');
    const wide = (i: number): CounterRequest[] =>
      Array.from({ length: MAX_BATCH_KEYS / 2 }, (_, j) => ({ key: `wide|${i}|${j}`, limit: 10, windowMs: 60_000, algorithm: 'sliding_window', hits: 1 }));
    const results = await Promise.all([0, 1, 2, 3].map((i) => store.decide(wide(i))));
    expect(results.every((d) => d.length === MAX_BATCH_KEYS / 2 && d.every((x) => x.allowed && x.remaining === 9))).toBe(true);
    expect(await scriptCalls()).toBe(2);
  });

  it('keeps every call of a batch all-or-nothing on its own', async () => {
    await admin.config('RESETSTAT');
    // Odd calls carry a counter that is always denied: they must charge nothing on the shared counter.
    const decisions = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        store.decide([
          { key: 'aon|shared', limit: 5, windowMs: 60_000, algorithm: 'sliding_window', hits: 1 },
          { key: `aon|gate|${i % 2}`, limit: i % 2 === 0 ? 1_000 : 0, windowMs: 60_000, algorithm: 'fixed_window', hits: 1 },
        ]),
      ),
    );
    expect(await scriptCalls()).toBe(1);
    const admitted = decisions.map((d, i) => (d.every((x) => x.allowed) ? i : -1)).filter((i) => i >= 0);
    expect(admitted).toEqual([0, 2, 4, 6, 8]);
    expect(decisions.filter((_, i) => i % 2 === 1).every((d) => d[1].allowed === false)).toBe(true);
    const [check] = await store.decide([{ key: 'aon|shared', limit: 5, windowMs: 60_000, algorithm: 'sliding_window', hits: 0 }]);
    expect(check.remaining).toBe(0);
    expect(await admin.keys(`${PREFIX}{aon|gate|1}*`)).toEqual([]);
  });

  it('reloads its script after redis forgets it', async () => {
    const c: CounterRequest = { key: 'flush', limit: 3, windowMs: 60_000, algorithm: 'sliding_window', hits: 1 };
    expect((await store.decide([c]))[0].remaining).toBe(2);
    await admin.script('FLUSH');
    expect((await store.decide([c]))[0].remaining).toBe(1);
  });
});
