import { classify, publicMessage } from '../errors';
import type { Replays } from '../limiter/replay';
import type { RateLimitDecider, RateLimitRequest, RateLimitResponse } from '../limiter/types';
import type { Logger } from '../log';
import type { CallSpan, CallTracer } from '../tracing/call-tracer';
import { GrpcStatus } from '../wire/grpc-framing';
import type { HealthState, ServingStatus } from './health';
import { ServingStatusNumber } from '../wire/proto';
import { DescriptorCache, frameResponse, RequestCache, requestKey } from '../wire/rls-codec';

/**
 * The rate-limit service as every gRPC transport serves it (GRPC_TRANSPORT: src/grpc/http2-server.ts on
 * the own HTTP/2 layer, src/grpc/grpc-js-server.ts on grpc-js): ShouldRateLimit as bytes in, bytes out
 * (decode -> decide -> encode, one codec), grpc.health.v1 Check and Watch, and shutdown. A
 * transport only moves bytes and statuses; what they mean is decided here, and what a failure
 * answers comes from the error catalogue (src/errors.ts).
 */

/**
 * Distinct descriptors kept decoded (src/wire/rls-codec.ts DescriptorCache), and the largest one
 * kept: at most about 15 MB (10,000 descriptors of 127 encoded bytes take 7.4 MB of heap), and far
 * more descriptors than a fleet of proxies sends again and again.
 */
export const DESCRIPTOR_CACHE_MAX_ENTRIES = 10_000;
export const DESCRIPTOR_CACHE_MAX_BYTES = 256;
/**
 * Distinct requests kept decoded (RequestCache), each named by at most REQUEST_KEY_MAX_BYTES: at most
 * about 12 MB with the names seen once, for far more (client, route) pairs than repeat within seconds.
 */
export const REQUEST_CACHE_MAX_ENTRIES = 10_000;

/** A failed call's gRPC status and message. */
export interface CallFailure {
  readonly code: number;
  readonly details: string;
}

/** Where one ShouldRateLimit call's outcome goes: the framed response message, or the failure (answer it with failure()). */
export interface CallSink {
  answer(frame: Buffer): void;
  fail(err: unknown): void;
}

/** A health Watch as the service sees it: where to send statuses, and how to end the stream. */
export interface WatchSink {
  write(status: number): void;
  end(): void;
}

export interface RlsServiceOptions {
  readonly limiter: RateLimitDecider;
  readonly health: HealthState;
  readonly logger: Logger;
  /** One span per ShouldRateLimit call (TRACING_ENABLED); absent when tracing is off. */
  readonly tracer?: CallTracer;
  /** Repeats of requests answered from local denials, answered again by their bytes; absent: none kept. */
  readonly replays?: ServiceReplays;
}

/** What the service asks of the replays: framed answers by request bytes, and the listener that remembers them. */
export type ServiceReplays = Pick<Replays<Buffer>, 'answer' | 'remembering'>;

/** ShouldRateLimit, health and shutdown, shared by every transport. */
export class RlsService {
  private readonly limiter: RateLimitDecider;
  private readonly health: HealthState;
  private readonly logger: Logger;
  private readonly tracer: CallTracer | undefined;
  private readonly replays: ServiceReplays | undefined;
  private readonly requests = new RequestCache({
    maxEntries: REQUEST_CACHE_MAX_ENTRIES,
    descriptors: new DescriptorCache({ maxEntries: DESCRIPTOR_CACHE_MAX_ENTRIES, maxDescriptorBytes: DESCRIPTOR_CACHE_MAX_BYTES }),
  });
  private readonly watches = new Map<WatchSink, () => void>();
  private stopping = false;

  constructor(options: RlsServiceOptions) {
    this.limiter = options.limiter;
    this.health = options.health;
    this.logger = options.logger;
    this.tracer = options.tracer;
    this.replays = options.replays;
  }

  /** True when calls are traced: transports then call shouldRateLimitTraced with the call's headers. */
  get traced(): boolean {
    return this.tracer !== undefined;
  }

  /** True once shutdown has begun: transports refuse new calls. */
  get shuttingDown(): boolean {
    return this.stopping;
  }

