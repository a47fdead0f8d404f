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

export { StoreUnavailableError } from './store/store';
