/** Latency summary shared by both load generators. All values in milliseconds. */
export interface LatencySummary {
  readonly samples: number;
  readonly mean: number;
  readonly p50: number;
  readonly p99: number;
  readonly p999: number;
  readonly max: number;
}

/** Summarises samples (sorted in place). Empty input gives zeros, so a failed run still serialises. */
export function summarize(samples: Float64Array): LatencySummary {
  const n = samples.length;
  if (n === 0) return { samples: 0, mean: 0, p50: 0, p99: 0, p999: 0, max: 0 };
  samples.sort();
  let sum = 0;
  for (let i = 0; i < n; i++) sum += samples[i];
  // Nearest-rank percentile: the smallest sample with at least q of all samples at or below it.
  const q = (p: number): number => samples[Math.min(n - 1, Math.max(0, Math.ceil(p * n) - 1))];
  return { samples: n, mean: sum / n, p50: q(0.5), p99: q(0.99), p999: q(0.999), max: samples[n - 1] };
}

/** Median of a list (mean of the middle two for even counts); NaN for an empty list. */
export function median(values: readonly number[]): number {
  const v = values.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return Number.NaN;
  const m = v.length >> 1;
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}
