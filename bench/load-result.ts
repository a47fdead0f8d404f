import type { LatencySummary } from './latency';

/**
 * The load generators: nghttp2's h2load, and two in this directory (raw node:http2, grpc-js).
 * `h2load-mix` is two h2load processes at once, each posting its own body (see h2load.ts).
 */
export type GeneratorName = 'h2load' | 'h2load-mix' | 'http2-load' | 'grpc-js-load';

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
  /** h2load-mix only: the attacker process's share of all calls, as measured. */
  readonly attackShare?: number;
  /** First error message seen, for diagnosis. */
  readonly firstError?: string;
}
