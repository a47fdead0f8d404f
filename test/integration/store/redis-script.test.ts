import fc from 'fast-check';
import Redis from 'ioredis';
import {
  bucket,
  fixedPeriod,
  fixedWindow,
  MAX_BUCKET_AHEAD_MS,
  slidingLog,
  slidingWindow,
  subWindowCounter,
  type Verdict,
} from '../../../src/limiter/algorithms';
import { UNIT_MS, UNITS, type Algorithm } from '../../../src/limiter/types';
import { calendarPeriod, daysFromCivil } from '../../../src/limiter/calendar';
import { MemoryStore } from '../../../src/store/memory-store';
import { CALENDAR_KEY_MARGIN_MS, counterSpec, DECIDE_SCRIPT, DecideReplyReader, pushCounterArgs, REFUND_SCRIPT } from '../../../src/store/redis/script';
import type { CounterRequest } from '../../../src/limiter/store';
import { FakeClock } from '../../helpers/fake-clock';
import { startRedis, type RedisServer } from '../../helpers/redis';

/**
 * The Lua decision must equal src/limiter/algorithms.ts exactly. Redis time cannot be set, so these
 * cases run the script text with `TIME` replaced by a pinned instant (the only edit), against
 * state written straight into Redis, and compare with the TypeScript reference.
 */

const TIME_CALL = "local t = redis.call('TIME')";

function pinned(nowMs: number): string {
  const sec = Math.floor(nowMs / 1000);
  const usec = (nowMs % 1000) * 1000 + 123;
  return DECIDE_SCRIPT.replace(TIME_CALL, `local t = {'${sec}', '${usec}'}`);
}

