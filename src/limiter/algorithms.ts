/**
 * The counting algorithms as pure functions of (state, now). Every store implements
 * exactly this arithmetic (the Redis Lua script mirrors it line by line), so a decision does not
 * depend on where the counters live.
 *
 * All times are integer milliseconds. Windows are aligned to the epoch: window n covers
 * [n*W, (n+1)*W). Arithmetic stays in integers wherever a comparison decides an outcome
 * (estimate x W instead of estimate), so the decision and the predicted reset never disagree
 * by a rounding step.
 */

import { calendarPeriod } from './calendar';
import type { CounterDecision, CounterRequest } from './store';
import { MAX_WINDOW_MS, type Algorithm } from './types';

export interface Verdict {
  readonly allowed: boolean;
  /** L - (used + h) when allowed, else 0. */
  readonly remaining: number;
  /** See CounterDecision.resetMs in ./store.ts. */
  readonly resetMs: number;
}

export interface SlidingWindowInput {
  /** Hits counted in the current fixed window (the one containing nowMs). */
  readonly current: number;
  /** Hits counted in the previous fixed window. */
  readonly previous: number;
  readonly nowMs: number;
  readonly windowMs: number;
  readonly limit: number;
  readonly hits: number;
}

/** Start of the fixed window containing nowMs. */
export function windowStart(nowMs: number, windowMs: number): number {
  return nowMs - (nowMs % windowMs);
}

/**
 * Sliding-window counter: estimate = current + previous x (1 - elapsed/W);
 * allow iff floor(estimate) + h <= L. A request whose h exceeds L is never allowed (reset: one window).
 */
export function slidingWindow(input: SlidingWindowInput): Verdict {
  const { current, previous, nowMs, windowMs: w, limit, hits } = input;
  const start = windowStart(nowMs, w);
  const toEnd = start + w - nowMs; // ms left in the current window, 1..W
  // floor(estimate) = floor((current*W + previous*(W - elapsedMs)) / W), with W - elapsedMs = toEnd
  const used = Math.floor((current * w + previous * toEnd) / w);
  if (used + hits <= limit) {
    const after = current + hits;
    let resetMs = 0;
    if (after > 0)
      resetMs = toEnd + w; // current hits drain over the next window
    else if (previous > 0) resetMs = toEnd; // previous hits drain by the end of this one
    return { allowed: true, remaining: limit - used - hits, resetMs };
  }
  return { allowed: false, remaining: 0, resetMs: slidingWindowRetryMs(current, previous, toEnd, w, limit, hits) };
}

/**
 * Smallest wait after which, with no other traffic, floor(estimate) + h <= L holds.
 * The condition is estimate x W < (L - h + 1) x W.
 */
function slidingWindowRetryMs(current: number, previous: number, toEnd: number, w: number, limit: number, hits: number): number {
  if (hits > limit) return w;
  const target = limit - hits + 1; // estimate must drop strictly below this
  if (current < target) {
    // Still in this window: need previous x d < (target - current) x W, d = ms left in the window.
    const dMax = Math.ceil(((target - current) * w) / previous) - 1;
    return toEnd - dMax;
  }
  // Next window: current becomes "previous" and decays; need current x d < target x W.
  const dMax = Math.ceil((target * w) / current) - 1;
  return toEnd + w - dMax;
}

export interface FixedWindowInput {
  readonly count: number;
  readonly nowMs: number;
  readonly windowMs: number;
  readonly limit: number;
  readonly hits: number;
}

/** Fixed window (the reference server's algorithm): allow iff count + h <= L; resets at the window's end. */
export function fixedWindow(input: FixedWindowInput): Verdict {
  const { count, nowMs, windowMs: w, limit, hits } = input;
  const startMs = windowStart(nowMs, w);
  return fixedPeriod({ count, nowMs, startMs, endMs: startMs + w, limit, hits });
}

