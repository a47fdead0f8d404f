import { IN_PROCESS_STATE, giveBack, newCounterState, takeHits, type CounterState, type TakenHits, type Verdict } from './algorithms';
import { divideCapacity } from './quota-share';
import type { ReplicaDemand, ReplicaExchange } from './replica-exchange';
import {
  counterIdentity,
  isChargedAnyway,
  judgeCheck,
  type CounterDecision,
  type CounterRequest,
  type DecideOptions,
  type LocalAnswer,
  type Reservations,
  type SettleAnswer,
  type Settlements,
  type Store,
} from './store';
import type { Clock } from './types';

/**
 * Leases (`lease: true` limits): a limit shared through the store, decided in this process.
 *
 * Each replica holds a part of every leased counter it uses and decides against it alone, with the
 * in-process arithmetic of the memory store (./algorithms.ts), on its own hits. In the background,
 * every `syncIntervalMs`, per lease:
 * - the hits admitted here since the last settlement are charged to the shared counter
 *   (Store.settlements: each (replica, seq) applied once, so a settlement sent again after a
 *   timeout is never charged twice), and the counter's usage comes back;
 * - this replica's demand (hits asked per second, admitted or not) is exchanged with the other
 *   replicas' (ReplicaExchange, one entry per replica living `ttlMs`);
 * - the limit is divided among the replicas by demand, as quota shares are (./quota-share.ts: a
 *   replica asking less than an even part gets what it asks and headroom, the busy ones the rest,
 *   the parts add up to the limit; a rising demand counts from the next sync, once the others have
 *   seen it: see divide()), and this replica's part is also held under what the counter says the
 *   others use (their settled hits and any calls on the counter that are not leased).
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
 * went through recently (see liveUntil()): a new one is not (its first sync publishes its demand,
 * its second takes a part, once the others have seen it), nor one the ledger or the demand exchange
 * does not record (more replicas than `maxReplicas`: the others divide without it). What was
 * admitted here stays pending until the store takes it.
 *
 * A call mixing leased and other counters stays all-or-nothing and decides and takes in one step:
 * the live leased ones are judged and, when they admit, charged here at once, before the store is
 * asked about the rest (so every call in flight sees them); if the store then denies, their hits
 * are given back (giveBack in ./algorithms.ts: exact for windows, for buckets less what drained
 * meanwhile).
 */

/** Caps and timing of the leases (settings LEASE_*). */
export interface LeaseLimits {
  /** How often a lease settles its hits and exchanges its demand, ms. */
  readonly syncIntervalMs: number;
  /** A part lives this long after the store last answered its settlement; so does a replica's demand entry, ms. */
  readonly ttlMs: number;
  /** Leases held at once; a counter beyond is decided by the store. */
  readonly maxLeases: number;
  /** Estimated bytes of every lease together; a counter beyond is decided by the store. */
  readonly maxBytes: number;
  /** Replicas a leased counter's ledger and demand exchange record; a replica beyond decides nothing in process. */
  readonly maxReplicas: number;
  /** Estimated bytes per second the syncs of every lease together send to the store and read back; a new lease beyond is refused. */
  readonly maxSyncBytesPerSecond: number;
}

/**
 * Why a leased counter was decided by the store: the leases of this process were full (`keys`:
 * maxLeases, `memory`: maxBytes, `traffic`: maxSyncBytesPerSecond), or its ledger or demand
 * exchange holds maxReplicas other replicas (`replicas`).
 */
export type LeaseRefusal = 'keys' | 'memory' | 'traffic' | 'replicas';

export interface LeaseObserver {
  /** Hits of a rule (its domain and stat key) the shared counter took from this replica. */
  onSettled?(domain: string, statKey: string, hits: number): void;
  /** A settlement or exchange that failed; the lease keeps its part until it expires, and its hits pending. */
  onStoreError?(err: unknown): void;
  /** A leased counter decided by the store because it could not hold a part (once per counter of a call). */
  onLeaseRefused?(reason: LeaseRefusal): void;
}

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

