import { measureDemand, newDemandMeter, publishedDemand, WindowCount } from '../../../src/sharing/demand-meter';

describe('a demand meter', () => {
  test('is unknown until measured, then the rate over the last two intervals', () => {
    const m = newDemandMeter(0);
    expect(m.demand).toBe(Infinity);
    m.asked += 100;
    expect(measureDemand(m, 1_000)).toBe(100);
    m.asked += 300;
    // 400 hits over the two intervals (2 s).
    expect(measureDemand(m, 2_000)).toBe(200);
    // Nothing asked since: the previous interval's 300 over 2 s.
    expect(measureDemand(m, 3_000)).toBe(150);
    expect(measureDemand(m, 4_000)).toBe(0);
  });

  test('keeps its demand when measured twice at one instant', () => {
    const m = newDemandMeter(0);
    m.asked += 10;
    expect(measureDemand(m, 1_000)).toBe(10);
    expect(measureDemand(m, 0)).toBe(10);
  });

  test('publishes an unknown demand as the largest safe number', () => {
    expect(publishedDemand(Infinity)).toBe(Number.MAX_SAFE_INTEGER);
    expect(publishedDemand(12.5)).toBe(12.5);
  });
});

describe('a window count', () => {
  test('sums the last slices and forgets older ones', () => {
    const w = new WindowCount(100);
    w.add(5, 0);
    w.add(7, 350);
    expect(w.sum(700)).toBe(12);
    // Slice 0 leaves at slice 8.
    expect(w.sum(800)).toBe(7);
    expect(w.sum(5_000)).toBe(0);
  });
});
