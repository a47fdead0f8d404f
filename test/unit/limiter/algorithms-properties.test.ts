import fc from 'fast-check';
import {
  bucket,
  bucketDrainMs,
  chargeBucket,
  EMPTY_BUCKET,
  giveBack,
  IN_PROCESS_STATE,
  MAX_BUCKET_AHEAD_MS,
  newCounterState,
  slidingWindow,
  subWindowCounter,
  takeHits,
  type BucketState,
  type TakenHits,
  type Verdict,
} from '../../../src/limiter/algorithms';
import type { CounterRequest } from '../../../src/limiter/store';
import { arrivalsOf, maxInAnyWindow, type Arrival } from '../../helpers/arrivals';

// Sub-window sliding windows (plain and strict) and the GCRA buckets, each driven by a small state
// machine written for the tests, and checked against exact definitions and brute force.

// ---- Sub-window sliding window ----

/** The k + 1 counts (oldest first) that a store holds at t for this admitted history. */
function subCounts(history: readonly Arrival[], t: number, windowMs: number, k: number): number[] {
  const s = windowMs / k;
  const n = Math.floor(t / s);
  const counts = new Array<number>(k + 1).fill(0);
  for (const a of history) {
    const i = Math.floor(a.t / s) - (n - k);
    if (i >= 0 && i <= k) counts[i] += a.hits;
  }
  return counts;
}

function subVerdict(history: readonly Arrival[], t: number, o: { windowMs: number; k: number; strict: boolean; limit: number; hits: number }): Verdict {
  return subWindowCounter({ counts: subCounts(history, t, o.windowMs, o.k), strict: o.strict, nowMs: t, windowMs: o.windowMs, limit: o.limit, hits: o.hits });
}

/** Feeds arrivals to one sub-window counter; denied arrivals add nothing. */
function runSub(arrivals: readonly Arrival[], o: { windowMs: number; k: number; strict: boolean; limit: number }): Verdict[] {
  const history: Arrival[] = [];
  return arrivals.map(({ t, hits }) => {
    const v = subVerdict(history, t, { ...o, hits });
    if (v.allowed && hits > 0) history.push({ t, hits });
    return v;
  });
}

