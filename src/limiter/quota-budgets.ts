import { matchBucket, type BucketMatch } from './bucket-match';
import { InvalidRequestError, NotReadyError, OverCapacityError } from './errors';
import {
  ALLOW_ALL,
  distinguishable,
  divideCapacity,
  proxiesCapacity,
  reportRate,
  sameStrategy,
  strategyForShare,
  TTL_INTERVALS,
  ttlSeconds,
  type QuotaStrategy,
} from './quota-share';
import type { DemandExchange, ReplicaDemand, ReplicaExchange } from './replica-exchange';
import type { RateLimitConfig } from './rules';
import type { CounterDecision, CounterRequest, Store } from './store';
import type { Clock, Entry } from './types';

/**
 * Quota budgets (RLQS): one rule's limit divided among the proxies that report a bucket of it, on
 * every replica. The stream service (src/service/rlqs-service.ts) hands in what a proxy reports and
 * sends out the assignments; everything else is here, on an injected clock:
 *
 * - a bucket's pairs match a rule as a descriptor would (./bucket-match.ts); no rule, or an unlimited
 *   one: ALLOW_ALL, nothing counted;
 * - a report's allowed requests are charged to every counter of the rule (the ones RLS calls on that
 *   descriptor use), capped at what the limit could have admitted in the report's interval; the
 *   charges are written in the background, every `syncIntervalMs`, one store call per budget;
 * - each subscription's demand (allowed + denied per second, timed by receive times) is measured
 *   per report; a subscription silent for two of its intervals counts for what it reported since
 *   (nothing), one silent for TTL_INTERVALS intervals is dropped: its assignment has expired;
 * - division is in two steps: replicas publish their demand on a budget through the ReplicaExchange
 *   port (one entry each, not one per proxy: a peer cannot fill the shared store), the limit is
 *   divided among replicas by demand, then each replica divides its part among its own proxies;
 * - division is coalesced per budget: a budget is divided once per sync (every `syncIntervalMs`),
 *   after its charges are written and its demand exchanged, whatever the number of reports touching
 *   it meanwhile; the assignments that division changed are pushed then, one message per stream for
 *   every budget synced together;
 * - a report is answered at once from the shares in force; a bucket new to its budget (a new budget,
 *   or a proxy joining one) is answered after the budget's next division, at most one sync later;
 * - a budget holds at most `maxProxiesPerBudget` subscriptions of this replica: a report that would
 *   add one more is refused (OverCapacityError), so that one division and its pushes stay bounded;
 * - every subscription and stream counts against `maxBytes` (estimated), so the state peers make
 *   this process keep is bounded whatever they open.
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

/** A report count beyond this is taken as this (RLS caps hits_addend the same way). */
export const MAX_REPORTED_COUNT = 0xffff_ffff;
/** A subscription silent this many of its report intervals counts for what it reported since. */
export const SILENT_INTERVALS = 2;
/** Budgets synced per second at most (each one store call and one exchange); more are refreshed less often. */
export const MAX_SYNCS_PER_SECOND = 2_000;
/** An unchanged budget is exchanged again after this many sync intervals (others' demand may have moved). */
const REFRESH_INTERVALS = 4;
/** Silent subscriptions are looked for this often, ms. */
const SWEEP_EVERY_MS = 1_000;
/** Reports closer than this to the bucket's previous one are added to the next (too short a span to rate). */
const MIN_RATE_SPAN_MS = 50;
/** Estimated bytes of one stream's state here, in the service and in its transport, beyond its subscriptions. */
export const STREAM_BYTES = 4_096;
/** Estimated bytes of one subscription beyond its bucket id (objects, map entries, its keys). */
const SUBSCRIPTION_BYTES = 1_536;
/** Slices of a window the admitted count is kept in. */
const ADMITTED_SLICES = 8;
const COUNT_ALWAYS = Object.freeze({ countDenied: true });

/** Requests counted over about the last window, in slices (exact to a slice). */
class WindowCount {
  private readonly slices = new Float64Array(ADMITTED_SLICES);
  private last = -Infinity;

  constructor(private readonly sliceMs: number) {}

  add(n: number, nowMs: number): void {
    this.advance(nowMs);
    this.slices[this.last % ADMITTED_SLICES] += n;
  }

  sum(nowMs: number): number {
    this.advance(nowMs);
    let s = 0;
    for (let i = 0; i < ADMITTED_SLICES; i++) s += this.slices[i];
    return s;
  }

