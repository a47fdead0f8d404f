import Redis from 'ioredis';
import { MAX_BUCKET_AHEAD_MS } from '../../../src/limiter/algorithms';
import { StoreUnavailableError, type CounterDecision, type CounterRequest } from '../../../src/limiter/store';
import { MAX_WINDOW_MS, UNIT_MS } from '../../../src/limiter/types';
import type { RedisStore } from '../../../src/store/redis/redis-store';
import { DECIDE_SCRIPT, DecideReplyReader, MalformedReplyError } from '../../../src/store/redis/script';
import { connectStore, startRedis, type RedisServer } from '../../helpers/redis';

/**
 * One DECIDE script call answers many calls, often of different tenants: nothing one call holds
 * may change what the others of its batch are told. Calls made in the same turn share a batch.
 */

const PREFIX = 'reply:';
const HOUR = 3_600_000;

/** Every field of a DECIDE reply: integers written in full, tokens of digits and ':'. */
const WELL_FORMED = /^-?\d+,-?\d+,[\d:]*(,-?\d+,-?\d+,[\d:]*)*$/;

describe('the redis store: one call of a batch never changes what the others are told', () => {
  let redis: RedisServer;
  let store: RedisStore;
  let admin: Redis;
  let seq = 0;

  beforeAll(async () => {
    redis = await startRedis();
    store = await connectStore({ type: 'single', url: redis.url, keyPrefix: PREFIX });
    admin = new Redis({ host: '127.0.0.1', port: redis.port });
  });

  afterAll(async () => {
    admin?.disconnect();
    await store?.close();
    await redis?.stop();
  });

  const fresh = (label: string): string => `${label}|${++seq}`;
  /** A plain call that other calls share a batch with: exact answers are known. */
  const bystander = (key: string, hits = 1): CounterRequest => ({ key, limit: 10, windowMs: HOUR, algorithm: 'fixed_window', hits });
  const remainingOf = async (c: CounterRequest): Promise<number> => (await store.decide([{ ...c, hits: 0 }]))[0].remaining;

  it('writes every number of its reply as an integer in full, past 1e14 too', async () => {
    // Past the store's bounds on purpose (the script is called directly): a reset of 1e15 ms.
    const reply = (await admin.eval(
      DECIDE_SCRIPT,
      2,
      `${PREFIX}{${fresh('far')}}`,
      `${PREFIX}{${fresh('near')}}`,
      '0',
      1,
      'tb:1000000000000000:1:1:1',
      '0',
      1,
      `fw:${HOUR}:10:0:1`,
    )) as string;
    expect(reply).toMatch(WELL_FORMED);
    const reader = new DecideReplyReader(reply);
    expect([reader.remaining(), reader.resetMs()]).toEqual([0, 1e15]);
    reader.skipToken();
    expect(reader.remaining()).toBe(9);
    expect(reader.resetMs()).toBeLessThanOrEqual(HOUR);
  });

  it('fails a call past the script bounds on its own; the calls batched with it are exact', async () => {
    const b = bystander(fresh('bystander'));
    const [far, near] = await Promise.allSettled([
      store.decide([{ key: fresh('far'), limit: 5, windowMs: 1e15, algorithm: 'sliding_window', hits: 1 }]),
      store.decide([b]),
    ]);
    expect(far.status).toBe('rejected');
    expect(String((far as PromiseRejectedResult).reason)).toContain(`window 1000000000000000 ms is not an integer from 1 to ${MAX_WINDOW_MS}`);
    expect(near).toEqual({ status: 'fulfilled', value: [{ allowed: true, remaining: 9, resetMs: expect.any(Number) }] });
    expect(await remainingOf(b)).toBe(9);
  });

  it('keeps a bucket charged far past its burst storable (a TAT past 2^63 ms would fail SET PX), its batch unharmed', async () => {
    const deep: CounterRequest = { key: fresh('deep'), limit: 1, windowMs: UNIT_MS.year, algorithm: 'token_bucket', burst: 1, hits: 4_294_967_295 };
    const b = bystander(fresh('bystander'));
    const [d, n] = await Promise.all([store.decide([deep], { countDenied: true }), store.decide([b], { countDenied: true })]);
    expect(d).toEqual([{ allowed: false, remaining: 0, resetMs: UNIT_MS.year }]);
    expect(n[0]).toMatchObject({ allowed: true, remaining: 9 });
    const ttl = await admin.pttl(`${PREFIX}{${deep.key}}`);
    expect(ttl).toBeGreaterThan(MAX_BUCKET_AHEAD_MS - 60_000);
    expect(ttl).toBeLessThanOrEqual(MAX_BUCKET_AHEAD_MS + 1);
  });

  it('fails a call whose key holds another type on its own, charging none of it; the others are decided and charged', async () => {
    const hash = fresh('hash');
    await admin.hset(`${PREFIX}{${hash}}`, 'x', '1');
    const good = bystander(fresh('good'));
    const b = bystander(fresh('bystander'));
    const settled = await Promise.allSettled([
      store.decide([good, { key: hash, limit: 5, windowMs: HOUR, algorithm: 'token_bucket', hits: 1 }]),
      store.decide([{ key: hash, limit: 5, windowMs: HOUR, algorithm: 'sliding_log', hits: 1 }]),
      store.decide([b]),
    ]);
    expect(settled.map((s) => s.status)).toEqual(['rejected', 'rejected', 'fulfilled']);
    for (const s of settled.slice(0, 2)) {
      expect((s as PromiseRejectedResult).reason).toBeInstanceOf(StoreUnavailableError);
      expect(String((s as PromiseRejectedResult).reason)).toContain('holds another type');
    }
    expect((settled[2] as PromiseFulfilledResult<CounterDecision[]>).value[0]).toMatchObject({ allowed: true, remaining: 9 });
    expect(await remainingOf(good)).toBe(10);
    expect(await remainingOf(b)).toBe(9);
    expect(await admin.type(`${PREFIX}{${hash}}`)).toBe('hash');
  });

  it('leaves a sliding window uncharged for the next calls of its batch when its call fails or is denied after it', async () => {
    const hash = fresh('hash');
    await admin.hset(`${PREFIX}{${hash}}`, 'x', '1');
    const window = (key: string, limit: number): CounterRequest => ({ key, limit, windowMs: HOUR, algorithm: 'sliding_window', hits: 1 });
    const shared = window(fresh('shared'), 10);
    const settled = await Promise.allSettled([
      store.decide([shared, { key: hash, limit: 5, windowMs: HOUR, algorithm: 'token_bucket', hits: 1 }]),
      store.decide([shared, window(fresh('closed'), 0)]),
      store.decide([shared]),
    ]);
    expect(settled.map((s) => s.status)).toEqual(['rejected', 'fulfilled', 'fulfilled']);
    expect((settled[1] as PromiseFulfilledResult<CounterDecision[]>).value.map((d) => d.allowed)).toEqual([true, false]);
    expect((settled[2] as PromiseFulfilledResult<CounterDecision[]>).value[0]).toMatchObject({ allowed: true, remaining: 9 });
    expect(await remainingOf(shared)).toBe(9);
  });

  it('fails the calls that charged a counter Redis refused to increment, each on its own', async () => {
    const hash = fresh('hash');
    const text = fresh('text');
    const n = Math.floor(Date.now() / HOUR);
    // A sliding window reads with MGET, which answers nil for another type: the INCRBY is what fails.
    await admin.hset(`${PREFIX}{${hash}}:${n}`, 'x', '1');
    await admin.set(`${PREFIX}{${text}}:${n}`, 'not a number');
    const b = bystander(fresh('bystander'));
    const settled = await Promise.allSettled([
      store.decide([{ key: hash, limit: 5, windowMs: HOUR, algorithm: 'sliding_window', hits: 1 }]),
      store.decide([b]),
      store.decide([{ key: text, limit: 5, windowMs: HOUR, algorithm: 'fixed_window', hits: 1 }]),
    ]);
    expect(settled.map((s) => s.status)).toEqual(['rejected', 'fulfilled', 'rejected']);
    expect(String((settled[0] as PromiseRejectedResult).reason)).toContain('refused the increment');
    expect(String((settled[2] as PromiseRejectedResult).reason)).toContain('refused the increment');
    expect(await remainingOf(b)).toBe(9);
  });

  it('fails a call whose bucket holds a value that is no bucket state on its own', async () => {
    const junk = fresh('junk');
    await admin.set(`${PREFIX}{${junk}}`, '1.5e+16:0');
    const b = bystander(fresh('bystander'));
    const [bad, ok] = await Promise.allSettled([
      store.decide([{ key: junk, limit: 5, windowMs: HOUR, algorithm: 'leaky_bucket', hits: 1 }]),
      store.decide([b]),
    ]);
    expect(String((bad as PromiseRejectedResult).reason)).toContain('not a bucket state');
    expect(ok.status).toBe('fulfilled');
    expect(await admin.get(`${PREFIX}{${junk}}`)).toBe('1.5e+16:0');
  });
});

describe('the DECIDE reply reader', () => {
  it('refuses a number in exponent form or with a fraction instead of reading on out of step', () => {
    for (const reply of ['0,1.5e+16,,9,1000,5', '0,1.5,,9,1000,5', '0,,,9,1000,5']) {
      const reader = new DecideReplyReader(reply);
      expect(reader.remaining()).toBe(0);
      expect(() => reader.resetMs()).toThrow(MalformedReplyError);
    }
  });

  it('reads past a failed call (every counter -2 and its code) and answers the next', () => {
    const reader = new DecideReplyReader('-2,1,,-2,1,,-1,500,');
    expect(reader.failure(2)).toBe(1);
    expect(reader.failure(1)).toBeUndefined();
    expect([reader.remaining(), reader.resetMs(), reader.token()]).toEqual([-1, 500, '']);
  });
});
