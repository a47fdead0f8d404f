/**
 * The decision's own failures. Edges map them through the error catalogue (src/errors.ts);
 * StoreUnavailableError, the store's failure, is declared with the Store port (./store.ts).
 */

/** The request is malformed (empty domain, no descriptors, empty key, bad override, ...). */
export class InvalidRequestError extends Error {
  /** Its entry in the error catalogue (src/errors.ts). */
  readonly code = 'invalid_request';
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
  /** Its entry in the error catalogue (src/errors.ts). */
  readonly code = 'not_ready';
  constructor(message: string) {
    super(message);
    this.name = 'NotReadyError';
  }
}

/**
 * A peer asked for more than the service keeps for it (quota streams over their byte budget, and
 * the like). Mapped to RESOURCE_EXHAUSTED: the peer may try again later or elsewhere.
 */
export class OverCapacityError extends Error {
  /** Its entry in the error catalogue (src/errors.ts). */
  readonly code = 'over_capacity';
  constructor(message: string) {
    super(message);
    this.name = 'OverCapacityError';
  }
}
