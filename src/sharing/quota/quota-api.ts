import type { RateLimitConfig } from '../../limiter/rules';
import type { Store } from '../../limiter/store';
import type { ReplicaExchange } from '../../limiter/replica-exchange';
import type { Clock, Entry } from '../../limiter/types';
import type { QuotaStrategy } from './quota-share';

/**
 * What the quota budgets (./quota-budgets.ts) take and give: their caps, a report's usage, the
 * actions sent back, and the views of the debug port, the live view and the metrics.
 */

/** Caps and timing of the quota budgets (settings RLQS_*). */
export interface QuotaLimits {
  /** Buckets one stream may report. */
  readonly maxBucketsPerStream: number;
  /** Pairs in one bucket id. */
  readonly maxBucketPairs: number;
  /** Bytes of one bucket id's keys and values together. */
  readonly maxBucketIdBytes: number;
  /** The report interval assumed until a stream's own is observed (Envoy's filter reports every 5 s). */
  readonly reportIntervalMs: number;
  /** Consecutive full reports without a request after which a bucket is abandoned. */
  readonly abandonAfterIdleReports: number;
  /** Estimated bytes of every stream and subscription of this process together; a stream that would pass it is refused. */
  readonly maxBytes: number;
  /** How often charges are written, demand exchanged and budgets divided, ms. */
  readonly syncIntervalMs: number;
  /** Subscriptions of this replica one budget holds (proxies reporting buckets of one rule counter); a report adding one more is refused. */
  readonly maxProxiesPerBudget: number;
}

/** The caps of the quota streams themselves (the service's), beside the budgets'. */
export interface RlqsLimits extends QuotaLimits {
  /** Streams open at once; one more is refused with RESOURCE_EXHAUSTED. */
  readonly maxStreams: number;
  /** Streams open at once on one connection; one more is refused with RESOURCE_EXHAUSTED. */
  readonly maxStreamsPerConnection: number;
  /** A stream that sends no report this long after it opened is ended, ms. */
  readonly firstReportTimeoutMs: number;
  /** A stream that sends nothing this long (or three of its observed report intervals, at most ten times this) is ended (Envoy reports every interval, idle or not), ms. */
  readonly idleTimeoutMs: number;
  /** Reports one stream may send per second (and at once); past it its next report waits (flow control). */
  readonly maxReportsPerSecond: number;
  /** Reports every stream of the process together may send per second (and at once); past it the next one waits. */
  readonly maxProcessReportsPerSecond: number;
}

/** One bucket's usage in a report, as the codec decodes it. */
export interface QuotaUsage {
  /** The bucket id's pairs, sorted by key. */
  readonly bucket: readonly Entry[];
  /** time_elapsed, whole seconds (0 for a new bucket's first report). */
  readonly timeElapsedSeconds: number;
  readonly allowed: number;
  readonly denied: number;
}

/** One action for one bucket: an assignment with its TTL, or abandon. */
export type QuotaAction =
  | { readonly bucket: readonly Entry[]; readonly abandon?: false; readonly strategy: QuotaStrategy; readonly ttlSeconds: number }
  | { readonly bucket: readonly Entry[]; readonly abandon: true };

/** A stream as the budgets know it (opaque to the service). */
export interface QuotaSubscriber {
  /** Unique among every replica: the replica and a sequence number. */
  readonly id: string;
}

export interface QuotaObserver {
  /** Reported usage of a rule's buckets, as reported (before the charge cap): summed per budget, told at its next sync. */
  onReport?(domain: string, statKey: string, allowed: number, denied: number): void;
  /** A store or exchange call that failed; the last shares stay in force. */
  onStoreError?(err: unknown): void;
}

export interface QuotaBudgetsOptions {
  /** The counters (charges and the counter's usage). */
  readonly store: Store;
  /** Other replicas' demand; absent: this process divides alone. */
  readonly exchange?: ReplicaExchange;
  readonly config: () => RateLimitConfig | undefined;
  readonly limits: QuotaLimits;
  readonly clock: Clock;
  /** This process's name in the exchange (unique among the replicas sharing it). */
  readonly replicaId: string;
  /** SHADOW_MODE: every assignment ALLOW_ALL, usage still counted. */
  readonly shadowMode?: boolean;
  /** The calendar of `calendar: true` limits, ms ahead of UTC; default 0. */
  readonly calendarOffsetMs?: number;
  /** Assignments changed outside a report's answer, for one stream. */
  readonly onPush: (subscriber: QuotaSubscriber, actions: readonly QuotaAction[]) => void;
  readonly observer?: QuotaObserver;
}

/** Totals of one rule over its budgets, for the metrics (O(budgets) to compute). */
export interface QuotaRuleTotals {
  readonly domain: string;
  readonly statKey: string;
  /** Proxies on every replica. */
  readonly proxies: number;
  /** Requests per second asked for, known demands of every replica. */
  readonly demand: number;
  /** Requests per second assigned to this process's proxies. */
  readonly assigned: number;
  /** Requests per window (averaged over two) the proxies of every replica admitted above the limit. */
  readonly overshoot: number;
}

/** A read-only view of one budget (debug port, live view). */
export interface BudgetView {
  readonly domain: string;
  readonly statKey: string;
  /** The counter the budget divides (the one RLS calls on the same descriptor use). */
  readonly counter: string;
  readonly limit: number;
  readonly windowMs: number;
  readonly shadow: boolean;
  /** The counter's usage of its window at the last sync (limit - remaining). */
  readonly used: number;
  /** This replica's proxies (at most the view's cap) and one line per other replica. */
  readonly proxies: readonly ProxyShareView[];
  /** This replica's proxies on the budget that the view leaves out (past its cap). */
  readonly unlisted: number;
  /** Requests per window the proxies admitted above the limit (0 when within). */
  readonly overshoot: number;
}

export interface ProxyShareView {
  /** A local subscription, or another replica. */
  readonly member: string;
  readonly demand: number | null;
  /** Requests per second admitted over the last two windows. */
  readonly allowed: number;
  /** Requests per second assigned. */
  readonly share: number;
  readonly local: boolean;
  /** Local subscriptions: the stream, the bucket, the assignment last sent and how long ago it last reported. */
  readonly stream?: string;
  readonly bucket?: readonly Entry[];
  readonly assignment?: QuotaStrategy | null;
  readonly reportAgeMs?: number | null;
  /** Other replicas: how many proxies they hold. */
  readonly proxies?: number;
}
