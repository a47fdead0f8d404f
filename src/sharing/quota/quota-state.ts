import type { BucketMatch } from '../../limiter/bucket-match';
import type { RateLimitConfig } from '../../limiter/rules';
import type { CounterRequest } from '../../limiter/store';
import type { Entry } from '../../limiter/types';
import type { WindowCount } from '../demand-meter';
import type { SharedPart } from '../shared-part';
import type { QuotaSubscriber } from './quota-api';
import type { QuotaStrategy } from './quota-share';

/**
 * The records of the quota budgets: a stream (Subscriber), its subscriptions to buckets, what the
 * streams reporting one bucket share (SharedBucket), and a rule counter's budget. Kept apart from
 * the code that changes them (./subscriptions.ts, ./budgets.ts) so that each names the other's.
 */

/** A report count beyond this is taken as this (RLS caps hits_addend the same way). */
export const MAX_REPORTED_COUNT = 0xffff_ffff;

export interface Subscriber extends QuotaSubscriber {
  readonly subs: Map<string, Subscription>;
  lastFullAtMs: number | undefined;
  intervalMs: number | undefined;
  nextBucket: number;
  closed: boolean;
}

/** One stream's subscription to one bucket. */
export interface Subscription {
  readonly subscriber: Subscriber;
  /** The stream and the bucket (two buckets may share a counter). */
  readonly id: string;
  readonly shared: SharedBucket;
  readonly bytes: number;
  budget: Budget | undefined;
  /** The match it was placed by: while its bucket's match stays this one, it stays where it is. */
  placedBy: BucketMatch | undefined;
  lastReportAtMs: number | undefined;
  /** Requests reported since the rate was last measured. */
  pendingCount: number;
  /** Allowed + denied per second; Infinity until measured. */
  demand: number;
  /** What it reported admitting over about the budget's last two windows (for the views). */
  admitted: WindowCount | undefined;
  idleReports: number;
  share: number;
  /** Whether a division of its budget has given it a share since it joined. */
  divided: boolean;
  /** The strategy last sent, undefined before the first. */
  sent: QuotaStrategy | undefined;
  /** What `sent` was worked out from: while they stand, it is the strategy still (see QuotaBudgets.current). */
  sentFrom: { readonly budget: Budget | undefined; readonly shadow: boolean; readonly share: number; readonly windowMs: number } | undefined;
}

/** What every stream of this process reporting the same bucket shares: its match under the config in force. */
export interface SharedBucket {
  readonly key: string;
  readonly domain: string;
  readonly pairs: readonly Entry[];
  refs: number;
  config: RateLimitConfig | undefined;
  match: BucketMatch | undefined;
}

/** One rule counter's budget and the local subscriptions dividing it with the other replicas. */
export interface Budget {
  readonly key: string;
  readonly bytes: number;
  domain: string;
  statKey: string;
  /** Every counter of the rule (hits 0), the divided one first. */
  counters: readonly CounterRequest[];
  shadow: boolean;
  readonly members: Set<Subscription>;
  /** This replica's part of the budget among the replicas (kind `rlqs`): the others, as the exchange last said, and when. */
  readonly part: SharedPart;
  /** Requests reported since the last sync (allowed, denied), not yet told to the observer. */
  reportedAllowed: number;
  reportedDenied: number;
  /** Hits reported and not yet written, per counter. */
  pending: number[];
  dirty: boolean;
  used: number;
  /** What this replica charged to the counter over the last two windows, by the time it was written. */
  readonly charged: WindowCount;
  /** Requests per second of the last division: this replica's part, then each of the others. */
  replicaShares: number[];
  /** A later limit of the rule (a day, a month) denied at the last sync: nothing is assigned until it admits again. */
  blocked: boolean;
  /** Whether it has been synced once (a new budget's first answer waits for it). */
  synced: boolean;
  syncedAtMs: number;
  syncing: Promise<void> | undefined;
  /** The sync period (Budgets.period) of its last division: one division per period. */
  dividedIn: number;
  /** Reports waiting for the next division (a proxy that joined): resolved by it. */
  waiting: (() => void)[];
}

/** A bucket's identity: each string prefixed with its length, so that no two buckets share one. */
export function contentKey(domain: string, pairs: readonly Entry[]): string {
  let key = `${domain.length}:${domain}`;
  for (const e of pairs) key += `${e.key.length}:${e.key}${e.value.length}:${e.value}`;
  return key;
}

/** A reported count as counted: a whole number from 0 to MAX_REPORTED_COUNT. */
export function count(n: number): number {
  return Number.isFinite(n) && n > 0 ? Math.min(Math.floor(n), MAX_REPORTED_COUNT) : 0;
}

/** Hits that counter `c` could have admitted over `intervalMs` (its capacity and its rate over the span). */
export function chargeCap(c: Pick<CounterRequest, 'limit' | 'windowMs' | 'burst'>, intervalMs: number): number {
  return Math.ceil(Math.max(c.limit, c.burst ?? 0) + (c.limit * Math.max(0, intervalMs)) / c.windowMs);
}

/** Adds hits to a budget counter's pending charge, kept up to twice what the counter could take at once (a store that fails). */
export function addPending(b: Budget, j: number, hits: number): void {
  b.pending[j] = Math.min(b.pending[j] + hits, 2 * chargeCap(b.counters[j] ?? b.counters[0], 0));
}

/** Estimated bytes held by every stream, subscription and budget of the process (and output held for peers), against QuotaLimits.maxBytes. */
export interface ByteCount {
  used: number;
}
