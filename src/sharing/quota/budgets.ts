import type { BucketMatch } from '../../limiter/bucket-match';
import type { ReplicaDemand, ReplicaExchange } from '../../limiter/replica-exchange';
import type { CounterDecision, Store } from '../../limiter/store';
import type { Clock } from '../../limiter/types';
import { WINDOW_SLICES, WindowCount } from '../demand-meter';
import { divideCapacity, usedOf } from '../division';
import { SharedPart } from '../shared-part';
import type { QuotaLimits, QuotaObserver } from './quota-api';
import { proxiesCapacity, TTL_INTERVALS } from './quota-share';
import { addPending, type Budget, type ByteCount, type Subscription } from './quota-state';

/**
 * The quota budgets of this process: one per rule counter that local subscriptions report on, each
 * this replica's part of the rule's limit among the replicas (../shared-part.ts, kind `rlqs`: one
 * entry per replica, not one per proxy, so a peer cannot fill the shared store). A budget's sync
 * writes its pending charges (every counter of the rule, counted whatever the outcome), exchanges
 * its demand, and divides: the limit among the replicas by demand, then this replica's part among
 * its own proxies. A budget is divided once per sync period, whatever the reports touching it.
 */

/** Budgets synced per second at most (each one store call and one exchange); more are refreshed less often. */
export const MAX_SYNCS_PER_SECOND = 2_000;
/** An unchanged budget is exchanged again after this many sync intervals (others' demand may have moved). */
const REFRESH_INTERVALS = 4;
const COUNT_ALWAYS = Object.freeze({ countDenied: true });

export interface BudgetsOptions {
  readonly store: Store;
  readonly exchange: ReplicaExchange | undefined;
  readonly limits: QuotaLimits;
  readonly clock: Clock;
  readonly replicaId: string;
  readonly shadowMode: boolean;
  readonly bytes: ByteCount;
  readonly observer: QuotaObserver;
  /** A subscription's demand as division counts it. */
  readonly demandOf: (sub: Subscription, now: number) => number;
  /** A local subscription's share changed by a division (its strategy may go out). */
  readonly onShare: (sub: Subscription) => void;
}

export class Budgets {
  /** Least recently synced first. */
  private readonly budgets = new Map<string, Budget>();
  private readonly store: Store;
  private readonly exchange: ReplicaExchange | undefined;
  private readonly limits: QuotaLimits;
  private readonly clock: Clock;
  private readonly replicaId: string;
  private readonly shadowMode: boolean;
  private readonly bytes: ByteCount;
  private readonly observer: QuotaObserver;
  private readonly demandOf: BudgetsOptions['demandOf'];
  private readonly onShare: BudgetsOptions['onShare'];
  /** Sync periods begun (one per tick): a budget is divided at most once in each. */
  period = 0;

  constructor(options: BudgetsOptions) {
    this.store = options.store;
    this.exchange = options.exchange;
    this.limits = options.limits;
    this.clock = options.clock;
    this.replicaId = options.replicaId;
    this.shadowMode = options.shadowMode;
    this.bytes = options.bytes;
    this.observer = options.observer;
    this.demandOf = options.demandOf;
    this.onShare = options.onShare;
  }

  get size(): number {
    return this.budgets.size;
  }

  get(key: string): Budget | undefined {
    return this.budgets.get(key);
  }

  values(): IterableIterator<Budget> {
    return this.budgets.values();
  }

