/**
 * The small error catalogue, classified once at the gRPC edge:
 * InvalidRequestError -> INVALID_ARGUMENT, StoreUnavailableError -> UNAVAILABLE,
 * anything else -> INTERNAL with a log line.
 */

export { InvalidRequestError, NotReadyError } from './limiter/errors';
export { StoreUnavailableError } from './limiter/store';