export interface FixedPeriodInput {
  /** Hits counted in the period [startMs, endMs), which contains nowMs. */
  readonly count: number;
  readonly nowMs: number;
  readonly startMs: number;
  readonly endMs: number;
  readonly limit: number;
  readonly hits: number;
}

/**
 * A fixed window of any length (an epoch-aligned window, or a calendar period: ./calendar.ts):
 * allow iff count + h <= L; resets at the period's end. A request over L waits one period.
 */
export function fixedPeriod(input: FixedPeriodInput): Verdict {
  const { count, nowMs, startMs, endMs, limit, hits } = input;
  const toEnd = endMs - nowMs;
  if (count + hits <= limit) return { allowed: true, remaining: limit - count - hits, resetMs: toEnd };
  return { allowed: false, remaining: 0, resetMs: hits > limit ? endMs - startMs : toEnd };
}

/** One sliding-log record: `hits` admitted at `atMs`. */
export interface LogEntry {
  readonly atMs: number;
  readonly hits: number;
}

export interface SlidingLogInput {
  /** Admitted records, oldest first. Records at or before nowMs - W are ignored. */
  readonly entries: readonly LogEntry[];
  readonly nowMs: number;
  readonly windowMs: number;
  readonly limit: number;
  readonly hits: number;
}

/**
 * Sliding log (exact): allow iff the hits admitted in (now - W, now] plus h is at most L.
 * A record admitted at t leaves the window at t + W.
 */
export function slidingLog(input: SlidingLogInput): Verdict {
  const { entries, nowMs, windowMs: w, limit, hits } = input;
  const from = nowMs - w;
  let count = 0;
  let newest = -Infinity;
  for (const e of entries) {
    if (e.atMs > from) {
      count += e.hits;
      if (e.atMs > newest) newest = e.atMs;
    }
  }
  if (count + hits <= limit) {
    let resetMs = 0;
    if (hits > 0) resetMs = w;
    else if (count > 0) resetMs = newest + w - nowMs;
    return { allowed: true, remaining: limit - count - hits, resetMs };
  }
  if (hits > limit) return { allowed: false, remaining: 0, resetMs: w };
  // Drop the oldest records until count + h <= L; the last one dropped sets the time.
  let left = count;
  for (const e of entries) {
    if (e.atMs <= from) continue;
    left -= e.hits;
    if (left + hits <= limit) return { allowed: false, remaining: 0, resetMs: e.atMs + w - nowMs };
  }
  return { allowed: false, remaining: 0, resetMs: w }; // unreachable: dropping every record admits h <= L
}

/** A sub-window counter's state at nowMs, and the request to decide. */
export interface SubWindowInput {
  /**
   * Hits of the sub-windows n-k .. n, oldest first (k + 1 counts), where n = floor(now / S) is the
   * sub-window containing nowMs and S = W / k. The oldest one is the partly expired one.
   */
  readonly counts: readonly number[];
  /** Count the oldest sub-window in full until it has expired entirely (never admits more than L in any W). */
  readonly strict: boolean;
  readonly nowMs: number;
  readonly windowMs: number;
  readonly limit: number;
  readonly hits: number;
}

/**
 * Sliding window over k sub-window counters (k = counts.length - 1; k = 1 is slidingWindow):
 * estimate = the k newest counts + the oldest x (ms left in the current sub-window) / S, or the
 * oldest in full when strict; allow iff floor(estimate) + h <= L.
 * Strict never admits more than L in any span of length W: at each admission the counted
 * sub-windows cover all of (now - W, now]. It under-admits by at most the oldest sub-window's hits.
 */
