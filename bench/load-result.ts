import type { LatencySummary } from './latency';

/** The load generators: nghttp2's h2load, and two in this directory (raw node:http2, grpc-js). */
export type GeneratorName = 'h2load' | 'http2-load' | 'grpc-js-load';

/** What one load-generator run measured, whichever generator produced it. */
export interface LoadResult {
  readonly generator: GeneratorName;
  /** Completed calls (any status). */
  readonly requests: number;
  /** Calls answered with gRPC status OK (h2load: inferred from DATA bytes, see h2load.ts). */
  readonly ok: number;
  /** Calls that failed, gRPC errors included (h2load: the errors it certainly saw). */
  readonly errors: number;
  /** h2load only: the most errors consistent with the bytes received (equals `errors` when every OK answer has one size). */
  readonly errorsUpperBound?: number;
  /** Calls answered OVER_LIMIT (the node generators; h2load cannot decode bodies). */
  readonly overLimit?: number;
  readonly durationS: number;
  /** ok / durationS. */
  readonly rps: number;
  readonly latencyMs: LatencySummary;
  /** First error message seen, for diagnosis. */
  readonly firstError?: string;
}
