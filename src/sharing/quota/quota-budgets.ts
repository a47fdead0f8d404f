import { matchBucket, type BucketMatch } from '../../limiter/bucket-match';
import { InvalidRequestError, NotReadyError, OverCapacityError } from '../../limiter/errors';
import type { RateLimitConfig } from '../../limiter/rules';
import type { Clock, Entry } from '../../limiter/types';
import { budgetView, ruleTotals } from './budget-views';
import { Budgets } from './budgets';
import type { BudgetView, QuotaAction, QuotaBudgetsOptions, QuotaLimits, QuotaObserver, QuotaRuleTotals, QuotaSubscriber, QuotaUsage } from './quota-api';
import { ALLOW_ALL, distinguishable, sameStrategy, strategyForShare, ttlSeconds, type QuotaStrategy } from './quota-share';
import { contentKey, count, type Budget, type ByteCount, type Subscriber, type Subscription } from './quota-state';
import { SUBSCRIPTION_BYTES, Subscriptions } from './subscriptions';

export type * from './quota-api';
export { chargeCap, MAX_REPORTED_COUNT } from './quota-state';
export { SILENT_INTERVALS, STREAM_BYTES } from './subscriptions';
export { MAX_SYNCS_PER_SECOND } from './budgets';

/**
 * Quota budgets (RLQS): one rule's limit divided among the proxies that report a bucket of it, on
 * every replica. The stream service (src/service/rlqs-service.ts) hands in what a proxy reports and
 * sends out the assignments; everything else is here, on an injected clock:
 *
 * - a bucket's pairs match a rule as a descriptor would (../../limiter/bucket-match.ts); no rule, or an
 *   unlimited one: ALLOW_ALL, nothing counted;
 * - a report's allowed requests are charged to every counter of the rule (the ones RLS calls on that
 *   descriptor use), capped at what the limit could have admitted in the report's interval; the
 *   charges are written in the background, every `syncIntervalMs`, one store call per budget;
 * - each subscription's demand is measured per report (./subscriptions.ts);
 * - division is in two steps (./budgets.ts, on the sharing engine): the limit is divided among
 *   replicas by demand, then each replica divides its part among its own proxies;
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

/** Silent subscriptions are looked for this often, ms. */
const SWEEP_EVERY_MS = 1_000;

export class QuotaBudgets {
  readonly replicaId: string;
  private readonly config: () => RateLimitConfig | undefined;
  private readonly limits: QuotaLimits;
  private readonly clock: Clock;
  private readonly calendarOffsetMs: number;
  private readonly onPush: QuotaBudgetsOptions['onPush'];
  private readonly observer: QuotaObserver;
  private readonly bytesHeld: ByteCount = { used: 0 };
  private readonly subs: Subscriptions;
  private readonly budgets: Budgets;
  private lastSweepMs = -Infinity;
  private ticking: Promise<void> | undefined;
  /** Assignments changed by divisions, per stream, until flushPushes sends them. */
  private readonly outbox = new Map<Subscriber, QuotaAction[]>();

  constructor(options: QuotaBudgetsOptions) {
    this.config = options.config;
    this.limits = options.limits;
    this.clock = options.clock;
    this.replicaId = options.replicaId;
    this.calendarOffsetMs = options.calendarOffsetMs ?? 0;
    this.onPush = options.onPush;
    this.observer = options.observer ?? {};
    this.subs = new Subscriptions({
      limits: options.limits,
      replicaId: options.replicaId,
      config: options.config,
      calendarOffsetMs: this.calendarOffsetMs,
      bytes: this.bytesHeld,
      leave: (sub) => this.budgets.leave(sub),
    });
    this.budgets = new Budgets({
      store: options.store,
      exchange: options.exchange,
      limits: options.limits,
      clock: options.clock,
      replicaId: options.replicaId,
      shadowMode: options.shadowMode === true,
      bytes: this.bytesHeld,
      observer: this.observer,
      demandOf: (sub, now) => this.subs.demandOf(sub, now),
      onShare: (sub) => this.queuePush(sub),
    });
  }

  /** Estimated bytes of every stream and subscription held. */
  get bytes(): number {
    return this.bytesHeld.used;
  }

  /** Subscriptions held, on every stream. */
  get subscriptions(): number {
    return this.subs.count;
  }

  /** A new stream; OverCapacityError when its state would pass the byte budget. */
  open(): QuotaSubscriber {
    return this.subs.open();
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
    this.bytesHeld.used += delta;
  }

