import fc from 'fast-check';
import { fixedWindow, slidingLog, slidingWindow, windowStart, type LogEntry, type Verdict } from '../../../src/limiter/algorithms';
import { arrivalsOf, maxInAnyWindow, type Arrival } from '../../helpers/arrivals';

// The pure functions are driven here by tiny state machines written for the tests, so each case
// states its inputs (counts, time) and its exact expected outputs.

const W = 10_000;

describe('slidingWindow', () => {
  it('admits when floor(estimate) + hits fits, and reports the remaining quota and the drain time', () => {
    // 5 s into the window: estimate = 1 + 2 x 0.5 = 2.
    const v = slidingWindow({ current: 1, previous: 2, nowMs: 7 * W + 5_000, windowMs: W, limit: 5, hits: 1 });
    expect(v).toEqual({ allowed: true, remaining: 2, resetMs: 5_000 + W });
  });

  it('reports the end of the current window as the drain time of a check that only carries previous hits', () => {
    // 4 s in: estimate = 3 x 0.6 = 1.8 -> 1 used.
    const v = slidingWindow({ current: 0, previous: 3, nowMs: 7 * W + 4_000, windowMs: W, limit: 5, hits: 0 });
    expect(v).toEqual({ allowed: true, remaining: 4, resetMs: 6_000 });
  });

  it('reports no drain time for an empty counter checked with zero hits', () => {
    expect(slidingWindow({ current: 0, previous: 0, nowMs: 123, windowMs: W, limit: 5, hits: 0 })).toEqual({
      allowed: true,
      remaining: 5,
      resetMs: 0,
    });
  });

  it('denies when the estimate is full and predicts a retry inside the current window', () => {
    // 1 s in: estimate = 2 + 4 x 0.9 = 5.6 -> 5. The previous window must decay until 4 x d < 3 x W (d = ms left).
    const now = 3 * W + 1_000;
    const v = slidingWindow({ current: 2, previous: 4, nowMs: now, windowMs: W, limit: 5, hits: 1 });
    expect(v).toEqual({ allowed: false, remaining: 0, resetMs: 1_501 });
    expect(slidingWindow({ current: 2, previous: 4, nowMs: now + 1_500, windowMs: W, limit: 5, hits: 1 }).allowed).toBe(false);
    expect(slidingWindow({ current: 2, previous: 4, nowMs: now + 1_501, windowMs: W, limit: 5, hits: 1 }).allowed).toBe(true);
  });

  it('denies when the current window alone is full and predicts a retry in the next window', () => {
    // The current window's 5 hits become "previous" and must decay below 5: 1 ms into the next window.
    const v = slidingWindow({ current: 5, previous: 0, nowMs: 3 * W + 3_000, windowMs: W, limit: 5, hits: 1 });
    expect(v).toEqual({ allowed: false, remaining: 0, resetMs: 7_000 + 1 });
  });

  it('never admits more hits than the limit at once, and names one window as the wait', () => {
    expect(slidingWindow({ current: 0, previous: 0, nowMs: 0, windowMs: W, limit: 5, hits: 6 })).toEqual({
      allowed: false,
      remaining: 0,
      resetMs: W,
    });
  });
});

describe('fixedWindow', () => {
  it('admits up to the limit and resets at the end of the window', () => {
    expect(fixedWindow({ count: 3, nowMs: 2 * W + 2_500, windowMs: W, limit: 5, hits: 2 })).toEqual({
      allowed: true,
      remaining: 0,
      resetMs: 7_500,
    });
  });

  it('denies beyond the limit and predicts the next window', () => {
    expect(fixedWindow({ count: 5, nowMs: 2 * W + 2_500, windowMs: W, limit: 5, hits: 1 })).toEqual({
      allowed: false,
      remaining: 0,
      resetMs: 7_500,
    });
  });

  it('names one window as the wait for more hits than the limit', () => {
    expect(fixedWindow({ count: 0, nowMs: 2 * W + 2_500, windowMs: W, limit: 5, hits: 6 }).resetMs).toBe(W);
  });
});

describe('slidingLog', () => {
  it('counts only records inside (now - W, now] and reports one window as the drain time of new hits', () => {
    const entries: LogEntry[] = [
      { atMs: 1_000, hits: 2 }, // left the window at 11_000
      { atMs: 4_000, hits: 1 },
      { atMs: 9_000, hits: 2 },
    ];
    expect(slidingLog({ entries, nowMs: 11_000, windowMs: W, limit: 5, hits: 1 })).toEqual({ allowed: true, remaining: 1, resetMs: W });
  });

  it('reports when the newest record leaves as the drain time of a check', () => {
    const entries: LogEntry[] = [
      { atMs: 4_000, hits: 1 },
      { atMs: 9_000, hits: 2 },
    ];
    expect(slidingLog({ entries, nowMs: 11_000, windowMs: W, limit: 5, hits: 0 })).toEqual({ allowed: true, remaining: 2, resetMs: 8_000 });
  });

  it('denies when the log is full and predicts when enough of the oldest records have left', () => {
    const entries: LogEntry[] = [
      { atMs: 4_000, hits: 1 },
      { atMs: 6_000, hits: 2 },
      { atMs: 9_000, hits: 2 },
    ];
    // 5 in the window, 2 more wanted: the records of 4_000 and 6_000 must leave (at 16_000).
    expect(slidingLog({ entries, nowMs: 11_000, windowMs: W, limit: 5, hits: 2 })).toEqual({ allowed: false, remaining: 0, resetMs: 5_000 });
    // 1 more wanted: the record of 4_000 leaving is enough (at 14_000).
    expect(slidingLog({ entries, nowMs: 11_000, windowMs: W, limit: 5, hits: 1 })).toEqual({ allowed: false, remaining: 0, resetMs: 3_000 });
  });
});