export function subWindowCounter(input: SubWindowInput): Verdict {
  const { counts, strict, nowMs, windowMs: w, limit, hits } = input;
  const k = counts.length - 1;
  const s = w / k;
  const toEnd = windowStart(nowMs, s) + s - nowMs; // ms left in the current sub-window, 1..S
  let full = 0;
  for (let i = 1; i <= k; i++) full += counts[i];
  const oldest = counts[0];
  const used = strict ? full + oldest : Math.floor((full * s + oldest * toEnd) / s);
  if (used + hits <= limit) {
    // The newest non-empty sub-window m weighs until the end of sub-window m + k.
    let newest = counts[k] + hits > 0 ? k : -1;
    for (let i = k - 1; newest < 0 && i >= 0; i--) if (counts[i] > 0) newest = i;
    const resetMs = newest < 0 ? 0 : toEnd + newest * s;
    return { allowed: true, remaining: limit - used - hits, resetMs };
  }
  return { allowed: false, remaining: 0, resetMs: subWindowRetryMs(counts, strict, toEnd, s, limit, hits) };
}

/**
 * Smallest wait after which, with no other traffic, the sub-window estimate admits h. In sub-window
 * n + j the full counts are counts[j+1..k] and the partial one counts[j]; the estimate only falls.
 */
function subWindowRetryMs(counts: readonly number[], strict: boolean, toEnd: number, s: number, limit: number, hits: number): number {
  const k = counts.length - 1;
  if (hits > limit) return k * s;
  const target = limit - hits + 1; // floor(estimate) must drop strictly below this
  let full = 0;
  for (let i = 1; i <= k; i++) full += counts[i];
  // j = 0 is the current sub-window (denied now); later ones start (j - 1) x S + toEnd from now.
  for (let j = 0; j <= k; j++) {
    if (j > 0) full -= counts[j];
    const oldest = counts[j];
    if (strict) {
      // Steps down at each boundary: the first sub-window whose counts (all in full) fit.
      if (j > 0 && full + oldest < target) return toEnd + (j - 1) * s;
      continue;
    }
    if (full >= target) continue;
    // Inside this sub-window, with d ms left in it: full x S + oldest x d < target x S.
    const startD = j === 0 ? toEnd : s;
    const dMax = oldest === 0 ? startD : Math.min(startD, Math.ceil(((target - full) * s) / oldest) - 1);
    return toEnd + j * s - dMax;
  }
  return toEnd + k * s; // every count has expired (reached only by strict)
}

/**
 * Token bucket and leaky bucket (as a meter) are one algorithm, GCRA: the state is a single
 * theoretical arrival time TAT, kept exactly as the rational tatMs + tatRem / L ms (0 <= tatRem < L),
 * so that a rate like 3 per second never rounds. The bucket's level at now is (TAT - now) x L / W
 * hits when positive, else 0: the tokens taken (token bucket), or the queue (leaky bucket).
 * The arithmetic runs in 1/L ms: one hit is W of them, the capacity burst x W.
 */
export interface BucketState {
  readonly tatMs: number;
  readonly tatRem: number;
}

/** A bucket that has fully drained (or was never used): a TAT at or before now. */
export const EMPTY_BUCKET: BucketState = Object.freeze({ tatMs: 0, tatRem: 0 });

/** A bucket's state, its rate and capacity, and the request to decide at nowMs. */
export interface BucketInput {
  readonly state: BucketState;
  readonly nowMs: number;
  readonly windowMs: number;
  /** Rate: `limit` hits per `windowMs`. */
  readonly limit: number;
  /** Capacity in hits (tokens of a full bucket, or the queue's size). */
  readonly burst: number;
  readonly hits: number;
}

/** The bucket's level at nowMs in 1/L ms (0 when it has drained). */
function bucketExcess(state: BucketState, nowMs: number, limit: number): number {
  const e = (state.tatMs - nowMs) * limit + state.tatRem;
  return e > 0 ? e : 0;
}

/**
 * GCRA: allow iff level + h <= burst. Remaining: whole tokens left (burst - level after, rounded
 * down). Reset when allowed: ms until the bucket is full again (empty, as a queue); when denied:
 * ms until the level has drained enough for h. A request that can never fit (h > burst, or a rate
 * of 0) is denied with one window as its wait.
 */