describe('subWindowCounter', () => {
  const W = 1_000;

  it('with one sub-window and not strict, is the two-counter sliding window', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 50 }),
        fc.integer({ min: 0, max: 50 }),
        fc.integer({ min: 0, max: 10 * W }),
        fc.integer({ min: 0, max: 40 }),
        fc.integer({ min: 0, max: 12 }),
        (previous, current, nowMs, limit, hits) => {
          const expected = slidingWindow({ current, previous, nowMs, windowMs: W, limit, hits });
          expect(subWindowCounter({ counts: [previous, current], strict: false, nowMs, windowMs: W, limit, hits })).toEqual(expected);
        },
      ),
      { numRuns: 3_000 },
    );
  });

  it('weighs only the oldest of four sub-windows, by the time left in the current one', () => {
    // S = 250; 100 ms into sub-window 9: oldest (5) weighs 150/250 -> 3; 1 + 0 + 2 + 1 in full.
    const v = subWindowCounter({ counts: [5, 1, 0, 2, 1], strict: false, nowMs: 9 * 250 + 100, windowMs: W, limit: 10, hits: 1 });
    expect(v).toEqual({ allowed: true, remaining: 2, resetMs: 150 + 4 * 250 });
  });

  it('strict: counts the oldest sub-window in full until it has expired', () => {
    const o = { counts: [5, 1, 0, 2, 1], strict: true, nowMs: 9 * 250 + 100, windowMs: W, limit: 10, hits: 2 };
    // 9 counted, 2 more do not fit until the 5 leave at the end of this sub-window (150 ms).
    expect(subWindowCounter(o)).toEqual({ allowed: false, remaining: 0, resetMs: 150 });
    expect(subWindowCounter({ ...o, hits: 1 })).toEqual({ allowed: true, remaining: 0, resetMs: 150 + 4 * 250 });
  });

  it('names one window as the wait for more hits than the limit', () => {
    expect(subWindowCounter({ counts: [0, 0, 0], strict: true, nowMs: 5, windowMs: W, limit: 3, hits: 4 })).toEqual({
      allowed: false,
      remaining: 0,
      resetMs: W,
    });
  });

  const BW = 20; // every millisecond of a few windows can be tried
  const historyArb = fc.array(fc.record({ dt: fc.integer({ min: 0, max: 9 }), hits: fc.integer({ min: 1, max: 3 }) }), { maxLength: 10 });
  const modeArb = fc.record({ k: fc.constantFrom(1, 2, 4, 5, 10), strict: fc.boolean(), limit: fc.integer({ min: 1, max: 6 }) });

  /** What still weighs on decisions at t: 0 once the counter has drained. */
  function weightAt(history: readonly Arrival[], t: number, k: number): number {
    return subCounts(history, t, BW, k).reduce((a, b) => a + b, 0);
  }

  it('predicts, for a denied request, exactly the first instant it would be allowed', () => {
    fc.assert(
      fc.property(historyArb, modeArb, fc.integer({ min: 1, max: 4 }), fc.integer({ min: 0, max: 2 * BW }), (steps, mode, hits, gap) => {
        const arrivals = arrivalsOf(steps, 1_000);
        const verdicts = runSub(arrivals, { windowMs: BW, ...mode });
        const history = arrivals.filter((_, i) => verdicts[i].allowed);
        const now = (arrivals.length > 0 ? arrivals[arrivals.length - 1].t : 1_000) + gap;
        const o = { windowMs: BW, ...mode, hits };
        const v = subVerdict(history, now, o);
        if (v.allowed || hits > mode.limit) return;
        let first = 1;
        while (!subVerdict(history, now + first, o).allowed) first++;
        expect(v.resetMs).toBe(first);
      }),
      { numRuns: 3_000 },
    );
  });

  it('predicts, for an admitted request, exactly the instant its counts have all expired', () => {
    fc.assert(
      fc.property(historyArb, modeArb, fc.integer({ min: 0, max: 3 }), fc.integer({ min: 0, max: 2 * BW }), (steps, mode, hits, gap) => {
        const arrivals = arrivalsOf(steps, 1_000);
        const verdicts = runSub(arrivals, { windowMs: BW, ...mode });
        const history = arrivals.filter((_, i) => verdicts[i].allowed);
        const now = (arrivals.length > 0 ? arrivals[arrivals.length - 1].t : 1_000) + gap;
        const v = subVerdict(history, now, { windowMs: BW, ...mode, hits });
        if (!v.allowed) return;
        const after = hits > 0 ? [...history, { t: now, hits }] : history;
        let drained = 0;
        while (weightAt(after, now + drained, mode.k) > 0) drained++;
        expect(v.resetMs).toBe(drained);
      }),
      { numRuns: 3_000 },
    );
  });

  const trafficArb = fc.record({
    limit: fc.integer({ min: 1, max: 8 }),
    k: fc.constantFrom(1, 2, 3, 4, 6),
    subMs: fc.integer({ min: 2, max: 12 }),
    steps: fc.array(fc.record({ dt: fc.integer({ min: 0, max: 25 }), hits: fc.integer({ min: 0, max: 4 }) }), { minLength: 1, maxLength: 80 }),
  });

  it('strict never admits more than L hits in any span of one window, at any alignment', () => {
    fc.assert(
      fc.property(trafficArb, ({ limit, k, subMs, steps }) => {
        const windowMs = k * subMs;
        const arrivals = arrivalsOf(steps);
        const verdicts = runSub(arrivals, { windowMs, k, strict: true, limit });
        const admitted = arrivals.filter((_, i) => verdicts[i].allowed);
        expect(maxInAnyWindow(admitted, windowMs)).toBeLessThanOrEqual(limit);
      }),
      { numRuns: 2_000 },
    );
  });

  it('strict denies only when the exact count of the window plus the oldest sub-window leaves no room', () => {
    fc.assert(
      fc.property(trafficArb, ({ limit, k, subMs, steps }) => {
        const windowMs = k * subMs;
        const history: Arrival[] = [];
        for (const { t, hits } of arrivalsOf(steps)) {
          const counts = subCounts(history, t, windowMs, k);
          const v = subWindowCounter({ counts, strict: true, nowMs: t, windowMs, limit, hits });
          const exact = history.filter((a) => a.t > t - windowMs).reduce((s, a) => s + a.hits, 0);
          if (!v.allowed && hits <= limit) expect(exact + hits).toBeGreaterThan(limit - counts[0]);
          if (v.allowed && hits > 0) history.push({ t, hits });
        }
      }),
      { numRuns: 2_000 },
    );
  });

  it('plain sub-windows admit more than L in some window at a burst on a boundary (what strict exists for)', () => {
    // 10 per second in 4 sub-windows: 10 at the very end of one sub-window, then 1 per 25 ms.
    const arrivals: Arrival[] = Array.from({ length: 10 }, () => ({ t: 4 * 250 - 1, hits: 1 }));
    for (let t = 1_000; t < 2_000; t += 25) arrivals.push({ t, hits: 1 });
    const plain = runSub(arrivals, { windowMs: W, k: 4, strict: false, limit: 10 });
    const strict = runSub(arrivals, { windowMs: W, k: 4, strict: true, limit: 10 });
    const most = (vs: Verdict[]): number =>
      maxInAnyWindow(
        arrivals.filter((_, i) => vs[i].allowed),
        W,
      );
    expect(most(plain)).toBeGreaterThan(10);
    expect(most(strict)).toBe(10);
  });
});

