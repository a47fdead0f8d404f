import { markedRule } from '../../limiter/lease-mark';
import type { ReplicaExchange } from '../../limiter/replica-exchange';
import {
  isChargedAnyway,
  judgeCheck,
  type CounterDecision,
  type CounterRequest,
  type DecideOptions,
  type LocalAnswer,
  type Reservations,
  type Settlements,
  type Store,
} from '../../limiter/store';
import type { Clock } from '../../limiter/types';
import { isLive } from '../part-sync';
import { charge, giveBack, judge, record, refusalOf, take, type Held, type Lease, type LeaseLimits, type LeaseObserver, type LeaseView } from './lease';
import { LeaseSync } from './lease-sync';
import { LeaseTable } from './lease-table';

export type { LeaseLimits, LeaseObserver, LeaseRefusal, LeaseView } from './lease';

/**
 * Leases (`lease: true` limits): a limit shared through the store, decided in this process.
 *
 * Each replica holds a part of every leased counter it uses (./lease-table.ts) and decides against
 * it alone, with the in-process arithmetic of the memory store (./lease.ts), on its own hits. In the
 * background (./lease-sync.ts) each lease settles what it admitted, exchanges its demand and is
 * divided again, on the sharing engine (../part-sync.ts, ../shared-part.ts).
 *
 * A part is a fraction f of the counter: the local counter has limit floor(f x limit) (and a
 * bucket's capacity floor(f x burst)). Under steady demand the parts add up to the limit, and a
 * sliding window's estimate, a fixed window's count and a bucket's level are sums over replicas, so
 * what all replicas admit together is what one counter would; when demand moves, the cap by the
 * others' usage keeps the sum within the limit plus what the others admitted since their last
 * settlement (one sync interval of their rate).
 *
 * A counter without a live lease is decided by the wrapped store, as any other: exact, and under
 * the failure policy when the store is down. A lease is live only while both halves of its sync
 * went through recently (../part-sync.ts liveUntil): a new one is not (its first sync publishes its
 * demand, its second takes a part, once the others have seen it), nor one the ledger or the demand
 * exchange does not record (more replicas than `maxReplicas`: the others divide without it). What
 * was admitted here stays pending until the store takes it.
 *
 * A call mixing leased and other counters stays all-or-nothing and decides and takes in one step:
 * the live leased ones are judged and, when they admit, charged here at once, before the store is
 * asked about the rest (so every call in flight sees them); if the store then denies, their hits
 * are given back (giveBack in ../../limiter/algorithms.ts: exact for windows, for buckets less what
 * drained meanwhile).
 */

export interface LeasedStoreOptions {
  /** The store stack every call that is not decided here goes to (with its failure policy). */
  readonly store: Store;
  /** Where settlements go: the shared counters (not through a denial cache). */
  readonly settlements: Settlements;
  readonly exchange: ReplicaExchange;
  readonly clock: Clock;
  /** This process's name among the replicas (unique). */
  readonly replicaId: string;
  readonly limits: LeaseLimits;
  readonly observer?: LeaseObserver;
}

/** A Store that decides `lease` counters in process (see above) and hands every other call to the store it wraps. */
export class LeasedStore implements Store {
  readonly name: string;
  readonly reservations: Reservations | undefined;
  readonly settlements: Settlements | undefined;
  private readonly store: Store;
  private readonly clock: Clock;
  private readonly observer: LeaseObserver;
  private readonly table: LeaseTable;
  private readonly syncs: LeaseSync;
  /** Counts the calls decided here: a lease's callHits belong to the call of its stamp. */
  private stamp = 0;
  /** The leases of the call decideNow() is deciding, by position. */
  private readonly found: Lease[] = [];

