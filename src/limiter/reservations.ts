import type { CounterDecision, CounterRequest } from './store';

/**
 * Reservations: a descriptor ending in `(reserve, ID)` holds its estimate against its rule's limits
 * until a descriptor ending in `(commit, ID)` charges the real cost, or the hold lapses. This file is
 * the arithmetic every store runs (the memory store calls it; the Redis script RESERVE mirrors it
 * step by step): a book of holds per descriptor, and the verdicts a reserve or a commit gets.
 *
 * A reserve is judged on checks of the rule's counters (hits 0: what each counter has left, its
 * algorithm's own answer) and on what the book already holds: admitted iff, on every counter,
 * counted + reserved + estimate <= limit, i.e. the check admits and `remaining >= reserved + estimate`
 * (for every algorithm, a check's remaining is exactly how many more hits it would admit), and the
 * in-flight limit (`concurrency`) has room for one more. Then the estimate is held for the ID until
 * `ttlMs` later. A denial holds nothing.
 */

/** What a reservation call does: hold an estimate, charge the real cost and free the hold, or free it without a charge. */
export type HoldKind = 'reserve' | 'commit' | 'release';

/** How a reservation call went, as the store reports it (metrics, tests). */
export type HoldOutcome =
  /** reserve: admitted, the estimate is held. */
  | 'held'
  /** reserve: a counter or the in-flight limit has no room; nothing held. */
  | 'denied'
  /** reserve: the key (or the store) holds as many entries as it may; nothing held. */
  | 'full'
  /** reserve of an ID already in the book: nothing more held, judged as a check of what is held. */
  | 'again'
  /** commit of a held ID: charged, the hold freed. */
  | 'committed'
  /** commit of an ID the book does not know (never held, lapsed, or released): charged all the same. */
  | 'unknown'
  /** commit of an ID already committed: nothing charged. */
  | 'duplicate'
  /** release: the hold freed (or there was none), nothing charged. */
  | 'released';

/** The longest reservation ID, UTF-8 bytes. */
export const MAX_RESERVATION_ID_BYTES = 256;
/** How long a hold (and a commit's memory of its ID) lasts by default (RESERVATION_TTL), ms. */
export const DEFAULT_RESERVATION_TTL_MS = 600_000;
/** Entries one descriptor's book keeps at most by default (RESERVATIONS_MAX_PER_KEY). */
export const DEFAULT_RESERVATIONS_PER_KEY = 10_000;

/** One ID in a book: the estimate it holds, or (committed) a committed ID remembered so that a second commit charges nothing. */
export interface Hold {
  readonly estimate: number;
  readonly committed: boolean;
  /** From this instant (store clock, ms) on the entry is gone. */
  readonly expiresAtMs: number;
}

/**
 * The reservations of one descriptor. Entries in insertion order, which is their expiry order
 * (every entry lives the store's one TTL from when it was written, on a clock that never goes back),
 * so lapsed ones are dropped from the front.
 */
export interface HoldBook {
  readonly entries: Map<string, Hold>;
  /** Sum of the held (uncommitted) entries' estimates. */
  reserved: number;
  /** Number of held (uncommitted) entries. */
  held: number;
}

export function emptyBook(): HoldBook {
  return { entries: new Map(), reserved: 0, held: 0 };
}

/** Drops the entries lapsed at `nowMs` (expiresAtMs <= nowMs); returns how many of them were holds. */
export function dropLapsed(book: HoldBook, nowMs: number): number {
  let lapsed = 0;
  for (const [id, hold] of book.entries) {
    if (hold.expiresAtMs > nowMs) break;
    book.entries.delete(id);
    if (!hold.committed) {
      lapsed++;
      book.held--;
      book.reserved -= hold.estimate;
    }
  }
  return lapsed;
}

/** Holds `estimate` for `id` until nowMs + ttlMs. The caller has checked that the book does not know `id`. */
export function addHold(book: HoldBook, id: string, estimate: number, nowMs: number, ttlMs: number): void {
  book.entries.set(id, { estimate, committed: false, expiresAtMs: nowMs + ttlMs });
  book.held++;
  book.reserved += estimate;
}

/** Frees the hold of `id` if it has one; returns whether it had. */
export function freeHold(book: HoldBook, id: string): boolean {
  const hold = book.entries.get(id);
  if (hold === undefined || hold.committed) return false;
  book.entries.delete(id);
  book.held--;
  book.reserved -= hold.estimate;
  return true;
}

/** Marks `id` committed until nowMs + ttlMs (freeing its hold, if any): a second commit then charges nothing. */
export function markCommitted(book: HoldBook, id: string, nowMs: number, ttlMs: number): void {
  freeHold(book, id);
  // Deleted first, so that it moves to the end: insertion order stays expiry order.
  book.entries.delete(id);
  book.entries.set(id, { estimate: 0, committed: true, expiresAtMs: nowMs + ttlMs });
}

/** Milliseconds until the book's oldest entry lapses (0 for an empty book). */
export function firstLapseMs(book: HoldBook, nowMs: number): number {
  for (const hold of book.entries.values()) return Math.max(0, hold.expiresAtMs - nowMs);
  return 0;
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
 * Denied, the wait is until the book's oldest entry lapses (`lapseMs`): no sooner can a place free
 * itself without a commit.
 */
export function judgeInFlight(held: number, maxHeld: number, adding: boolean, lapseMs: number): CounterDecision {
  if (!adding) return { allowed: true, remaining: Math.max(0, maxHeld - held), resetMs: 0 };
  if (held + 1 <= maxHeld) return { allowed: true, remaining: maxHeld - held - 1, resetMs: 0 };
  return { allowed: false, remaining: 0, resetMs: lapseMs };
}

/** Every decision denied, with one wait: a reserve that the book's bound refused. */
export function refuseAll(count: number, resetMs: number): CounterDecision[] {
  return Array.from({ length: count }, () => ({ allowed: false, remaining: 0, resetMs }));
}
