/**
 * A map of expiring entries bounded twice: in entries and in (estimated) bytes, the least recently
 * used dropped first. What every in-process cache of caller-sized entries is built on (the memory
 * store's counters, the denial cache, the replays): a bound by count alone lets a caller who picks
 * the size of each entry pick the memory too.
 *
 * Sizes are estimates the owner gives per entry (`bytes`, see entryBytes): the characters of its
 * key plus what the owner's objects cost. An expired entry is dropped when met (peek), by tidy()
 * (a few at the cold end and a few more in turn: owners call it once per call they serve, so the
 * cache is swept as fast as it is filled) and by sweep(), which examines a bounded number per call
 * and resumes where the last call stopped, so no call stalls the event loop however many entries
 * there are.
 */

/** What a cache entry carries for the cache: its expiry and its estimated size. */
export interface CacheEntry {
  /** From this instant on (the owner's clock, ms) the entry is dropped when met. */
  expiresAtMs: number;
  /** Estimated bytes; change it only through BoundedCache.resize. */
  bytes: number;
}

export interface CacheBounds {
  /** Most entries kept. */
  readonly maxEntries: number;
  /** Most estimated bytes kept. */
  readonly maxBytes: number;
}

/**
 * What one map entry costs besides its key's characters and the owner's own fields: the map's slot,
 * the key string's header and the entry object's header (V8, 64-bit, measured with heap snapshots).
 */
export const ENTRY_OVERHEAD_BYTES = 64;

/** Estimated bytes of an entry keyed by `key` whose object holds `ownBytes`. */
export function entryBytes(key: string, ownBytes: number): number {
  return ENTRY_OVERHEAD_BYTES + key.length + ownBytes;
}

/**
 * The oldest key of a Map or a Set in amortized constant time: one iterator kept across calls, each
 * slot stepped over once. An iterator started afresh at every call steps again over every slot
 * deleted since the table last compacted: under steady insertion and deletion that is a good part
 * of the table per call (11 us per call at 10,000 entries, against 0.5 us this way). Valid while
 * the owner deletes every key it was handed (or moves it to the end by deleting and adding it
 * again), so that no live key lies before the iterator.
 */
export class OldestKey<K> {
  private iterator: Iterator<K> | undefined;

  constructor(private readonly keys: () => Iterator<K>) {}

  /** The oldest key not handed out yet, or undefined when there is none. */
  next(): K | undefined {
    if (this.iterator !== undefined) {
      const r = this.iterator.next();
      if (r.done !== true) return r.value;
    }
    // Exhausted (an iterator that once ended stays ended), or never started: from the start again.
    this.iterator = this.keys();
    const r = this.iterator.next();
    return r.done === true ? undefined : r.value;
  }

  /** Forgets the iterator (after the collection was cleared). */
  reset(): void {
    this.iterator = undefined;
  }
}

// Entries tidy() checks at the cold end of the order of use, and in turn after the last one swept:
// a constant, tiny cost per call.
const COLD_EXPIRY_CHECKS = 2;
const SWEEP_PER_TIDY = 2;

export class BoundedCache<V extends CacheEntry> {
  private readonly entries = new Map<string, V>();
  private readonly maxEntries: number;
  private readonly maxBytes: number;
  private totalBytes = 0;
  /** The most recently used key: touching it again changes nothing (a call naming one counter many times). */
  private newest: string | undefined;
  private cursor: IterableIterator<[string, V]> | undefined;
  // The cold end of the order of use: the least recently used key once found (coldKey, cleared when
  // it is dropped or used again), and the iterator that finds the next one.
  private readonly oldest = new OldestKey(() => this.entries.keys());
  private coldKey: string | undefined;

  constructor(bounds: CacheBounds) {
    if (!Number.isInteger(bounds.maxEntries) || bounds.maxEntries < 1) throw new RangeError(`maxEntries must be a positive integer, got ${bounds.maxEntries}`);
    if (!Number.isInteger(bounds.maxBytes) || bounds.maxBytes < 1) throw new RangeError(`maxBytes must be a positive integer, got ${bounds.maxBytes}`);
    this.maxEntries = bounds.maxEntries;
    this.maxBytes = bounds.maxBytes;
  }