// ---- Small state machines over the pure functions ----

type Algo = 'sliding_window' | 'fixed_window' | 'sliding_log';

/** Feeds arrivals (time-ordered) to one counter; denied arrivals add nothing. */
function run(algo: Algo, arrivals: readonly Arrival[], windowMs: number, limit: number): Verdict[] {
  const counts = new Map<number, number>(); // window index -> admitted hits
  const log: LogEntry[] = [];
  return arrivals.map(({ t, hits }) => {
    const index = Math.floor(t / windowMs);
    let v: Verdict;
    if (algo === 'sliding_log') v = slidingLog({ entries: log, nowMs: t, windowMs, limit, hits });
    else if (algo === 'fixed_window') v = fixedWindow({ count: counts.get(index) ?? 0, nowMs: t, windowMs, limit, hits });
    else {
      v = slidingWindow({ current: counts.get(index) ?? 0, previous: counts.get(index - 1) ?? 0, nowMs: t, windowMs, limit, hits });
    }
    if (v.allowed && hits > 0) {
      counts.set(index, (counts.get(index) ?? 0) + hits);
      log.push({ atMs: t, hits });
    }
    return v;
  });
}

const ALGOS: readonly Algo[] = ['sliding_window', 'fixed_window', 'sliding_log'];

describe('the three algorithms driven over time', () => {
  it('admit exactly 30 of one request per second for 60 s against 5 per 10 s with the sliding window', () => {
    const arrivals = Array.from({ length: 60 }, (_, i) => ({ t: i * 1_000, hits: 1 }));
    expect(run('sliding_window', arrivals, W, 5).filter((v) => v.allowed)).toHaveLength(30);
  });

  it.each(ALGOS)('%s: with hits 3 on a limit of 10, admits three requests, denies the fourth, and the denial consumes nothing', (algo) => {
    const arrivals = [3, 3, 3, 3, 1].map((hits) => ({ t: 5 * W + 100, hits }));
    const verdicts = run(algo, arrivals, W, 10);
    expect(verdicts.map((v) => v.allowed)).toEqual([true, true, true, false, true]);
    expect(verdicts.map((v) => v.remaining)).toEqual([7, 4, 1, 0, 0]);
  });
});

// ---- Brute force: the predicted wait is exactly the first instant the same request fits ----

const BW = 20; // a small window so that every millisecond can be tried

/** Verdict of `hits` at `t` given the admitted history, with no traffic after it. */
function verdictAt(algo: Algo, history: readonly Arrival[], t: number, limit: number, hits: number): Verdict {
  const index = Math.floor(t / BW);
  const inWindow = (k: number): number => history.filter((a) => Math.floor(a.t / BW) === k).reduce((s, a) => s + a.hits, 0);
  if (algo === 'sliding_log') return slidingLog({ entries: history.map((a) => ({ atMs: a.t, hits: a.hits })), nowMs: t, windowMs: BW, limit, hits });
  if (algo === 'fixed_window') return fixedWindow({ count: inWindow(index), nowMs: t, windowMs: BW, limit, hits });
  return slidingWindow({ current: inWindow(index), previous: inWindow(index - 1), nowMs: t, windowMs: BW, limit, hits });
}

/** The weighted count still influencing decisions at t (0 = drained). */
function weightAt(algo: Algo, history: readonly Arrival[], t: number): number {
  const index = Math.floor(t / BW);
  const inWindow = (k: number): number => history.filter((a) => Math.floor(a.t / BW) === k).reduce((s, a) => s + a.hits, 0);
  if (algo === 'sliding_log') return history.filter((a) => a.t > t - BW).reduce((s, a) => s + a.hits, 0);
  if (algo === 'fixed_window') return inWindow(index);
  const toEnd = windowStart(t, BW) + BW - t;
  return inWindow(index) * BW + inWindow(index - 1) * toEnd;
}

const historyArb = fc.array(fc.record({ dt: fc.integer({ min: 0, max: 12 }), hits: fc.integer({ min: 1, max: 3 }) }), { maxLength: 8 }).map((steps) => {
  let t = 1_000;
  return steps.map((s) => ({ t: (t += s.dt), hits: s.hits }));
});