// ---- GCRA buckets ----

/** Feeds arrivals to one bucket; denied arrivals add nothing. */
function runBucket(arrivals: readonly Arrival[], o: { windowMs: number; limit: number; burst: number }): Verdict[] {
  let state: BucketState = EMPTY_BUCKET;
  return arrivals.map(({ t, hits }) => {
    const v = bucket({ state, nowMs: t, hits, ...o });
    if (v.allowed && hits > 0) state = chargeBucket(state, t, o.windowMs, o.limit, hits);
    return v;
  });
}

/**
 * The token bucket as it is defined: `burst` tokens, refilled continuously at L per W, a request
 * takes h tokens or is denied. Tokens are counted exactly, in 1/W of a token.
 */
function tokenBucketDefinition(arrivals: readonly Arrival[], o: { windowMs: number; limit: number; burst: number }): { allowed: boolean; remaining: number }[] {
  const full = o.burst * o.windowMs;
  let tokens = full;
  let last = -Infinity;
  return arrivals.map(({ t, hits }) => {
    tokens = last === -Infinity ? full : Math.min(full, tokens + o.limit * (t - last));
    last = t;
    const allowed = tokens >= hits * o.windowMs;
    if (allowed) tokens -= hits * o.windowMs;
    return { allowed, remaining: allowed ? Math.floor(tokens / o.windowMs) : 0 };
  });
}

/** The leaky bucket as a meter: a queue of capacity `burst` draining at L per W; admitted if it fits. */
function leakyBucketDefinition(arrivals: readonly Arrival[], o: { windowMs: number; limit: number; burst: number }): boolean[] {
  let level = 0; // in 1/W of a hit
  let last = -Infinity;
  return arrivals.map(({ t, hits }) => {
    if (last !== -Infinity) level = Math.max(0, level - o.limit * (t - last));
    last = t;
    const fits = level + hits * o.windowMs <= o.burst * o.windowMs;
    if (fits) level += hits * o.windowMs;
    return fits;
  });
}

