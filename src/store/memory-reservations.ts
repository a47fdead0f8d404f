import {
  addHold,
  commitCharge,
  DEFAULT_RESERVATION_TTL_MS,
  DEFAULT_RESERVATIONS_KEY_BYTES,
  DEFAULT_RESERVATIONS_PER_KEY,
  dropLapsed,
  emptyBook,
  firstLapseMs,
  freeHold,
  hasRoom,
  holdBytes,
  holdTimeMs,
  judgeHeld,
  judgeInFlight,
  refuseAll,
  type HoldBook,
} from '../limiter/reservations';
import type { CounterDecision, CounterRequest, DecideOptions, HoldAnswer, HoldCall, Reservations } from '../limiter/store';
import type { Clock } from '../limiter/types';

/**
 * The memory store's reservations: one book per descriptor (../limiter/reservations.ts) in this
 * process, decided with the store's own counters in one synchronous step (atomic, as every call of
 * the memory store). Bounded twice:
 * - per book, as on Redis: holds and their bytes (RESERVATIONS_MAX_PER_KEY, RESERVATIONS_MAX_KEY_BYTES);
 *   a reserve past them is refused ('full'), on that descriptor only. A hold is never evicted from
 *   a book that is in use: an evicted hold would let its estimate be spent twice.
 * - over all books (RESERVATIONS_MAX_ENTRIES, RESERVATIONS_MAX_BYTES): a book that needs room takes
 *   it from the least recently used other books, dropped whole, as the store's counters are (their
 *   holds are forgotten: their commits are still charged, as unknown IDs). So no caller's books can
 *   fill a table another descriptor's reserves need; a flood of books costs the idlest descriptors
 *   their holds, as it costs them their counters.
 */

export interface MemoryReservationsOptions {
  readonly clock: Clock;
  /** The memory store's decideNow. */
  readonly decide: (counters: readonly CounterRequest[], options?: DecideOptions) => CounterDecision[];
  /** The longest hold (RESERVATION_TTL), ms. */
  readonly ttlMs?: number;
  /** Holds of one book, at most. */
  readonly maxPerKey?: number;
  /** Bytes of one book's holds (holdBytes each), at most. */
  readonly maxKeyBytes?: number;
  /** Holds of all books together, at most (the least recently used books make room). */
  readonly maxEntries?: number;
  /** Estimated bytes of all books together (keys and IDs included), at most (likewise). */
  readonly maxBytes?: number;
}

/** Defaults of the process-wide bounds (RESERVATIONS_MAX_ENTRIES, RESERVATIONS_MAX_BYTES). */
export const DEFAULT_RESERVATIONS_MAX_ENTRIES = 1_000_000;
export const DEFAULT_RESERVATIONS_MAX_BYTES = 128 * 1024 * 1024;

/** A hold's object beside what its book counts (holdBytes), and a book's cost beside its key's characters, estimated. */
const HOLD_OBJECT_BYTES = 32;
const BOOK_BYTES = 160;

const COUNTED: DecideOptions = Object.freeze({ countDenied: true });

export class MemoryReservations implements Reservations {
  readonly ttlMs: number;
  private readonly clock: Clock;
  private readonly decide: MemoryReservationsOptions['decide'];
  private readonly maxPerKey: number;
  private readonly maxKeyBytes: number;
  private readonly maxEntries: number;
  private readonly maxBytes: number;
  /** Every book with a hold, least recently used first. */
  private readonly books = new Map<string, HoldBook>();
  private entries = 0;
  private bytesHeld = 0;
  private evicted = 0;

  constructor(options: MemoryReservationsOptions) {
    this.clock = options.clock;
    this.decide = options.decide;
    this.ttlMs = options.ttlMs ?? DEFAULT_RESERVATION_TTL_MS;
    this.maxPerKey = options.maxPerKey ?? DEFAULT_RESERVATIONS_PER_KEY;
    this.maxKeyBytes = options.maxKeyBytes ?? DEFAULT_RESERVATIONS_KEY_BYTES;
    this.maxEntries = options.maxEntries ?? DEFAULT_RESERVATIONS_MAX_ENTRIES;
    this.maxBytes = options.maxBytes ?? DEFAULT_RESERVATIONS_MAX_BYTES;
  }

  /** Holds over every book. */
  get size(): number {
    return this.entries;
  }

  /** Estimated bytes of every book. */
  get bytes(): number {
    return this.bytesHeld;
  }

