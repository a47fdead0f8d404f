import { IN_PROCESS_STATE, newCounterState, pendingHits, type CounterState } from '../limiter/algorithms';
import { monotonicClock, type Clock } from '../limiter/types';
import { counterIdentity, type CounterDecision, type CounterRequest, type DecideOptions, type Store } from '../limiter/store';
import { BoundedCache, entryBytes } from '../limiter/bounded-cache';
import { MemoryReservations, type MemoryReservationsOptions } from './memory-reservations';
import { MemorySettlements, type MemorySettlementsOptions } from './memory-settlements';

/**
 * The embedded store: counters in one process, bounded in memory.
 *
 * Every decision and charge is computed by src/limiter/algorithms.ts (IN_PROCESS_STATE, per
 * algorithm); this file only keeps the states, bounded. The work is synchronous, so a call is atomic with respect to every other call
 * without any locking; the Promise is there to honour the Store port.
 *
 * Memory is bounded: a record is dropped once it can no longer influence a decision (its expiry,
 * see below), and the records never number more than `maxKeys` nor weigh more than `maxBytes`
 * (keys are as long as callers make them), the least recently used one (as live() orders them)
 * evicted first (../limiter/bounded-cache). Evicting a live counter forgets its hits, so the bounds
 * should exceed what the distinct active descriptors need.
 *
 * Time is the injected clock, by default a monotonic one (../limiter/types): a wall-clock step
 * back neither starts counters over nor stretches a wait.
 */

export interface MemoryStoreOptions {
  /** Most records kept; beyond it the least recently used one is evicted. */
  readonly maxKeys: number;
  /** Most estimated bytes of records kept (keys included); beyond it the least recently used one is evicted. Default 256 MiB. */
  readonly maxBytes?: number;
  /** Time source, read once per decide() call; defaults to the monotonic clock. */
  readonly clock?: Clock;
  /** Period of the background expiry sweep, ms; 0 turns it off (lazy cleanup only). Default 10 s. */
  readonly sweepIntervalMs?: number;
  /** Records examined per sweep tick, so one tick never stalls the event loop. Default 10 000. */
  readonly sweepBatch?: number;
  /** Reservations: their TTL and bounds (./memory-reservations.ts); defaults when omitted. */
  readonly reservations?: Omit<MemoryReservationsOptions, 'clock' | 'decide'>;
  /** Settlements: their bounds (./memory-settlements.ts); defaults when omitted. */
  readonly settlements?: Omit<MemorySettlementsOptions, 'clock' | 'decide'>;
}

/** A record's own fields, estimated; sub-window counts and log entries are added per element. */
const RECORD_BYTES = 120;
const ARRAY_BYTES = 16;
const COUNT_BYTES = 8;
const LOG_ENTRY_BYTES = 32;

export const DEFAULT_MEMORY_MAX_BYTES = 256 * 1024 * 1024;

function recordBytes(key: string, record: CounterState): number {
  let own = RECORD_BYTES;
  if (record.counts !== undefined) own += ARRAY_BYTES + COUNT_BYTES * record.counts.length;
  if (record.log !== undefined) own += ARRAY_BYTES + LOG_ENTRY_BYTES * record.log.length;
  return entryBytes(key, own);
}

const DEFAULT_SWEEP_INTERVAL_MS = 10_000;
const DEFAULT_SWEEP_BATCH = 10_000;
// Calls with more counters than this find repeated counters through a map instead of by scanning
// the earlier ones: a call naming one counter n times must not cost n^2.
const PENDING_SCAN_MAX = 8;

/** In-process Store: exact algorithms, LRU-bounded, expired windows evicted. */
export class MemoryStore implements Store {
  readonly name = 'memory';
  private readonly records: BoundedCache<CounterState>;
  private readonly clock: Clock;
  private readonly sweepBatch: number;
  private readonly timer: NodeJS.Timeout | undefined;
  /** Reservations of descriptors, decided with these counters (see the Store port). */
  readonly reservations: MemoryReservations;
  /** Settlements of leased counters, decided with these counters (see the Store port). */
  readonly settlements: MemorySettlements;

  constructor(options: MemoryStoreOptions) {
    if (!Number.isInteger(options.maxKeys) || options.maxKeys < 1) {
      throw new RangeError(`maxKeys must be a positive integer, got ${options.maxKeys}`);
    }
    this.records = new BoundedCache({ maxEntries: options.maxKeys, maxBytes: options.maxBytes ?? DEFAULT_MEMORY_MAX_BYTES });
    this.clock = options.clock ?? monotonicClock;
    this.sweepBatch = options.sweepBatch ?? DEFAULT_SWEEP_BATCH;
    const decide = (counters: readonly CounterRequest[], o?: DecideOptions): CounterDecision[] => this.decideNow(counters, o);
    this.reservations = new MemoryReservations({ ...options.reservations, clock: this.clock, decide });
    this.settlements = new MemorySettlements({ ...options.settlements, clock: this.clock, decide });
    const interval = options.sweepIntervalMs ?? DEFAULT_SWEEP_INTERVAL_MS;
    if (interval > 0) {
      this.timer = setInterval(() => this.sweep(), interval);
      // The sweep is housekeeping: it must never keep the process alive.
      this.timer.unref();
    }
  }