  private advance(nowMs: number): void {
    const slice = Math.floor(nowMs / this.sliceMs);
    if (slice <= this.last) return;
    if (slice - this.last >= ADMITTED_SLICES) this.slices.fill(0);
    else for (let s = this.last + 1; s <= slice; s++) this.slices[s % ADMITTED_SLICES] = 0;
    this.last = slice;
  }
}

interface Subscriber extends QuotaSubscriber {
  readonly subs: Map<string, Subscription>;
  lastFullAtMs: number | undefined;
  intervalMs: number | undefined;
  nextBucket: number;
  closed: boolean;
}

/** One stream's subscription to one bucket. */
interface Subscription {
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
  /** What `sent` was worked out from: while they stand, it is the strategy still (see current). */
  sentFrom: { readonly budget: Budget | undefined; readonly shadow: boolean; readonly share: number; readonly windowMs: number } | undefined;
}

/** What every stream of this process reporting the same bucket shares: its match under the config in force. */
interface SharedBucket {
  readonly key: string;
  readonly domain: string;
  readonly pairs: readonly Entry[];
  refs: number;
  config: RateLimitConfig | undefined;
  match: BucketMatch | undefined;
}

/** One rule counter's budget and the local subscriptions dividing it with the other replicas. */
interface Budget {
  readonly key: string;
  readonly bytes: number;
  domain: string;
  statKey: string;
  /** Every counter of the rule (hits 0), the divided one first. */
  counters: readonly CounterRequest[];
  shadow: boolean;
  readonly members: Set<Subscription>;
  /** Requests reported since the last sync (allowed, denied), not yet told to the observer. */
  reportedAllowed: number;
  reportedDenied: number;
  /** Hits reported and not yet written, per counter. */
  pending: number[];
  dirty: boolean;
  /** The other replicas, as the exchange last said, and when. */
  others: readonly ReplicaDemand[];
  othersAtMs: number;
  used: number;
  /** What this replica charged to the counter over the last two windows, by the time it was written. */
  readonly charged: WindowCount;
  /** Requests per second of the last division: this replica's part, then each of `others`. */
  replicaShares: number[];
  /** A later limit of the rule (a day, a month) denied at the last sync: nothing is assigned until it admits again. */
  blocked: boolean;
  /** Whether it has been synced once (a new budget's first answer waits for it). */
  synced: boolean;
  syncedAtMs: number;
  syncing: Promise<void> | undefined;
  /** The sync period (QuotaBudgets.period) of its last division: one division per period. */
  dividedIn: number;
  /** Reports waiting for the next division (a proxy that joined): resolved by it. */
  waiting: (() => void)[];
}

/** A bucket's identity: each string prefixed with its length, so that no two buckets share one. */
function contentKey(domain: string, pairs: readonly Entry[]): string {
  let key = `${domain.length}:${domain}`;
  for (const e of pairs) key += `${e.key.length}:${e.key}${e.value.length}:${e.value}`;
  return key;
}

function count(n: number): number {
  return Number.isFinite(n) && n > 0 ? Math.min(Math.floor(n), MAX_REPORTED_COUNT) : 0;
}

/** Hits that counter `c` could have admitted over `intervalMs` (its capacity and its rate over the span). */
export function chargeCap(c: Pick<CounterRequest, 'limit' | 'windowMs' | 'burst'>, intervalMs: number): number {
  return Math.ceil(Math.max(c.limit, c.burst ?? 0) + (c.limit * Math.max(0, intervalMs)) / c.windowMs);
}

/** Adds hits to a budget counter's pending charge, kept up to twice what the counter could take at once (a store that fails). */
function addPending(b: Budget, j: number, hits: number): void {
  b.pending[j] = Math.min(b.pending[j] + hits, 2 * chargeCap(b.counters[j] ?? b.counters[0], 0));
}

export class QuotaBudgets {
  private readonly store: Store;
  private readonly exchange: ReplicaExchange | undefined;
  private readonly config: () => RateLimitConfig | undefined;
  private readonly limits: QuotaLimits;
  private readonly clock: Clock;
  readonly replicaId: string;
  private readonly shadowMode: boolean;
  private readonly calendarOffsetMs: number;
  private readonly onPush: QuotaBudgetsOptions['onPush'];
  private readonly observer: QuotaObserver;
  private readonly subscribers = new Set<Subscriber>();
  private readonly buckets = new Map<string, SharedBucket>();
  /** Least recently synced first. */
  private readonly budgets = new Map<string, Budget>();
  private usedBytes = 0;
  private nextSubscriber = 0;
  private lastSweepMs = -Infinity;
  private ticking: Promise<void> | undefined;
  /** Sync periods begun (one per tick): a budget is divided at most once in each. */
  private period = 0;
  /** Assignments changed by divisions, per stream, until flushPushes sends them. */
  private readonly outbox = new Map<Subscriber, QuotaAction[]>();

