/**
 * The small error catalogue, classified once at the gRPC edge:
 * InvalidRequestError -> INVALID_ARGUMENT, StoreUnavailableError (src/store/store.ts) -> UNAVAILABLE,
 * anything else -> INTERNAL with a log line.
 */

/** The request is malformed (empty domain, no descriptors, empty key, bad override, ...). */
export class InvalidRequestError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'InvalidRequestError';
  }
}

/**
 * The service cannot decide yet (no configuration loaded). Mapped to UNAVAILABLE like a store
 * failure, so Envoy's failure_mode_deny decides, as it would for any server not ready to serve.
 */
export class NotReadyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NotReadyError';
  }
}

export { StoreUnavailableError } from './store/store';
