import { fallbackFraction, heldByCutOff, regionFraction, regionMember, regionOf, scaledLimit } from '../../../../src/sharing/regions/region-division';

describe('region division', () => {
  const base = { limit: 1_000, windowMs: 10_000, globalUsed: 0, regionUsed: 0 };

  test('a member name carries its region', () => {
    expect(regionOf(regionMember('eu-west.1', 'pod-7'))).toBe('eu-west.1');
    expect(regionOf('alone')).toBe('alone');
  });

  test('busy regions split the limit evenly; a quiet one gets what it asks with headroom', () => {
    expect(regionFraction({ ...base, demand: 500, seenDemand: 500, others: [{ demand: 500 }] })).toBeCloseTo(0.5);
    // 100/s is the limit's rate; the quiet region asks 10/s (12.5 with headroom).
    expect(regionFraction({ ...base, demand: 10, seenDemand: 10, others: [{ demand: 500 }, { demand: 500 }] })).toBeCloseTo(0.125);
    expect(regionFraction({ ...base, demand: 500, seenDemand: 500, others: [{ demand: 10 }, { demand: 500 }] })).toBeCloseTo(0.4375);
  });

  test('not seen by the others yet: no fraction (the region keeps what it holds)', () => {
    expect(regionFraction({ ...base, demand: 500, seenDemand: undefined, others: [] })).toBeUndefined();
  });

  test('a part grows one sync after the demand: divided by the smaller of the demand now and the one seen', () => {
    expect(regionFraction({ ...base, demand: 500, seenDemand: 10, others: [{ demand: 500 }] })).toBeCloseTo(0.125);
    expect(regionFraction({ ...base, demand: 10, seenDemand: 500, others: [{ demand: 500 }] })).toBeCloseTo(0.125);
  });

  test('capped by what the others hold in the global counter', () => {
    // The others used 900 of the window: 100 left, whatever the division says.
    expect(regionFraction({ ...base, demand: 500, seenDemand: 500, others: [{ demand: 1 }], globalUsed: 950, regionUsed: 50 })).toBeCloseTo(0.1);
  });

  test('a cut-off region keeps its room out of the division', () => {
    expect(regionFraction({ ...base, demand: 500, seenDemand: 500, others: [{ demand: 500 }, { demand: 0, held: 1 / 3 }] })).toBeCloseTo(1 / 3);
  });

  test('fallbacks: split evenly among the regions known, allow all, deny none', () => {
    expect(fallbackFraction('split', 3)).toBeCloseTo(1 / 3);
    expect(fallbackFraction('split', 0)).toBe(1);
    expect(fallbackFraction('allow', 3)).toBe(1);
    expect(fallbackFraction('deny', 3)).toBe(0);
  });

  test('room kept for a cut-off region: split the larger of its last part and its fallback; deny its last part for one TTL', () => {
    expect(heldByCutOff({ fallback: 'split', lastFraction: 0.1, knownRegions: 3, cutOffForMs: 0, ttlMs: 5_000 })).toBeCloseTo(1 / 3);
    expect(heldByCutOff({ fallback: 'split', lastFraction: 0.6, knownRegions: 3, cutOffForMs: 60_000, ttlMs: 5_000 })).toBeCloseTo(0.6);
    expect(heldByCutOff({ fallback: 'deny', lastFraction: 0.6, knownRegions: 3, cutOffForMs: 1_000, ttlMs: 5_000 })).toBeCloseTo(0.6);
    expect(heldByCutOff({ fallback: 'deny', lastFraction: 0.6, knownRegions: 3, cutOffForMs: 5_000, ttlMs: 5_000 })).toBe(0);
  });

  test('a scaled limit is rounded down, a whole number kept whole', () => {
    expect(scaledLimit(1_000, 0.3)).toBe(300);
    expect(scaledLimit(1_000, 0.29999)).toBe(299);
    expect(scaledLimit(7, 1 / 3)).toBe(2);
  });
});
