import { matchBucket, type BucketMatch } from '../../limiter/bucket-match';
import { InvalidRequestError, OverCapacityError } from '../../limiter/errors';
import type { RateLimitConfig } from '../../limiter/rules';
import type { Entry } from '../../limiter/types';
import type { QuotaLimits, QuotaSubscriber, QuotaUsage } from './quota-api';
import { reportRate, TTL_INTERVALS } from './quota-share';
import { addPending, chargeCap, count, MAX_REPORTED_COUNT, type ByteCount, type SharedBucket, type Subscriber, type Subscription } from './quota-state';

/**
 * The quota streams of this process and their subscriptions to buckets: what each proxy reported,
 * its demand (allowed + denied per second, timed by receive times; a subscription silent for two of
 * its intervals counts for what it reported since, one silent for TTL_INTERVALS intervals is
 * dropped), and each bucket's match under the config in force. Every stream and subscription
 * counts against the byte budget.
 */

/** A subscription silent this many of its report intervals counts for what it reported since. */
export const SILENT_INTERVALS = 2;
/** Estimated bytes of one stream's state here, in the service and in its transport, beyond its subscriptions. */
export const STREAM_BYTES = 4_096;
/** Estimated bytes of one subscription beyond its bucket id (objects, map entries, its keys). */
export const SUBSCRIPTION_BYTES = 1_536;
/** Reports closer than this to the bucket's previous one are added to the next (too short a span to rate). */
const MIN_RATE_SPAN_MS = 50;

export interface SubscriptionsOptions {
  readonly limits: QuotaLimits;
  readonly replicaId: string;
  readonly config: () => RateLimitConfig | undefined;
  readonly calendarOffsetMs: number;
  readonly bytes: ByteCount;
  /** A subscription leaves its budget (unsubscribed). */
  readonly leave: (sub: Subscription) => void;
}

export class Subscriptions {
  readonly subscribers = new Set<Subscriber>();
  private readonly buckets = new Map<string, SharedBucket>();
  private readonly limits: QuotaLimits;
  private readonly replicaId: string;
  private readonly config: () => RateLimitConfig | undefined;
  private readonly calendarOffsetMs: number;
  private readonly bytes: ByteCount;
  private readonly leave: (sub: Subscription) => void;
  private nextSubscriber = 0;

  constructor(options: SubscriptionsOptions) {
    this.limits = options.limits;
    this.replicaId = options.replicaId;
    this.config = options.config;
    this.calendarOffsetMs = options.calendarOffsetMs;
    this.bytes = options.bytes;
    this.leave = options.leave;
  }

  /** Subscriptions held, on every stream. */
  get count(): number {
    let n = 0;
    for (const s of this.subscribers) n += s.subs.size;
    return n;
  }

  /** A new stream; OverCapacityError when its state would pass the byte budget. */
  open(): QuotaSubscriber {
    if (this.bytes.used + STREAM_BYTES > this.limits.maxBytes) {
      throw new OverCapacityError(`quota streams hold their memory budget (${this.limits.maxBytes} bytes); try another replica or later`);
    }
    this.bytes.used += STREAM_BYTES;
    const s: Subscriber = {
      id: `${this.replicaId}.${this.nextSubscriber++}`,
      subs: new Map(),
      lastFullAtMs: undefined,
      intervalMs: undefined,
      nextBucket: 0,
      closed: false,
    };
    this.subscribers.add(s);
    return s;
  }

  /** The stream is gone: its subscriptions leave their budgets. */
  close(s: Subscriber): void {
    if (s.closed) return;
    s.closed = true;
    for (const sub of [...s.subs.values()]) this.unsubscribe(sub);
    this.subscribers.delete(s);
    this.bytes.used -= STREAM_BYTES;
  }

  /** The bucket already shared by a stream of this process, if any. */
  bucket(key: string): SharedBucket | undefined {
    return this.buckets.get(key);
  }

  /** `match`: the bucket's match under the config in force, when known. */
  subscribe(s: Subscriber, key: string, domain: string, pairs: readonly Entry[], match?: BucketMatch): Subscription {
    let shared = this.buckets.get(key);
    if (shared === undefined) {
      shared = { key, domain, pairs, refs: 0, config: match === undefined ? undefined : this.config(), match };
      this.buckets.set(key, shared);
    }
    shared.refs++;
    let idBytes = 0;
    for (const e of pairs) idBytes += Buffer.byteLength(e.key) + Buffer.byteLength(e.value);
    const sub: Subscription = {
      subscriber: s,
      id: `${s.id}.${s.nextBucket++}`,
      shared,
      bytes: SUBSCRIPTION_BYTES + 3 * idBytes,
      budget: undefined,
      placedBy: undefined,
      lastReportAtMs: undefined,
      pendingCount: 0,
      demand: Infinity,
      admitted: undefined,
      idleReports: 0,
      share: 0,
      divided: false,
      sent: undefined,
      sentFrom: undefined,
    };
    this.bytes.used += sub.bytes;
    s.subs.set(key, sub);
    return sub;
  }