describe('bucket (GCRA)', () => {
  it('5 per second with a burst of 10: ten at once, then one every 200 ms', () => {
    const o = { windowMs: 1_000, limit: 5, burst: 10 };
    const at0 = runBucket(
      Array.from({ length: 11 }, () => ({ t: 50_000, hits: 1 })),
      o,
    );
    expect(at0.map((v) => v.allowed)).toEqual([...new Array<boolean>(10).fill(true), false]);
    expect(at0[9]).toEqual({ allowed: true, remaining: 0, resetMs: 2_000 });
    expect(at0[10]).toEqual({ allowed: false, remaining: 0, resetMs: 200 });
    // Offered every 10 ms afterwards: admitted exactly at +200, +400, ...
    const arrivals = Array.from({ length: 11 }, () => ({ t: 50_000, hits: 1 }));
    for (let t = 50_010; t <= 51_000; t += 10) arrivals.push({ t, hits: 1 });
    const verdicts = runBucket(arrivals, o);
    expect(arrivals.filter((a, i) => verdicts[i].allowed && a.t > 50_000).map((a) => a.t)).toEqual([50_200, 50_400, 50_600, 50_800, 51_000]);
  });

  it('keeps a rate that does not divide the window exactly (3 per second, burst 1)', () => {
    const o = { windowMs: 1_000, limit: 3, burst: 1 };
    const arrivals = Array.from({ length: 3_001 }, (_, i) => ({ t: 7_000 + i, hits: 1 }));
    const verdicts = runBucket(arrivals, o);
    const admitted = arrivals.filter((_, i) => verdicts[i].allowed).map((a) => a.t - 7_000);
    // TAT after the first: 333 1/3 ms, so the second fits at 334, the third at 334 + 333 1/3 -> 668, ...
    expect(admitted.slice(0, 4)).toEqual([0, 334, 668, 1_002]);
  });

  it('denies a request larger than the burst with one window as its wait, and admits a check of 0 hits', () => {
    expect(bucket({ state: EMPTY_BUCKET, nowMs: 1, windowMs: 1_000, limit: 5, burst: 10, hits: 11 })).toEqual({ allowed: false, remaining: 0, resetMs: 1_000 });
    expect(bucket({ state: EMPTY_BUCKET, nowMs: 1, windowMs: 1_000, limit: 5, burst: 10, hits: 0 })).toEqual({ allowed: true, remaining: 10, resetMs: 0 });
    expect(bucket({ state: EMPTY_BUCKET, nowMs: 1, windowMs: 1_000, limit: 0, burst: 0, hits: 1 })).toEqual({ allowed: false, remaining: 0, resetMs: 1_000 });
  });

  it('keeps a bucket charged past its burst (counted although denied) at most MAX_BUCKET_AHEAD_MS in debt', () => {
    const year = 31_536_000_000;
    expect(chargeBucket(EMPTY_BUCKET, 1_000, year, 1, 4_294_967_295)).toEqual({ tatMs: 1_000 + MAX_BUCKET_AHEAD_MS, tatRem: 0 });
    // Just inside the bound, the state is exact.
    const inside = chargeBucket(EMPTY_BUCKET, 1_000, year, 3, 3 * 12);
    expect(inside).toEqual({ tatMs: 1_000 + 12 * year, tatRem: 0 });
    expect(chargeBucket(inside, 1_000, year, 3, 1)).toEqual({ tatMs: 1_000 + 12 * year + year / 3, tatRem: 0 });
  });

  const trafficArb = fc.record({
    limit: fc.integer({ min: 1, max: 9 }),
    burst: fc.integer({ min: 1, max: 12 }),
    windowMs: fc.constantFrom(7, 10, 60, 1_000),
    steps: fc.array(fc.record({ dt: fc.integer({ min: 0, max: 400 }), hits: fc.integer({ min: 0, max: 5 }) }), { minLength: 1, maxLength: 80 }),
  });

  it('decides exactly as the token bucket and the leaky bucket are defined', () => {
    fc.assert(
      fc.property(trafficArb, ({ limit, burst, windowMs, steps }) => {
        const arrivals = arrivalsOf(steps);
        const o = { windowMs, limit, burst };
        const actual = runBucket(arrivals, o);
        expect(actual.map((v) => ({ allowed: v.allowed, remaining: v.remaining }))).toEqual(tokenBucketDefinition(arrivals, o));
        expect(actual.map((v) => v.allowed)).toEqual(leakyBucketDefinition(arrivals, o));
      }),
      { numRuns: 2_000 },
    );
  });

  it('predicts the first instant a denied request fits, and the instant an admitted one has drained', () => {
    fc.assert(
      fc.property(trafficArb, fc.integer({ min: 0, max: 4 }), fc.integer({ min: 0, max: 300 }), ({ limit, burst, windowMs, steps }, hits, gap) => {
        const arrivals = arrivalsOf(steps);
        let state: BucketState = EMPTY_BUCKET;
        for (const a of arrivals) {
          if (bucket({ state, nowMs: a.t, windowMs, limit, burst, hits: a.hits }).allowed) state = chargeBucket(state, a.t, windowMs, limit, a.hits);
        }
        const now = arrivals[arrivals.length - 1].t + gap;
        const ask = (t: number): Verdict => bucket({ state, nowMs: t, windowMs, limit, burst, hits });
        const v = ask(now);
        if (!v.allowed) {
          if (hits > burst) return;
          let first = 1;
          while (!ask(now + first).allowed) first++;
          expect(v.resetMs).toBe(first);
        } else {
          const after = hits > 0 ? chargeBucket(state, now, windowMs, limit, hits) : state;
          expect(v.resetMs).toBe(bucketDrainMs(after, now, limit));
          expect(bucketDrainMs(after, now + v.resetMs, limit)).toBe(0);
          if (v.resetMs > 0) expect(bucketDrainMs(after, now + v.resetMs - 1, limit)).toBeGreaterThan(0);
        }
      }),
      { numRuns: 2_000 },
    );
  });

  it('never admits more than burst + L x span / W hits in any span', () => {
    fc.assert(
      fc.property(trafficArb, fc.integer({ min: 1, max: 3_000 }), ({ limit, burst, windowMs, steps }, span) => {
        const arrivals = arrivalsOf(steps);
        const verdicts = runBucket(arrivals, { windowMs, limit, burst });
        const admitted = arrivals.filter((_, i) => verdicts[i].allowed);
        // A span (t - span, t] holds arrivals over at most span - 1 ms of refill.
        expect(maxInAnyWindow(admitted, span)).toBeLessThanOrEqual(burst + Math.floor((limit * (span - 1)) / windowMs));
      }),
      { numRuns: 2_000 },
    );
  });
});

