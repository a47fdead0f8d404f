import type { Algorithm } from './types';
import type { CalendarWindow } from './calendar';
import type { HoldKind, HoldOutcome } from './hold';
import { SHARING_KINDS, type SharingKind } from './sharing-kind';

/**
 * The Store port: one call per ShouldRateLimit request, all counters together. It holds counters
 * only; what replicas tell each other is the ReplicaExchange port (./replica-exchange.ts). A store that can
 * answer some calls from what it remembers locally (the denial cache) says so through
 * decideLocally(), which callers ask before decide(); its answers carry no marks of their own.
 *
 * Contract (every adapter, checked by test/contract):
 * - Time comes from the store (memory: its injected Clock; Redis: `TIME`), never from the caller.
 * - Decision per counter, by its algorithm (src/limiter/algorithms.ts is the reference):
 *   allowed iff the algorithm admits `hits` more.
 * - All-or-nothing: counters are incremented only when every counter in the call is allowed
 *   (unless `countDenied`, where every counter is charged whatever the outcome; a counter with its
 *   own `countDenied` is charged whatever the outcome too, the others as without it).
 * - `hits` 0 checks without counting.
 * - Results are in input order.
 * - A store that cannot answer rejects with StoreUnavailableError (never hangs past its deadline).
 */
export interface Store {
  /** Human-readable adapter name for logs and metrics ("memory", "redis"). */
  readonly name: string;
  /**
   * Decides and charges `counters` all-or-nothing. A frozen array is PlannedCounters, the same
   * object on every call of one request: a store may key work on it (isPlannedCounters).
   */
  decide(counters: readonly CounterRequest[] | PlannedCounters, options?: DecideOptions): Promise<CounterDecision[]>;
  /**
   * Optional: the answer to this call from local knowledge alone (no round trip, nothing charged),
   * or undefined when there is none; then call decide(). Callers ask this first, on every call.
   */
  decideLocally?(counters: readonly CounterRequest[]): LocalAnswer | undefined;
  /**
   * Optional, for a store that decides in this process: decide() done at once, its decisions
   * returned (thrown where decide() would reject), or undefined when this call cannot be decided
   * at once (then call decide()). Callers that have it ask it first.
   */
  decideNow?(counters: readonly CounterRequest[], options?: DecideOptions): CounterDecision[] | undefined;
  /** True while the store can answer (drives gRPC health). */
  isHealthy(): boolean;
  close(): Promise<void>;
  /** Optional: drops local answers derived from the current limits (cached denials); call after a config reload. */
  clearCache?(): void;
  /**
   * Optional: reservations held in the store (./reservations.ts), so that a commit may reach another
   * replica than its reserve. A store without it holds none: the limiter refuses reserve and commit
   * descriptors.
   */
  readonly reservations?: Reservations;
  /**
   * Optional: settlements of leased counters (src/sharing/leases), charges a replica decided in process
   * and writes in the background, each applied once however often it is sent. A store without it
   * takes no leases: leased limits are decided by decide() as any other.
   */
  readonly settlements?: Settlements;
}

/**
 * Charges decided in process (leases, src/sharing/leases), written to the shared counters once each.
 *
 * Contract (every adapter, checked by test/contract):
 * - settle charges every counter its hits whatever the outcome (as countDenied), atomically with
 *   the counters' decision, and records (member, seq) in the ledger for `ttlMs` (the member's entry
 *   lapses ttlMs after the call that wrote it, whatever other members write);
 * - a call whose seq is not above the last one recorded for its member on that ledger charges
 *   nothing: its counters are answered as checks (hits 0), `applied` is false and `heldSeq` says
 *   the seq recorded. So a settlement sent again after a timeout (that Redis may have run) is never
 *   charged twice, and a sender learns when the seq recorded is above any it sent (an earlier
 *   process under the same member name);
 * - the ledger holds one entry per member (the highest seq), at most `maxMembers` members (lapsed
 *   entries make room first); a new member beyond is refused: nothing charged, nothing recorded,
 *   its counters answered as checks, `full` true. So every charge is applied once;
 * - a call the adapter cannot take (settleCallProblem, a counter it cannot decide) rejects before
 *   anything is charged or recorded;
 * - a call that cannot be answered rejects with StoreUnavailableError within its deadline.
 */