  /** The subscription into the budget of its bucket's rule (`match`; none: no rule or an unlimited one), leaving another it was on. */
  place(sub: Subscription, match: BucketMatch | undefined): Budget | undefined {
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
        part: new SharedPart({ kind: 'rlqs', key, member: this.replicaId, exchange: this.exchange, heardAtMs: 0 }),
        reportedAllowed: 0,
        reportedDenied: 0,
        pending: match.counters.map(() => 0),
        dirty: true,
        used: 0,
        charged: new WindowCount((2 * match.counters[0].windowMs) / WINDOW_SLICES),
        replicaShares: [],
        blocked: false,
        synced: false,
        syncedAtMs: -Infinity,
        syncing: undefined,
        dividedIn: -1,
        waiting: [],
      };
      this.bytes.used += bytes;
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
      sub.admitted = new WindowCount((2 * match.counters[0].windowMs) / WINDOW_SLICES);
    }
    sub.placedBy = match;
    return budget;
  }

  /** The subscription leaves its budget; the others' shares grow at the budget's next division (its next sync). */
  leave(sub: Subscription): void {
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

  /** The budgets due a sync at `now` (changed, or not refreshed for a while), least recently synced first, at most MAX_SYNCS_PER_SECOND a second. */
  due(now: number): Budget[] {
    const max = Math.max(1, Math.floor((MAX_SYNCS_PER_SECOND * this.limits.syncIntervalMs) / 1000));
    const refreshMs = this.refreshMs();
    const due: Budget[] = [];
    for (const b of this.budgets.values()) {
      if (due.length >= max) break;
      if (b.syncing === undefined && (b.dirty || now - b.syncedAtMs >= refreshMs)) due.push(b);
    }
    return due;
  }

  /** Resolves once the budget has been divided again (at its next sync). */
  nextDivision(b: Budget): Promise<void> {
    return new Promise((resolve) => b.waiting.push(resolve));
  }

  /**
   * Writes the budget's pending charges (every counter of the rule, counted whatever the outcome)
   * and exchanges its demand (withdrawn when no local proxy is left), then divides it again. A
   * failed write keeps its charges pending; a failed exchange keeps the other replicas' last
   * demand until it would have expired. A budget without proxies or charges is then dropped.
   */
  sync(b: Budget): Promise<void> {
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
    // Withdrawn when no local proxy is left.
    const publish = b.members.size === 0 ? undefined : this.ownDemand(b, now);
    const charging = this.store.decide(counters, COUNT_ALWAYS);
    const exchanging = b.part.exchange(publish, ttlMs);
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
        if (exchanged.value !== undefined) b.part.peers.heard(exchanged.value, now);
      } else {
        this.observer.onStoreError?.(exchanged.reason);
        b.part.peers.forgetAfter(now, ttlMs);
      }
      if (b.members.size > 0) this.divide(b);
      else if (!b.dirty && b.syncing === undefined) this.drop(b);
      this.release(b);
    });
    return b.syncing;
  }

  /** The reports waiting for the budget's division go on (divided, or left with nothing to divide). */
  release(b: Budget): void {
    if (b.waiting.length > 0) for (const resolve of b.waiting.splice(0)) resolve();
  }

  /** This replica's entry: its proxies' demand together, and what it charged to the counter. */
  ownDemand(b: Budget, now: number): ReplicaDemand {
    let demand = 0;
    for (const m of b.members) demand += this.demandOf(m, now);
    return { member: this.replicaId, demand, admitted: b.charged.sum(now), proxies: b.members.size };
  }

  /**
   * Divides the budget: among the replicas by demand, then this replica's part among its proxies;
   * tells onShare of every local subscription, and lets the reports waiting for it go on. Called
   * once per sync period (see `period`).
   */
  divide(b: Budget): void {
    const now = this.clock.nowMs();
    const members = [...b.members];
    const demands = members.map((m) => this.demandOf(m, now));
    const own = this.ownDemand(b, now);
    // Two windows of charges: the counter holds no more of them than that (a sliding window weighs
    // the previous window in), so what it holds beyond is others' for sure.
    let admitted = own.admitted;
    for (const o of b.part.others) admitted += o.admitted;
    const c = b.counters[0];
    const capacity = b.blocked ? 0 : proxiesCapacity({ limit: c.limit, windowMs: c.windowMs, used: b.used, admitted });
    const replicaShares = b.part.divide(capacity, own.demand);
    b.replicaShares = replicaShares;
    b.dividedIn = this.period;
    const shares = divideCapacity(replicaShares[0], demands);
    members.forEach((m, i) => {
      m.share = shares[i];
      m.divided = true;
      this.onShare(m);
    });
    this.release(b);
  }

  /** Drops the budget (no proxies, nothing pending). */
  private drop(b: Budget): void {
    if (this.budgets.get(b.key) !== b) return;
    this.budgets.delete(b.key);
    this.bytes.used -= b.bytes;
  }

  private charged(b: Budget, decisions: readonly CounterDecision[]): void {
    b.used = usedOf(decisions[0], b.counters[0].limit);
    let blocked = false;
    for (let j = 1; j < decisions.length; j++) if (!decisions[j].allowed || decisions[j].remaining === 0) blocked = true;
    b.blocked = blocked;
  }

  /** How often an unchanged budget is exchanged: every REFRESH_INTERVALS syncs, less often when there are more than MAX_SYNCS_PER_SECOND allows. */
  private refreshMs(): number {
    return Math.max(REFRESH_INTERVALS * this.limits.syncIntervalMs, (this.budgets.size / MAX_SYNCS_PER_SECOND) * 1000);
  }
}
