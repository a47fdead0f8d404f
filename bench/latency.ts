/** Latency summary shared by every load generator. All values in milliseconds. */
export interface LatencySummary {
  readonly samples: number;
  readonly mean: number;
  readonly p50: number;
  readonly p99: number;
  readonly p999: number;
  readonly max: number;
  /** Calls slower than Envoy's default rate-limit timeout (TIMEOUT_MS): Envoy would have given up on them. */
  readonly overTimeout: number;
}

/** Envoy's default timeout for a rate-limit call, ms. */
export const TIMEOUT_MS = 20;

const EMPTY: LatencySummary = { samples: 0, mean: 0, p50: 0, p99: 0, p999: 0, max: 0, overTimeout: 0 };

/** Summarises samples (sorted in place). Empty input gives zeros, so a failed run still serialises. */
export function summarize(samples: Float64Array): LatencySummary {
  const n = samples.length;
  if (n === 0) return EMPTY;
  samples.sort();
  let sum = 0;
  let overTimeout = 0;
  for (let i = 0; i < n; i++) {
    sum += samples[i];
    if (samples[i] > TIMEOUT_MS) overTimeout++;
  }
  // Nearest-rank percentile: the smallest sample with at least q of all samples at or below it.
  const q = (p: number): number => samples[Math.min(n - 1, Math.max(0, Math.ceil(p * n) - 1))];
  return { samples: n, mean: sum / n, p50: q(0.5), p99: q(0.99), p999: q(0.999), max: samples[n - 1], overTimeout };
}

// Histogram layout: 1 µs buckets below LINEAR_US, then buckets growing by GROWTH (0.5% relative
// error) up to about a minute. Fixed memory however long the run, and recording is one log().
const LINEAR_US = 1000;
const GROWTH = 1.005;
const LOG_GROWTH = Math.log(GROWTH);
const LOG_BUCKETS = Math.ceil(Math.log(60_000_000 / LINEAR_US) / LOG_GROWTH) + 1;

/**
 * A latency histogram with bounded memory and 0.5% resolution, for generators that record millions
 * of calls. Percentiles are reported as the upper edge of the bucket holding the nearest rank.
 */
export class LatencyHistogram {
  private readonly counts = new Float64Array(LINEAR_US + LOG_BUCKETS);
  private n = 0;
  private sumMs = 0;
  private maxMs = 0;
  private overTimeout = 0;

  /** Adds one call of `ms` milliseconds. */
  record(ms: number): void {
    const us = ms * 1000;
    let i: number;
    if (us < LINEAR_US) i = us < 0 ? 0 : Math.floor(us);
    else i = LINEAR_US + Math.min(LOG_BUCKETS - 1, Math.floor(Math.log(us / LINEAR_US) / LOG_GROWTH));
    this.counts[i]++;
    this.n++;
    this.sumMs += ms;
    if (ms > this.maxMs) this.maxMs = ms;
    if (ms > TIMEOUT_MS) this.overTimeout++;
  }

  /** Count, mean, p50, p99, p99.9 and max (max and mean exact, percentiles to the bucket). */
  summary(): LatencySummary {
    if (this.n === 0) return EMPTY;
    const q = (p: number): number => {
      const rank = Math.max(1, Math.ceil(p * this.n));
      let seen = 0;
      for (let i = 0; i < this.counts.length; i++) {
        seen += this.counts[i];
        if (seen >= rank) return Math.min(this.maxMs, upperEdgeMs(i));
      }
      return this.maxMs;
    };
    return { samples: this.n, mean: this.sumMs / this.n, p50: q(0.5), p99: q(0.99), p999: q(0.999), max: this.maxMs, overTimeout: this.overTimeout };
  }
}

function upperEdgeMs(bucket: number): number {
  if (bucket < LINEAR_US) return (bucket + 1) / 1000;
  return (LINEAR_US * Math.pow(GROWTH, bucket - LINEAR_US + 1)) / 1000;
}

/** Median of a list (mean of the middle two for even counts); NaN for an empty list. */
export function median(values: readonly number[]): number {
  const v = values.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return Number.NaN;
  const m = v.length >> 1;
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}