  unsubscribe(sub: Subscription): void {
    const s = sub.subscriber;
    if (s.subs.get(sub.shared.key) !== sub) return;
    s.subs.delete(sub.shared.key);
    this.bytes.used -= sub.bytes;
    if (--sub.shared.refs === 0) this.buckets.delete(sub.shared.key);
    this.leave(sub);
  }

  /** Subscriptions silent for TTL_INTERVALS of their intervals (and a sync) are dropped: their assignment has expired. */
  dropSilent(now: number): void {
    for (const s of this.subscribers) {
      const limit = TTL_INTERVALS * this.expectedIntervalMs(s) + this.limits.syncIntervalMs;
      for (const sub of [...s.subs.values()]) {
        if (sub.lastReportAtMs !== undefined && now - sub.lastReportAtMs > limit) this.unsubscribe(sub);
      }
    }
  }

  /** The match of a bucket under the config in force (matched again after a reload). */
  matchOf(shared: SharedBucket): BucketMatch | undefined {
    const config = this.config();
    if (config !== shared.config) {
      shared.config = config;
      shared.match = config === undefined ? undefined : matchBucket(config, shared.domain, shared.pairs, this.calendarOffsetMs);
    }
    return shared.match;
  }

  /** The id's byte size; InvalidRequestError naming the usage when over a cap. */
  checkBucket(usage: QuotaUsage, i: number): number {
    const { maxBucketPairs, maxBucketIdBytes } = this.limits;
    if (usage.bucket.length > maxBucketPairs) throw new InvalidRequestError(`bucket_quota_usages[${i}].bucket_id: more than ${maxBucketPairs} pairs`);
    let bytes = 0;
    for (const e of usage.bucket) bytes += Buffer.byteLength(e.key) + Buffer.byteLength(e.value);
    if (bytes > maxBucketIdBytes) throw new InvalidRequestError(`bucket_quota_usages[${i}].bucket_id: over ${maxBucketIdBytes} bytes`);
    return bytes;
  }

  /** Usage into the subscription's demand and its budget's pending charges and reported counts. */
  record(sub: Subscription, usage: QuotaUsage, now: number, full: boolean): void {
    const allowed = count(usage.allowed);
    const denied = count(usage.denied);
    const span = sub.lastReportAtMs === undefined ? undefined : now - sub.lastReportAtMs;
    const budget = sub.budget;
    if (budget !== undefined) {
      // No more than each limit could have admitted since the previous report: a report of 2^53
      // requests charges a window's worth, and a counter in debt drains within two windows.
      const intervalMs = span ?? usage.timeElapsedSeconds * 1000;
      const first = Math.min(allowed, chargeCap(budget.counters[0], intervalMs));
      sub.admitted!.add(first, now);
      budget.counters.forEach((c, j) => {
        const charge = j === 0 ? first : Math.min(allowed, chargeCap(c, intervalMs));
        addPending(budget, j, charge);
      });
      if (allowed > 0) budget.dirty = true;
      // Told to the observer at the budget's next sync: one call per budget and sync, not per bucket and report.
      budget.reportedAllowed += allowed;
      budget.reportedDenied += denied;
    }
    sub.pendingCount = Math.min(sub.pendingCount + allowed + denied, 2 * MAX_REPORTED_COUNT);
    if (span === undefined || span >= MIN_RATE_SPAN_MS) {
      const demand = reportRate(sub.pendingCount, span, usage.timeElapsedSeconds);
      if (demand !== undefined) {
        if (demand !== sub.demand && budget !== undefined) budget.dirty = true;
        sub.demand = demand;
      }
      sub.pendingCount = 0;
      sub.lastReportAtMs = now;
    }
    if (full) sub.idleReports = allowed + denied === 0 ? sub.idleReports + 1 : 0;
  }

  /** Demand as division counts it: what was measured, or for a subscription silent two intervals, what it reported since. */
  demandOf(sub: Subscription, now: number): number {
    if (sub.lastReportAtMs === undefined) return sub.demand;
    const silence = now - sub.lastReportAtMs;
    if (silence <= SILENT_INTERVALS * this.expectedIntervalMs(sub.subscriber)) return sub.demand;
    return (sub.pendingCount * 1000) / silence;
  }

  expectedIntervalMs(s: Subscriber): number {
    return s.intervalMs ?? this.limits.reportIntervalMs;
  }
}
