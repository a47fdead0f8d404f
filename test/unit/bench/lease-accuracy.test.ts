import { parseConfigText } from '../../../src/config/rule-reader';
import {
  callsDue,
  LEASE_RATE,
  leaseAccuracyTable,
  leaseConfigYaml,
  leaseRunSpecs,
  recoveryMs,
  RECOVERY_SHARE,
  scoreLeaseRun,
  worstSpan,
  type CallRecord,
  type LeaseRunSpec,
} from '../../../bench/lease-accuracy';

/** Admissions `every` ms apart from `from` (inclusive) to `to` (exclusive). */
const paced = (from: number, to: number, every: number): number[] => {
  const out: number[] = [];
  for (let t = from; t < to; t += every) out.push(t);
  return out;
};

describe('lease accuracy instrument (pure parts)', () => {
  it('runs uneven demand, a demand shift and a killed replica for 1 s and 10 s windows, only 1 s when quick', () => {
    const full = leaseRunSpecs(false);
    expect(full.map((s) => `${s.name}@${s.windowMs}`)).toEqual([
      'uneven-3-1@1000',
      'demand-shift@1000',
      'replica-killed@1000',
      'uneven-3-1@10000',
      'demand-shift@10000',
      'replica-killed@10000',
    ]);
    for (const s of full) {
      expect(s.limit).toBe((LEASE_RATE * s.windowMs) / 1000);
      // Total demand 1.5 x the limit's rate in every phase.
      for (const step of s.steps) expect(step.perSecond[0] + step.perSecond[1]).toBeCloseTo(1.5 * LEASE_RATE);
      expect(s.warmMs).toBeGreaterThanOrEqual(2 * s.windowMs);
    }
    const tenKilled = full.find((s) => s.windowMs === 10_000 && s.name === 'replica-killed')!;
    expect(tenKilled.endMs).toBe(50_000);
    expect(tenKilled.eventMs! - tenKilled.warmMs).toBe(10_000);
    expect(leaseRunSpecs(true).map((s) => s.windowMs)).toEqual([1000, 1000, 1000]);
    expect(Math.max(...leaseRunSpecs(true).map((s) => s.endMs))).toBeLessThanOrEqual(8000);
  });

  it('writes rules the config reader accepts, one leased sliding window per window', () => {
    const config = parseConfigText('lease-accuracy.yaml', leaseConfigYaml([1000, 10_000, 1000]), { defaultAlgorithm: 'fixed_window' });
    expect([...config.rules.keys()]).toEqual(['lease_1s', 'lease_10s']);
    const limit = config.rules.get('lease_10s')!.keyOnly!.limit!;
    expect(limit).toMatchObject({ requestsPerUnit: 4000, unitMultiplier: 10, algorithm: 'sliding_window', lease: true });
  });

  it('paces each replica by the integral of its demand steps', () => {
    const steps = [
      { fromMs: 0, perSecond: [100, 10] as const },
      { fromMs: 2000, perSecond: [0, 50] as const },
    ];
    expect(callsDue(steps, 0, 0)).toBe(0);
    expect(callsDue(steps, 0, 1000)).toBe(100);
    expect(callsDue(steps, 0, 5000)).toBe(200);
    expect(callsDue(steps, 1, 1999)).toBe(19);
    expect(callsDue(steps, 1, 3000)).toBe(70);
  });

  it('finds the most admissions in any span of one window, within the measured phase only', () => {
    const steady = paced(0, 10_000, 10); // 100 per second
    expect(worstSpan(steady, 1000, 0, 10_000).count).toBe(100);
    // 50 more in the last tenth of second 5: 150 in the window ending there.
    const burst = [...steady, ...paced(4900, 5000, 2)].sort((a, b) => a - b);
    expect(worstSpan(burst, 1000, 0, 10_000)).toEqual({ count: 150, atMs: 4998 });
    // The same burst before the measured phase is not counted.
    expect(worstSpan(burst, 1000, 5000, 10_000).count).toBe(100);
  });

  it('dates the whole limit from when the shortfall against 90% of the rate was largest', () => {
    // Half the rate for 600 ms after the event, then the rate: whole from 600 ms.
    const times = [...paced(1000, 1600, 2 * 2.5), ...paced(1600, 6000, 2.5)]; // 400/s is one per 2.5 ms
    expect(recoveryMs(times, 400, 1000, 6000)).toBeCloseTo(600, -1);
    // Steps: a burst catching up after 600 ms, a dip later that does not undo it.
    const stepped = [...paced(1000, 1600, 5), ...paced(1600, 1800, 1), ...paced(1800, 2400, 3.5), ...paced(2400, 6000, 2.5)];
    expect(recoveryMs(stepped, 400, 1000, 6000)).toBeCloseTo(600, -1);
    // At the rate all along: 0; below 90% to the end: null.
    expect(recoveryMs(paced(1000, 6000, 2.5), 400, 1000, 6000)).toBe(0);
    expect(recoveryMs(paced(1000, 6000, 2.5 / (RECOVERY_SHARE - 0.1)), 400, 1000, 6000)).toBeNull();
  });

  it('scores a run: both replicas in the worst span, the bound, the admitted share and calls lost to a kill', () => {
    const spec: LeaseRunSpec = {
      name: 'replica-killed',
      description: '',
      windowMs: 1000,
      limit: 400,
      warmMs: 1000,
      eventMs: 3000,
      endMs: 6000,
      killed: 1,
      rising: 0,
      steps: [
        { fromMs: 0, perSecond: [300, 300] },
        { fromMs: 3000, perSecond: [600, 0] },
      ],
    };
    const calls: CallRecord[] = [];
    const admit = (replica: 0 | 1, from: number, to: number, every: number): void => {
      for (const t of paced(from, to, every)) calls.push({ replica, sentMs: t - 1, doneMs: t + 1, code: 1 });
    };
    admit(0, 0, 5000, 5); // A: 200/s until 5 s, then 400/s
    admit(1, 0, 3000, 5); // B: 200/s until it dies
    admit(0, 5000, 6000, 2.5);
    calls.push({ replica: 0, sentMs: 3500, doneMs: 3501, code: 2 });
    calls.push({ replica: 1, sentMs: 2999, doneMs: 3002, code: undefined }); // in flight at the kill
    calls.push({ replica: 0, sentMs: 4000, doneMs: 6000, code: undefined }); // a timeout
    calls.push({ replica: 0, sentMs: 4100, doneMs: 4102, code: undefined, status: 14 }); // answered UNAVAILABLE
    const r = scoreLeaseRun(spec, calls, 250, 3000);
    expect(r.worstSpan).toBe(400);
    expect(r.bound).toBe(400 * 1.05 + 100);
    expect(r.errors).toBe(2);
    expect(r.timeouts).toBe(1);
    expect(r.lostToKill).toBe(1);
    expect(r.ofLimit).toBeCloseTo((2 * 400 + 2 * 200 + 400) / (400 * 5));
    expect(r.admittedPerS).toEqual([
      [200, 200],
      [300, 0],
    ]);
    expect(r.recoveryMs).toBeCloseTo(2000, -1);
    const table = leaseAccuracyTable({ quick: true, rate: 400, syncIntervalMs: 250, ttlMs: 2000, runs: [r] });
    expect(table).toContain('| replica-killed | 1 s | 400 | 300 : 300 → 600 : 0 | 200 : 200 → 300 : 0 |');
    expect(table).toContain('| 400 (1.000 x L) | 520 (1.300 x L) | yes | 2,000 ms |');
  });
});