  /** Holds dropped with their books to make room for other books, since the start. */
  get evictedHolds(): number {
    return this.evicted;
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
    const known = this.books.get(key);
    const lapsed = known === undefined ? 0 : this.dropLapsed(key, known, now);
    // The most recently used book goes last: the process-wide bound takes room from the front.
    if (known !== undefined && known.entries.size > 0) {
      this.books.delete(key);
      this.books.set(key, known);
    }
    const book = known !== undefined && known.entries.size > 0 ? known : emptyBook();
    const holdMs = holdTimeMs(this.ttlMs, call.holdMs);
    const count = counters.length + (maxHeld === undefined ? 0 : 1);
    let decisions: CounterDecision[] = [];
    let outcome: HoldAnswer['outcome'];
    switch (call.kind) {
      case 'reserve': {
        const checks = this.decide(counters);
        const entry = book.entries.get(id);
        if (entry !== undefined) {
          decisions = refuseAll(count, Math.max(0, entry.expiresAtMs - now));
          outcome = 'reused';
          break;
        }
        if (!hasRoom(book, id, this.maxPerKey, this.maxKeyBytes)) {
          decisions = refuseAll(count, firstLapseMs(book, now) || holdMs);
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
          const d = judgeInFlight(book.entries.size, maxHeld, true, firstLapseMs(book, now));
          if (!d.allowed) admitted = false;
          decisions.push(d);
        }
        outcome = admitted ? 'held' : 'denied';
        if (admitted && !this.add(key, book, id, call.hits, now, holdMs)) {
          decisions = refuseAll(count, firstLapseMs(book, now) || holdMs);
          outcome = 'full';
        }
        break;
      }
      case 'commit': {
        decisions = this.decide(
          counters.map((c) => ({ ...c, hits: commitCharge(c, call.hits) })),
          COUNTED,
        );
        outcome = this.free(book, id) ? 'committed' : 'unknown';
        if (maxHeld !== undefined) decisions.push(judgeInFlight(book.entries.size, maxHeld, false, 0));
        break;
      }
      case 'release': {
        decisions = this.decide(counters);
        this.free(book, id);
        if (maxHeld !== undefined) decisions.push(judgeInFlight(book.entries.size, maxHeld, false, 0));
        outcome = 'released';
        break;
      }
    }
    const held = book.entries.size;
    if (held === 0) this.dropBook(key);
    return { decisions, outcome, held, lapsed };
  }

  /** Drops the lapsed holds of every book (the memory store's sweep); returns how many. */
  sweep(): number {
    const now = this.clock.nowMs();
    let lapsed = 0;
    for (const [key, book] of this.books) lapsed += this.dropLapsed(key, book, now);
    return lapsed;
  }

  private dropLapsed(key: string, book: HoldBook, now: number): number {
    const lapsed = dropLapsed(book, now, (id) => this.forget(id));
    if (book.entries.size === 0) this.dropBook(key);
    return lapsed;
  }

  /**
   * Holds `estimate` for `id` in `book` (registering the book if new), after making room over all
   * books by dropping the least recently used others; false when even that leaves no room (the
   * process-wide bounds below one book's).
   */
  private add(key: string, book: HoldBook, id: string, estimate: number, now: number, holdMs: number): boolean {
    const isNew = !this.books.has(key);
    const need = HOLD_OBJECT_BYTES + holdBytes(id) + (isNew ? BOOK_BYTES + key.length : 0);
    for (const [other, victim] of this.books) {
      if (this.entries + 1 <= this.maxEntries && this.bytesHeld + need <= this.maxBytes) break;
      if (other === key) continue;
      this.evicted += victim.entries.size;
      for (const gone of victim.entries.keys()) this.forget(gone);
      this.dropBook(other);
    }
    if (this.entries + 1 > this.maxEntries || this.bytesHeld + need > this.maxBytes) return false;
    if (isNew) {
      this.books.set(key, book);
      this.bytesHeld += BOOK_BYTES + key.length;
    }
    addHold(book, id, estimate, now, holdMs);
    this.entries++;
    this.bytesHeld += HOLD_OBJECT_BYTES + holdBytes(id);
    return true;
  }

  /** Frees the hold of `id`, if `book` has one; returns whether it had. */
  private free(book: HoldBook, id: string): boolean {
    if (!freeHold(book, id)) return false;
    this.forget(id);
    return true;
  }

  /** A hold of `id` gone from the process-wide counts. */
  private forget(id: string): void {
    this.entries--;
    this.bytesHeld -= HOLD_OBJECT_BYTES + holdBytes(id);
  }

  private dropBook(key: string): void {
    if (this.books.delete(key)) this.bytesHeld -= BOOK_BYTES + key.length;
  }
}