describe.each(ALGOS)('%s reset prediction, checked by stepping time 1 ms at a time', (algo) => {
  it('predicts, for a denied request, exactly the first instant it would be allowed', () => {
    fc.assert(
      fc.property(
        historyArb,
        fc.integer({ min: 1, max: 6 }),
        fc.integer({ min: 1, max: 3 }),
        fc.integer({ min: 0, max: 2 * BW }),
        (arrivals, limit, hits, gap) => {
          // Keep only what the algorithm itself would have admitted, so the history is reachable.
          const verdicts = run(algo, arrivals, BW, limit);
          const history = arrivals.filter((_, i) => verdicts[i].allowed);
          const last = arrivals.length > 0 ? arrivals[arrivals.length - 1].t : 1_000;
          const now = last + gap;
          const v = verdictAt(algo, history, now, limit, hits);
          if (v.allowed || hits > limit) return;
          let first = 1;
          while (!verdictAt(algo, history, now + first, limit, hits).allowed) first++;
          expect(v.resetMs).toBe(first);
        },
      ),
      { numRuns: 3_000 },
    );
  });

  it('predicts, for an admitted request, exactly the instant its counter has fully drained', () => {
    fc.assert(
      fc.property(
        historyArb,
        fc.integer({ min: 1, max: 6 }),
        fc.integer({ min: 0, max: 3 }),
        fc.integer({ min: 0, max: 2 * BW }),
        (arrivals, limit, hits, gap) => {
          const verdicts = run(algo, arrivals, BW, limit);
          const history = arrivals.filter((_, i) => verdicts[i].allowed);
          const last = arrivals.length > 0 ? arrivals[arrivals.length - 1].t : 1_000;
          const now = last + gap;
          const v = verdictAt(algo, history, now, limit, hits);
          if (!v.allowed) return;
          const after = hits > 0 ? [...history, { t: now, hits }] : history;
          let drained = 0;
          while (weightAt(algo, after, now + drained) > 0) drained++;
          if (algo === 'fixed_window') {
            // The reference's fixed window always names the end of the window, drained or not.
            expect(v.resetMs).toBe(windowStart(now, BW) + BW - now);
          } else {
            expect(v.resetMs).toBe(drained);
          }
        },
      ),
      { numRuns: 3_000 },
    );
  });
});

// ---- Properties over random traffic ----

const trafficArb = fc.record({
  limit: fc.integer({ min: 1, max: 8 }),
  windowMs: fc.integer({ min: 5, max: 50 }),
  steps: fc.array(fc.record({ dt: fc.integer({ min: 0, max: 30 }), hits: fc.integer({ min: 0, max: 4 }) }), { minLength: 1, maxLength: 80 }),
});

describe('properties over random traffic', () => {
  it('sliding_log never admits more than L hits in any window of length W', () => {
    fc.assert(
      fc.property(trafficArb, ({ limit, windowMs, steps }) => {
        const arrivals = arrivalsOf(steps);
        const verdicts = run('sliding_log', arrivals, windowMs, limit);
        const admitted = arrivals.filter((_, i) => verdicts[i].allowed);
        expect(maxInAnyWindow(admitted, windowMs)).toBeLessThanOrEqual(limit);
      }),
      { numRuns: 2_000 },
    );
  });

  it('sliding_window never admits more than 2L hits in any window of length W', () => {
    fc.assert(
      fc.property(trafficArb, ({ limit, windowMs, steps }) => {
        const arrivals = arrivalsOf(steps);
        const verdicts = run('sliding_window', arrivals, windowMs, limit);
        const admitted = arrivals.filter((_, i) => verdicts[i].allowed);
        expect(maxInAnyWindow(admitted, windowMs)).toBeLessThanOrEqual(2 * limit);
      }),
      { numRuns: 2_000 },
    );
  });

  it('sliding_window decides exactly as a naive implementation that keeps every admitted hit', () => {
    // Naive on purpose: the whole admitted history, window sums recomputed from it, and the rule
    // "floor(estimate) + h <= L" restated as "estimate < L - h + 1" in exact integer arithmetic.
    const naive = (arrivals: readonly Arrival[], windowMs: number, limit: number): { allowed: boolean; remaining: number }[] => {
      const admitted: Arrival[] = [];
      return arrivals.map(({ t, hits }) => {
        const k = Math.floor(t / windowMs);
        const sum = (idx: number): number => admitted.filter((a) => Math.floor(a.t / windowMs) === idx).reduce((s, a) => s + a.hits, 0);
        const cur = sum(k);
        const prev = sum(k - 1);
        const elapsed = t - k * windowMs;
        const scaled = cur * windowMs + prev * (windowMs - elapsed); // estimate x W
        const allowed = scaled < (limit - hits + 1) * windowMs;
        if (allowed && hits > 0) admitted.push({ t, hits });
        return { allowed, remaining: allowed ? limit - Math.floor(scaled / windowMs) - hits : 0 };
      });
    };
    fc.assert(
      fc.property(trafficArb, ({ limit, windowMs, steps }) => {
        const arrivals = arrivalsOf(steps);
        const actual = run('sliding_window', arrivals, windowMs, limit).map((v) => ({ allowed: v.allowed, remaining: v.remaining }));
        expect(actual).toEqual(naive(arrivals, windowMs, limit));
      }),
      { numRuns: 2_000 },
    );
  });
});