export function bucket(input: BucketInput): Verdict {
  const { state, nowMs, windowMs: w, limit, burst, hits } = input;
  if (limit === 0 || hits > burst) return hits === 0 ? { allowed: true, remaining: 0, resetMs: 0 } : { allowed: false, remaining: 0, resetMs: w };
  const e = bucketExcess(state, nowMs, limit);
  const after = e + hits * w;
  const capacity = burst * w;
  if (after <= capacity) {
    return { allowed: true, remaining: Math.floor((capacity - after) / w), resetMs: Math.ceil(after / limit) };
  }
  return { allowed: false, remaining: 0, resetMs: Math.ceil((after - capacity) / limit) };
}

/**
 * How far a bucket's TAT may lie ahead of now, ms. An admitted charge keeps it within burst x W / L
 * (at most MAX_WINDOW_MS, checked at config load); charges counted although denied (countDenied)
 * push it further, by up to h x W / L each. Without a bound a few large ones would carry it past
 * what a store can keep (Redis's expiry is a 64-bit ms timestamp) and past exact doubles.
 */
export const MAX_BUCKET_AHEAD_MS = 2 * MAX_WINDOW_MS;

/** The state after charging h hits at nowMs (allowed, or counted although denied). A rate of 0 keeps no state. */
export function chargeBucket(state: BucketState, nowMs: number, windowMs: number, limit: number, hits: number): BucketState {
  if (limit === 0) return state;
  const after = bucketExcess(state, nowMs, limit) + hits * windowMs;
  if (after > limit * MAX_BUCKET_AHEAD_MS) return { tatMs: nowMs + MAX_BUCKET_AHEAD_MS, tatRem: 0 };
  return { tatMs: nowMs + Math.floor(after / limit), tatRem: after % limit };
}

/** Ms from nowMs until the bucket has drained: how long its state must be kept. */
export function bucketDrainMs(state: BucketState, nowMs: number, limit: number): number {
  return limit === 0 ? 0 : Math.ceil(bucketExcess(state, nowMs, limit) / limit);
}

/** One entry of a sliding log: admitted hits at one millisecond. */
export interface LogRecordEntry {
  atMs: number;
  hits: number;
}

/**
 * One counter's state kept in process (the memory store's records). `index` is the fixed window
 * (floor(now / W)) that `current` counts (a calendar window's: the start of its period, ms);
 * `previous` counts window index - 1 (sliding window only). With k > 1 sub-windows, `index` is the
 * newest sub-window (floor(now / (W / k))) and `counts` holds sub-windows index - k .. index, oldest
 * first. The log keeps admitted hits oldest first. A bucket keeps its TAT, tatMs + tatRem / L.
 * Every state has every field (one object shape), made by newCounterState.
 */
export interface CounterState {
  readonly algorithm: Algorithm;
  readonly windowMs: number;
  readonly subWindows: number;
  index: number;
  current: number;
  previous: number;
  counts: number[] | undefined;
  log: LogRecordEntry[] | undefined;
  tatMs: number;
  tatRem: number;
  /** From this instant on the state cannot change any decision and may be dropped. */
  expiresAtMs: number;
  /** Its keeper's estimate of its size in bytes (the memory store's bound); 0 until it sets it. */
  bytes: number;
}

/** The state of counter `c` before its first charge at `now`. */
export function newCounterState(c: CounterRequest, now: number): CounterState {
  return {
    algorithm: c.algorithm,
    windowMs: c.windowMs,
    subWindows: c.subWindows ?? 1,
    index: Math.floor(now / c.windowMs),
    current: 0,
    previous: 0,
    counts: undefined,
    log: undefined,
    tatMs: 0,
    tatRem: 0,
    expiresAtMs: 0,
    bytes: 0,
  };
}