  /**
   * One ShouldRateLimit call: the request message's bytes in, the framed response message (5-byte
   * prefix included) or the failure out to `sink`, synchronously when a replay answers. A sink
   * rather than a promise: one promise per call (the decision's), not two.
   */
  shouldRateLimit(message: Buffer, sink: CallSink): void {
    const replays = this.replays;
    // One name per request message, for the replays and the request cache.
    const key = requestKey(message);
    // A repeat of a request answered from local denials skips decoding and matching (attack traffic).
    const replayKey = replays === undefined ? undefined : key;
    if (replayKey !== undefined) {
      const replayed = replays!.answer(replayKey);
      if (replayed !== undefined) {
        sink.answer(replayed);
        return;
      }
    }
    let pending: Promise<RateLimitResponse>;
    try {
      const request: RateLimitRequest = this.requests.decode(message, key);
      pending = this.limiter.shouldRateLimit(request, replayKey === undefined ? undefined : replays!.remembering(replayKey));
    } catch (err) {
      sink.fail(err);
      return;
    }
    pending.then(
      (response) => sink.answer(frameResponse(response)),
      (err: unknown) => sink.fail(err),
    );
  }

  /**
   * shouldRateLimit inside a span that continues the trace context `header` reads from the call
   * (traceparent, B3) and records the domain and the decision or the failure. Traced calls are
   * always decoded, never replayed (a replay knows neither).
   */
  shouldRateLimitTraced(message: Buffer, sink: CallSink, header: (name: string) => string | undefined): void {
    const span = this.tracer!.startCall(header);
    let request: RateLimitRequest;
    let pending: Promise<RateLimitResponse>;
    try {
      request = this.requests.decode(message, requestKey(message));
    } catch (err) {
      this.failTraced(span, undefined, sink, err);
      return;
    }
    try {
      pending = this.limiter.shouldRateLimit(request);
    } catch (err) {
      this.failTraced(span, request.domain, sink, err);
      return;
    }
    pending.then(
      (response) => {
        span.end({ domain: request.domain, overallCode: response.overallCode, grpcCode: GrpcStatus.OK });
        sink.answer(frameResponse(response));
      },
      (err: unknown) => this.failTraced(span, request.domain, sink, err),
    );
  }

  private failTraced(span: CallSpan, domain: string | undefined, sink: CallSink, err: unknown): void {
    const kind = classify(err);
    span.end({ domain, grpcCode: kind.grpcStatus, message: publicMessage(kind, err) });
    sink.fail(err);
  }

  /** The status and message a failed call answers with; logged here when the catalogue says so. */
  failure(err: unknown): CallFailure {
    const kind = classify(err);
    if (kind.logLevel !== 'silent') this.logger[kind.logLevel]({ err, code: kind.code }, 'ShouldRateLimit failed');
    return { code: kind.grpcStatus, details: publicMessage(kind, err) };
  }

  /** grpc.health.v1 Check: the status number of a known service, or NOT_FOUND. */
  check(service: string): { readonly status: number } | CallFailure {
    const status = this.health.status(service);
    if (status === undefined) return { code: GrpcStatus.NOT_FOUND, details: `unknown service "${service}"` };
    return { status: ServingStatusNumber[status] };
  }

  /**
   * grpc.health.v1 Watch: sends the current status now and every change after; an unknown service
   * keeps its stream open (the protocol lets it appear later). After shutdown has begun the stream
   * gets NOT_SERVING and ends. Returns the function the transport calls when the client goes away.
   */
  watch(service: string, sink: WatchSink): () => void {
    if (this.stopping) {
      sink.write(ServingStatusNumber.NOT_SERVING);
      sink.end();
      return () => undefined;
    }
    const status = this.health.status(service);
    sink.write(status === undefined ? ServingStatusNumber.SERVICE_UNKNOWN : ServingStatusNumber[status]);
    const unsubscribe = status === undefined ? () => undefined : this.health.subscribe((next: ServingStatus) => sink.write(ServingStatusNumber[next]));
    this.watches.set(sink, unsubscribe);
    return () => this.forget(sink);
  }

  /** Shutdown has begun: health NOT_SERVING, every Watch stream ended; new calls are refused. Idempotent. */
  shutdown(): void {
    if (this.stopping) return;
    this.stopping = true;
    this.health.beginShutdown();
    for (const sink of [...this.watches.keys()]) {
      this.forget(sink);
      sink.end();
    }
  }

  private forget(sink: WatchSink): void {
    this.watches.get(sink)?.();
    this.watches.delete(sink);
  }
}