export interface Settlements {
  settle(call: SettleCall): Promise<SettleAnswer>;
}

export interface SettleCall {
  /**
   * The ledger: a counter's key, or the counters' tag, free of `{` and `}`. The Redis store keeps it
   * in their hash slot: under `tag` when given, else under its own name.
   */
  readonly key: string;
  /** The counters' hash tag (CounterRequest.tag) when the ledger is not named by it; absent: `key` is the tag. */
  readonly tag?: string;
  /**
   * Whose settlement: leases' (`lease`, the default), or another kind sharing the same counters
   * (regions'); each kind's ledger on a key is its own, so their members and seqs never meet.
   */
  readonly kind?: SharingKind;
  /** The replica settling (unique among every process sharing the store). */
  readonly member: string;
  /** Increases with every settlement the member sends on one ledger (a positive safe integer). */
  readonly seq: number;
  /** The counters, each with the hits to charge. */
  readonly counters: readonly CounterRequest[];
  /** How long the ledger keeps the member's seq after this call, ms (longer than any resend). */
  readonly ttlMs: number;
  /** Members the ledger records at most (1..MAX_SETTLE_MEMBERS); default MAX_SETTLE_MEMBERS. */
  readonly maxMembers?: number;
}

export interface SettleAnswer {
  /** One per counter, in order: after the charge, or a check when nothing was charged. */
  readonly decisions: readonly CounterDecision[];
  /** True when charged and recorded. */
  readonly applied: boolean;
  /** True when refused: a new member of a ledger holding maxMembers live members (nothing charged or recorded). */
  readonly full: boolean;
  /** The member's seq the ledger holds after the call (0 when none: refused). */
  readonly heldSeq: number;
}

/**
 * The suffix of a ledger's name for a settlement of `kind`: leases' ledgers keep the name they had
 * before kinds existed (`|settled`), so that an upgrade finds the seqs they hold.
 */
export function ledgerSuffix(kind: SharingKind | undefined): string {
  return kind === undefined || kind === 'lease' ? '|settled' : `|settled:${kind}`;
}

/** Members one settlement ledger records at most. */
export const MAX_SETTLE_MEMBERS = 256;

/**
 * Why no adapter takes `call` (a caller's bug, rejected before anything is charged), or undefined
 * when they all do: a ledger key and tag free of `{` and `}`, a member named, seq and ttlMs positive
 * safe integers, maxMembers from 1 to MAX_SETTLE_MEMBERS.
 */
export function settleCallProblem(call: SettleCall): string | undefined {
  if (call.key.length === 0 || /[{}]/.test(call.key)) return `settlement ledger ${JSON.stringify(call.key)} is empty or holds a brace`;
  if (call.tag !== undefined && (call.tag.length === 0 || /[{}]/.test(call.tag))) return `settlement tag ${JSON.stringify(call.tag)} is empty or holds a brace`;
  if (call.kind !== undefined && !SHARING_KINDS.includes(call.kind))
    return `settlement kind ${JSON.stringify(call.kind)} is not one of ${SHARING_KINDS.join(', ')}`;
  if (call.member.length === 0) return 'settlement member is empty';
  if (!Number.isSafeInteger(call.seq) || call.seq < 1) return `settlement seq ${call.seq} is not a positive safe integer`;
  if (!Number.isSafeInteger(call.ttlMs) || call.ttlMs < 1) return `settlement ttl ${call.ttlMs} ms is not a positive safe integer`;
  const max = call.maxMembers;
  if (max !== undefined && (!Number.isSafeInteger(max) || max < 1 || max > MAX_SETTLE_MEMBERS)) {
    return `settlement maxMembers ${max} is not an integer from 1 to ${MAX_SETTLE_MEMBERS}`;
  }
  return undefined;
}