// ---- Giving back hits charged in process (a mixed call the store then denied) ----

describe('giveBack', () => {
  const W = 1_000;
  interface Shape {
    readonly label: string;
    readonly counter: (limit: number) => CounterRequest;
  }
  const shapes: readonly Shape[] = [
    { label: 'fixed_window', counter: (limit) => ({ key: 'k', algorithm: 'fixed_window', windowMs: W, limit, hits: 0 }) },
    {
      label: 'fixed_window on calendar seconds',
      counter: (limit) => ({ key: 'k', algorithm: 'fixed_window', windowMs: W, limit, hits: 0, calendar: { unit: 'second', offsetMs: 0 } }),
    },
    { label: 'sliding_window', counter: (limit) => ({ key: 'k', algorithm: 'sliding_window', windowMs: W, limit, hits: 0 }) },
    { label: 'sliding_window with 4 sub-windows', counter: (limit) => ({ key: 'k', algorithm: 'sliding_window', windowMs: W, limit, hits: 0, subWindows: 4 }) },
    { label: 'sliding_log', counter: (limit) => ({ key: 'k', algorithm: 'sliding_log', windowMs: W, limit, hits: 0 }) },
  ];
  const buckets: readonly Shape[] = [
    { label: 'token_bucket', counter: (limit) => ({ key: 'k', algorithm: 'token_bucket', windowMs: W, limit, burst: limit + 3, hits: 0 }) },
    { label: 'leaky_bucket', counter: (limit) => ({ key: 'k', algorithm: 'leaky_bucket', windowMs: W, limit, burst: limit, hits: 0 }) },
  ];

  /** Charges at increasing times; the one at `taken` is charged, then given back after `backAfter` more charges and `lagMs`. */
  const scenarioArb = fc.record({
    limit: fc.integer({ min: 1, max: 40 }),
    start: fc.integer({ min: 0, max: 5 * W }),
    charges: fc.array(fc.record({ gapMs: fc.integer({ min: 0, max: 700 }), hits: fc.integer({ min: 1, max: 6 }) }), { minLength: 1, maxLength: 12 }),
    taken: fc.nat(),
    backAfter: fc.nat(),
    lagMs: fc.integer({ min: 0, max: 900 }),
  });

  type Scenario = typeof scenarioArb extends fc.Arbitrary<infer T> ? T : never;

  /**
   * Two states: one charged every time, the taken charge given back at its moment; one never
   * charged that time. Returns both and the times after the give-back at which to compare them.
   */
  function replay(shape: Shape, s: Scenario) {
    const c = shape.counter(s.limit);
    const at: number[] = [];
    let t = s.start;
    for (const ch of s.charges) at.push((t += ch.gapMs));
    const k = s.taken % s.charges.length;
    const back = Math.min(s.charges.length, k + 1 + (s.backAfter % s.charges.length));
    const backAt = (back < s.charges.length ? at[back] : at[at.length - 1]) + s.lagMs;
    const withIt = newCounterState(c, s.start);
    const without = newCounterState(c, s.start);
    let held: TakenHits | undefined;
    let charged = false;
    let sinceMs = 0;
    for (let i = 0; i < s.charges.length; i++) {
      if (i === back && held !== undefined) {
        // Given back before the charges from `back` on (their time is at or after it).
        const t1 = Math.min(backAt, at[i]);
        giveBack({ ...c, hits: s.charges[k].hits }, withIt, held, t1);
        sinceMs = t1 - at[k];
        held = undefined;
      }
      const charge = { ...c, hits: s.charges[i].hits };
      if (i === k) held = takeHits(charge, withIt, at[i]);
      else {
        IN_PROCESS_STATE[c.algorithm].charge(charge, withIt, at[i]);
        IN_PROCESS_STATE[c.algorithm].charge(charge, without, at[i]);
      }
      if (i > k) charged = true;
    }
    const end = Math.max(backAt, at[at.length - 1]);
    if (held !== undefined) {
      giveBack({ ...c, hits: s.charges[k].hits }, withIt, held, end);
      sinceMs = end - at[k];
    }
    const probes = [0, 1, 37, 250, 999, 1_000, 1_500, 2_500].map((d) => end + d);
    return { c, withIt, without, probes, between: charged && back > k + 1, sinceMs };
  }

  for (const shape of shapes) {
    it(`${shape.label}: leaves the state as if the hits were never charged, however the windows moved since`, () => {
      fc.assert(
        fc.property(scenarioArb, fc.integer({ min: 0, max: 8 }), (s, hits) => {
          const { c, withIt, without, probes } = replay(shape, s);
          for (const t of probes) {
            const ask = { ...c, hits };
            expect(IN_PROCESS_STATE[c.algorithm].decide(ask, withIt, t, 0)).toEqual(IN_PROCESS_STATE[c.algorithm].decide(ask, without, t, 0));
          }
        }),
        { numRuns: 400 },
      );
    });
  }

  for (const shape of buckets) {
    it(`${shape.label}: exact when nothing was charged in between; else never emptier, and fuller by at most what drained since the charge`, () => {
      fc.assert(
        fc.property(scenarioArb, (s) => {
          const { c, withIt, without, probes, between, sinceMs } = replay(shape, s);
          for (const t of probes) {
            const level = (state: typeof withIt): number => bucketDrainMs({ tatMs: state.tatMs, tatRem: state.tatRem }, t, c.limit);
            if (!between) expect(level(withIt)).toBe(level(without));
            expect(level(withIt)).toBeGreaterThanOrEqual(level(without));
            // Levels in ms of drain, rounded up: one ms of rounding.
            expect(level(withIt) - level(without)).toBeLessThanOrEqual(sinceMs + 1);
          }
        }),
        { numRuns: 400 },
      );
    });
  }

  it('a bucket charged, then charged by others while it would have drained empty beneath them: fuller than without by no more than the time since', () => {
    const c: CounterRequest = { key: 'k', algorithm: 'token_bucket', windowMs: W, limit: 10, burst: 10, hits: 5 };
    // 5 hits at 0 (500 ms of TAT), 1 more at 300; given back at 450. Without the 5, the bucket was
    // empty from 0 to 300 and again from 400: what the state no longer tells.
    const withIt = newCounterState(c, 0);
    const taken = takeHits(c, withIt, 0);
    IN_PROCESS_STATE.token_bucket.charge({ ...c, hits: 1 }, withIt, 300);
    giveBack(c, withIt, taken, 450);
    const without = newCounterState(c, 0);
    IN_PROCESS_STATE.token_bucket.charge({ ...c, hits: 1 }, without, 300);
    expect(bucketDrainMs(without, 450, 10)).toBe(0);
    expect(bucketDrainMs(withIt, 450, 10)).toBe(100);
    // Given back right after the other charge, it is exact: the 5 hits' TAT was all still ahead.
    const early = newCounterState(c, 0);
    const first = takeHits(c, early, 0);
    IN_PROCESS_STATE.token_bucket.charge({ ...c, hits: 4 }, early, 300);
    giveBack(c, early, first, 300);
    const plain = newCounterState(c, 0);
    IN_PROCESS_STATE.token_bucket.charge({ ...c, hits: 4 }, plain, 300);
    expect(bucketDrainMs(early, 300, 10)).toBe(bucketDrainMs(plain, 300, 10));
  });
});