  constructor(options: LeasedStoreOptions) {
    this.store = options.store;
    this.name = options.store.name;
    this.reservations = options.store.reservations;
    this.settlements = options.store.settlements;
    this.clock = options.clock;
    this.observer = options.observer ?? {};
    this.table = new LeaseTable({
      limits: options.limits,
      replicaId: options.replicaId,
      exchange: options.exchange,
      ledger: options.settlements,
      observer: this.observer,
      onOpen: (lease, now) => void this.syncs.sync(lease, now),
    });
    this.syncs = new LeaseSync({ table: this.table, clock: options.clock, limits: options.limits, observer: this.observer });
  }

  /** Leases held. */
  get size(): number {
    return this.table.size;
  }

  /** Estimated bytes of the leases held. */
  get bytes(): number {
    return this.table.bytes;
  }

  /** Estimated bytes per second the leases' syncs send and read back. */
  get syncBytes(): number {
    return this.table.syncBytes;
  }

  decideLocally(counters: readonly CounterRequest[]): LocalAnswer | undefined {
    if (this.store.decideLocally === undefined || anyLeased(counters)) return undefined;
    return this.store.decideLocally(counters);
  }

  /** The decisions of a call whose every counter has a live lease; undefined for any other call (then decide()). */
  decideNow(counters: readonly CounterRequest[], options?: DecideOptions): CounterDecision[] | undefined {
    const n = counters.length;
    if (n === 0) return undefined;
    for (let i = 0; i < n; i++) if (counters[i].lease === undefined) return undefined;
    const now = this.clock.nowMs();
    // Leases are only looked up here: a counter without one goes on to decide(), which opens it
    // (or counts the refusal) once per call, though the limiter asks decideNow() first. The list
    // is reused: the call is decided synchronously, before another can start.
    const leases = this.found;
    for (let i = 0; i < n; i++) {
      const lease = this.table.held(counters[i]);
      if (lease === undefined || !isLive(lease, now)) return undefined;
      leases[i] = lease;
    }
    return this.decideLeased(counters, leases, now, options?.countDenied === true);
  }

