import fc from 'fast-check';
import Redis from 'ioredis';
import { fixedWindow, slidingLog, slidingWindow, type Verdict } from '../../src/limiter/algorithms';
import { DECIDE_SCRIPT, REFUND_SCRIPT } from '../../src/store/redis-script';
import { startRedis, type RedisServer } from '../helpers/redis';

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

  async function decide(nowMs: number, key: string, alg: 'sw' | 'fw' | 'sl', windowMs: number, limit: number, hits: number): Promise<{ verdict: Verdict; token: string }> {
    const out = (await r.eval(pinned(nowMs), 1, key, '0', alg, windowMs, limit, hits)) as (number | string)[];
    return { verdict: { allowed: out[0] === 1, remaining: Number(out[1]), resetMs: Number(out[2]) }, token: String(out[3]) };
  }

  const base = fc.record({
    nowMs: fc.integer({ min: 1_600_000_000_000, max: 1_900_000_000_000 }),
    windowMs: fc.constantFrom(1_000, 7_000, 60_000, 3_600_000, 86_400_000, 31_536_000_000),
    limit: fc.integer({ min: 1, max: 1_000 }),
    hits: fc.oneof(fc.integer({ min: 0, max: 5 }), fc.integer({ min: 0, max: 1_200 })),
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

  it('keeps every admitted batch as its own log record, even within one millisecond', async () => {
    await r.flushall();
    const now = 1_700_000_000_500;
    const tokens = new Set<string>();
    for (let i = 0; i < 5; i++) tokens.add((await decide(now, 'k', 'sl', 1_000, 100, 2)).token);
    expect(tokens.size).toBe(5);
    expect(await r.zcard('k')).toBe(5);
    expect((await decide(now, 'k', 'sl', 1_000, 100, 0)).verdict.remaining).toBe(90);
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