/** How one algorithm decides on and charges a counter whose state is kept in process. */
export interface InProcessCounter {
  /**
   * The verdict on `c`'s hits at `now` from its state (undefined: none yet), with `pending` hits
   * that earlier counters of the same call add to it first.
   */
  decide(c: CounterRequest, state: CounterState | undefined, now: number, pending: number): Verdict;
  /** Adds `c`'s hits to `state` at `now`, and sets until when the state matters (expiresAtMs). */
  charge(c: CounterRequest, state: CounterState, now: number): void;
}

const BUCKET: InProcessCounter = {
  decide(c, state, now, pending) {
    let s: BucketState = state ?? EMPTY_BUCKET;
    // Earlier counters of this call on the same bucket took their hits at this same instant.
    if (pending > 0) s = chargeBucket(s, now, c.windowMs, c.limit, pending);
    return bucket({ state: s, nowMs: now, windowMs: c.windowMs, limit: c.limit, burst: c.burst ?? c.limit, hits: c.hits });
  },
  charge(c, state, now) {
    if (c.limit === 0) return; // a rate of 0 admits nothing and keeps no state
    const next = chargeBucket(state, now, c.windowMs, c.limit, c.hits);
    state.tatMs = next.tatMs;
    state.tatRem = next.tatRem;
    // Once drained, the state says no more than an absent one.
    state.expiresAtMs = now + bucketDrainMs(next, now, c.limit);
  },
};

/**
 * Every algorithm's decision and charge on a state kept in process, by the arithmetic above: what
 * the memory store runs (src/store/redis/script.ts is the same in Lua). The compiler asks for an
 * entry per algorithm.
 */
export const IN_PROCESS_STATE: Readonly<Record<Algorithm, InProcessCounter>> = {
  sliding_window: {
    decide(c, state, now, pending) {
      const w = c.windowMs;
      const k = c.subWindows ?? 1;
      if (k > 1 || c.strict === true) {
        const counts = subWindowCounts(state, Math.floor(now / (w / k)), k);
        counts[k] += pending;
        return subWindowCounter({ counts, strict: c.strict === true, nowMs: now, windowMs: w, limit: c.limit, hits: c.hits });
      }
      let current = 0;
      let previous = 0;
      if (state !== undefined) {
        const index = Math.floor(now / w);
        if (state.index >= index) {
          // (A clock that stepped back keeps reading the newest window: never admits more.)
          current = state.current;
          previous = state.previous;
        } else if (state.index === index - 1) {
          previous = state.current;
        }
      }
      return slidingWindow({ current: current + pending, previous, nowMs: now, windowMs: w, limit: c.limit, hits: c.hits });
    },
    charge(c, state, now) {
      if (state.subWindows > 1) {
        chargeSubWindows(state, now, c.hits);
        return;
      }
      const w = c.windowMs;
      const index = Math.floor(now / w);
      if (state.index !== index) {
        state.previous = state.index === index - 1 ? state.current : 0;
        state.current = 0;
        state.index = index;
      }
      state.current += c.hits;
      // The current window's hits weigh on the estimate until the end of the next window.
      state.expiresAtMs = (index + 2) * w;
    },
  },
  fixed_window: {
    decide(c, state, now, pending) {
      let count = 0;
      if (c.calendar !== undefined) {
        const { startMs, endMs } = calendarPeriod(now, c.calendar.unit, c.calendar.offsetMs);
        // Another period (or, after CALENDAR_TIMEZONE changed, another calendar's) counts nothing here.
        if (state !== undefined && state.index === startMs) count = state.current;
        return fixedPeriod({ count: count + pending, nowMs: now, startMs, endMs, limit: c.limit, hits: c.hits });
      }
      if (state !== undefined && state.index >= Math.floor(now / c.windowMs)) count = state.current;
      return fixedWindow({ count: count + pending, nowMs: now, windowMs: c.windowMs, limit: c.limit, hits: c.hits });
    },
    charge(c, state, now) {
      const index = Math.floor(now / c.windowMs);
      const period = c.calendar === undefined ? undefined : calendarPeriod(now, c.calendar.unit, c.calendar.offsetMs);
      const at = period === undefined ? index : period.startMs;
      if (state.index !== at) {
        state.current = 0;
        state.index = at;
      }
      state.current += c.hits;
      state.expiresAtMs = period === undefined ? (index + 1) * c.windowMs : period.endMs;
    },
  },
  sliding_log: {
    decide(c, state, now, pending) {
      const w = c.windowMs;
      let entries: readonly LogRecordEntry[] = state?.log ?? EMPTY_LOG;
      if (state?.log !== undefined) pruneLog(state.log, now - w);
      if (pending > 0) entries = [...entries, { atMs: now, hits: pending }];
      return slidingLog({ entries, nowMs: now, windowMs: w, limit: c.limit, hits: c.hits });
    },
    charge(c, state, now) {
      const w = c.windowMs;
      const log = (state.log ??= []);
      pruneLog(log, now - w);
      const last = log.length > 0 ? log[log.length - 1] : undefined;
      // Hits in the same millisecond share one entry, which bounds the log by W as well as by L.
      if (last !== undefined && last.atMs === now) last.hits += c.hits;
      else log.push({ atMs: now, hits: c.hits });
      state.expiresAtMs = now + w;
    },
  },
  token_bucket: BUCKET,
  leaky_bucket: BUCKET,
};

