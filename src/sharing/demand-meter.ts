/**
 * Measuring a member's demand on a shared limit: what it asks per second (admitted or not), over
 * the last two sync intervals (steady enough to divide by, recent enough to follow a change), and
 * what it admitted over about the last window or two (WindowCount). The hot path only adds to
 * `asked`; the sync reads the rate and starts a new interval.
 */

/** The fields of a demand measure; a user keeps them on its own object (a lease), so that counting one call is one addition. */
export interface DemandMeter {
  /** Hits asked (admitted or not) in the current and the previous interval, and when each began. */
  asked: number;
  askedBefore: number;
  askedSinceMs: number;
  askedBeforeMs: number;
  /** Hits per second asked over the last two intervals, as of the last measure (Infinity: not measured yet). */
  demand: number;
}

/** A measure begun at `nowMs`, nothing asked, its demand unknown. */
export function newDemandMeter(nowMs: number): DemandMeter {
  return { asked: 0, askedBefore: 0, askedSinceMs: nowMs, askedBeforeMs: nowMs, demand: Infinity };
}

/** Measures the demand over the last two intervals (kept when no time has passed) and begins a new interval at `nowMs`. */
export function measureDemand(m: DemandMeter, nowMs: number): number {
  const span = nowMs - m.askedBeforeMs;
  if (span > 0) m.demand = ((m.asked + m.askedBefore) * 1000) / span;
  m.askedBefore = m.asked;
  m.askedBeforeMs = m.askedSinceMs;
  m.asked = 0;
  m.askedSinceMs = nowMs;
  return m.demand;
}

/** The demand a member publishes to the others: an unmeasured one as the largest safe number (the exchange carries finite numbers). */
export function publishedDemand(demand: number): number {
  return Number.isFinite(demand) ? demand : Number.MAX_SAFE_INTEGER;
}

/** Slices of a window a WindowCount is kept in. */
export const WINDOW_SLICES = 8;

/** Counts over about the last `WINDOW_SLICES` slices (exact to a slice). */
export class WindowCount {
  private readonly slices = new Float64Array(WINDOW_SLICES);
  private last = -Infinity;

  constructor(private readonly sliceMs: number) {}

  add(n: number, nowMs: number): void {
    this.advance(nowMs);
    this.slices[this.last % WINDOW_SLICES] += n;
  }

  sum(nowMs: number): number {
    this.advance(nowMs);
    let s = 0;
    for (let i = 0; i < WINDOW_SLICES; i++) s += this.slices[i];
    return s;
  }

  private advance(nowMs: number): void {
    const slice = Math.floor(nowMs / this.sliceMs);
    if (slice <= this.last) return;
    if (slice - this.last >= WINDOW_SLICES) this.slices.fill(0);
    else for (let s = this.last + 1; s <= slice; s++) this.slices[s % WINDOW_SLICES] = 0;
    this.last = slice;
  }
}
