import {
  addHold,
  DEFAULT_RESERVATION_TTL_MS,
  DEFAULT_RESERVATIONS_PER_KEY,
  dropLapsed,
  emptyBook,
  firstLapseMs,
  freeHold,
  judgeHeld,
  judgeInFlight,
  markCommitted,
  refuseAll,
  type HoldBook,
} from '../limiter/reservations';
import type { CounterDecision, CounterRequest, DecideOptions, HoldAnswer, HoldCall, Reservations } from '../limiter/store';
import type { Clock } from '../limiter/types';

/**
 * The memory store's reservations: one book per descriptor (../limiter/reservations.ts) in this
 * process, decided with the store's own counters in one synchronous step (atomic, as every call of
 * the memory store). Bounded: entries per book, and entries and estimated bytes over all books; a
 * reserve that would cross a bound is refused (nothing is ever evicted: an evicted hold would let
 * its estimate be spent twice).
 */

export interface MemoryReservationsOptions {
  readonly clock: Clock;
  /** The memory store's decideNow. */
  readonly decide: (counters: readonly CounterRequest[], options?: DecideOptions) => CounterDecision[];
  readonly ttlMs?: number;
  /** Entries (holds and remembered commits) of one book, at most. */
  readonly maxPerKey?: number;
  /** Entries of all books together, at most. */
  readonly maxEntries?: number;
  /** Estimated bytes of all books together (keys and IDs included), at most. */
  readonly maxBytes?: number;
}

/** Defaults of the process-wide bounds (RESERVATIONS_MAX_ENTRIES, RESERVATIONS_MAX_BYTES). */
export const DEFAULT_RESERVATIONS_MAX_ENTRIES = 1_000_000;
export const DEFAULT_RESERVATIONS_MAX_BYTES = 128 * 1024 * 1024;

/** An entry's fixed cost beside its ID's characters, and a book's beside its key's, estimated. */
const ENTRY_BYTES = 96;
const BOOK_BYTES = 160;

const COUNTED: DecideOptions = Object.freeze({ countDenied: true });

export class MemoryReservations implements Reservations {
  readonly ttlMs: number;
  private readonly clock: Clock;
  private readonly decide: MemoryReservationsOptions['decide'];
  private readonly maxPerKey: number;
  private readonly maxEntries: number;
  private readonly maxBytes: number;
  private readonly books = new Map<string, HoldBook>();
  private entries = 0;
  private bytesHeld = 0;

  constructor(options: MemoryReservationsOptions) {
    this.clock = options.clock;
    this.decide = options.decide;
    this.ttlMs = options.ttlMs ?? DEFAULT_RESERVATION_TTL_MS;
    this.maxPerKey = options.maxPerKey ?? DEFAULT_RESERVATIONS_PER_KEY;
    this.maxEntries = options.maxEntries ?? DEFAULT_RESERVATIONS_MAX_ENTRIES;
    this.maxBytes = options.maxBytes ?? DEFAULT_RESERVATIONS_MAX_BYTES;
  }

  /** Entries held over every book (holds and remembered commits). */
  get size(): number {
    return this.entries;
  }

  /** Estimated bytes of every book. */
  get bytes(): number {
    return this.bytesHeld;
  }

