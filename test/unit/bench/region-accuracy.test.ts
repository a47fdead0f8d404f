import { parseConfigText } from '../../../src/config/rule-reader';
import { recoveryMs, type CallRecord } from '../../../bench/lease-accuracy';
import {
  reachMs,
  REGION_RATE,
  regionAccuracyTable,
  regionBound,
  regionConfigYaml,
  regionOfReplica,
  regionRunSpecs,
  replicaSteps,
  scoreRegionRun,
  type RegionRunSpec,
} from '../../../bench/region-accuracy';

/** Dates `every` ms apart from `from` (inclusive) to `to` (exclusive). */
const paced = (from: number, to: number, every: number): number[] => {
  const out: number[] = [];
  for (let t = from; t < to; t += every) out.push(t);
  return out;
};

describe('region accuracy instrument (pure parts)', () => {
  it('runs uneven demand and a shift for 10 s and 60 s windows, only 10 s when quick', () => {
    const full = regionRunSpecs(false);
    expect(full.map((s) => `${s.name}@${s.windowMs}`)).toEqual(['uneven@10000', 'shift@10000', 'uneven@60000', 'shift@60000']);
    for (const s of full) {
      expect(s.limit).toBe((REGION_RATE * s.windowMs) / 1000);
      expect(s.warmMs).toBe(2 * s.windowMs);
      // Over the limit's rate in every phase: 2.1 x it, whoever asks.
      for (const step of s.steps) expect(step.perSecond.reduce((a, b) => a + b, 0)).toBeCloseTo(2.1 * REGION_RATE);
    }
    const uneven = full.find((s) => s.name === 'uneven' && s.windowMs === 60_000)!;
    expect(uneven.endMs - uneven.warmMs).toBe(3 * 60_000);
    const shift = full.find((s) => s.name === 'shift' && s.windowMs === 10_000)!;
    expect([shift.warmMs, shift.eventMs, shift.endMs]).toEqual([20_000, 30_000, 50_000]);
    // us takes eu's demand.
    expect(shift.rising).toBe(1);
    expect(shift.steps.map((s) => s.perSecond[1] / REGION_RATE)).toEqual([0.1, 1.5]);
    expect(regionRunSpecs(true).map((s) => s.windowMs)).toEqual([10_000, 10_000]);
  });

  it('writes global rules the config reader accepts, a 10 s and a one-minute sliding window', () => {
    const config = parseConfigText('region-accuracy.yaml', regionConfigYaml([10_000, 60_000, 10_000]), {
      defaultAlgorithm: 'fixed_window',
      regionSyncIntervalMs: 1000,
    });
    expect([...config.rules.keys()]).toEqual(['global_10s', 'global_60s']);
    expect(config.rules.get('global_10s')!.keyOnly!.limit!).toMatchObject({
      requestsPerUnit: 400,
      unit: 'second',
      unitMultiplier: 10,
      algorithm: 'sliding_window',
      scope: 'global',
    });
    expect(config.rules.get('global_60s')!.keyOnly!.limit!).toMatchObject({ requestsPerUnit: 2400, unit: 'minute', unitMultiplier: 1, scope: 'global' });
  });

  it("splits a region's rate evenly among its replicas, region by region", () => {
    expect(replicaSteps([{ fromMs: 0, perSecond: [60, 4, 20] }])).toEqual([{ fromMs: 0, perSecond: [30, 30, 2, 2, 10, 10] }]);
    expect([0, 1, 2, 3, 4, 5].map(regionOfReplica)).toEqual([0, 0, 1, 1, 2, 2]);
  });

  it('states the bound: L x 1.02 plus the syncs and the delay as a share of the window', () => {
    expect(regionBound(400, 10_000, { regionSyncMs: 1000, delayMs: 100, leaseSyncMs: 250 })).toBeCloseTo(400 * 1.02 + 400 * 0.135);
    expect(regionBound(2400, 60_000, { regionSyncMs: 1000, delayMs: 100, leaseSyncMs: 250 })).toBeCloseTo(2448 + 54);
  });

  it('dates the rise from when the shortfall against 95% of what it can get was largest, the tail one region sync', () => {
    // A third of 20/s for 1 s after the event, then 20/s: 1 s.
    const lagging = recoveryMs([...paced(1000, 2000, 150), ...paced(2000, 6000, 50)], 20, 1000, 6000, 0.95, 1000);
    expect(lagging).toBeGreaterThan(900);
    expect(lagging).toBeLessThanOrEqual(1000);
    // 90% of it to the end: never; the same lag ending within the last second: never either.
    expect(recoveryMs(paced(1000, 6000, 50 / 0.9), 20, 1000, 6000, 0.95, 1000)).toBeNull();
    expect(recoveryMs([...paced(1000, 5500, 150), ...paced(5500, 6000, 50)], 20, 1000, 6000, 0.95, 1000)).toBeNull();
  });

  it('dates the reach at the first span of one sync after the event holding 95% of what it can get', () => {
    // 10/s for 2 s after the event at 1 s, then 20/s: 19 in a span of 1 s first 0.85 s into the 20/s.
    const times = [...paced(0, 1000, 50), ...paced(1000, 3000, 100), ...paced(3000, 6000, 50)];
    expect(reachMs(times, 20, 1000, 6000, 0.95, 1000)).toBe(2850);
    // Admissions before the event do not count toward it; never at 90%.
    expect(reachMs(paced(0, 6000, 50), 20, 1000, 6000, 0.95, 1000)).toBe(900);
    expect(reachMs(paced(0, 6000, 50 / 0.9), 20, 1000, 6000, 0.95, 1000)).toBeNull();
  });

  it('scores a shift: every region in the worst span, the bound, each region admitted per phase and the rise in syncs', () => {
    const spec: RegionRunSpec = {
      name: 'shift',
      description: '',
      windowMs: 10_000,
      limit: 400,
      warmMs: 10_000,
      eventMs: 20_000,
      endMs: 40_000,
      rising: 1,
      steps: [
        { fromMs: 0, perSecond: [60, 4, 20] },
        { fromMs: 20_000, perSecond: [4, 60, 20] },
      ],
    };
    const calls: CallRecord[] = [];
    const call = (replica: number, from: number, to: number, every: number, code: number): void => {
      for (const t of paced(from, to, every)) calls.push({ replica, sentMs: t - 1, doneMs: t + 1, code });
    };
    // Replicas 0 and 1 are eu's, 2 and 3 us', 4 and 5 ap's. Admitted before the shift: eu 20/s, us 4/s,
    // ap 16/s (40/s together); after it: eu 4/s, ap 16/s, us 10/s for 3 s and 20/s from then on.
    call(0, 0, 20_000, 50, 1);
    call(0, 20_000, 40_000, 250, 1);
    call(4, 0, 40_000, 62.5, 1);
    call(2, 0, 20_000, 250, 1);
    call(2, 20_000, 23_000, 100, 1);
    call(2, 23_000, 40_000, 50, 1);
    // Denied: eu's asks beyond its admissions before the shift, us' after it (40/s more).
    call(1, 5, 20_000, 25, 2);
    call(3, 20_010, 40_000, 25, 2);
    calls.push({ replica: 5, sentMs: 30_000, doneMs: 32_000, code: undefined });
    const r = scoreRegionRun(spec, calls, 1.5);
    expect(r.bound).toBeCloseTo(400 * 1.02 + 54);
    expect(r.worstSpan).toBeGreaterThanOrEqual(400);
    expect(r.worstSpan).toBeLessThan(420);
    expect(r.errors).toBe(1);
    expect(r.admittedPerS).toEqual([
      [20, 4, 16],
      [4, 20, 16],
    ]);
    expect(r.ofLimit).toBeGreaterThan(0.95);
    // It can get 20/s after the shift (the limit's rate less eu's 4 and ap's 16); it admitted 10/s for 3 s.
    expect(r.canGetPerS).toBe(20);
    expect(r.riseMs).toBeGreaterThan(2900);
    expect(r.riseMs).toBeLessThanOrEqual(3000);
    expect(r.riseSyncs).toBeCloseTo(r.riseMs! / 1000);
    // 19 admissions in one second first at 23.85 s (one at 22.9 s and 18 from 23 s).
    expect(r.reachMs).toBeCloseTo(3850, 5);
    expect(r.reachSyncs).toBeCloseTo(3.85, 5);
    expect(r.riseSeries).toHaveLength(15);
    expect(r.riseSeries!.slice(0, 5)).toEqual([10, 10, 10, 20, 20]);
    const table = regionAccuracyTable({
      quick: true,
      rate: 40,
      regions: ['eu', 'us', 'ap'],
      replicasPerRegion: 2,
      regionSyncMs: 1000,
      leaseSyncMs: 250,
      delayMs: 100,
      runs: [r],
    });
    expect(table).toContain('| shift | 10 s | 400 | 60 : 4 : 20 → 4 : 60 : 20 | 20.0 : 4.0 : 16.0 → 4.0 : 20.0 : 16.0 |');
    expect(table).toContain('462 (1.155 x L) | yes | 3.9 / 3.0 syncs (of 20.0/s) |');
  });
});