/**
 * Reservations of descriptors, kept beside their counters (on Redis in their hash slot).
 *
 * Contract (every adapter, checked by test/contract):
 * - One call is atomic with the decision of its counters: no other call sees the counters and the
 *   book between the two.
 * - reserve: refused ('reused', every decision denied) when the book holds the ID already; refused
 *   ('full') when the book holds its maximum of holds or bytes; else admitted iff every counter
 *   checked with hits 0 admits and has `remaining >= reserved + estimate` and the in-flight limit
 *   (maxHeld) has room for one more; then the estimate is held for holdTimeMs(ttlMs, holdMs).
 *   Nothing else is charged. A denial holds nothing.
 * - commit: each counter is charged min(hits, its limit) whatever the outcome (recorded past the
 *   limit), and the ID's hold is freed if it has one. Nothing is remembered of the ID: a second
 *   commit is charged again.
 * - release: the ID's hold is freed, nothing charged; the counters are answered as checks.
 * - Lapsed holds are dropped before anything is judged.
 */
export interface Reservations {
  /** The longest a hold lasts (RESERVATION_TTL), ms. */
  readonly ttlMs: number;
  hold(call: HoldCall): Promise<HoldAnswer>;
}

export interface HoldCall {
  readonly kind: HoldKind;
  /**
   * The descriptor's book: its counters' tag (or its one counter's key), free of `{` and `}`, so
   * that the Redis store keeps it in their hash slot.
   */
  readonly key: string;
  /** The reservation ID (at most MAX_RESERVATION_ID_BYTES of UTF-8). */
  readonly id: string;
  /** reserve: the estimate to hold; commit: the hits to charge; release: unused. */
  readonly hits: number;
  /** The descriptor's counters with a window, one per limit, each with hits 0 (a check). */
  readonly counters: readonly CounterRequest[];
  /** The rule's in-flight limit (`concurrency`), when it has one. */
  readonly maxHeld: number | undefined;
  /** reserve: how long to hold, ms (the rule's hold time, ./reservations.ts holdTimeOf), capped by the store's TTL; undefined: the TTL. */
  readonly holdMs?: number;
}

export interface HoldAnswer {
  /** One per counter, in order, then one for the in-flight limit when the call had maxHeld. */
  readonly decisions: readonly CounterDecision[];
  readonly outcome: HoldOutcome;
  /** Reservations the book holds after the call. */
  readonly held: number;
  /** Holds of the book found lapsed, and dropped, by this call (a book whose entries all lapsed may be gone whole, uncounted). */
  readonly lapsed: number;
}

export interface DecideOptions {
  /** Charge denied requests too (the reference server's behaviour); default false. */
  readonly countDenied?: boolean;
}

export interface CounterRequest {
  /**
   * The counter's identity, built by src/limiter/keys.ts: injective in (domain, entries, window, algorithm),
   * and free of `{` and `}`, so an adapter may wrap it in a Redis hash tag. Adapters add their prefix and window suffix.
   */
  readonly key: string;
  readonly limit: number;
  readonly windowMs: number;
  readonly algorithm: Algorithm;
  readonly hits: number;
  /** token_bucket / leaky_bucket: capacity in hits; default `limit`. */
  readonly burst?: number;
  /** sliding_window: counters per window (divides windowMs; part of the key's layout); default 1. */
  readonly subWindows?: number;
  /** sliding_window: count the oldest sub-window in full; default false. */
  readonly strict?: boolean;
  /**
   * Charge this counter even when the call is denied (a rule's `count_denied_requests`), as
   * DecideOptions.countDenied does for every counter; default false. A store that splits a call
   * keeps such a charge when another part of the call denies it.
   */
  readonly countDenied?: boolean;
  /**
   * Counters of a call with the same tag are kept together: the Redis store puts them in one hash
   * slot (`<prefix>{<tag>}<key>`), so a Cluster decides them atomically. Free of `{` and `}`, like
   * the key. A tag equal to the key is the same as none. The limits of one descriptor share one.
   */
  readonly tag?: string;
  /**
   * fixed_window only: the window is this calendar period containing the store's now
   * (./calendar.ts calendarPeriod), not an epoch-aligned windowMs (then the unit's nominal length).
   */
  readonly calendar?: CalendarWindow;
  /**
   * A `lease: true` limit's rule (its stat key): the counter is decided in process against this
   * replica's part of the limit by the lease layer (src/sharing/leases) when the store stack has one;
   * stores themselves ignore it.
   */
  readonly lease?: string;
  /**
   * A `scope: global` limit's counter (it is leased too, `lease` set): this region's part of it is
   * shared with the other regions through the global store. Stores themselves ignore it.
   */
  readonly global?: true;
}