  /** Number of records currently held (expired ones included until swept). */
  get size(): number {
    return this.records.size;
  }

  /** Estimated bytes of the records held. */
  get bytes(): number {
    return this.records.bytes;
  }

  /** Decides every counter at one instant of the store's clock; see the Store contract. */
  decide(counters: readonly CounterRequest[], options?: DecideOptions): Promise<CounterDecision[]> {
    try {
      return Promise.resolve(this.decideNow(counters, options));
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** Always true: the store lives in this process. */
  isHealthy(): boolean {
    return true;
  }

  /** Stops the background sweep. Counters are kept until the object is collected. */
  close(): Promise<void> {
    if (this.timer !== undefined) clearInterval(this.timer);
    return Promise.resolve();
  }

  /**
   * Drops expired records, examining at most `sweepBatch` of them; the next call resumes where
   * this one stopped. Called by the background timer; public so tests can drive it.
   */
  sweep(budget: number = this.sweepBatch): number {
    this.reservations.sweep();
    this.settlements.sweep(budget);
    return this.records.sweep(this.clock.nowMs(), budget);
  }

  /** decide(), synchronously (see the Store port). */
  decideNow(counters: readonly CounterRequest[], options?: DecideOptions): CounterDecision[] {
    const countDenied = options?.countDenied === true;
    const now = this.clock.nowMs();
    const n = counters.length;
    const decisions: CounterDecision[] = new Array<CounterDecision>(n);
    // Each counter's record as read here, so that charging it takes no second lookup.
    const records: (CounterState | undefined)[] = new Array<CounterState | undefined>(n);
    let allAllowed = true;
    // The same counter twice in one call: the later one sees the earlier one's hits, as it would
    // had the two arrived one after the other.
    const pending = n > PENDING_SCAN_MAX ? new Map<string, number>() : undefined;
    for (let i = 0; i < n; i++) {
      const c = counters[i];
      const record = this.live(c, now);
      records[i] = record;
      const id = pending !== undefined ? counterIdentity(c) : '';
      const before = pending !== undefined ? (pending.get(id) ?? 0) : i > 0 ? pendingHits(counters, decisions, i, countDenied) : 0;
      const verdict = IN_PROCESS_STATE[c.algorithm].decide(c, record, now, before);
      decisions[i] = verdict;
      if (!verdict.allowed) allAllowed = false;
      if (pending !== undefined && (verdict.allowed || countDenied || c.countDenied === true) && c.hits > 0) pending.set(id, before + c.hits);
    }
    for (let i = 0; i < n; i++) {
      const c = counters[i];
      // A record absent above may have been created by an earlier counter of this call (same key).
      if (c.hits > 0 && (allAllowed || countDenied || c.countDenied === true)) this.charge(c, now, records[i] ?? this.live(c, now));
    }
    // The timer sweeps the rest (sweep()).
    this.records.tidy(now, 0);
    return decisions;
  }

  /** The record of a counter if it still matters at `now`; forgets it otherwise. */
  private live(c: CounterRequest, now: number): CounterState | undefined {
    const record = this.records.peek(c.key, now);
    if (record === undefined) return undefined;
    // A key reused with another algorithm or window cannot reinterpret the old state.
    if (record.algorithm !== c.algorithm || record.windowMs !== c.windowMs || record.subWindows !== (c.subWindows ?? 1)) {
      this.records.delete(c.key);
      return undefined;
    }
    // Reads count as use: a counter that only ever denies is as hot as one that admits, and
    // evicting it would hand its caller a fresh quota. The order only decides evictions, which
    // begin at a bound: below half of both a read skips the two hash operations of the move, so the
    // order is exact among the counters used since the store last held half of a bound, and
    // those are all younger than the ones not used since.
    if (this.records.halfFull) this.records.touch(c.key, record);
    return record;
  }

  /** Adds c's hits to `record`, its live record (undefined: none yet, one is created). */
  private charge(c: CounterRequest, now: number, existing: CounterState | undefined): void {
    let record = existing;
    if (record === undefined) {
      record = newCounterState(c, now);
      record.bytes = recordBytes(c.key, record);
      this.records.set(c.key, record);
    }
    IN_PROCESS_STATE[c.algorithm].charge(c, record, now);
    // Sub-window counts and log entries are what make a record grow after it was made.
    if (record.counts !== undefined || record.log !== undefined) this.records.resize(record, recordBytes(c.key, record));
  }
}