/**
 * Hits charged to a state kept in process, as giveBack() needs them to take them out again: where
 * they went (the state's index right after the charge: the fixed window, calendar period or newest
 * sub-window charged) and, for a bucket, its TAT before and after.
 */
export interface TakenHits {
  readonly hits: number;
  readonly atMs: number;
  readonly index: number;
  readonly tatBeforeMs: number;
  readonly tatBeforeRem: number;
  readonly tatAfterMs: number;
  readonly tatAfterRem: number;
}

/** Charges `c`'s hits to `state` at `now` (IN_PROCESS_STATE) and says where they went, for giveBack(). */
export function takeHits(c: CounterRequest, state: CounterState, now: number): TakenHits {
  const tatBeforeMs = state.tatMs;
  const tatBeforeRem = state.tatRem;
  IN_PROCESS_STATE[c.algorithm].charge(c, state, now);
  return { hits: c.hits, atMs: now, index: state.index, tatBeforeMs, tatBeforeRem, tatAfterMs: state.tatMs, tatAfterRem: state.tatRem };
}

/**
 * Takes hits charged by takeHits() out of `state` at `now` (a later part of their call denied it),
 * so that every later decision reads the state as if they had never been charged:
 * - windows (fixed, calendar, sliding, sub-windows) and logs: exactly. The hits are subtracted from
 *   the window, period, sub-window or log entry they went to, wherever the state has moved since;
 *   a window the state no longer holds no longer weighs on any decision, and is left as it is.
 * - buckets: exactly when nothing was charged in between (the TAT before the charge is put back).
 *   Otherwise the level may since have drained to a point where the hits no longer made a
 *   difference, which the state no longer tells: what is given back is the hits less what the
 *   bucket drains in the time since the charge (at most that much of the level stays: the bucket
 *   reads fuller than had the hits never been charged, never emptier).
 */