describe('the decide script', () => {
  let redis: RedisServer;
  let r: Redis;

  beforeAll(async () => {
    expect(DECIDE_SCRIPT).toContain(TIME_CALL);
    redis = await startRedis();
    r = new Redis({ host: '127.0.0.1', port: redis.port });
  });

  afterAll(async () => {
    r?.disconnect();
    await redis?.stop();
  });

  type Code = 'sw' | 'ss' | 'fw' | 'sl' | 'tb' | 'lb';

  /** One counter decided alone; `shape` is the sub-window count (sw, ss) or the burst (tb, lb). */
  async function decide(
    nowMs: number,
    key: string,
    alg: Code,
    windowMs: number,
    limit: number,
    hits: number,
    shape = alg === 'sw' || alg === 'ss' ? 1 : alg === 'tb' || alg === 'lb' ? limit : 0,
  ): Promise<{ verdict: Verdict; token: string }> {
    const [out] = read((await r.eval(pinned(nowMs), 1, key, '0', 1, `${alg}:${windowMs}:${limit}:${shape}:${hits}`)) as string, 1);
    return out;
  }

  /** The first `n` counters of a DECIDE reply. */
  function read(reply: string, n: number): { verdict: Verdict; token: string }[] {
    const reader = new DecideReplyReader(reply);
    return Array.from({ length: n }, () => {
      const remaining = reader.remaining();
      const resetMs = reader.resetMs();
      return { verdict: { allowed: remaining >= 0, remaining: Math.max(remaining, 0), resetMs }, token: reader.token() };
    });
  }

  const base = fc.record({
    nowMs: fc.integer({ min: 1_600_000_000_000, max: 1_900_000_000_000 }),
    windowMs: fc.constantFrom(1_000, 7_000, 60_000, 3_600_000, 86_400_000, 31_536_000_000),
    limit: fc.integer({ min: 1, max: 1_000 }),
    hits: fc.oneof(fc.integer({ min: 0, max: 5 }), fc.integer({ min: 0, max: 1_200 })),
  });

  it('reads a reply field by field: denials as -1, empty and log tokens, the last field unterminated', () => {
    const reader = new DecideReplyReader('4,2000,28333333,-1,60000,,0,1000,3:1700000000500123:3');
    expect([reader.remaining(), reader.resetMs(), reader.token()]).toEqual([4, 2000, '28333333']);
    expect([reader.remaining(), reader.resetMs(), reader.token()]).toEqual([-1, 60000, '']);
    expect(reader.remaining()).toBe(0);
    expect(reader.resetMs()).toBe(1000);
    expect(reader.token()).toBe('3:1700000000500123:3');
  });

  it('mirrors the sliding window arithmetic exactly', async () => {
    await fc.assert(
      fc.asyncProperty(base, fc.integer({ min: 0, max: 1_500 }), fc.integer({ min: 0, max: 1_500 }), async (b, current, previous) => {
        await r.flushall();
        const n = Math.floor(b.nowMs / b.windowMs);
        if (current > 0) await r.set(`k:${n}`, current);
        if (previous > 0) await r.set(`k:${n - 1}`, previous);
        const got = await decide(b.nowMs, 'k', 'sw', b.windowMs, b.limit, b.hits);
        expect(got.verdict).toEqual(slidingWindow({ current, previous, nowMs: b.nowMs, windowMs: b.windowMs, limit: b.limit, hits: b.hits }));
        if (got.verdict.allowed && b.hits > 0) {
          expect(got.token).toBe(String(n));
          expect(Number(await r.get(`k:${n}`))).toBe(current + b.hits);
        } else {
          expect(got.token).toBe('');
          expect(Number((await r.get(`k:${n}`)) ?? 0)).toBe(current);
        }
      }),
      { numRuns: 150 },
    );
  });

  it('mirrors the fixed window arithmetic exactly', async () => {
    await fc.assert(
      fc.asyncProperty(base, fc.integer({ min: 0, max: 1_500 }), async (b, count) => {
        await r.flushall();
        const n = Math.floor(b.nowMs / b.windowMs);
        if (count > 0) await r.set(`k:${n}`, count);
        const got = await decide(b.nowMs, 'k', 'fw', b.windowMs, b.limit, b.hits);
        expect(got.verdict).toEqual(fixedWindow({ count, nowMs: b.nowMs, windowMs: b.windowMs, limit: b.limit, hits: b.hits }));
      }),
      { numRuns: 100 },
    );
  });

  it('cuts calendar periods as src/limiter/calendar.ts does, counting each under its start until its end', async () => {
    const DAY = UNIT_MS.day;
    // Any instant up to the year 2381, or one within 2 ms of a local first of a month.
    const instant = fc.oneof(
      fc.record({ at: fc.integer({ min: 0, max: 13_000_000_000_000 }) }),
      fc.record({ year: fc.integer({ min: 1970, max: 2400 }), month: fc.integer({ min: 1, max: 12 }), delta: fc.integer({ min: -2, max: 2 }) }),
    );
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...UNITS),
        fc.integer({ min: -1439, max: 1439 }),
        instant,
        fc.integer({ min: 1, max: 20 }),
        fc.integer({ min: 0, max: 25 }),
        fc.integer({ min: 0, max: 20 }),
        async (unit, minutes, when, limit, hits, count) => {
          const offsetMs = minutes * 60_000;
          const nowMs = 'at' in when ? when.at : daysFromCivil(when.year, when.month) * DAY - offsetMs + when.delta;
          fc.pre(nowMs >= 0);
          await r.flushall();
          const { startMs, endMs } = calendarPeriod(nowMs, unit, offsetMs);
          if (count > 0) await r.set(`k:${startMs}`, count);
          const c: CounterRequest = { key: 'k', algorithm: 'fixed_window', windowMs: UNIT_MS[unit], limit, hits, calendar: { unit, offsetMs } };
          const [got] = read((await r.eval(pinned(nowMs), 1, 'k', '0', 1, counterSpec(c))) as string, 1);
          expect(got.verdict).toEqual(fixedPeriod({ count, nowMs, startMs, endMs, limit, hits }));
          if (got.verdict.allowed && hits > 0) {
            expect(got.token).toBe(String(startMs));
            expect(await r.get(`k:${startMs}`)).toBe(String(count + hits));
            // A key the call created lives until its period's end and a second, not a nominal unit.
            const ttl = await r.pttl(`k:${startMs}`);
            expect(ttl).toBeLessThanOrEqual(endMs - nowMs + CALENDAR_KEY_MARGIN_MS);
            if (count === 0) expect(ttl).toBeGreaterThan(endMs - nowMs + CALENDAR_KEY_MARGIN_MS - 500);
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  it('decides a calendar month as the memory store does across its end, with a clock behind UTC', async () => {
    const offsetMs = -8 * 3_600_000;
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1970, max: 2400 }),
        fc.integer({ min: 1, max: 12 }),
        fc.array(fc.record({ dt: fc.integer({ min: 0, max: 3 }), hits: fc.integer({ min: 0, max: 3 }) }), { minLength: 1, maxLength: 12 }),
        async (year, month, steps) => {
          await r.flushall();
          const clock = new FakeClock(daysFromCivil(year, month) * UNIT_MS.day - offsetMs - 10);
          const memory = new MemoryStore({ maxKeys: 100, clock, sweepIntervalMs: 0 });
          for (const step of steps) {
            clock.advance(step.dt);
            const c: CounterRequest = {
              key: 'm',
              algorithm: 'fixed_window',
              windowMs: UNIT_MS.month,
              limit: 4,
              hits: step.hits,
              calendar: { unit: 'month', offsetMs },
            };
            const [fromMemory] = await memory.decide([c]);
            expect(await scriptDecide(clock.nowMs(), [c], false)).toEqual([fromMemory]);
          }
          await memory.close();
        },
      ),
      { numRuns: 100 },
    );
  });

  it('mirrors the sliding log arithmetic exactly', async () => {
    const records = fc.array(fc.record({ ageMs: fc.integer({ min: 0, max: 120_000 }), hits: fc.integer({ min: 1, max: 300 }) }), { maxLength: 12 });
    await fc.assert(
      fc.asyncProperty(base, records, async (b, recs) => {
        await r.flushall();
        const entries = recs.map((x) => ({ atMs: b.nowMs - x.ageMs, hits: x.hits })).sort((x, y) => x.atMs - y.atMs);
        for (let j = 0; j < entries.length; j++) await r.zadd('k', entries[j].atMs, `${entries[j].hits}:seed:${j}`);
        const got = await decide(b.nowMs, 'k', 'sl', b.windowMs, b.limit, b.hits);
        expect(got.verdict).toEqual(slidingLog({ entries, nowMs: b.nowMs, windowMs: b.windowMs, limit: b.limit, hits: b.hits }));
        if (got.verdict.allowed && b.hits > 0) {
          expect(got.token.startsWith(`${b.hits}:`)).toBe(true);
          expect(await r.zscore('k', got.token)).toBe(String(b.nowMs));
          expect(await r.pttl('k')).toBeGreaterThan(0);
        }
      }),
      { numRuns: 150 },
    );
  });

  it('mirrors the sub-window sliding window arithmetic exactly, plain and strict', async () => {
    const shapeArb = fc.record({ k: fc.constantFrom(1, 2, 4, 5, 10, 20), strict: fc.boolean() }); // each divides every window of `base`
    await fc.assert(
      fc.asyncProperty(base, shapeArb, fc.array(fc.integer({ min: 0, max: 400 }), { minLength: 21, maxLength: 21 }), async (b, { k, strict }, raw) => {
        await r.flushall();
        const s = b.windowMs / k;
        const n = Math.floor(b.nowMs / s);
        const counts = raw.slice(0, k + 1);
        for (let j = 0; j <= k; j++) if (counts[j] > 0) await r.set(`k:${n - k + j}`, counts[j]);
        const got = await decide(b.nowMs, 'k', strict ? 'ss' : 'sw', b.windowMs, b.limit, b.hits, k);
        expect(got.verdict).toEqual(subWindowCounter({ counts, strict, nowMs: b.nowMs, windowMs: b.windowMs, limit: b.limit, hits: b.hits }));
        if (got.verdict.allowed && b.hits > 0) {
          expect(got.token).toBe(String(n));
          expect(Number(await r.get(`k:${n}`))).toBe(counts[k] + b.hits);
          // A key the call created gets the TTL W + S; an existing one keeps its own.
          if (counts[k] === 0) expect(await r.pttl(`k:${n}`)).toBeGreaterThan(b.windowMs + s - 1_000);
        } else {
          expect(got.token).toBe('');
        }
      }),
      { numRuns: 150 },
    );
  });

  it('mirrors the GCRA bucket arithmetic exactly, and keeps its TAT until the bucket has drained', async () => {
    await fc.assert(
      fc.asyncProperty(
        base,
        fc.constantFrom('tb' as const, 'lb' as const),
        fc.integer({ min: 1, max: 2_000 }),
        fc.option(fc.integer({ min: -3_600_000, max: 3_600_000 }), { nil: undefined }),
        fc.integer({ min: 0, max: 999 }),
        async (b, alg, burst, tatOffset, remRaw) => {
          await r.flushall();
          const state = tatOffset === undefined ? { tatMs: 0, tatRem: 0 } : { tatMs: b.nowMs + tatOffset, tatRem: remRaw % b.limit };
          if (tatOffset !== undefined) await r.set('k', `${state.tatMs}:${state.tatRem}`);
          const got = await decide(b.nowMs, 'k', alg, b.windowMs, b.limit, b.hits, burst);
          expect(got.verdict).toEqual(bucket({ state, nowMs: b.nowMs, windowMs: b.windowMs, limit: b.limit, burst, hits: b.hits }));
          if (got.verdict.allowed && b.hits > 0) {
            expect(got.token).toBe(`${b.windowMs}:${b.limit}`);
            // The TTL is the drain time the verdict reports, at most the debt cap (a TAT may lie up to a
            // window's remainder past it: 200 years and 999 ms, kept 200 years).
            expect(await r.pttl('k')).toBeLessThanOrEqual(got.verdict.resetMs);
            expect(await r.pttl('k')).toBeGreaterThan(Math.min(got.verdict.resetMs, MAX_BUCKET_AHEAD_MS) - 1_000);
          } else {
            expect(got.token).toBe('');
          }
        },
      ),
      { numRuns: 150 },
    );
  });

  /** Decides `requests` at `nowMs` through the script exactly as RedisStore sends them (keys unprefixed). */
  async function scriptDecide(nowMs: number, counters: readonly CounterRequest[], countDenied: boolean): Promise<Verdict[]> {
    const args: (string | number)[] = [countDenied ? '1' : '0', counters.length];
    for (const c of counters) pushCounterArgs(args, c);
    return read((await r.eval(pinned(nowMs), counters.length, ...counters.map((c) => c.key), ...args)) as string, counters.length).map((d) => d.verdict);
  }

  it('decides every algorithm and mode exactly as the memory store does, request after request', async () => {
    type Shape = Pick<CounterRequest, 'algorithm' | 'windowMs' | 'subWindows' | 'strict' | 'burst' | 'calendar'>;
    const shapes: Shape[] = [
      { algorithm: 'sliding_window', windowMs: 1_000 },
      { algorithm: 'sliding_window', windowMs: 1_000, subWindows: 4 },
      { algorithm: 'sliding_window', windowMs: 1_000, subWindows: 1, strict: true },
      { algorithm: 'sliding_window', windowMs: 600, subWindows: 6, strict: true },
      { algorithm: 'fixed_window', windowMs: 1_000 },
      { algorithm: 'fixed_window', windowMs: 1_000, calendar: { unit: 'second', offsetMs: 19_800_000 } },
      { algorithm: 'sliding_log', windowMs: 1_000 },
      { algorithm: 'token_bucket', windowMs: 1_000, burst: 7 },
      { algorithm: 'leaky_bucket', windowMs: 3_000, burst: 2 },
    ];
    const counterArb = fc.record({
      key: fc.constantFrom('a', 'b'),
      shape: fc.integer({ min: 0, max: shapes.length - 1 }),
      limit: fc.integer({ min: 0, max: 5 }),
      hits: fc.integer({ min: 0, max: 3 }),
    });
    const stepArb = fc.record({
      dt: fc.integer({ min: 0, max: 400 }),
      countDenied: fc.boolean(),
      counters: fc.array(counterArb, { minLength: 1, maxLength: 3 }),
    });
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1_600_000_000_000, max: 1_900_000_000_000 }),
        fc.array(stepArb, { minLength: 1, maxLength: 25 }),
        async (start, steps) => {
          await r.flushall();
          const clock = new FakeClock(start);
          const memory = new MemoryStore({ maxKeys: 1_000, clock, sweepIntervalMs: 0 });
          for (const step of steps) {
            clock.advance(step.dt);
            const counters: CounterRequest[] = step.counters.map((c) => {
              const shape = shapes[c.shape];
              // The key names its algorithm, window and sub-windows, as a real counter key does.
              const key = `${c.key}|${shape.algorithm as Algorithm}${shape.windowMs}/${shape.subWindows ?? 1}${shape.calendar === undefined ? '' : '/c'}`;
              return { key, limit: c.limit, hits: c.hits, ...shape, burst: shape.burst === undefined ? undefined : Math.max(shape.burst, c.limit) };
            });
            const fromMemory = await memory.decide(counters, { countDenied: step.countDenied });
            expect(await scriptDecide(clock.nowMs(), counters, step.countDenied)).toEqual(
              fromMemory.map((d) => ({ allowed: d.allowed, remaining: d.remaining, resetMs: d.resetMs })),
            );
          }
          await memory.close();
        },
      ),
      { numRuns: 150 },
    );
  });

  /** One request of a DECIDE batch: its counters as [key, algorithm, window, limit, hits]. */
  type Req = { countDenied: boolean; counters: [string, Code, number, number, number][] };

  async function decideBatch(nowMs: number, reqs: readonly Req[]): Promise<{ verdict: Verdict; token: string }[]> {
    const keys: string[] = [];
    const argv: string[] = [];
    for (const q of reqs) {
      argv.push(q.countDenied ? '1' : '0', String(q.counters.length));
      for (const [key, alg, w, limit, hits] of q.counters) {
        keys.push(key);
        const shape = alg === 'sw' ? '1' : alg === 'ss' ? '2' : alg === 'tb' || alg === 'lb' ? '3' : '0';
        argv.push(`${alg}:${w}:${limit}:${shape}:${hits}`);
      }
    }
    return read((await r.eval(pinned(nowMs), keys.length, ...keys, ...argv)) as string, keys.length);
  }

  /** Every key's value (counters) or record hits (logs), for comparing two runs. */
  async function state(): Promise<Record<string, string>> {
    const out: Record<string, string> = {};
    for (const key of (await r.keys('*')).sort()) {
      expect({ key, ttl: (await r.pttl(key)) > 0 }).toEqual({ key, ttl: true });
      out[key] = (await r.type(key)) === 'zset' ? (await r.zrange(key, '0', '-1')).map((m) => m.split(':')[0]).join(',') : String(await r.get(key));
    }
    return out;
  }

  it('decides a batch of requests exactly as the same requests called one by one', async () => {
    const counter = fc.tuple(
      fc.constantFrom('a', 'b', 'c'),
      fc.constantFrom('sw' as const, 'ss' as const, 'fw' as const, 'sl' as const, 'tb' as const, 'lb' as const),
      fc.constantFrom(1_000, 60_000),
      fc.integer({ min: 0, max: 6 }),
      fc.integer({ min: 0, max: 3 }),
    );
    const request = fc.record({ countDenied: fc.boolean(), counters: fc.array(counter, { minLength: 1, maxLength: 4 }) });
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1_600_000_000_000, max: 1_900_000_000_000 }),
        fc.array(request, { minLength: 1, maxLength: 8 }),
        async (nowMs, raw) => {
          // The algorithm and window are part of a real counter key.
          const reqs: Req[] = raw.map((q) => ({
            countDenied: q.countDenied,
            counters: q.counters.map(([k, alg, w, l, h]) => [`${k}|${alg}${w}${alg === 'ss' ? '/2' : ''}`, alg, w, l, h]),
          }));
          await r.flushall();
          const batched = await decideBatch(nowMs, reqs);
          const batchedState = await state();
          await r.flushall();
          const single: { verdict: Verdict; token: string }[] = [];
          for (const q of reqs) single.push(...(await decideBatch(nowMs, [q])));
          expect(await state()).toEqual(batchedState);
          // Log tokens name the counter's place in its call; everything else is identical.
          const comparable = (out: { verdict: Verdict; token: string }[]): unknown[] => out.map((d) => ({ ...d, token: d.token.split(':')[0] }));
          expect(comparable(batched)).toEqual(comparable(single));
        },
      ),
      { numRuns: 120 },
    );
  });

  it('keeps each request of a batch all-or-nothing on its own', async () => {
    await r.flushall();
    const now = 1_700_000_000_500;
    const out = await decideBatch(now, [
      {
        countDenied: false,
        counters: [
          ['shared', 'sw', 1_000, 10, 2],
          ['gate', 'fw', 1_000, 0, 1],
        ],
      },
      { countDenied: false, counters: [['shared', 'sw', 1_000, 10, 3]] },
      {
        countDenied: true,
        counters: [
          ['shared', 'sw', 1_000, 10, 1],
          ['gate', 'fw', 1_000, 0, 1],
        ],
      },
    ]);
    expect(out.map((d) => d.verdict.allowed)).toEqual([true, false, true, true, false]);
    // The denied request charged nothing; the next one and the countDenied one did.
    expect(out[2].verdict.remaining).toBe(7);
    expect(await r.get('shared:1700000000')).toBe('4');
    expect(await r.get('gate:1700000000')).toBe('1');
  });

  it("sets a counter's TTL when it creates the key and never extends it", async () => {
    await r.flushall();
    const now = 1_700_000_000_500;
    await decideBatch(now, [
      {
        countDenied: false,
        counters: [
          ['sw', 'sw', 60_000, 10, 1],
          ['fw', 'fw', 60_000, 10, 1],
        ],
      },
    ]);
    expect(await r.pttl('sw:28333333')).toBeGreaterThan(2 * 60_000 - 1_000);
    expect(await r.pttl('fw:28333333')).toBeGreaterThan(60_000 - 1_000);
    await r.pexpire('sw:28333333', 5_000);
    await r.pexpire('fw:28333333', 5_000);
    await decideBatch(now, [
      {
        countDenied: false,
        counters: [
          ['sw', 'sw', 60_000, 10, 1],
          ['fw', 'fw', 60_000, 10, 1],
        ],
      },
    ]);
    expect(await r.pttl('sw:28333333')).toBeLessThanOrEqual(5_000);
    expect(await r.pttl('fw:28333333')).toBeLessThanOrEqual(5_000);
    expect(await r.get('sw:28333333')).toBe('2');
  });

  it('keeps every admitted batch as its own log record, even within one millisecond', async () => {
    await r.flushall();
    const now = 1_700_000_000_500;
    const tokens = new Set<string>();
    for (let i = 0; i < 5; i++) tokens.add((await decide(now, 'k', 'sl', 1_000, 100, 2)).token);
    expect(tokens.size).toBe(5);
    expect(await r.zcard('k')).toBe(5);
    expect((await decide(now, 'k', 'sl', 1_000, 100, 0)).verdict.remaining).toBe(90);
  });

  it('refunds a bucket by moving its TAT back, deleting a bucket that has drained', async () => {
    await r.flushall();
    // Real Redis time: REFUND reads TIME, so the TATs are set around the real clock.
    const now = Number((await r.time())[0]) * 1000;
    await r.set('b', `${now + 60_000}:1`);
    // A refund of 3 hits at 5 per second (token W:L = 1000:5) moves the TAT back 600 ms.
    expect(await r.eval(REFUND_SCRIPT, 1, 'b', 'tb', 3, '1000:5')).toBe(1);
    const [ms, rem] = (await r.get('b'))!.split(':').map(Number);
    expect(rem).toBe(1);
    expect(ms).toBeGreaterThanOrEqual(now + 60_000 - 600 - 1);
    expect(ms).toBeLessThanOrEqual(now + 60_000 - 600);
    expect(await r.pttl('b')).toBeGreaterThan(50_000);
    // Taking back more than is left: the bucket has drained.
    await r.eval(REFUND_SCRIPT, 1, 'b', 'lb', 1_000, '1000:5');
    expect(await r.exists('b')).toBe(0);
  });

  it('refunds exactly what a decide call added', async () => {
    await r.flushall();
    const now = 1_700_000_000_500;
    await r.set('sw:1700000000', 4);
    const sw = await decide(now, 'sw', 'sw', 1_000, 10, 3);
    const fw = await decide(now, 'fw', 'fw', 1_000, 10, 2);
    const sl = await decide(now, 'sl', 'sl', 1_000, 10, 5);
    await r.zadd('sl', now, '1:other:1');
    expect(await r.get('sw:1700000000')).toBe('7');
    const refunded = await r.eval(REFUND_SCRIPT, 3, 'sw', 'fw', 'sl', 'sw', 3, sw.token, 'fw', 2, fw.token, 'sl', 5, sl.token);
    expect(refunded).toBe(3);
    expect(await r.get('sw:1700000000')).toBe('4');
    expect(await r.exists('fw:1700000000')).toBe(0);
    expect(await r.zrange('sl', '0', '-1')).toEqual(['1:other:1']);
    // A window that expired meanwhile is not recreated with a negative count.
    await r.del('sw:1700000000');
    await r.eval(REFUND_SCRIPT, 1, 'sw', 'sw', 3, sw.token);
    expect(await r.exists('sw:1700000000')).toBe(0);
  });
});