/** The `lease` mark of a leased counter (CounterRequest.lease): its rule's domain and stat key. */
export function leaseMark(domain: string, statKey: string): string {
  return `${domain}\u0000${statKey}`;
}

/** A `lease` mark's domain and stat key. */
export function markedRule(mark: string): { readonly domain: string; readonly statKey: string } {
  const at = mark.indexOf('\u0000');
  return at < 0 ? { domain: '', statKey: mark } : { domain: mark.slice(0, at), statKey: mark.slice(at + 1) };
}

/** One lease as the views show it (metrics, debug port). */
export interface LeaseView {
  readonly domain: string;
  /** The rule's stat key. */
  readonly rule: string;
  readonly counter: string;
  readonly limit: number;
  readonly windowMs: number;
  /** This replica's part of the limit (0..1) and its hits per second. */
  readonly fraction: number;
  readonly share: number;
  /** Hits per second asked here at the last sync (Infinity: not measured yet). */
  readonly demand: number;
  /** Hits this replica settled to the shared counter since the lease began. */
  readonly settled: number;
  /** Hits admitted here and not yet taken by the store. */
  readonly pending: number;
  /** Whether the lease decides now (see LeasedStore: both halves of its sync went through recently). */
  readonly live: boolean;
  /** Why it holds no part although synced: more replicas than the ledger or the exchange record. */
  readonly refused: LeaseRefusal | undefined;
  /** Other replicas holding the counter, as the last exchange said. */
  readonly replicas: number;
}

/** Estimated bytes of one lease beyond its key (objects, map entries, the state). */
const LEASE_BYTES = 1_024;
/**
 * Estimated bytes of one sync's two Redis calls (a settlement and a demand exchange, each naming the
 * counter once) beside the names: framing, the scripts' hashes, the numbers, the counter's spec,
 * the demand and both replies' fixed parts; and of each replica's entry in the exchange's reply
 * beside its name.
 */
const SYNC_CALL_BYTES = 512;
const SYNC_ENTRY_BYTES = 48;
/**
 * How long the shared counter's ledger remembers this replica's last settlement: a settlement whose
 * reply was lost is sent again until Redis answers, and is recognised as applied within this time.
 * So it is the longest this replica may go without an answer from Redis (a partition, an outage)
 * and still never have a settlement charged twice; the price is that a replica that went away
 * holds its place among the ledger's maxReplicas as long (REPLICA_ID lets a restarted one take
 * its own place again).
 */
export const LEDGER_TTL_MS = 600_000;

interface Lease {
  readonly id: string;
  readonly rule: string;
  readonly bytes: number;
  /** The counter's tag when it has one of its own (not its key): the ledger and the demand live in its slot. */
  readonly tag: string | undefined;
  /** UTF-8 bytes of the counter's key and tag, as each sync call sends them. */
  readonly nameBytes: number;
  /** Estimated bytes per second of its syncs (counted in the store's syncBytes). */
  syncBytes: number;
  /** The counter as last asked (its limit may change with a reload), with hits 0. */
  counter: CounterRequest;
  /** This replica's own admitted hits, by the counter's algorithm. */
  state: CounterState | undefined;
  /**
   * The hits this replica settled, charged to the real counter when each settlement was made: what
   * of the shared counter's usage is this replica's, in the shared counter's time (a hit admitted
   * here reaches it up to one sync interval later).
   */
  mirror: CounterState | undefined;
  /** The counter decided here (limit and capacity scaled to `fraction`), made again when either changes; keyed by hits. */
  local: CounterRequest | undefined;
  fraction: number;
  share: number;
  live: boolean;
  /** Until when the part holds (see liveUntil()). */
  liveUntilMs: number;
  /** When the last settlement that went through (applied, or applied before) was sent. */
  settledSentMs: number;
  /** When the last demand exchange that recorded this replica was sent. */
  exchangedSentMs: number;
  /** The last answer of the ledger, and of the exchange, had no room for this replica. */
  ledgerRefused: boolean;
  exchangeRefused: boolean;
  /** Hits asked (admitted or not) in the current and the previous sync interval, and when the current began. */
  asked: number;
  askedBefore: number;
  askedSinceMs: number;
  askedBeforeMs: number;
  demand: number;
  /**
   * The demand of the last exchange that went through: what the other replicas divided by since
   * (each syncs once an interval). Undefined until one has, or when they may since have dropped this
   * replica's entry: they divided without this replica.
   */
  seenDemand: number | undefined;
  pending: number;
  /** Counts the times pending was taken into a settlement: hits given back in the same count are still pending. */
  epoch: number;
  /** A settlement sent and not yet acknowledged: sent again as it is, so that it is applied once. */
  unsettled: { readonly seq: number; readonly hits: number } | undefined;
  settled: number;
  others: readonly ReplicaDemand[];
  lastUsedMs: number;
  syncing: Promise<void> | undefined;
  dropped: boolean;
  /** The call being decided (LeasedStore.stamp) and the hits its earlier counters on this lease add: one pass per call. */
  stamp: number;
  callHits: number;
}

