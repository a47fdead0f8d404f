import type { CounterDecision, CounterRequest } from './store';

export type { HoldKind, HoldOutcome } from './hold';

/**
 * Reservations: a descriptor ending in `(reserve, ID)` holds its estimate against its rule's limits
 * until a descriptor ending in `(commit, ID)` charges the real cost, or the hold lapses. Only a rule
 * that opts in takes them (`reservations: true`, implied by a `concurrency` limit; ./plan.ts refuses
 * the entries elsewhere). This file is the arithmetic every store runs (the memory store calls it;
 * the Redis script RESERVE mirrors it step by step): a book of holds per descriptor, and the verdicts
 * a reserve or a commit gets.
 *
 * A reserve is judged on checks of the rule's counters (hits 0: what each counter has left, its
 * algorithm's own answer) and on what the book already holds: admitted iff, on every counter,
 * counted + reserved + estimate <= limit, i.e. the check admits and `remaining >= reserved + estimate`
 * (for every algorithm, a check's remaining is exactly how many more hits it would admit), and the
 * in-flight limit (`concurrency`) has room for one more. Then the estimate is held for the ID for
 * the hold time (holdTimeMs: at most RESERVATION_TTL, by default at most the rule's shortest window).
 * A denial holds nothing.
 *
 * Who owns an ID: the book knows the IDs it holds, and nothing else (a committed ID is not
 * remembered: remembering it would cost an entry per request for the TTL, and would cap a busy
 * descriptor at its book's size per TTL).
 * - reserve of an ID the book holds: refused ('reused'), nothing more held, so concurrent reserves
 *   of one ID hold once and count once in flight; any other reserve is a new reservation, judged in full.
 * - commit of an ID the book holds: charged, its hold freed ('committed'); of any other ID (never
 *   reserved, lapsed, committed already): charged all the same ('unknown').
 * - release (the limiter's own, for a request another descriptor denied): frees the hold, charges nothing.
 *
 * Why no sequence of calls makes a cost free. A cost is what a commit says; every commit charges its
 * counters min(hits, limit) (commitCharge), whatever the book holds, whatever was committed before
 * under the same ID, and whatever the outcome (past the limit too). Nothing else removes a charge:
 * a commit frees at most the one hold of its ID, and a hold never charged anything. A reserve holds
 * capacity and charges nothing, so the only thing a sequence can avoid is the hold itself, and each
 * way out of a hold is accounted for: a commit charges; a release happens only when the same
 * request was denied, so nothing ran; a lapse ends a hold that occupied its estimate for the hold
 * time (by default up to one window of its rule, as a charge would weigh on it). Reusing an ID
 * gains nothing: a second reserve of a held ID is refused, and a reserve after the commit is a new
 * hold whose own commit charges again. What a commit charges past the cap (the counter's limit)
 * is not recorded: one commit denies its descriptor for about one window at most, instead of
 * for as long as a caller-chosen amount takes to drain.
 */

/** The longest reservation ID, UTF-8 bytes. */
export const MAX_RESERVATION_ID_BYTES = 256;
/** How long a hold lasts at most by default (RESERVATION_TTL), ms. */
export const DEFAULT_RESERVATION_TTL_MS = 600_000;
/** Holds one descriptor's book keeps at most by default (RESERVATIONS_MAX_PER_KEY). */
export const DEFAULT_RESERVATIONS_PER_KEY = 10_000;
/** Bytes one descriptor's book keeps at most by default, each hold counted as holdBytes (RESERVATIONS_MAX_KEY_BYTES). */
export const DEFAULT_RESERVATIONS_KEY_BYTES = 1024 * 1024;
/**
 * What a hold costs its book beside its ID's bytes, in both stores: Redis keeps the ID twice (a
 * hash field and a sorted-set member) with their encodings, the memory store a map entry and its object.
 */
export const HOLD_ENTRY_BYTES = 64;
/** The longest hold time a rule may ask for (`reservation_hold_seconds`), s: RESERVATION_TTL's own maximum. */
export const MAX_HOLD_SECONDS = 7 * 86_400;

/** One held ID in a book. */
export interface Hold {
  readonly estimate: number;
  /** From this instant (store clock, ms) the hold is gone. */
  readonly expiresAtMs: number;
}

/**
 * The reservations of one descriptor: its holds in insertion order, which is their expiry order
 * (the holds of one descriptor share its rule's hold time, on a clock that never goes back), so
 * lapsed ones are dropped from the front. (After a reload that shortens a rule's hold time, holds
 * taken since lapse no sooner than the older ones before them: at most the old hold time. Redis
 * orders them by expiry and drops each at its own.)
 */
export interface HoldBook {
  readonly entries: Map<string, Hold>;
  /** Sum of the holds' estimates. */
  reserved: number;
  /** Sum of the holds' holdBytes. */
  bytes: number;
}

export function emptyBook(): HoldBook {
  return { entries: new Map(), reserved: 0, bytes: 0 };
}