  hold(call: HoldCall): Promise<HoldAnswer> {
    try {
      return Promise.resolve(this.holdNow(call));
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** hold(), synchronously. */
  holdNow(call: HoldCall): HoldAnswer {
    const now = this.clock.nowMs();
    const { key, id, counters, maxHeld } = call;
    const book = this.books.get(key) ?? emptyBook();
    const lapsed = this.dropLapsed(key, book, now);
    const entry = book.entries.get(id);
    const decisions: CounterDecision[] = [];
    let outcome: HoldAnswer['outcome'];
    switch (call.kind) {
      case 'reserve': {
        const checks = this.decide(counters);
        if (entry !== undefined) {
          for (let i = 0; i < counters.length; i++) decisions.push(judgeHeld(checks[i], counters[i], book.reserved));
          if (maxHeld !== undefined) decisions.push(judgeInFlight(book.held, maxHeld, false, 0));
          outcome = 'again';
          break;
        }
        const idBytes = ENTRY_BYTES + id.length;
        if (book.entries.size >= this.maxPerKey || this.entries >= this.maxEntries || this.bytesHeld + idBytes + this.bookBytes(key, book) > this.maxBytes) {
          decisions.push(...refuseAll(counters.length + (maxHeld === undefined ? 0 : 1), firstLapseMs(book, now) || this.ttlMs));
          outcome = 'full';
          break;
        }
        let admitted = true;
        for (let i = 0; i < counters.length; i++) {
          const d = judgeHeld(checks[i], counters[i], book.reserved + call.hits);
          if (!d.allowed) admitted = false;
          decisions.push(d);
        }
        if (maxHeld !== undefined) {
          const d = judgeInFlight(book.held, maxHeld, true, firstLapseMs(book, now));
          if (!d.allowed) admitted = false;
          decisions.push(d);
        }
        outcome = admitted ? 'held' : 'denied';
        if (admitted) this.add(key, book, () => addHold(book, id, call.hits, now, this.ttlMs), idBytes);
        break;
      }
      case 'commit': {
        if (entry !== undefined && entry.committed) {
          decisions.push(...this.decide(counters));
          outcome = 'duplicate';
        } else {
          decisions.push(...this.decide(withHits(counters, call.hits), COUNTED));
          outcome = entry === undefined ? 'unknown' : 'committed';
          // An unknown ID is remembered only while the bounds allow: past them, a second commit charges again.
          if (entry !== undefined) markCommitted(book, id, now, this.ttlMs);
          else if (book.entries.size < this.maxPerKey && this.entries < this.maxEntries && this.bytesHeld + ENTRY_BYTES + id.length <= this.maxBytes) {
            this.add(key, book, () => markCommitted(book, id, now, this.ttlMs), ENTRY_BYTES + id.length);
          }
        }
        if (maxHeld !== undefined) decisions.push(judgeInFlight(book.held, maxHeld, false, 0));
        break;
      }
      case 'release': {
        decisions.push(...this.decide(counters));
        if (freeHold(book, id)) this.forget(id);
        if (maxHeld !== undefined) decisions.push(judgeInFlight(book.held, maxHeld, false, 0));
        outcome = 'released';
        break;
      }
    }
    const held = book.held;
    if (book.entries.size === 0) this.dropBook(key);
    return { decisions, outcome, held, lapsed };
  }

  /** Drops the lapsed entries of every book (the memory store's sweep); returns the holds among them. */
  sweep(): number {
    const now = this.clock.nowMs();
    let lapsed = 0;
    for (const [key, book] of this.books) {
      lapsed += this.dropLapsed(key, book, now);
      if (book.entries.size === 0) this.dropBook(key);
    }
    return lapsed;
  }

  private dropLapsed(key: string, book: HoldBook, now: number): number {
    const before = book.entries.size;
    if (before === 0) return 0;
    // The lapsed entries' bytes, counted out before the book drops them (the same front of it).
    for (const [id, hold] of book.entries) {
      if (hold.expiresAtMs > now) break;
      this.forget(id);
    }
    const lapsed = dropLapsed(book, now);
    if (book.entries.size === 0 && before > 0) this.dropBook(key);
    return lapsed;
  }

  /** Adds one entry to `book` (registering the book if new). */
  private add(key: string, book: HoldBook, write: () => void, idBytes: number): void {
    if (book.entries.size === 0) {
      this.books.set(key, book);
      this.bytesHeld += this.bookBytes(key, undefined);
    }
    write();
    this.entries++;
    this.bytesHeld += idBytes;
  }

  /** An entry of `id` gone. */
  private forget(id: string): void {
    this.entries--;
    this.bytesHeld -= ENTRY_BYTES + id.length;
  }

  private dropBook(key: string): void {
    if (this.books.delete(key)) this.bytesHeld -= this.bookBytes(key, undefined);
  }

  /** What registering `book` under `key` would add (0 when it is registered already). */
  private bookBytes(key: string, book: HoldBook | undefined): number {
    if (book !== undefined && this.books.has(key)) return 0;
    return BOOK_BYTES + key.length;
  }
}

function withHits(counters: readonly CounterRequest[], hits: number): CounterRequest[] {
  return counters.map((c) => ({ ...c, hits }));
}
