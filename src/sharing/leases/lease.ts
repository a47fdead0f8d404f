import {
  IN_PROCESS_STATE,
  giveBack as giveBackHits,
  newCounterState,
  takeHits,
  type CounterState,
  type TakenHits,
  type Verdict,
} from '../../limiter/algorithms';
import type { CounterRequest } from '../../limiter/store';
import { charged, type SettledShare } from '../part-sync';
import { returnPending } from '../settlement';
import type { SharedPart } from '../shared-part';

/**
 * One lease: this replica's part of one leased counter, its own admitted hits, and the decision
 * against the part (the memory store's arithmetic, ../../limiter/algorithms.ts). The fields the
 * decision reads sit on the lease itself, so that deciding a call allocates nothing.
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
  /** Whether the lease decides now (both halves of its sync went through recently: ../part-sync.ts liveUntil). */
  readonly live: boolean;
  /** Why it holds no part although synced: more replicas than the ledger or the exchange record. */
  readonly refused: LeaseRefusal | undefined;
  /** Other replicas holding the counter, as the last exchange said. */
  readonly replicas: number;
}

/** One lease: a settled share (../part-sync.ts) of one counter, with what its decision reads. */
export interface Lease extends SettledShare {
  readonly id: string;
  /** The counter's `lease` mark: its rule (markedRule). */
  readonly rule: string;
  readonly bytes: number;
  /** UTF-8 bytes of the counter's key and tag, as each sync call sends them. */
  readonly nameBytes: number;
  /** Estimated bytes per second of its syncs (counted in the table's syncBytes). */
  syncBytes: number;
  /** This replica's own admitted hits, by the counter's algorithm. */
  state: CounterState | undefined;
  lastUsedMs: number;
  dropped: boolean;
  /** The call being decided (LeasedStore's stamp) and the hits its earlier counters on this lease add: one pass per call. */
  stamp: number;
  callHits: number;
}

/** Hits of a mixed call taken from a lease before the store answered, to give back if it denies. */
export interface Held {
  readonly lease: Lease;
  /** The counter as charged (its local limit then). */
  readonly local: CounterRequest;
  readonly taken: TakenHits;
  readonly epoch: number;
  readonly chargedAnyway: boolean;
}

/** A new lease of counter `c` (hits 0 or not) on `part`, holding no part yet. */
export function newLease(id: string, c: CounterRequest, part: SharedPart, bytes: number, nameBytes: number, syncBytes: number, now: number): Lease {
  return {
    id,
    rule: c.lease ?? '',
    bytes,
    part,
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
    lastUsedMs: now,
    syncing: undefined,
    dropped: false,
    stamp: 0,
    callHits: 0,
  };
}

/** Why a synced lease holds no part: more replicas than its ledger or its demand exchange record. */
export function refusalOf(lease: Lease): LeaseRefusal | undefined {
  return lease.ledgerRefused || lease.exchangeRefused ? 'replicas' : undefined;
}

/** The counter as decided here: the limit (and a bucket's capacity) scaled to this replica's part, with `c`'s hits. */
export function localOf(lease: Lease, c: CounterRequest): CounterRequest {
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
export function judge(lease: Lease, c: CounterRequest, now: number, stamp: number, countDenied: boolean): Verdict {
  if (lease.stamp !== stamp) {
    lease.stamp = stamp;
    lease.callHits = 0;
  }
  const verdict = IN_PROCESS_STATE[c.algorithm].decide(localOf(lease, c), lease.state, now, lease.callHits);
  if (verdict.allowed || countDenied || c.countDenied === true) lease.callHits += c.hits;
  return verdict;
}

/** Hits of `c` the store charged itself: into this replica's usage and its mirror of what it put in the shared counter. */
export function record(lease: Lease, c: CounterRequest, now: number): void {
  lease.state = charged(lease.state, localOf(lease, c), now);
  lease.mirror = charged(lease.mirror, c, now);
}

/** Hits of `c` admitted here: into this replica's usage, and pending until the next settlement. */
export function charge(lease: Lease, c: CounterRequest, now: number): void {
  lease.state = charged(lease.state, localOf(lease, c), now);
  lease.pending += c.hits;
}

/** charge(), keeping what giveBack() needs to take the hits out again. */
export function take(lease: Lease, c: CounterRequest, now: number, chargedAnyway: boolean): Held {
  const local = localOf(lease, c);
  const state = (lease.state ??= newCounterState(local, now));
  const taken = takeHits(local, state, now);
  lease.pending += c.hits;
  return { lease, local, taken, epoch: lease.epoch, chargedAnyway };
}

/**
 * Gives back hits take() charged: out of this replica's usage, and out of what is pending while
 * no settlement has taken them yet (see returnPending).
 */
export function giveBack(held: Held, now: number): void {
  const { lease, local, taken } = held;
  if (lease.state !== undefined) giveBackHits(local, lease.state, taken, now);
  returnPending(lease, held.epoch, taken.hits);
}
