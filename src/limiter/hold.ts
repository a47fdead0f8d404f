/**
 * The words of a reservation call (./reservations.ts), apart from its arithmetic: the domain types
 * (./types.ts) and the Store port (./store.ts) name them, and the arithmetic needs the port, so they
 * live in a file that imports nothing.
 */

/** What a reservation call does: hold an estimate, charge the real cost and free the hold, or free it without a charge. */
export type HoldKind = 'reserve' | 'commit' | 'release';

/** How a reservation call went, as the store reports it (metrics, tests). */
export type HoldOutcome =
  /** reserve: admitted, the estimate is held. */
  | 'held'
  /** reserve: a counter or the in-flight limit has no room; nothing held. */
  | 'denied'
  /** reserve: the descriptor's book holds as many entries or bytes as it may; nothing held. */
  | 'full'
  /** reserve of an ID the book holds already: refused, nothing more held. */
  | 'reused'
  /** commit of a held ID: charged, the hold freed. */
  | 'committed'
  /** commit of an ID the book does not hold (never held, lapsed, released, or committed already): charged all the same. */
  | 'unknown'
  /** release: the hold freed (or there was none), nothing charged. */
  | 'released';
