/**
 * What the gRPC edges see of tracing (TRACING_ENABLED): one span per ShouldRateLimit call, started
 * from the trace context of the call's headers and ended with its outcome. The OpenTelemetry SDK
 * behind it (./otel-tracer) is loaded only when tracing is on; when it is off the edges hold no
 * tracer and test one property per call.
 */

/** How a traced call ended. */
export interface CallOutcome {
  /** The request's domain, when the request could be decoded. */
  readonly domain?: string;
  /** OK or OVER_LIMIT, when a decision was answered. */
  readonly overallCode?: string;
  /** The gRPC status answered (0 with a decision). */
  readonly grpcCode: number;
  /** The status message of a failed call. */
  readonly message?: string;
}

export interface CallSpan {
  /** Records the outcome and ends the span; later calls do nothing. */
  end(outcome: CallOutcome): void;
}

export interface CallTracer {
  /** Starts the span of one call; `header` reads the call's request headers (lower-case names). */
  startCall(header: (name: string) => string | undefined): CallSpan;
  /** Exports the spans still buffered and stops. */
  shutdown(): Promise<void>;
}