  decide(counters: readonly CounterRequest[], options?: DecideOptions): Promise<CounterDecision[]> {
    if (!anyLeased(counters)) return this.store.decide(counters, options);
    try {
      const now = this.decideNow(counters, options);
      if (now !== undefined) return Promise.resolve(now);
      return this.decideMixed(counters, options);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  isHealthy(): boolean {
    return this.store.isHealthy();
  }

  clearCache(): void {
    this.store.clearCache?.();
  }

  close(): Promise<void> {
    return this.store.close();
  }

  /** The background work, every syncIntervalMs (./lease-sync.ts). Never rejects. */
  tick(): Promise<void> {
    return this.syncs.tick();
  }

  /** Settles what is pending and withdraws this replica's demand from every lease (at shutdown). */
  shutdown(): Promise<void> {
    return this.syncs.shutdown();
  }

  /** Every lease (at most `max`), for the metrics and the debug port. */
  view(max: number): { readonly leases: readonly LeaseView[]; readonly total: number } {
    const leases: LeaseView[] = [];
    const now = this.clock.nowMs();
    for (const l of this.table.values()) {
      if (leases.length >= max) break;
      const { domain, statKey } = markedRule(l.rule);
      leases.push({
        domain,
        rule: statKey,
        counter: l.counter.key,
        limit: l.counter.limit,
        windowMs: l.counter.windowMs,
        fraction: l.fraction,
        share: l.share,
        demand: l.demand,
        settled: l.settled,
        pending: l.pending + (l.unsettled?.hits ?? 0),
        live: isLive(l, now),
        refused: refusalOf(l),
        replicas: l.part.others.length,
      });
    }
    return { leases, total: this.table.size };
  }

  /** Every counter leased and live: judged and charged here, all-or-nothing among themselves. */
  private decideLeased(counters: readonly CounterRequest[], leases: readonly Lease[], now: number, countDenied: boolean): CounterDecision[] {
    const n = counters.length;
    const decisions = new Array<CounterDecision>(n);
    const stamp = ++this.stamp;
    let allAllowed = true;
    for (let i = 0; i < n; i++) {
      const c = counters[i];
      const lease = leases[i];
      lease.lastUsedMs = now;
      lease.asked += c.hits;
      const verdict = judge(lease, c, now, stamp, countDenied);
      decisions[i] = verdict;
      if (!verdict.allowed) allAllowed = false;
    }
    for (let i = 0; i < n; i++) {
      const c = counters[i];
      if (c.hits > 0 && (allAllowed || countDenied || c.countDenied === true)) charge(leases[i], c, now);
    }
    return decisions;
  }

  /**
   * A call with leased counters that are not all live, or with other counters: the live leased
   * ones judged and (when they all admit) charged here at once, the rest decided by the store (only
   * checked when a leased one denied); if the store denies, the leased hits are given back.
   */
  private async decideMixed(counters: readonly CounterRequest[], options: DecideOptions | undefined): Promise<CounterDecision[]> {
    const countDenied = options?.countDenied === true;
    const n = counters.length;
    const now = this.clock.nowMs();
    const stamp = ++this.stamp;
    const decisions = new Array<CounterDecision>(n);
    const here: number[] = [];
    const leases: Lease[] = [];
    const there: number[] = [];
    let allowedHere = true;
    for (let i = 0; i < n; i++) {
      const c = counters[i];
      const lease = c.lease === undefined ? undefined : this.table.leaseOf(c, now);
      if (lease !== undefined) {
        lease.lastUsedMs = now;
        lease.asked += c.hits;
      }
      if (lease === undefined || !isLive(lease, now)) {
        const refusal = lease === undefined ? undefined : refusalOf(lease);
        if (refusal !== undefined) this.observer.onLeaseRefused?.(refusal);
        there.push(i);
        continue;
      }
      here.push(i);
      leases.push(lease);
      const verdict = judge(lease, c, now, stamp, countDenied);
      decisions[i] = verdict;
      if (!verdict.allowed) allowedHere = false;
    }
    // Taken in the step that judged them (STYLE rule 15): every call in flight meanwhile sees them.
    const held: Held[] = [];
    for (let j = 0; j < here.length; j++) {
      const c = counters[here[j]];
      const anyway = countDenied || c.countDenied === true;
      if (c.hits > 0 && (allowedHere || anyway)) held.push(take(leases[j], c, now, anyway));
    }
    if (there.length === 0) return decisions;
    let admitted = allowedHere;
    let answers: CounterDecision[];
    const asked = there.map((i) => (allowedHere || countDenied || isChargedAnyway(counters[i]) ? counters[i] : { ...counters[i], hits: 0 }));
    try {
      answers = await this.store.decide(asked, options);
    } catch (err) {
      // Not decided: nothing of the call is admitted, nor charged.
      const after = this.clock.nowMs();
      for (const h of held) giveBack(h, after);
      throw err;
    }
    let storeAdmitted = true;
    for (let j = 0; j < there.length; j++) {
      const i = there[j];
      const charged = asked[j] === counters[i];
      decisions[i] = charged ? answers[j] : judgeCheck(answers[j], counters[i]);
      if (!decisions[i].allowed) admitted = false;
      if (!answers[j].allowed) storeAdmitted = false;
    }
    const after = this.clock.nowMs();
    if (!admitted) for (const h of held) if (!h.chargedAnyway) giveBack(h, after);
    // Hits of a leased counter the store took itself (its lease not live yet) are this replica's
    // usage all the same: counted against its part, and as its own in the shared counter.
    for (let j = 0; j < there.length; j++) {
      const c = asked[j];
      if (c.lease === undefined || c.hits === 0 || !(storeAdmitted || countDenied || c.countDenied === true)) continue;
      const lease = this.table.held(c);
      if (lease !== undefined) record(lease, c, after);
    }
    return decisions;
  }
}

function anyLeased(counters: readonly CounterRequest[]): boolean {
  for (let i = 0; i < counters.length; i++) if (counters[i].lease !== undefined) return true;
  return false;
}