/** A counter charged even when its call is denied (a `count_denied_requests` rule's, with hits). */
export function isChargedAnyway(counter: CounterRequest): boolean {
  return counter.countDenied === true && counter.hits > 0;
}

/**
 * A counter checked with hits 0 after another counter denied its call, judged for its own hits.
 * Whether they would have fitted is `remaining >= hits` (remaining = L - used); when they would
 * not, the wait is unknown without another call, so one window is reported (an upper bound). A
 * calendar period may be longer than its unit's nominal window (a 31-day month), but it is a fixed
 * window: hits that fit in a fresh one wait exactly until its end, which the check reported.
 */
export function judgeCheck(check: CounterDecision, counter: CounterRequest): CounterDecision {
  const hits = counter.hits;
  if (check.remaining >= hits) return { allowed: true, remaining: check.remaining - hits, resetMs: check.resetMs };
  const toEnd = counter.calendar !== undefined && hits <= counter.limit;
  return { allowed: false, remaining: 0, resetMs: toEnd ? check.resetMs : counter.windowMs };
}

declare const planned: unique symbol;

/**
 * The counters of a request the limiter keeps a plan for (./plan.ts): frozen, and the same array on
 * every call of that request, so that a store may key work per request on it (the Redis store keeps
 * each one's arguments as RESP bytes). Made by plannedCounters alone; recognised by isPlannedCounters.
 */
export type PlannedCounters = readonly CounterRequest[] & { readonly [planned]: true };

/** `counters`, frozen, as a kept plan's: the caller hands the store this same array on every call of its request. */
export function plannedCounters(counters: readonly CounterRequest[]): PlannedCounters {
  return Object.freeze(counters) as PlannedCounters;
}

/** Whether `counters` is a kept plan's (a frozen array: nothing else hands a store one). */
export function isPlannedCounters(counters: readonly CounterRequest[]): counters is PlannedCounters {
  return Object.isFrozen(counters);
}

/** One string per distinct counter of a call: a key named with another algorithm or window is another counter. */
export function counterIdentity(c: CounterRequest): string {
  return `${c.algorithm}/${c.windowMs}/${c.key}`;
}

export interface CounterDecision {
  readonly allowed: boolean;
  /** L - (floor(estimate) + h) after an allowed request; 0 when denied. Never negative. */
  readonly remaining: number;
  /**
   * Milliseconds. Denied: until the same request would be allowed with no other traffic.
   * Allowed: until the counter has fully drained.
   */
  readonly resetMs: number;
}

/**
 * A call answered locally (Store.decideLocally): the verdicts in input order, and for each counter
 * the local time (the store's Clock, ms) until which its remembered denial holds. A local answer
 * is what the store would answer for every counter of the call (nothing is charged): a store that
 * cannot say so for some counter answers nothing locally.
 */
export interface LocalAnswer {
  readonly decisions: readonly CounterDecision[];
  readonly deniedUntilMs: readonly number[];
}

/** The store could not answer (down, slow, overloaded). Mapped to gRPC UNAVAILABLE at the edge. */
export class StoreUnavailableError extends Error {
  /** Its entry in the error catalogue (src/errors.ts). */
  readonly code = 'store_unavailable';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'StoreUnavailableError';
  }
}