  constructor(options: QuotaBudgetsOptions) {
    this.store = options.store;
    this.exchange = options.exchange;
    this.config = options.config;
    this.limits = options.limits;
    this.clock = options.clock;
    this.replicaId = options.replicaId;
    this.shadowMode = options.shadowMode === true;
    this.calendarOffsetMs = options.calendarOffsetMs ?? 0;
    this.onPush = options.onPush;
    this.observer = options.observer ?? {};
  }

  /** Estimated bytes of every stream and subscription held. */
  get bytes(): number {
    return this.usedBytes;
  }

  /** Subscriptions held, on every stream. */
  get subscriptions(): number {
    let n = 0;
    for (const s of this.subscribers) n += s.subs.size;
    return n;
  }

  /** A new stream; OverCapacityError when its state would pass the byte budget. */
  open(): QuotaSubscriber {
    if (this.usedBytes + STREAM_BYTES > this.limits.maxBytes) {
      throw new OverCapacityError(`quota streams hold their memory budget (${this.limits.maxBytes} bytes); try another replica or later`);
    }
    this.usedBytes += STREAM_BYTES;
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

  /** The report interval observed on a stream, ms; undefined before two full reports. */
  intervalOf(handle: QuotaSubscriber): number | undefined {
    return (handle as Subscriber).intervalMs;
  }

  /** Buckets a stream has reported and not abandoned. */
  bucketsOf(handle: QuotaSubscriber): number {
    return (handle as Subscriber).subs.size;
  }

  /**
   * Counts `delta` bytes more (or fewer) against the byte budget: output the transports hold for
   * the streams' peers. The caller keeps the total within `maxBytes` (see `bytes`).
   */
  holdBytes(delta: number): void {
    this.usedBytes += delta;
  }

  /** The assignment last sent for every bucket of a stream that has had one (what a stream that fell behind is sent when it reads again). */
  assignments(handle: QuotaSubscriber): QuotaAction[] {
    const s = handle as Subscriber;
    const ttl = ttlSeconds(this.expectedIntervalMs(s));
    const actions: QuotaAction[] = [];
    for (const sub of s.subs.values()) if (sub.sent !== undefined) actions.push({ bucket: sub.shared.pairs, strategy: sub.sent, ttlSeconds: ttl });
    return actions;
  }

  /**
   * One report of a stream of `domain`: the answer for every bucket it names. Rejects with
   * InvalidRequestError (a bad bucket, too many buckets), OverCapacityError (the byte budget) or
   * NotReadyError (no config); the stream's state is then unchanged.
   */
  async report(handle: QuotaSubscriber, domain: string, usages: readonly QuotaUsage[]): Promise<QuotaAction[]> {
    const s = handle as Subscriber;
    if (s.closed || usages.length === 0) return [];
    const now = this.clock.nowMs();
    // A bucket named twice in one report is one bucket: its counts add up.
    const merged = new Map<string, QuotaUsage>();
    let freshBytes = 0;
    const fresh: { key: string; pairs: readonly Entry[] }[] = [];
    usages.forEach((u, i) => {
      const idBytes = this.checkBucket(u, i);
      const key = contentKey(domain, u.bucket);
      const seen = merged.get(key);
      if (seen !== undefined) {
        merged.set(key, { ...seen, allowed: count(seen.allowed) + count(u.allowed), denied: count(seen.denied) + count(u.denied) });
        return;
      }
      merged.set(key, u);
      if (!s.subs.has(key)) {
        fresh.push({ key, pairs: u.bucket });
        freshBytes += SUBSCRIPTION_BYTES + 3 * idBytes;
      }
    });
    if (s.subs.size + fresh.length > this.limits.maxBucketsPerStream)
      throw new InvalidRequestError(`more than ${this.limits.maxBucketsPerStream} buckets on one stream`);
    if (this.usedBytes + freshBytes > this.limits.maxBytes) {
      throw new OverCapacityError(`quota streams hold their memory budget (${this.limits.maxBytes} bytes); report fewer buckets or try another replica`);
    }
    const config = this.config();
    if (config === undefined) throw new NotReadyError('no rate limit configuration loaded');
    const matches = this.checkJoins(config, domain, fresh);
    // A full report names every bucket of the stream and no new one: Envoy's periodic report.
    const full = fresh.length === 0 && merged.size === s.subs.size;
    if (full) {
      if (s.lastFullAtMs !== undefined) s.intervalMs = now - s.lastFullAtMs;
      s.lastFullAtMs = now;
    }
    const ttl = ttlSeconds(s.intervalMs ?? this.limits.reportIntervalMs);
    const answered: (Subscription | QuotaAction)[] = [];
    const joined = new Set<Budget>();
    for (const [key, usage] of merged) {
      const sub = s.subs.get(key) ?? this.subscribe(s, key, domain, usage.bucket, matches.get(key));
      const budget = this.place(sub);
      this.record(sub, usage, now, full);
      if (full && sub.idleReports >= this.limits.abandonAfterIdleReports) {
        this.unsubscribe(sub);
        answered.push({ bucket: sub.shared.pairs, abandon: true });
        continue;
      }
      answered.push(sub);
      if (budget !== undefined && !sub.divided) joined.add(budget);
    }
    // A bucket new to its budget is answered by the budget's next division: a new budget's first
    // sync, the one under way, or one now if the budget has had none this period.
    const divisions: Promise<void>[] = [];
    for (const b of joined) {
      if (!b.synced || b.syncing !== undefined) divisions.push(this.sync(b));
      else if (b.dividedIn < this.period) this.divide(b);
      else divisions.push(this.nextDivision(b));
    }
    if (divisions.length > 0) await Promise.all(divisions);
    // What those divisions changed for the other streams goes out now, not at the next sync.
    if (joined.size > 0) this.flushPushes();
    if (s.closed) return [];
    return answered.map((a) => ('subscriber' in a ? { bucket: a.shared.pairs, strategy: this.current(a), ttlSeconds: ttl } : a));
  }

  /**
   * The matches of the buckets a report adds to its stream; OverCapacityError when one would take a
   * budget past `maxProxiesPerBudget` subscriptions (nothing is changed then).
   */
  private checkJoins(
    config: RateLimitConfig,
    domain: string,
    fresh: readonly { key: string; pairs: readonly Entry[] }[],
  ): Map<string, BucketMatch | undefined> {
    const matches = new Map<string, BucketMatch | undefined>();
    if (fresh.length === 0) return matches;
    const joining = new Map<string, number>();
    const max = this.limits.maxProxiesPerBudget;
    for (const { key, pairs } of fresh) {
      const shared = this.buckets.get(key);
      const match = shared !== undefined ? this.matchOf(shared) : matchBucket(config, domain, pairs, this.calendarOffsetMs);
      matches.set(key, match);
      if (match === undefined || match.rule.limit.unlimited) continue;
      const counter = match.counters[0].key;
      const joins = (joining.get(counter) ?? 0) + 1;
      joining.set(counter, joins);
      if ((this.budgets.get(counter)?.members.size ?? 0) + joins > max) {
        const named = pairs.map((e) => `${e.key}=${e.value}`).join(',');
        throw new OverCapacityError(
          `bucket {${named.length > 128 ? `${named.slice(0, 128)}...` : named}}: its budget already has ${max} proxies on this replica (RLQS_MAX_PROXIES_PER_BUDGET); try another replica`,
        );
      }
    }
    return matches;
  }

  /** Resolves once the budget has been divided again (at its next sync). */
  private nextDivision(b: Budget): Promise<void> {
    return new Promise((resolve) => b.waiting.push(resolve));
  }

  /** The stream is gone: its subscriptions leave their budgets (their demand is withdrawn at the next sync). */
  close(handle: QuotaSubscriber): void {
    const s = handle as Subscriber;
    if (s.closed) return;
    s.closed = true;
    for (const sub of [...s.subs.values()]) this.unsubscribe(sub);
    this.subscribers.delete(s);
    this.usedBytes -= STREAM_BYTES;
  }

  /**
   * The background work, called every syncIntervalMs: drops silent subscriptions, writes pending
   * charges, exchanges demand and divides again for the budgets that changed or are due, then pushes
   * the changed assignments, one message per stream. At most MAX_SYNCS_PER_SECOND budgets a second.
   * Never rejects.
   */
  tick(): Promise<void> {
    // A new period even while the last tick's syncs are under way: a proxy joining a budget not
    // synced since is answered by a division of its own.
    this.period++;
    if (this.ticking !== undefined) return this.ticking;
    const now = this.clock.nowMs();
    if (now - this.lastSweepMs >= SWEEP_EVERY_MS) {
      this.lastSweepMs = now;
      this.dropSilent(now);
    }
    const max = Math.max(1, Math.floor((MAX_SYNCS_PER_SECOND * this.limits.syncIntervalMs) / 1000));
    const refreshMs = this.refreshMs();
    const due: Budget[] = [];
    for (const b of this.budgets.values()) {
      if (due.length >= max) break;
      if (b.syncing === undefined && (b.dirty || now - b.syncedAtMs >= refreshMs)) due.push(b);
    }
    if (due.length === 0) return Promise.resolve();
    this.ticking = Promise.all(due.map((b) => this.sync(b))).then(() => {
      this.ticking = undefined;
      this.flushPushes();
    });
    return this.ticking;
  }

  /** Drops every stream, writes what is pending and withdraws this replica's demand from every budget. */
  async shutdown(): Promise<void> {
    for (const s of [...this.subscribers]) this.close(s);
    for (const b of this.budgets.values()) this.release(b);
    await this.ticking;
    // Twice: a budget whose sync was under way when its last proxy left withdraws on the second.
    for (let pass = 0; pass < 2 && this.budgets.size > 0; pass++) await Promise.all([...this.budgets.values()].map((b) => this.sync(b)));
  }

  /** Every budget in use (the first `maxBudgets`, each with at most `maxProxies` local proxies), for the debug port and the live view. */
  view(maxBudgets: number, maxProxies: number): { readonly budgets: readonly BudgetView[]; readonly total: number } {
    const budgets: BudgetView[] = [];
    const now = this.clock.nowMs();
    for (const b of this.budgets.values()) {
      if (budgets.length >= maxBudgets) break;
      if (b.members.size === 0) continue;
      // Admitted counts cover two windows: rates over them, the overshoot per window.
      const spanSeconds = (2 * b.counters[0].windowMs) / 1000;
      const proxies: ProxyShareView[] = [];
      let admitted = 0;
      for (const m of b.members) {
        const allowed = (m.admitted?.sum(now) ?? 0) / spanSeconds;
        admitted += allowed * spanSeconds;
        if (proxies.length >= maxProxies) continue;
        const demand = this.demandOf(m, now);
        proxies.push({
          member: m.id,
          demand: Number.isFinite(demand) ? demand : null,
          allowed,
          share: m.share,
          local: true,
          stream: m.subscriber.id,
          bucket: m.shared.pairs,
          assignment: m.sent ?? null,
          reportAgeMs: m.lastReportAtMs === undefined ? null : now - m.lastReportAtMs,
        });
      }
      b.others.forEach((o, i) => {
        admitted += o.admitted;
        const share = b.replicaShares[i + 1] ?? 0;
        proxies.push({
          member: o.member,
          demand: Number.isFinite(o.demand) ? o.demand : null,
          allowed: o.admitted / spanSeconds,
          share,
          local: false,
          proxies: o.proxies,
        });
      });
      budgets.push({
        domain: b.domain,
        statKey: b.statKey,
        counter: b.key,
        limit: b.counters[0].limit,
        windowMs: b.counters[0].windowMs,
        shadow: b.shadow,
        used: b.used,
        proxies,
        unlisted: b.members.size - Math.min(b.members.size, maxProxies),
        overshoot: Math.max(0, Math.round(admitted / 2 - b.counters[0].limit)),
      });
    }
    return { budgets, total: this.budgets.size };
  }

  /** Per-rule totals over every budget (summed when several budgets share a rule). */
  ruleTotals(): QuotaRuleTotals[] {
    const now = this.clock.nowMs();
    const byRule = new Map<string, { domain: string; statKey: string; proxies: number; demand: number; assigned: number; overshoot: number }>();
    for (const b of this.budgets.values()) {
      if (b.members.size === 0) continue;
      const id = `${b.domain}\u0000${b.statKey}`;
      let t = byRule.get(id);
      if (t === undefined) {
        t = { domain: b.domain, statKey: b.statKey, proxies: 0, demand: 0, assigned: 0, overshoot: 0 };
        byRule.set(id, t);
      }
      let admitted = b.charged.sum(now);
      for (const m of b.members) {
        const d = this.demandOf(m, now);
        if (Number.isFinite(d)) t.demand += d;
        t.assigned += m.share;
      }
      t.proxies += b.members.size;
      for (const o of b.others) {
        t.proxies += o.proxies;
        if (Number.isFinite(o.demand)) t.demand += o.demand;
        admitted += o.admitted;
      }
      t.overshoot += Math.max(0, Math.round(admitted / 2 - b.counters[0].limit));
    }
    return [...byRule.values()];
  }

  /* ---------- one report ---------- */

  /** The id's byte size; InvalidRequestError naming the usage when over a cap. */
  private checkBucket(usage: QuotaUsage, i: number): number {
    const { maxBucketPairs, maxBucketIdBytes } = this.limits;
    if (usage.bucket.length > maxBucketPairs) throw new InvalidRequestError(`bucket_quota_usages[${i}].bucket_id: more than ${maxBucketPairs} pairs`);
    let bytes = 0;
    for (const e of usage.bucket) bytes += Buffer.byteLength(e.key) + Buffer.byteLength(e.value);
    if (bytes > maxBucketIdBytes) throw new InvalidRequestError(`bucket_quota_usages[${i}].bucket_id: over ${maxBucketIdBytes} bytes`);
    return bytes;
  }

  /** Usage into the subscription's demand and its budget's pending charges and reported counts. */
  private record(sub: Subscription, usage: QuotaUsage, now: number, full: boolean): void {
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

  /** The strategy to send, recorded as sent (changed if need be so that Envoy notices the change). */
  private sendable(sub: Subscription, strategy: QuotaStrategy): QuotaStrategy {
    const next = sub.sent !== undefined && sameStrategy(sub.sent, strategy) ? sub.sent : distinguishable(sub.sent, strategy);
    sub.sent = next;
    return next;
  }

  /** The strategy to send now, recorded as sent (see sendable); not worked out again while what it comes from stands (a report answers every bucket with it). */
  private current(sub: Subscription): QuotaStrategy {
    const b = sub.budget;
    const shadow = b === undefined || b.shadow;
    const windowMs = b === undefined ? 0 : b.counters[0].windowMs;
    const from = sub.sentFrom;
    if (sub.sent !== undefined && from !== undefined && from.budget === b && from.shadow === shadow && from.share === sub.share && from.windowMs === windowMs) {
      return sub.sent;
    }
    const strategy = this.sendable(sub, this.strategyOf(sub));
    sub.sentFrom = { budget: b, shadow, share: sub.share, windowMs };
    return strategy;
  }

  private strategyOf(sub: Subscription): QuotaStrategy {
    const b = sub.budget;
    if (b === undefined || b.shadow) return ALLOW_ALL;
    return strategyForShare(sub.share, b.counters[0].windowMs);
  }

  /** Demand as division counts it: what was measured, or for a subscription silent two intervals, what it reported since. */
  private demandOf(sub: Subscription, now: number): number {
    if (sub.lastReportAtMs === undefined) return sub.demand;
    const silence = now - sub.lastReportAtMs;
    if (silence <= SILENT_INTERVALS * this.expectedIntervalMs(sub.subscriber)) return sub.demand;
    return (sub.pendingCount * 1000) / silence;
  }

  private expectedIntervalMs(s: Subscriber): number {
    return s.intervalMs ?? this.limits.reportIntervalMs;
  }

  /* ---------- subscriptions ---------- */

  /** `match`: the bucket's match under the config in force, when known. */
  private subscribe(s: Subscriber, key: string, domain: string, pairs: readonly Entry[], match?: BucketMatch): Subscription {
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
    this.usedBytes += sub.bytes;
    s.subs.set(key, sub);
    return sub;
  }

  private unsubscribe(sub: Subscription): void {
    const s = sub.subscriber;
    if (s.subs.get(sub.shared.key) !== sub) return;
    s.subs.delete(sub.shared.key);
    this.usedBytes -= sub.bytes;
    if (--sub.shared.refs === 0) this.buckets.delete(sub.shared.key);
    this.leave(sub);
  }

  /** Subscriptions silent for TTL_INTERVALS of their intervals (and a sync) are dropped: their assignment has expired. */
  private dropSilent(now: number): void {
    for (const s of this.subscribers) {
      const limit = TTL_INTERVALS * this.expectedIntervalMs(s) + this.limits.syncIntervalMs;
      for (const sub of [...s.subs.values()]) {
        if (sub.lastReportAtMs !== undefined && now - sub.lastReportAtMs > limit) this.unsubscribe(sub);
      }
    }
  }

  /* ---------- budgets ---------- */

  /** The match of a bucket under the config in force (matched again after a reload). */
  private matchOf(shared: SharedBucket): BucketMatch | undefined {
    const config = this.config();
    if (config !== shared.config) {
      shared.config = config;
      shared.match = config === undefined ? undefined : matchBucket(config, shared.domain, shared.pairs, this.calendarOffsetMs);
    }
    return shared.match;
  }

  /** The subscription into the budget of its bucket's rule (none: no rule or an unlimited one), leaving another it was on. */
  private place(sub: Subscription): Budget | undefined {
    const match = this.matchOf(sub.shared);
    // Placed by this match already (no reload since): its budget is the same, with the same limits.
    if (match !== undefined && sub.budget !== undefined && sub.placedBy === match) return sub.budget;
    if (match === undefined || match.rule.limit.unlimited) {
      this.leave(sub);
      return undefined;
    }
    const key = match.counters[0].key;
    if (sub.budget !== undefined && sub.budget.key !== key) this.leave(sub);
    let budget = this.budgets.get(key);
    if (budget === undefined) {
      const bytes = 1_024 + 2 * key.length;
      budget = {
        key,
        bytes,
        domain: sub.shared.domain,
        statKey: match.statKey,
        counters: match.counters,
        shadow: false,
        members: new Set(),
        reportedAllowed: 0,
        reportedDenied: 0,
        pending: match.counters.map(() => 0),
        dirty: true,
        others: [],
        othersAtMs: 0,
        used: 0,
        charged: new WindowCount((2 * match.counters[0].windowMs) / ADMITTED_SLICES),
        replicaShares: [],
        blocked: false,
        synced: false,
        syncedAtMs: -Infinity,
        syncing: undefined,
        dividedIn: -1,
        waiting: [],
      };
      this.usedBytes += bytes;
      this.budgets.set(key, budget);
    }
    // A reload may change the limits of the same counter.
    if (budget.counters !== match.counters) {
      if (budget.counters.length !== match.counters.length) budget.pending = match.counters.map((_, j) => budget!.pending[j] ?? 0);
      budget.counters = match.counters;
    }
    budget.statKey = match.statKey;
    budget.shadow = this.shadowMode || match.rule.shadowMode;
    if (sub.budget !== budget) {
      budget.members.add(sub);
      budget.dirty = true;
      sub.budget = budget;
      sub.divided = false;
      sub.admitted = new WindowCount((2 * match.counters[0].windowMs) / ADMITTED_SLICES);
    }
    sub.placedBy = match;
    return budget;
  }

  /** The subscription leaves its budget; the others' shares grow at the budget's next division (its next sync). */
  private leave(sub: Subscription): void {
    const budget = sub.budget;
    if (budget === undefined) return;
    sub.budget = undefined;
    sub.placedBy = undefined;
    sub.admitted = undefined;
    sub.share = 0;
    sub.divided = false;
    budget.members.delete(sub);
    budget.dirty = true;
  }

  /** How often an unchanged budget is exchanged: every REFRESH_INTERVALS syncs, less often when there are more than MAX_SYNCS_PER_SECOND allows. */
  private refreshMs(): number {
    return Math.max(REFRESH_INTERVALS * this.limits.syncIntervalMs, (this.budgets.size / MAX_SYNCS_PER_SECOND) * 1000);
  }

  /**
   * Writes the budget's pending charges (every counter of the rule, counted whatever the outcome)
   * and exchanges its demand (withdrawn when no local proxy is left), then divides it again. A
   * failed write keeps its charges pending; a failed exchange keeps the other replicas' last
   * demand until it would have expired. A budget without proxies or charges is then dropped.
   */
  private sync(b: Budget): Promise<void> {
    if (b.syncing !== undefined) return b.syncing;
    if (b.reportedAllowed > 0 || b.reportedDenied > 0) {
      this.observer.onReport?.(b.domain, b.statKey, b.reportedAllowed, b.reportedDenied);
      b.reportedAllowed = 0;
      b.reportedDenied = 0;
    }
    const now = this.clock.nowMs();
    const taken = b.pending;
    b.pending = b.counters.map(() => 0);
    b.dirty = false;
    const counters = b.counters.map((c, j) => ({ ...c, hits: taken[j] }));
    const ttlMs = TTL_INTERVALS * this.refreshMs();
    const leaving = b.members.size === 0;
    const exchange: DemandExchange = leaving ? { key: b.key, withdraw: this.replicaId, ttlMs } : { key: b.key, publish: this.ownDemand(b, now), ttlMs };
    const charging = this.store.decide(counters, COUNT_ALWAYS);
    const exchanging = this.exchange?.exchangeDemand(exchange);
    b.syncing = Promise.allSettled([charging, exchanging]).then(([charged, exchanged]) => {
      b.syncing = undefined;
      b.synced = true;
      b.syncedAtMs = now;
      // Least recently synced first.
      this.budgets.delete(b.key);
      this.budgets.set(b.key, b);
      if (charged.status === 'fulfilled') {
        b.charged.add(taken[0], now);
        this.charged(b, charged.value);
      } else {
        taken.forEach((hits, j) => addPending(b, j, hits));
        b.dirty = true;
        this.observer.onStoreError?.(charged.reason);
      }
      if (exchanged.status === 'fulfilled') {
        if (exchanged.value !== undefined) {
          b.others = exchanged.value.filter((d) => d.member !== this.replicaId);
          b.othersAtMs = now;
        }
      } else {
        this.observer.onStoreError?.(exchanged.reason);
        if (now - b.othersAtMs > ttlMs) b.others = [];
      }
      if (b.members.size > 0) this.divide(b);
      else if (!b.dirty && b.syncing === undefined) this.drop(b);
      this.release(b);
    });
    return b.syncing;
  }

  private charged(b: Budget, decisions: readonly CounterDecision[]): void {
    const first = decisions[0];
    b.used = first.allowed ? b.counters[0].limit - first.remaining : b.counters[0].limit;
    let blocked = false;
    for (let j = 1; j < decisions.length; j++) if (!decisions[j].allowed || decisions[j].remaining === 0) blocked = true;
    b.blocked = blocked;
  }

  private drop(b: Budget): void {
    if (this.budgets.get(b.key) !== b) return;
    this.budgets.delete(b.key);
    this.usedBytes -= b.bytes;
  }

  /** The reports waiting for the budget's division go on (divided, or left with nothing to divide). */
  private release(b: Budget): void {
    if (b.waiting.length > 0) for (const resolve of b.waiting.splice(0)) resolve();
  }

  /** This replica's entry: its proxies' demand together, and what it charged to the counter. */
  private ownDemand(b: Budget, now: number): ReplicaDemand {
    let demand = 0;
    for (const m of b.members) demand += this.demandOf(m, now);
    return { member: this.replicaId, demand, admitted: b.charged.sum(now), proxies: b.members.size };
  }

  /**
   * Divides the budget: among the replicas by demand, then this replica's part among its proxies;
   * queues a changed strategy for every local subscription that has had one (sent by flushPushes),
   * and lets the reports waiting for it go on. Called once per sync period (see `period`).
   */
  private divide(b: Budget): void {
    const now = this.clock.nowMs();
    const members = [...b.members];
    const demands = members.map((m) => this.demandOf(m, now));
    const own = this.ownDemand(b, now);
    // Two windows of charges: the counter holds no more of them than that (a sliding window weighs
    // the previous window in), so what it holds beyond is others' for sure.
    let admitted = own.admitted;
    for (const o of b.others) admitted += o.admitted;
    const c = b.counters[0];
    const capacity = b.blocked ? 0 : proxiesCapacity({ limit: c.limit, windowMs: c.windowMs, used: b.used, admitted });
    const replicaShares = divideCapacity(capacity, [own.demand, ...b.others.map((o) => o.demand)]);
    b.replicaShares = replicaShares;
    b.dividedIn = this.period;
    const shares = divideCapacity(replicaShares[0], demands);
    members.forEach((m, i) => {
      m.share = shares[i];
      m.divided = true;
      if (m.sent === undefined || m.subscriber.closed) return;
      const before = m.sent;
      const strategy = this.current(m);
      if (strategy === before) return;
      let list = this.outbox.get(m.subscriber);
      if (list === undefined) {
        list = [];
        this.outbox.set(m.subscriber, list);
      }
      list.push({ bucket: m.shared.pairs, strategy, ttlSeconds: ttlSeconds(this.expectedIntervalMs(m.subscriber)) });
    });
    this.release(b);
  }

  /** Sends the queued assignments: one message per stream, whatever the number of its budgets divided since the last. */
  private flushPushes(): void {
    if (this.outbox.size === 0) return;
    const outbox = [...this.outbox];
    this.outbox.clear();
    for (const [s, actions] of outbox) if (!s.closed) this.onPush(s, actions);
  }
}