  /** Entries held (expired ones included until met or swept). */
  get size(): number {
    return this.entries.size;
  }

  /** Estimated bytes held. */
  get bytes(): number {
    return this.totalBytes;
  }

  /** True beyond half of either bound: from there on, the order of use starts to matter. */
  get halfFull(): boolean {
    return this.entries.size * 2 > this.maxEntries || this.totalBytes * 2 > this.maxBytes;
  }

  /** The entry of `key` unless it has expired at `nowMs` (then it is dropped). Leaves the order of use alone. */
  peek(key: string, nowMs: number): V | undefined {
    const entry = this.entries.get(key);
    if (entry === undefined) return undefined;
    if (nowMs >= entry.expiresAtMs) {
      this.drop(key, entry);
      return undefined;
    }
    return entry;
  }

  /** Makes `key`'s entry the most recently used. */
  touch(key: string, entry: V): void {
    if (key === this.newest) return;
    if (key === this.coldKey) this.coldKey = undefined;
    this.entries.delete(key);
    this.entries.set(key, entry);
    this.newest = key;
  }

  /** Stores `entry` under `key` as the most recently used, then drops the least recently used ones while a bound is exceeded (never this one). */
  set(key: string, entry: V): void {
    const old = this.entries.get(key);
    if (old !== undefined) this.drop(key, old);
    this.entries.set(key, entry);
    this.newest = key;
    this.totalBytes += entry.bytes;
    this.enforce();
  }

  /**
   * Drops a few expired entries: at the cold end of the order of use, and `sweepSteps` more examined
   * in turn (see sweep; an owner that sweeps on a timer of its own passes 0).
   */
  tidy(nowMs: number, sweepSteps = SWEEP_PER_TIDY): void {
    for (let i = 0; i < COLD_EXPIRY_CHECKS; i++) {
      const key = this.coldest();
      if (key === undefined) break;
      const entry = this.entries.get(key)!;
      if (nowMs < entry.expiresAtMs) break;
      this.drop(key, entry);
    }
    if (sweepSteps > 0 && this.entries.size > 0) this.sweep(nowMs, sweepSteps);
  }

  /** The entry's estimated size is now `bytes` (it grew or shrank in place). */
  resize(entry: V, bytes: number): void {
    this.totalBytes += bytes - entry.bytes;
    entry.bytes = bytes;
    if (bytes > 0) this.enforce();
  }

  delete(key: string): void {
    const entry = this.entries.get(key);
    if (entry !== undefined) this.drop(key, entry);
  }

  clear(): void {
    this.entries.clear();
    this.newest = undefined;
    this.totalBytes = 0;
    this.cursor = undefined;
    this.oldest.reset();
    this.coldKey = undefined;
  }

  /** Drops the expired entries among at most `budget` examined; the next call resumes where this one stopped. */
  sweep(nowMs: number, budget: number): number {
    let dropped = 0;
    for (let i = 0; i < budget; i++) {
      this.cursor ??= this.entries.entries();
      const next = this.cursor.next();
      if (next.done === true) {
        this.cursor = undefined;
        break;
      }
      const [key, entry] = next.value;
      if (nowMs >= entry.expiresAtMs) {
        this.drop(key, entry);
        dropped++;
      }
    }
    return dropped;
  }

  /** Drops the least recently used entries while a bound is exceeded, keeping the most recent one whatever its size. */
  private enforce(): void {
    while ((this.entries.size > this.maxEntries || this.totalBytes > this.maxBytes) && this.entries.size > 1) {
      const key = this.coldest()!;
      this.drop(key, this.entries.get(key)!);
    }
  }

  /** The least recently used key (see `oldest`), or undefined when there is none. */
  private coldest(): string | undefined {
    if (this.coldKey === undefined && this.entries.size > 0) this.coldKey = this.oldest.next();
    return this.coldKey;
  }

  private drop(key: string, entry: V): void {
    if (key === this.newest) this.newest = undefined;
    if (key === this.coldKey) this.coldKey = undefined;
    this.entries.delete(key);
    this.totalBytes -= entry.bytes;
  }
}
