import type { LatencySummary } from './latency';

/** What one load-generator run measured, whichever generator produced it. */
export interface LoadResult {
  readonly generator: 'node' | 'h2load';
  /** Completed calls (any status). */
  readonly requests: number;
  /** Calls answered with gRPC status OK (h2load: HTTP 200, it cannot see gRPC trailers). */
  readonly ok: number;
  readonly errors: number;
  /** Calls answered OVER_LIMIT (node generator only; h2load cannot decode bodies). */
  readonly overLimit?: number;
  readonly durationS: number;
  /** ok / durationS. */
  readonly rps: number;
  readonly latencyMs: LatencySummary;
  /** First error message seen, for diagnosis. */
  readonly firstError?: string;
}