export function giveBack(c: CounterRequest, state: CounterState, taken: TakenHits, now: number): void {
  const hits = taken.hits;
  if (hits <= 0) return;
  switch (c.algorithm) {
    case 'fixed_window':
      if (state.index === taken.index) state.current = Math.max(0, state.current - hits);
      return;
    case 'sliding_window': {
      if (state.subWindows > 1) {
        const at = state.subWindows - (state.index - taken.index);
        if (state.counts !== undefined && at >= 0 && at <= state.subWindows) state.counts[at] = Math.max(0, state.counts[at] - hits);
        return;
      }
      if (state.index === taken.index) state.current = Math.max(0, state.current - hits);
      else if (state.index === taken.index + 1) state.previous = Math.max(0, state.previous - hits);
      return;
    }
    case 'sliding_log': {
      const log = state.log;
      const at = log === undefined ? -1 : log.findIndex((e) => e.atMs === taken.atMs);
      if (at < 0) return;
      // An entry left empty would still read as the newest admission: it goes.
      if (log![at].hits <= hits) log!.splice(at, 1);
      else log![at].hits -= hits;
      return;
    }
    case 'token_bucket':
    case 'leaky_bucket': {
      if (state.tatMs === taken.tatAfterMs && state.tatRem === taken.tatAfterRem) {
        state.tatMs = taken.tatBeforeMs;
        state.tatRem = taken.tatBeforeRem;
        return;
      }
      if (c.limit === 0) return;
      // Whole ms of the TAT that surely are still these hits': their length, less the time since.
      const back = Math.floor((hits * c.windowMs) / c.limit) - (now - taken.atMs);
      if (back > 0 && state.tatMs > now) state.tatMs = Math.max(now, state.tatMs - back);
      return;
    }
  }
}

/** Adds hits to the newest sub-window, sliding the counts forward to the one containing now. */
function chargeSubWindows(state: CounterState, now: number, hits: number): void {
  const k = state.subWindows;
  const s = state.windowMs / k;
  const n = Math.floor(now / s);
  const counts = (state.counts = subWindowCounts(state, n, k));
  // (A clock that stepped back charges the newest sub-window it has seen.)
  state.index = Math.max(state.index, n);
  counts[k] += hits;
  // Sub-window n is read until the end of sub-window n + k.
  state.expiresAtMs = (state.index + k + 1) * s;
}

/** The k + 1 counts of sub-windows n - k .. n (oldest first) held by a state, zeros for any it has not seen. */
function subWindowCounts(state: CounterState | undefined, n: number, k: number): number[] {
  const out = new Array<number>(k + 1).fill(0);
  if (state === undefined) return out;
  if (state.subWindows === 1) {
    // The two-counter layout: current is window `index`, previous is `index - 1`.
    if (state.index >= n) {
      out[1] = state.current;
      out[0] = state.previous;
    } else if (state.index === n - 1) out[0] = state.current;
    return out;
  }
  const held = state.counts;
  if (held === undefined) return out;
  // (A clock that stepped back keeps reading the newest sub-windows: never admits more.)
  const shift = Math.max(0, n - state.index);
  for (let i = 0; i + shift <= k; i++) out[i] = held[i + shift];
  return out;
}

const EMPTY_LOG: readonly LogRecordEntry[] = Object.freeze([]);

/** Removes entries at or before `from` (they have left the window), oldest first. */
function pruneLog(log: LogRecordEntry[], from: number): void {
  let k = 0;
  while (k < log.length && log[k].atMs <= from) k++;
  if (k > 0) log.splice(0, k);
}

/**
 * Hits that earlier counters of one call add to the same counter `counters[i]` before it is judged:
 * each earlier one already decided (`decisions[j]` set) that is charged (admitted, or charged
 * whatever the outcome). The same counter twice in a call sees the first one's hits, as it would had
 * the two arrived one after the other. A scan: for calls of a few counters.
 */
export function pendingHits(counters: readonly CounterRequest[], decisions: readonly (CounterDecision | undefined)[], i: number, countDenied: boolean): number {
  const c = counters[i];
  let pending = 0;
  for (let j = 0; j < i; j++) {
    const o = counters[j];
    const d = decisions[j];
    if (
      d !== undefined &&
      o.key === c.key &&
      o.algorithm === c.algorithm &&
      o.windowMs === c.windowMs &&
      (d.allowed || countDenied || o.countDenied === true)
    ) {
      pending += o.hits;
    }
  }
  return pending;
}