  /** The assignment last sent for every bucket of a stream that has had one (what a stream that fell behind is sent when it reads again). */
  assignments(handle: QuotaSubscriber): QuotaAction[] {
    const s = handle as Subscriber;
    const ttl = ttlSeconds(this.subs.expectedIntervalMs(s));
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
      const idBytes = this.subs.checkBucket(u, i);
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
    if (this.bytesHeld.used + freshBytes > this.limits.maxBytes) {
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
      const sub = s.subs.get(key) ?? this.subs.subscribe(s, key, domain, usage.bucket, matches.get(key));
      const budget = this.budgets.place(sub, this.subs.matchOf(sub.shared));
      this.subs.record(sub, usage, now, full);
      if (full && sub.idleReports >= this.limits.abandonAfterIdleReports) {
        this.subs.unsubscribe(sub);
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
      if (!b.synced || b.syncing !== undefined) divisions.push(this.budgets.sync(b));
      else if (b.dividedIn < this.budgets.period) this.budgets.divide(b);
      else divisions.push(this.budgets.nextDivision(b));
    }
    if (divisions.length > 0) await Promise.all(divisions);
    // What those divisions changed for the other streams goes out now, not at the next sync.
    if (joined.size > 0) this.flushPushes();
    if (s.closed) return [];
    return answered.map((a) => ('subscriber' in a ? { bucket: a.shared.pairs, strategy: this.current(a), ttlSeconds: ttl } : a));
  }

  /** The stream is gone: its subscriptions leave their budgets (their demand is withdrawn at the next sync). */
  close(handle: QuotaSubscriber): void {
    this.subs.close(handle as Subscriber);
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
    this.budgets.period++;
    if (this.ticking !== undefined) return this.ticking;
    const now = this.clock.nowMs();
    if (now - this.lastSweepMs >= SWEEP_EVERY_MS) {
      this.lastSweepMs = now;
      this.subs.dropSilent(now);
    }
    const due = this.budgets.due(now);
    if (due.length === 0) return Promise.resolve();
    this.ticking = Promise.all(due.map((b) => this.budgets.sync(b))).then(() => {
      this.ticking = undefined;
      this.flushPushes();
    });
    return this.ticking;
  }

  /** Drops every stream, writes what is pending and withdraws this replica's demand from every budget. */
  async shutdown(): Promise<void> {
    for (const s of [...this.subs.subscribers]) this.close(s);
    for (const b of this.budgets.values()) this.budgets.release(b);
    await this.ticking;
    // Twice: a budget whose sync was under way when its last proxy left withdraws on the second.
    for (let pass = 0; pass < 2 && this.budgets.size > 0; pass++) await Promise.all([...this.budgets.values()].map((b) => this.budgets.sync(b)));
  }

  /** Every budget in use (the first `maxBudgets`, each with at most `maxProxies` local proxies), for the debug port and the live view. */
  view(maxBudgets: number, maxProxies: number): { readonly budgets: readonly BudgetView[]; readonly total: number } {
    const budgets: BudgetView[] = [];
    const now = this.clock.nowMs();
    const demandOf = (sub: Subscription, at: number): number => this.subs.demandOf(sub, at);
    for (const b of this.budgets.values()) {
      if (budgets.length >= maxBudgets) break;
      if (b.members.size === 0) continue;
      budgets.push(budgetView(b, maxProxies, now, demandOf));
    }
    return { budgets, total: this.budgets.size };
  }

  /** Per-rule totals over every budget (summed when several budgets share a rule). */
  ruleTotals(): QuotaRuleTotals[] {
    return ruleTotals(this.budgets.values(), this.clock.nowMs(), (sub, at) => this.subs.demandOf(sub, at));
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
      const shared = this.subs.bucket(key);
      const match = shared !== undefined ? this.subs.matchOf(shared) : matchBucket(config, domain, pairs, this.calendarOffsetMs);
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

  /* ---------- assignments ---------- */

  /** A division gave `sub` its share: a changed strategy is queued for its stream when it has had one (sent by flushPushes). */
  private queuePush(sub: Subscription): void {
    if (sub.sent === undefined || sub.subscriber.closed) return;
    const before = sub.sent;
    const strategy = this.current(sub);
    if (strategy === before) return;
    let list = this.outbox.get(sub.subscriber);
    if (list === undefined) {
      list = [];
      this.outbox.set(sub.subscriber, list);
    }
    list.push({ bucket: sub.shared.pairs, strategy, ttlSeconds: ttlSeconds(this.subs.expectedIntervalMs(sub.subscriber)) });
  }

  /** Sends the queued assignments: one message per stream, whatever the number of its budgets divided since the last. */
  private flushPushes(): void {
    if (this.outbox.size === 0) return;
    const outbox = [...this.outbox];
    this.outbox.clear();
    for (const [s, actions] of outbox) if (!s.closed) this.onPush(s, actions);
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
}
