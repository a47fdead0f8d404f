import { mostConstrained, rateLimitHeaders, type ResponseHeaderOptions } from '../../../src/limiter/headers';
import type { DescriptorStatus } from '../../../src/limiter/types';

const classic: ResponseHeaderOptions = {
  enabled: true,
  limitHeader: 'RateLimit-Limit',
  remainingHeader: 'RateLimit-Remaining',
  resetHeader: 'RateLimit-Reset',
  draftEnabled: false,
};

const ok = (remaining: number, limit: number, resetMs: number, extra: Partial<NonNullable<DescriptorStatus['currentLimit']>> = {}): DescriptorStatus => ({
  code: 'OK',
  currentLimit: { requestsPerUnit: limit, unit: 'second', ...extra },
  limitRemaining: remaining,
  durationUntilResetMs: resetMs,
});

const over = (limit: number, resetMs: number): DescriptorStatus => ({
  code: 'OVER_LIMIT',
  currentLimit: { requestsPerUnit: limit, unit: 'minute' },
  limitRemaining: 0,
  durationUntilResetMs: resetMs,
});

const unmatched: DescriptorStatus = { code: 'OK', limitRemaining: 0 };

describe('rateLimitHeaders', () => {
  it('sends nothing when both header sets are disabled', () => {
    expect(rateLimitHeaders([ok(4, 5, 1000)], { ...classic, enabled: false })).toEqual([]);
  });

  it('sends nothing when no descriptor matched a limit', () => {
    expect(rateLimitHeaders([unmatched, unmatched], classic)).toEqual([]);
    expect(rateLimitHeaders([], classic)).toEqual([]);
  });

  it('describes an allowed request with the limit, the remaining quota and the reset in whole seconds', () => {
    expect(rateLimitHeaders([ok(4, 5, 19_001)], classic)).toEqual([
      { key: 'RateLimit-Limit', value: '5' },
      { key: 'RateLimit-Remaining', value: '4' },
      { key: 'RateLimit-Reset', value: '20' },
    ]);
  });

  it('rounds the reset up so that a client waiting that long is never early', () => {
    const reset = (ms: number) => rateLimitHeaders([ok(1, 5, ms)], classic)[2]!.value;
    expect(reset(0)).toBe('0');
    expect(reset(1)).toBe('1');
    expect(reset(1000)).toBe('1');
    expect(reset(1001)).toBe('2');
  });

  it('speaks for the descriptor with the lowest remaining quota', () => {
    const headers = rateLimitHeaders([ok(90, 100, 5000), ok(3, 10, 7000), unmatched, ok(50, 60, 1000)], classic);
    expect(headers.map((h) => h.value)).toEqual(['10', '3', '7']);
  });

  it('keeps the first of several descriptors with the same remaining quota', () => {
    const headers = rateLimitHeaders([ok(3, 10, 1000), ok(3, 20, 2000)], classic);
    expect(headers[0]!.value).toBe('10');
  });

  it('speaks for the denied descriptor even when another has less quota left', () => {
    const headers = rateLimitHeaders([ok(0, 10, 1000), over(50, 12_500), ok(1, 5, 1000)], classic);
    expect(headers).toEqual([
      { key: 'RateLimit-Limit', value: '50' },
      { key: 'RateLimit-Remaining', value: '0' },
      { key: 'RateLimit-Reset', value: '13' },
    ]);
  });

  it('uses the overridden header names', () => {
    const headers = rateLimitHeaders([ok(1, 2, 500)], {
      ...classic,
      limitHeader: 'X-RateLimit-Limit',
      remainingHeader: 'X-RateLimit-Remaining',
      resetHeader: 'X-RateLimit-Reset',
    });
    expect(headers.map((h) => h.key)).toEqual(['X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset']);
  });

  it('sends the draft RateLimit-Policy and RateLimit fields with the window in seconds', () => {
    const headers = rateLimitHeaders([ok(4, 5, 9_200, { name: 'per_user', windowMs: 10_000 })], {
      ...classic,
      enabled: false,
      draftEnabled: true,
    });
    expect(headers).toEqual([
      { key: 'RateLimit-Policy', value: '"per_user";q=5;w=10' },
      { key: 'RateLimit', value: '"per_user";r=4;t=10' },
    ]);
  });

  it('names an unnamed policy "default" and takes one unit as its window', () => {
    const headers = rateLimitHeaders([over(50, 30_000)], { ...classic, enabled: false, draftEnabled: true });
    expect(headers).toEqual([
      { key: 'RateLimit-Policy', value: '"default";q=50;w=60' },
      { key: 'RateLimit', value: '"default";r=0;t=30' },
    ]);
  });

  it('sends both header sets when both are enabled', () => {
    const headers = rateLimitHeaders([ok(4, 5, 1000)], { ...classic, draftEnabled: true });
    expect(headers.map((h) => h.key)).toEqual(['RateLimit-Limit', 'RateLimit-Remaining', 'RateLimit-Reset', 'RateLimit-Policy', 'RateLimit']);
  });

  it('escapes policy names so the structured field always parses', () => {
    const headers = rateLimitHeaders([ok(1, 2, 0, { name: 'a"b\\c\u00e9' })], { ...classic, enabled: false, draftEnabled: true });
    expect(headers[0]!.value).toBe('"a\\"b\\\\c?";q=2;w=1');
  });
});

describe('mostConstrained', () => {
  it('ignores descriptors without a limit', () => {
    expect(mostConstrained([unmatched])).toBeUndefined();
  });

  it('picks the first denied descriptor', () => {
    const first = over(5, 1000);
    expect(mostConstrained([ok(0, 1, 0), first, over(6, 1000)])).toBe(first);
  });
});