/** Hits of a mixed call taken from a lease before the store answered, to give back if it denies. */
interface Held {
  readonly lease: Lease;
  /** The counter as charged (its local limit then). */
  readonly local: CounterRequest;
  readonly taken: TakenHits;
  readonly epoch: number;
  readonly chargedAnyway: boolean;
}

/** A Store that decides `lease` counters in process (see above) and hands every other call to the store it wraps. */
export class LeasedStore implements Store {
  readonly name: string;
  readonly reservations: Reservations | undefined;
  readonly settlements: Settlements | undefined;
  private readonly store: Store;
  private readonly ledger: Settlements;
  private readonly exchange: ReplicaExchange;
  private readonly clock: Clock;
  private readonly replicaId: string;
  private readonly memberBytes: number;
  private readonly limits: LeaseLimits;
  private readonly observer: LeaseObserver;
  private readonly leases = new Map<string, Lease>();
  /** The lease of a counter object (a kept plan's counters are the same objects on every call). */
  private readonly byCounter = new WeakMap<CounterRequest, Lease>();
  private usedBytes = 0;
  private usedSyncBytes = 0;
  private seq = 0;
  /** Counts the calls decided here: a lease's callHits belong to the call of its stamp. */
  private stamp = 0;
  /** The leases of the call decideNow() is deciding, by position. */
  private readonly found: Lease[] = [];
  private ticking: Promise<void> | undefined;

  constructor(options: LeasedStoreOptions) {
    this.store = options.store;
    this.name = options.store.name;
    this.reservations = options.store.reservations;
    this.settlements = options.store.settlements;
    this.ledger = options.settlements;
    this.exchange = options.exchange;
    this.clock = options.clock;
    this.replicaId = options.replicaId;
    this.memberBytes = Buffer.byteLength(options.replicaId);
    this.limits = options.limits;
    this.observer = options.observer ?? {};
  }

  /** Leases held. */
  get size(): number {
    return this.leases.size;
  }

  /** Estimated bytes of the leases held. */
  get bytes(): number {
    return this.usedBytes;
  }

