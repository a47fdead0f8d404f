import type { SharingKind } from './sharing-kind';

/**
 * The replica-coordination port: what the processes sharing one store tell each other, beside the
 * counters (the Store port, ./store.ts). Two things: small documents each process publishes under
 * its own name (the live view, src/top), and each replica's demand on a shared budget (the sharing
 * engine's, src/sharing: quota streams, leases). The Redis adapter keeps them in Redis with Redis's
 * clock; the memory adapter in this process. Neither is on the decision path of an RLS call.
 *
 * Contract (every adapter, checked by test/contract/replica-exchange-contract.ts):
 * - an entry lives `ttlMs` after it was last written, by the adapter's clock, then is gone;
 * - a budget's demand holds one entry per replica (at most MAX_REPLICAS_PER_BUDGET);
 * - a call that cannot be answered rejects with StoreUnavailableError within its deadline.
 */
export interface ReplicaExchange extends SharedDocuments {
  /**
   * Sets this replica's demand on one budget (`publish`, living `ttlMs` unless published again) or
   * withdraws it (`withdraw`), and returns every live entry of the budget, this replica's included.
   */
  exchangeDemand(exchange: DemandExchange): Promise<ReplicaDemand[]>;
}

/**
 * Small documents that every process sharing a store publishes under its own name and reads from
 * all the others: how replicas exchange their live views (src/top). Each lives `ttlMs` after it was
 * last put, so a process that stops leaves no trace.
 */
export interface SharedDocuments {
  /** Writes (or replaces) the document `name` of `kind`; it expires `ttlMs` later. */
  put(kind: string, name: string, document: string, ttlMs: number): Promise<void>;
  /** Every live document of `kind` (at most `max`), in no particular order. */
  all(kind: string, max: number): Promise<string[]>;
}

/** One replica's demand on one budget, as replicas publish it to each other. */
export interface ReplicaDemand {
  /** The replica (unique among every process sharing the store). */
  readonly member: string;
  /** Requests per second its proxies ask for (allowed + denied); Infinity while some are not measured yet. */
  readonly demand: number;
  /** Requests it charged to the budget's counter over the last two windows (by the time they were written). */
  readonly admitted: number;
  /** Proxies (subscriptions) it holds on the budget. */
  readonly proxies: number;
  /**
   * Optional: a number the replica changes at every publish (regions: how the others tell a live
   * member from one whose entry is only remembered).
   */
  readonly beat?: number;
}

export interface DemandExchange {
  /** The budget: its counter's key (./keys.ts), free of `{` and `}`. */
  readonly key: string;
  /** The counter's hash tag (CounterRequest.tag), when it has one: the Redis adapter keeps the demand in its slot. */
  readonly tag?: string;
  /** Whose demand: quota streams' (`rlqs`, the default), leases' (`lease`) or regions' (`region`); each kind is a budget of its own. */
  readonly kind?: DemandKind;
  /** This replica's entry; absent with `withdraw`. */
  readonly publish?: ReplicaDemand;
  /** Removes the entry named `withdraw` instead. */
  readonly withdraw?: string;
  /** How long the published entry lives without being published again, ms. */
  readonly ttlMs: number;
  /** Replicas the budget records at most (1..MAX_REPLICAS_PER_BUDGET); default MAX_REPLICAS_PER_BUDGET. */
  readonly maxMembers?: number;
}

export type DemandKind = SharingKind;

/**
 * Replicas kept per budget; a new one beyond it is not recorded (the live entries returned do not
 * hold it: the others divide without it).
 */
export const MAX_REPLICAS_PER_BUDGET = 256;

/** The replicas `exchange` may record: its maxMembers within 1..MAX_REPLICAS_PER_BUDGET. */
export function demandMembersCap(exchange: DemandExchange): number {
  const max = exchange.maxMembers;
  return max === undefined || !(max >= 1) ? MAX_REPLICAS_PER_BUDGET : Math.min(MAX_REPLICAS_PER_BUDGET, Math.floor(max));
}
