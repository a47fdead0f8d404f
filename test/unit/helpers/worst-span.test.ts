import { worstSpan } from '../../helpers/regions';

/** worstSpan (test/helpers/regions.ts): the most admissions in any span of one window, as the region tests check the bound. */

describe('worstSpan', () => {
  it('is 0 without admissions and the count when they all fit in one window', () => {
    expect(worstSpan([], 1_000)).toBe(0);
    expect(worstSpan([5], 1_000)).toBe(1);
    expect(worstSpan([0, 100, 999], 1_000)).toBe(3);
  });

  it('counts a span of exactly one window, the one a window apart not in it', () => {
    // (t - W, t]: 0 and 1000 are never in one span of 1000 ms.
    expect(worstSpan([0, 1_000], 1_000)).toBe(1);
    expect(worstSpan([0, 999.5], 1_000)).toBe(2);
    expect(worstSpan([0, 500, 1_000, 1_499, 2_000], 1_000)).toBe(3);
  });

  it('finds the worst span at any alignment, not only windows aligned to the clock', () => {
    // Five at the end of one aligned window and five at the start of the next: ten in a span of 100 ms.
    const times = [...[951, 960, 970, 980, 990], ...[1_000, 1_010, 1_020, 1_030, 1_040], 1_500, 2_500];
    expect(worstSpan(times, 1_000)).toBe(11);
    expect(worstSpan(times, 100)).toBe(10);
    expect(worstSpan(times, 50)).toBe(6);
  });

  it('takes the timestamps in any order, leaves them as they were, and counts equal ones each', () => {
    const times = [3_000, 10, 2_990, 20, 2_995, 20];
    expect(worstSpan(times, 100)).toBe(3);
    expect(times).toEqual([3_000, 10, 2_990, 20, 2_995, 20]);
    expect(worstSpan([7, 7, 7, 7], 1)).toBe(4);
  });

  it('refuses a window that is not above 0', () => {
    expect(() => worstSpan([1], 0)).toThrow('windowMs must be above 0');
    expect(() => worstSpan([1], Number.NaN)).toThrow('windowMs must be above 0');
  });
});