  /** Estimated bytes per second the leases' syncs send and read back. */
  get syncBytes(): number {
    return this.usedSyncBytes;
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
      const lease = this.heldLease(counters[i]);
      if (lease === undefined || !this.isLive(lease, now)) return undefined;
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

  /**
   * The background work, every syncIntervalMs: each lease settles, exchanges its demand and is
   * divided again; a lease unused for two TTLs with nothing pending withdraws its demand and is
   * dropped. Never rejects.
   */
  tick(): Promise<void> {
    if (this.ticking !== undefined) return this.ticking;
    const now = this.clock.nowMs();
    const syncs: Promise<void>[] = [];
    for (const lease of this.leases.values()) {
      const idle = now - lease.lastUsedMs > 2 * this.limits.ttlMs && lease.pending === 0 && lease.unsettled === undefined;
      syncs.push(idle ? this.withdraw(lease) : this.sync(lease, now));
    }
    if (syncs.length === 0) return Promise.resolve();
    this.ticking = Promise.all(syncs).then(() => {
      this.ticking = undefined;
    });
    return this.ticking;
  }

  /** Settles what is pending and withdraws this replica's demand from every lease (at shutdown). */
  async shutdown(): Promise<void> {
    await this.ticking;
    const now = this.clock.nowMs();
    await Promise.all([...this.leases.values()].map((l) => this.sync(l, now)));
    await Promise.all([...this.leases.values()].map((l) => this.withdraw(l)));
  }

  /** Every lease (at most `max`), for the metrics and the debug port. */
  view(max: number): { readonly leases: readonly LeaseView[]; readonly total: number } {
    const leases: LeaseView[] = [];
    const now = this.clock.nowMs();
    for (const l of this.leases.values()) {
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
        live: this.isLive(l, now),
        refused: refusalOf(l),
        replicas: l.others.length,
      });
    }
    return { leases, total: this.leases.size };
  }

  /* ---------- deciding ---------- */

  /** The counter's lease if it has one; none is opened. */
  private heldLease(c: CounterRequest): Lease | undefined {
    const lease = this.byCounter.get(c);
    if (lease !== undefined && !lease.dropped) return lease;
    const held = this.leases.get(counterIdentity(c));
    if (held !== undefined) this.byCounter.set(c, held);
    return held;
  }

  /** The counter's lease (made when there is room), or undefined. */
  private leaseOf(c: CounterRequest, now: number): Lease | undefined {
    const held = this.heldLease(c);
    if (held !== undefined) return held;
    const lease = this.open(counterIdentity(c), c, now);
    if (lease !== undefined) this.byCounter.set(c, lease);
    return lease;
  }

  private open(id: string, c: CounterRequest, now: number): Lease | undefined {
    const bytes = LEASE_BYTES + 2 * id.length + 8 * (c.subWindows ?? 1);
    const tag = c.tag === undefined || c.tag === c.key ? undefined : c.tag;
    const nameBytes = Buffer.byteLength(c.key) + (tag === undefined ? 0 : Buffer.byteLength(tag));
    const syncBytes = this.syncBytesOf(nameBytes, undefined);
    const refusal: LeaseRefusal | undefined =
      this.leases.size >= this.limits.maxLeases
        ? 'keys'
        : this.usedBytes + bytes > this.limits.maxBytes
          ? 'memory'
          : this.usedSyncBytes + syncBytes > this.limits.maxSyncBytesPerSecond
            ? 'traffic'
            : undefined;
    if (refusal !== undefined) {
      this.observer.onLeaseRefused?.(refusal);
      return undefined;
    }
    const lease: Lease = {
      id,
      rule: c.lease ?? '',
      bytes,
      tag,
      nameBytes,
      syncBytes,
      counter: c.hits === 0 ? c : { ...c, hits: 0 },
      state: undefined,
      mirror: undefined,
      local: undefined,
      fraction: 0,
      share: 0,
      live: false,
      liveUntilMs: -Infinity,
      settledSentMs: -Infinity,
      exchangedSentMs: -Infinity,
      ledgerRefused: false,
      exchangeRefused: false,
      asked: 0,
      askedBefore: 0,
      askedSinceMs: now,
      askedBeforeMs: now,
      demand: Infinity,
      seenDemand: undefined,
      pending: 0,
      epoch: 0,
      unsettled: undefined,
      settled: 0,
      others: [],
      lastUsedMs: now,
      syncing: undefined,
      dropped: false,
      stamp: 0,
      callHits: 0,
    };
    this.leases.set(id, lease);
    this.usedBytes += bytes;
    this.usedSyncBytes += syncBytes;
    // The first sync publishes its demand, the second makes it live; until then its calls go to the store.
    void this.sync(lease, now);
    return lease;
  }

  /**
   * Estimated bytes per second of a lease's syncs: each of its two calls names the counter once,
   * with this replica's name; the exchange's reply names every replica holding it (`others`, none
   * known yet when undefined).
   */
  private syncBytesOf(nameBytes: number, others: readonly ReplicaDemand[] | undefined): number {
    let entries = SYNC_ENTRY_BYTES + this.memberBytes;
    if (others !== undefined) for (const o of others) entries += SYNC_ENTRY_BYTES + Buffer.byteLength(o.member);
    const perSync = 2 * (nameBytes + this.memberBytes) + SYNC_CALL_BYTES + entries;
    return Math.ceil((perSync * 1000) / this.limits.syncIntervalMs);
  }

  private isLive(lease: Lease, now: number): boolean {
    if (lease.live && now > lease.liveUntilMs) lease.live = false;
    return lease.live;
  }

  /** The counter as decided here: the limit (and a bucket's capacity) scaled to this replica's part, with `c`'s hits. */
  private localOf(lease: Lease, c: CounterRequest): CounterRequest {
    const local = lease.local;
    const known = lease.counter;
    if (local !== undefined && local.hits === c.hits && known.limit === c.limit && known.burst === c.burst) return local;
    // A reload may change the limit of the same counter.
    if (known.limit !== c.limit || known.burst !== c.burst) lease.counter = { ...c, hits: 0 };
    const f = lease.fraction;
    const made: CounterRequest = {
      ...c,
      limit: Math.floor(f * c.limit + 1e-9),
      burst: c.burst === undefined ? undefined : Math.floor(f * c.burst + 1e-9),
      countDenied: undefined,
    };
    lease.local = made;
    return made;
  }

  /**
   * The verdict on `c`'s hits against its lease's part, with the hits earlier counters of the same
   * call (`stamp`) add to the same lease; adds `c`'s to them when they are charged (admitted, or
   * charged whatever the outcome). One pass per call, whatever the number of counters.
   */
  private judge(lease: Lease, c: CounterRequest, now: number, stamp: number, countDenied: boolean): Verdict {
    if (lease.stamp !== stamp) {
      lease.stamp = stamp;
      lease.callHits = 0;
    }
    const verdict = IN_PROCESS_STATE[c.algorithm].decide(this.localOf(lease, c), lease.state, now, lease.callHits);
    if (verdict.allowed || countDenied || c.countDenied === true) lease.callHits += c.hits;
    return verdict;
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
      const verdict = this.judge(lease, c, now, stamp, countDenied);
      decisions[i] = verdict;
      if (!verdict.allowed) allAllowed = false;
    }
    for (let i = 0; i < n; i++) {
      const c = counters[i];
      if (c.hits > 0 && (allAllowed || countDenied || c.countDenied === true)) this.charge(leases[i], c, now);
    }
    return decisions;
  }

  /** Hits of `c` the store charged itself: into this replica's usage and its mirror of what it put in the shared counter. */
  private record(lease: Lease, c: CounterRequest, now: number): void {
    lease.state = charged(lease.state, this.localOf(lease, c), now);
    lease.mirror = charged(lease.mirror, c, now);
  }

  /** Hits of `c` admitted here: into this replica's usage, and pending until the next settlement. */
  private charge(lease: Lease, c: CounterRequest, now: number): void {
    lease.state = charged(lease.state, this.localOf(lease, c), now);
    lease.pending += c.hits;
  }

  /** charge(), keeping what giveBack() needs to take the hits out again. */
  private take(lease: Lease, c: CounterRequest, now: number, chargedAnyway: boolean): Held {
    const local = this.localOf(lease, c);
    const state = (lease.state ??= newCounterState(local, now));
    const taken = takeHits(local, state, now);
    lease.pending += c.hits;
    return { lease, local, taken, epoch: lease.epoch, chargedAnyway };
  }

  /**
   * Gives back hits take() charged: out of this replica's usage, and out of what is pending while
   * no settlement has taken them yet (one that has wrote them to the shared counter, which then
   * counts them: over-counting by what one settlement held, never under-counting).
   */
  private giveBack(held: Held, now: number): void {
    const { lease, local, taken } = held;
    if (lease.state !== undefined) giveBack(local, lease.state, taken, now);
    if (lease.epoch === held.epoch) lease.pending = Math.max(0, lease.pending - taken.hits);
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
      const lease = c.lease === undefined ? undefined : this.leaseOf(c, now);
      if (lease !== undefined) {
        lease.lastUsedMs = now;
        lease.asked += c.hits;
      }
      if (lease === undefined || !this.isLive(lease, now)) {
        const refusal = lease === undefined ? undefined : refusalOf(lease);
        if (refusal !== undefined) this.observer.onLeaseRefused?.(refusal);
        there.push(i);
        continue;
      }
      here.push(i);
      leases.push(lease);
      const verdict = this.judge(lease, c, now, stamp, countDenied);
      decisions[i] = verdict;
      if (!verdict.allowed) allowedHere = false;
    }
    // Taken in the step that judged them (STYLE rule 15): every call in flight meanwhile sees them.
    const held: Held[] = [];
    for (let j = 0; j < here.length; j++) {
      const c = counters[here[j]];
      const anyway = countDenied || c.countDenied === true;
      if (c.hits > 0 && (allowedHere || anyway)) held.push(this.take(leases[j], c, now, anyway));
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
      for (const h of held) this.giveBack(h, after);
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
    if (!admitted) for (const h of held) if (!h.chargedAnyway) this.giveBack(h, after);
    // Hits of a leased counter the store took itself (its lease not live yet) are this replica's
    // usage all the same: counted against its part, and as its own in the shared counter.
    for (let j = 0; j < there.length; j++) {
      const c = asked[j];
      if (c.lease === undefined || c.hits === 0 || !(storeAdmitted || countDenied || c.countDenied === true)) continue;
      const lease = this.heldLease(c);
      if (lease !== undefined) this.record(lease, c, after);
    }
    return decisions;
  }

  /* ---------- in the background ---------- */

  /**
   * The next sequence number of a settlement: above every one sent before, and drawn from the
   * clock (ms x 1000), so that a process restarted under the same name (REPLICA_ID) continues above
   * the seqs of its previous run, whose highest the ledgers keep. Safe integers until the year 2255;
   * up to 1,000 settlements a millisecond keep it at the clock (the sync byte budget keeps a process
   * far below that). A ledger holding a higher seq of this name still is told apart (sync()).
   */
  private nextSeq(now: number): number {
    this.seq = Math.max(this.seq + 1, now * 1000);
    return this.seq;
  }

  /**
   * Settles the lease's pending hits (or sends its unacknowledged settlement again), exchanges its
   * demand, then divides the limit again and renews the part. A failure keeps the hits for the
   * next sync, and the part until liveUntil().
   */
  private sync(lease: Lease, now: number): Promise<void> {
    if (lease.syncing !== undefined) return lease.syncing;
    const c = lease.counter;
    if (lease.unsettled === undefined) {
      lease.unsettled = { seq: this.nextSeq(now), hits: lease.pending };
      if (lease.pending > 0) lease.mirror = charged(lease.mirror, { ...c, hits: lease.pending }, now);
      lease.pending = 0;
      lease.epoch += 1;
    }
    const settlement = lease.unsettled;
    // This replica's part of the counter's usage once the settlement is in: the rest is the others'.
    const ownUsed = lease.mirror === undefined ? 0 : usedOf(c, lease.mirror, now);
    // Demand over the last two intervals: steady enough to divide by, recent enough to follow a change.
    const span = now - lease.askedBeforeMs;
    if (span > 0) lease.demand = ((lease.asked + lease.askedBefore) * 1000) / span;
    lease.askedBefore = lease.asked;
    lease.askedBeforeMs = lease.askedSinceMs;
    lease.asked = 0;
    lease.askedSinceMs = now;
    const { ttlMs, maxReplicas } = this.limits;
    // What the others divided by since this replica's last exchange: nothing of it when its entry
    // may have expired since (they have divided without it, as for a new lease).
    const seenDemand = now < lease.exchangedSentMs + ttlMs ? lease.seenDemand : undefined;
    const settling = this.ledger.settle({
      key: c.key,
      tag: lease.tag,
      member: this.replicaId,
      seq: settlement.seq,
      counters: [{ ...c, hits: settlement.hits, countDenied: true }],
      ttlMs: LEDGER_TTL_MS,
      maxMembers: maxReplicas,
    });
    const exchanging = this.exchange.exchangeDemand({
      key: c.key,
      tag: lease.tag,
      kind: 'lease',
      publish: { member: this.replicaId, demand: Number.isFinite(lease.demand) ? lease.demand : Number.MAX_SAFE_INTEGER, admitted: 0, proxies: 1 },
      ttlMs,
      maxMembers: maxReplicas,
    });
    lease.syncing = Promise.allSettled([settling, exchanging]).then(([settled, exchanged]) => {
      lease.syncing = undefined;
      if (exchanged.status === 'fulfilled') this.exchanged(lease, exchanged.value, now);
      else this.observer.onStoreError?.(exchanged.reason);
      if (settled.status === 'rejected') {
        this.observer.onStoreError?.(settled.reason);
        return;
      }
      const answer = settled.value;
      lease.ledgerRefused = answer.full;
      if (answer.full) {
        // Not charged, not recorded: the same settlement goes again at the next sync.
      } else if (!answer.applied && answer.heldSeq > settlement.seq) {
        // The ledger holds a higher seq of this name than any this process sent on it: an earlier
        // process under the same REPLICA_ID. Not applied: sent again above it.
        this.seq = Math.max(this.seq, answer.heldSeq);
        lease.unsettled = { seq: this.nextSeq(now), hits: settlement.hits };
      } else {
        // Applied now, or by an earlier send of it (its reply lost): taken either way.
        if (lease.unsettled === settlement) lease.unsettled = undefined;
        lease.settled += settlement.hits;
        lease.settledSentMs = now;
        if (settlement.hits > 0 && this.observer.onSettled !== undefined) {
          const { domain, statKey } = markedRule(lease.rule);
          this.observer.onSettled(domain, statKey, settlement.hits);
        }
        if (!lease.ledgerRefused && !lease.exchangeRefused) this.divide(lease, answer, ownUsed, seenDemand, now);
      }
      if (lease.ledgerRefused || lease.exchangeRefused) lease.live = false;
    });
    return lease.syncing;
  }

  /**
   * An exchange that went through: the others' demand, and whether this replica's entry is among
   * the live ones (a budget holding maxReplicas others has no room for it: the others divide
   * without it, so it must not decide in process).
   */
  private exchanged(lease: Lease, entries: readonly ReplicaDemand[], sentMs: number): void {
    const others: ReplicaDemand[] = [];
    let recorded = false;
    for (const d of entries) {
      if (d.member === this.replicaId) recorded = true;
      else others.push(d);
    }
    lease.others = others;
    lease.exchangeRefused = !recorded;
    if (recorded) {
      lease.exchangedSentMs = sentMs;
      lease.seenDemand = lease.demand;
    } else {
      lease.seenDemand = undefined;
    }
    const syncBytes = this.syncBytesOf(lease.nameBytes, others);
    if (!lease.dropped) this.usedSyncBytes += syncBytes - lease.syncBytes;
    lease.syncBytes = syncBytes;
  }

  /**
   * Until when a part holds: while both halves of the sync went through recently.
   * - The exchange: this replica's demand entry lives `ttlMs` in the store after the call that wrote
   *   it, which was sent no later than the send time kept here (Redis writes it later still). The
   *   other replicas drop it at their first sync after that, and then divide as if this one were
   *   gone: so this replica stops deciding here one sync interval before it can expire, and what it
   *   admitted until then reaches the shared counter with its next settlement, before the others
   *   stop counting it among them.
   * - The settlement: the part lives `ttlMs` after the last settlement the store took was sent
   *   (what is admitted meanwhile is pending, and the others do not see it in the counter).
   * Past it the store decides the counter, exactly (under the failure policy when it is down),
   * until both go through again; the last known peers are kept meanwhile.
   */
  private liveUntil(lease: Lease): number {
    const { ttlMs, syncIntervalMs } = this.limits;
    return Math.min(lease.settledSentMs + ttlMs, lease.exchangedSentMs + ttlMs - syncIntervalMs);
  }

  /**
   * The part from the division by demand, capped by what the counter says the others use; renewed
   * until liveUntil(). Divided by the smaller part of two demands of this replica: the one just measured,
   * and the one the others have seen (and divided by) since the last exchange. The others hold the
   * parts they took from the latter until their next sync, and the hits they admit meanwhile are
   * not in the counter yet: a part taken from a higher demand alone could add up with theirs to
   * more than the limit, by as much as the others' whole parts when every replica gets busy at once.
   * So a part grows one sync after the demand (once the others have made room), and shrinks at once.
   */
  private divide(lease: Lease, answer: SettleAnswer, ownUsed: number, seenDemand: number | undefined, now: number): void {
    // Not seen by the others yet (a new lease, or one whose entry may have expired): they divided
    // the whole limit among themselves, and its calls stay with the store until the next sync. A
    // part taken now, beside theirs, could add up to twice the limit when a new counter gets busy
    // on several replicas at once.
    if (seenDemand === undefined) return;
    const c = lease.counter;
    const capacity = c.burst ?? c.limit;
    const decision = answer.decisions[0];
    const used = decision.allowed ? capacity - decision.remaining : capacity;
    const othersUsed = Math.max(0, used - ownUsed);
    const perSecond = c.limit / (c.windowMs / 1000);
    const others = lease.others.map((o) => o.demand);
    const share = Math.min(divideCapacity(perSecond, [lease.demand, ...others])[0], divideCapacity(perSecond, [seenDemand, ...others])[0]);
    const byDemand = perSecond > 0 ? share / perSecond : 0;
    const byUsage = capacity > 0 ? Math.max(0, capacity - othersUsed) / capacity : 0;
    const fraction = Math.max(0, Math.min(1, byDemand, byUsage));
    if (fraction !== lease.fraction) {
      lease.fraction = fraction;
      lease.local = undefined;
    }
    lease.share = fraction * perSecond;
    lease.liveUntilMs = this.liveUntil(lease);
    lease.live = now <= lease.liveUntilMs;
  }

  /** Withdraws this replica's demand and drops the lease (its hits are all settled). */
  private withdraw(lease: Lease): Promise<void> {
    this.drop(lease);
    const c = lease.counter;
    return this.exchange.exchangeDemand({ key: c.key, tag: lease.tag, kind: 'lease', withdraw: this.replicaId, ttlMs: this.limits.ttlMs }).then(
      () => undefined,
      (err: unknown) => this.observer.onStoreError?.(err),
    );
  }

  private drop(lease: Lease): void {
    if (this.leases.get(lease.id) !== lease) return;
    lease.dropped = true;
    this.leases.delete(lease.id);
    this.usedBytes -= lease.bytes;
    this.usedSyncBytes -= lease.syncBytes;
  }
}

/** Why a synced lease holds no part: more replicas than its ledger or its demand exchange record. */
function refusalOf(lease: Lease): LeaseRefusal | undefined {
  return lease.ledgerRefused || lease.exchangeRefused ? 'replicas' : undefined;
}

function anyLeased(counters: readonly CounterRequest[]): boolean {
  for (let i = 0; i < counters.length; i++) if (counters[i].lease !== undefined) return true;
  return false;
}

/** `state` (made when there is none) with `c`'s hits charged at `now`. */
function charged(state: CounterState | undefined, c: CounterRequest, now: number): CounterState {
  const s = state ?? newCounterState(c, now);
  IN_PROCESS_STATE[c.algorithm].charge(c, s, now);
  return s;
}

/** How much of counter `c`'s capacity (hits 0) `state` uses at `now`, in hits. */
function usedOf(c: CounterRequest, state: CounterState, now: number): number {
  const check = IN_PROCESS_STATE[c.algorithm].decide(c, state, now, 0);
  return Math.max(0, (c.burst ?? c.limit) - check.remaining);
}
