import { InvalidRequestError, NotReadyError, OverCapacityError } from './limiter/errors';
import { StoreUnavailableError } from './limiter/store';

/**
 * The error catalogue: every way a ShouldRateLimit call can fail, and what each one answers on
 * every edge. `classify` is the only place an error is recognised; the gRPC transports, HTTP /json
 * and the metrics all ask it, so a new failure is its class (with its `code`) and one entry here.
 *
 * Statuses follow the service's contract: a bad request is INVALID_ARGUMENT; a service that cannot
 * decide (store down, no config yet) is UNAVAILABLE, so that Envoy's failure_mode_deny decides;
 * anything else is INTERNAL and logged once. Never `overall_code: UNKNOWN`.
 */

/** gRPC status codes (numerically equal to grpc-js's `status`). */
export const GrpcStatus = Object.freeze({
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  RESOURCE_EXHAUSTED: 8,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
});

/** The request bytes are not a valid protobuf encoding of the message (the wire decoders throw it). */
export class MalformedMessageError extends Error {
  readonly code = 'malformed_message';
  constructor(message: string) {
    super(message);
    this.name = 'MalformedMessageError';
  }
}

/** Stable names of the failures, for logs and tests; never renamed. */
export type ErrorCode = 'invalid_request' | 'malformed_message' | 'not_ready' | 'over_capacity' | 'store_unavailable' | 'internal';

/**
 * Which failure counter a call error feeds (`ratelimit_service_should_rate_limit_error{err_type}`):
 * `store` is `<store>_error` (`redis_error`, as the reference server), `service` is `service_error`.
 */
export type ErrorMetric = 'store' | 'service';

/** What one kind of failure answers. */
export interface ErrorKind {
  readonly code: ErrorCode;
  readonly grpcStatus: number;
  readonly httpStatus: number;
  readonly metric: ErrorMetric;
  /** Logged at this level by the edge that answers it; `silent` for failures that are the client's or counted elsewhere. */
  readonly logLevel: 'silent' | 'warn' | 'error';
  /** The message sent to the client: the error's own (it names the bad field), or this fixed text. */
  readonly publicMessage?: string;
  /** The class of the errors of this kind (classify); none for `internal`, the kind of everything else. */
  readonly type?: abstract new (...args: never[]) => Error;
}

/** Every failure, by code. */
export const ERROR_CATALOGUE: Readonly<Record<ErrorCode, ErrorKind>> = Object.freeze({
  invalid_request: {
    code: 'invalid_request',
    type: InvalidRequestError,
    grpcStatus: GrpcStatus.INVALID_ARGUMENT,
    httpStatus: 400,
    metric: 'service',
    logLevel: 'silent',
  },
  malformed_message: {
    code: 'malformed_message',
    type: MalformedMessageError,
    grpcStatus: GrpcStatus.INTERNAL,
    httpStatus: 400,
    metric: 'service',
    logLevel: 'silent',
    publicMessage: 'cannot decode RateLimitRequest',
  },
  over_capacity: {
    code: 'over_capacity',
    type: OverCapacityError,
    grpcStatus: GrpcStatus.RESOURCE_EXHAUSTED,
    httpStatus: 429,
    metric: 'service',
    logLevel: 'silent',
  },
  not_ready: { code: 'not_ready', type: NotReadyError, grpcStatus: GrpcStatus.UNAVAILABLE, httpStatus: 503, metric: 'service', logLevel: 'silent' },
  store_unavailable: {
    code: 'store_unavailable',
    type: StoreUnavailableError,
    grpcStatus: GrpcStatus.UNAVAILABLE,
    httpStatus: 503,
    metric: 'store',
    logLevel: 'silent',
  },
  internal: { code: 'internal', grpcStatus: GrpcStatus.INTERNAL, httpStatus: 500, metric: 'service', logLevel: 'error', publicMessage: 'internal error' },
});

/** The catalogue's kinds that have a class (their classes are unrelated: the order does not matter). */
const CLASSIFIED: readonly ErrorKind[] = Object.values(ERROR_CATALOGUE).filter((kind) => kind.type !== undefined);

/** The catalogue entry of any thrown value, by its class; `internal` for everything not recognised. */
export function classify(err: unknown): ErrorKind {
  for (let i = 0; i < CLASSIFIED.length; i++) if (err instanceof CLASSIFIED[i].type!) return CLASSIFIED[i];
  return ERROR_CATALOGUE.internal;
}

/** The text a client gets for `err` of kind `kind`: never an internal error's own message. */
export function publicMessage(kind: ErrorKind, err: unknown): string {
  return kind.publicMessage ?? (err instanceof Error ? err.message : String(err));
}
