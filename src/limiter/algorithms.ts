/**
 * The three counting algorithms as pure functions of (state, now). Every store implements
 * exactly this arithmetic (the Redis Lua script mirrors it line by line), so a decision does not
 * depend on where the counters live.
 *
 * All times are integer milliseconds. Windows are aligned to the epoch: window n covers
 * [n*W, (n+1)*W). Arithmetic stays in integers wherever a comparison decides an outcome
 * (estimate x W instead of estimate), so the decision and the predicted reset never disagree
 * by a rounding step.
 */

export interface Verdict {
  readonly allowed: boolean;
  /** L - (used + h) when allowed, else 0. */
  readonly remaining: number;
  /** See CounterDecision.resetMs in src/store/store.ts. */
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
    if (after > 0) resetMs = toEnd + w; // current hits drain over the next window
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
  const toEnd = windowStart(nowMs, w) + w - nowMs;
  if (count + hits <= limit) return { allowed: true, remaining: limit - count - hits, resetMs: toEnd };
  return { allowed: false, remaining: 0, resetMs: hits > limit ? w : toEnd };
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
