import {
  ALLOW_ALL,
  DENY_ALL,
  distinguishable,
  MAX_FILL_INTERVAL_SECONDS,
  proxiesCapacity,
  reportRate,
  sameStrategy,
  strategyForShare,
  ttlSeconds,
  type QuotaStrategy,
} from '../../../../src/sharing/quota/quota-share';
import { divideCapacity } from '../../../../src/sharing/division';

const bucket = (maxTokens: number, tokensPerFill: number, fillIntervalSeconds: number): QuotaStrategy => ({
  kind: 'token_bucket',
  maxTokens,
  tokensPerFill,
  fillIntervalSeconds,
});

describe('dividing a budget by demand', () => {
  test('proxies that each want more than an even share get an even share', () => {
    expect(divideCapacity(90, [100, Infinity, 500])).toEqual([30, 30, 30]);
  });

  test('a proxy asking less than an even share gets what it asks (with headroom), the rest goes to the busy ones', () => {
    // 20 x 1.25 = 25 for the light one; 75 for the heavy one.
    expect(divideCapacity(100, [200, 20])).toEqual([75, 25]);
  });

  test('what nobody asked for is spread evenly: the shares always add up to the capacity', () => {
    const shares = divideCapacity(100, [8, 8]);
    expect(shares).toEqual([50, 50]);
    const mixed = divideCapacity(100, [10, 30, 1000]);
    expect(mixed[0]).toBeCloseTo(12.5);
    expect(mixed[1]).toBeCloseTo(37.5);
    expect(mixed[2]).toBeCloseTo(50);
    expect(mixed.reduce((a, b) => a + b, 0)).toBeCloseTo(100);
  });

  test('no capacity, no shares; no proxies, nothing', () => {
    expect(divideCapacity(0, [5, 5])).toEqual([0, 0]);
    expect(divideCapacity(10, [])).toEqual([]);
  });

  test('the capacity is the limit per second, less what others use of the counter beyond the tolerance', () => {
    expect(proxiesCapacity({ limit: 100, windowMs: 10_000, used: 0, admitted: 0 })).toBe(10);
    // RLS calls have spent the window: nothing left for the proxies.
    expect(proxiesCapacity({ limit: 100, windowMs: 10_000, used: 100, admitted: 0 })).toBe(0);
    expect(proxiesCapacity({ limit: 100, windowMs: 1_000, used: 60, admitted: 60 })).toBe(100);
    // RLS calls used 50 of the window beyond what the proxies admitted: 50 left for the proxies.
    expect(proxiesCapacity({ limit: 100, windowMs: 1_000, used: 100, admitted: 50 })).toBe(50);
    // A difference within the tolerance is the lag of the charges, not traffic of others.
    expect(proxiesCapacity({ limit: 100, windowMs: 1_000, used: 100, admitted: 85 })).toBe(100);
  });
});

describe('assignments', () => {
  test('a share becomes a token bucket with a whole-second fill interval of one window, tokens rounded down', () => {
    expect(strategyForShare(33.33, 1_000)).toEqual(bucket(3, 33, 1));
    expect(strategyForShare(10, 60_000)).toEqual(bucket(60, 600, 60));
  });

  test('a small share gets a longer fill interval so that a fill holds at least ten tokens', () => {
    // 0.5/s on a 1 s window: 20 s per 10 tokens, the same rate.
    expect(strategyForShare(0.5, 1_000)).toEqual(bucket(1, 10, 20));
  });

  test('no share, or less than one request per fill interval at its longest, is DENY_ALL', () => {
    expect(strategyForShare(0, 1_000)).toBe(DENY_ALL);
    expect(strategyForShare(0.5 / MAX_FILL_INTERVAL_SECONDS, 1_000)).toBe(DENY_ALL);
  });

  test('the bursts of every proxy together stay a tenth of the limit', () => {
    const limit = 600;
    const shares = divideCapacity(limit / 60, [Infinity, Infinity, Infinity]);
    const bursts = shares.map((s) => strategyForShare(s, 60_000)).map((s) => (s.kind === 'token_bucket' ? s.maxTokens : NaN));
    expect(bursts.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(limit / 10);
  });

  test('a bucket differing only in fill_interval.seconds (which Envoy does not compare) gets another max_tokens', () => {
    expect(distinguishable(bucket(5, 10, 2), bucket(5, 10, 3))).toEqual(bucket(4, 10, 3));
    expect(distinguishable(bucket(1, 10, 2), bucket(1, 10, 3))).toEqual(bucket(2, 10, 3));
    expect(distinguishable(bucket(5, 11, 2), bucket(5, 10, 3))).toEqual(bucket(5, 10, 3));
    expect(distinguishable(undefined, bucket(5, 10, 3))).toEqual(bucket(5, 10, 3));
    expect(distinguishable(ALLOW_ALL, DENY_ALL)).toBe(DENY_ALL);
  });

  test('sameStrategy compares every field', () => {
    expect(sameStrategy(bucket(1, 2, 3), bucket(1, 2, 3))).toBe(true);
    expect(sameStrategy(bucket(1, 2, 3), bucket(1, 2, 4))).toBe(false);
    expect(sameStrategy(ALLOW_ALL, ALLOW_ALL)).toBe(true);
    expect(sameStrategy(ALLOW_ALL, DENY_ALL)).toBe(false);
  });

  test('the TTL is whole seconds, three report intervals, at least one second and at most five minutes', () => {
    expect(ttlSeconds(5_000)).toBe(15);
    expect(ttlSeconds(200)).toBe(1);
    expect(ttlSeconds(450)).toBe(2);
    expect(ttlSeconds(1_000_000)).toBe(300);
    for (const interval of [100, 333, 999, 5_000]) expect(ttlSeconds(interval) * 1000).toBeGreaterThan(interval);
  });
});

describe('report rates', () => {
  test("the server's receive times rate a report; without them, time_elapsed when it is a whole second or more", () => {
    expect(reportRate(50, 500, 0)).toBe(100);
    expect(reportRate(50, undefined, 5)).toBe(10);
    expect(reportRate(1, undefined, 0)).toBeUndefined();
  });
});