/** What the hold of `id` costs its book's byte bound. */
export function holdBytes(id: string): number {
  return HOLD_ENTRY_BYTES + Buffer.byteLength(id);
}

/** Whether the book may take a hold of `id`: fewer than `maxEntries` holds, and its bytes within `maxBytes` after it. */
export function hasRoom(book: HoldBook, id: string, maxEntries: number, maxBytes: number): boolean {
  return book.entries.size < maxEntries && book.bytes + holdBytes(id) <= maxBytes;
}

/** Drops the holds lapsed at `nowMs` (expiresAtMs <= nowMs), each given to `gone`; returns how many. */
export function dropLapsed(book: HoldBook, nowMs: number, gone?: (id: string) => void): number {
  let lapsed = 0;
  for (const [id, hold] of book.entries) {
    if (hold.expiresAtMs > nowMs) break;
    book.entries.delete(id);
    book.reserved -= hold.estimate;
    book.bytes -= holdBytes(id);
    gone?.(id);
    lapsed++;
  }
  return lapsed;
}

/** Holds `estimate` for `id` until nowMs + holdMs. The caller has checked that the book does not hold `id` and has room. */
export function addHold(book: HoldBook, id: string, estimate: number, nowMs: number, holdMs: number): void {
  book.entries.set(id, { estimate, expiresAtMs: nowMs + holdMs });
  book.reserved += estimate;
  book.bytes += holdBytes(id);
}

/** Frees the hold of `id` if it has one; returns whether it had. */
export function freeHold(book: HoldBook, id: string): boolean {
  const hold = book.entries.get(id);
  if (hold === undefined) return false;
  book.entries.delete(id);
  book.reserved -= hold.estimate;
  book.bytes -= holdBytes(id);
  return true;
}

/** Milliseconds until the book's oldest hold lapses (0 for an empty book). */
export function firstLapseMs(book: HoldBook, nowMs: number): number {
  for (const hold of book.entries.values()) return Math.max(0, hold.expiresAtMs - nowMs);
  return 0;
}

/**
 * How long a reserve holds: what the call asks (its rule's hold time, holdTimeOf), never more than
 * the store's RESERVATION_TTL; the TTL when it asks nothing.
 */
export function holdTimeMs(ttlMs: number, askedMs: number | undefined): number {
  return askedMs === undefined ? ttlMs : Math.min(ttlMs, askedMs);
}

/**
 * A rule's hold time, ms, as its reserves ask it: its `reservation_hold_seconds` when set (1 s to
 * MAX_HOLD_SECONDS), else its shortest window (a hold never keeps a limit's room longer than that
 * limit's window); undefined for a rule with no window (only `concurrency`): the TTL then.
 */
export function holdTimeOf(windowsMs: readonly number[], holdSeconds: number): number | undefined {
  if (holdSeconds > 0) return holdSeconds * 1000;
  return windowsMs.length === 0 ? undefined : Math.min(...windowsMs);
}

/** What a commit charges a counter: its hits, at most the counter's limit (the rest is not recorded). */
export function commitCharge(counter: CounterRequest, hits: number): number {
  return Math.min(hits, counter.limit);
}

/**
 * A counter's verdict on a reserve that needs `need` (what the book holds plus the estimate), from
 * its check (hits 0). Denied, the wait is not the counter's alone (holds may be committed or lapse
 * sooner): one window is reported, or for a calendar window whose limit the need fits, the period's
 * end (a fixed window empties then), as for a soft counter judged on a check.
 */
export function judgeHeld(check: CounterDecision, counter: CounterRequest, need: number): CounterDecision {
  if (check.allowed && check.remaining >= need) return { allowed: true, remaining: check.remaining - need, resetMs: check.resetMs };
  const toEnd = counter.calendar !== undefined && need <= counter.limit;
  return { allowed: false, remaining: 0, resetMs: toEnd ? check.resetMs : counter.windowMs };
}

/**
 * The in-flight limit's verdict: on a reserve (`adding`), admitted iff `held + 1 <= maxHeld`, with
 * what is left after it; otherwise (a commit or release, after its hold was freed) what is left.
 * Denied, the wait is until the book's oldest hold lapses (`lapseMs`): no sooner can a place free
 * itself without a commit.
 */
export function judgeInFlight(held: number, maxHeld: number, adding: boolean, lapseMs: number): CounterDecision {
  if (!adding) return { allowed: true, remaining: Math.max(0, maxHeld - held), resetMs: 0 };
  if (held + 1 <= maxHeld) return { allowed: true, remaining: maxHeld - held - 1, resetMs: 0 };
  return { allowed: false, remaining: 0, resetMs: lapseMs };
}

/** Every decision denied, with one wait: a reserve refused before its counters were judged (a full book, a reused ID). */
export function refuseAll(count: number, resetMs: number): CounterDecision[] {
  return Array.from({ length: count }, () => ({ allowed: false, remaining: 0, resetMs }));
}
