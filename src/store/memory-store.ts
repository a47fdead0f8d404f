import {
  bucket,
  bucketDrainMs,
  chargeBucket,
  EMPTY_BUCKET,
  fixedPeriod,
  fixedWindow,
  slidingLog,
  slidingWindow,
  subWindowCounter,
  type Verdict,
} from '../limiter/algorithms';
import { monotonicClock, type Algorithm, type Clock } from '../limiter/types';
import {
  counterIdentity,
  type CounterDecision,
  type CounterRequest,
  type DecideOptions,
  type DemandExchange,
  type ProxyDemand,
  type Store,
} from '../limiter/store';
import { BoundedCache, entryBytes } from '../limiter/bounded-cache';
import { calendarPeriod } from '../limiter/calendar';
import { MemoryReservations, type MemoryReservationsOptions } from './memory-reservations';

/**
 * The embedded store: counters in one process, bounded in memory.
 *
 * Every decision is computed by src/limiter/algorithms.ts; this file only keeps the state those
 * functions read. The work is synchronous, so a call is atomic with respect to every other call
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
}

interface LogRecordEntry {
  atMs: number;
  hits: number;
}

/**
 * One counter's state. `index` is the fixed window (floor(now / W)) that `current` counts (a
 * calendar window's: the start of its period, ms);
 * `previous` counts window index - 1 (sliding window only). With k > 1 sub-windows, `index` is the
 * newest sub-window (floor(now / (W / k))) and `counts` holds sub-windows index - k .. index, oldest
 * first. The log keeps admitted hits oldest first. A bucket keeps its TAT, tatMs + tatRem / L.
 */
interface CounterRecord {
  readonly algorithm: Algorithm;
  readonly windowMs: number;
  readonly subWindows: number;
  index: number;
  current: number;
  previous: number;
  counts: number[] | undefined;
  log: LogRecordEntry[] | undefined;
  tatMs: number;
  tatRem: number;
  /** From this instant on the record cannot change any decision and may be dropped. */
  expiresAtMs: number;
  /** Estimated size, key included (recordBytes). */
  bytes: number;
}

/** A record's own fields, estimated; sub-window counts and log entries are added per element. */
const RECORD_BYTES = 120;
const ARRAY_BYTES = 16;
const COUNT_BYTES = 8;
const LOG_ENTRY_BYTES = 32;

export const DEFAULT_MEMORY_MAX_BYTES = 256 * 1024 * 1024;

function recordBytes(key: string, record: CounterRecord): number {
  let own = RECORD_BYTES;
  if (record.counts !== undefined) own += ARRAY_BYTES + COUNT_BYTES * record.counts.length;
  if (record.log !== undefined) own += ARRAY_BYTES + LOG_ENTRY_BYTES * record.log.length;
  return entryBytes(key, own);
}

const DEFAULT_SWEEP_INTERVAL_MS = 10_000;
/** Budgets whose demand is kept (RLQS); beyond it the least recently exchanged one is dropped. */
export const DEMAND_MAX_KEYS = 100_000;
/** Proxies kept per budget; a new one beyond it is not recorded (its share is then computed locally). */
export const DEMAND_MAX_MEMBERS = 1_000;
const DEFAULT_SWEEP_BATCH = 10_000;
// Calls with more counters than this find repeated counters through a map instead of by scanning
// the earlier ones: a call naming one counter n times must not cost n^2.
const PENDING_SCAN_MAX = 8;

/** In-process Store: exact algorithms, LRU-bounded, expired windows evicted. */
export class MemoryStore implements Store {
  readonly name = 'memory';
  private readonly records: BoundedCache<CounterRecord>;
  /** RLQS demand per budget, each entry with its expiry (store clock), least recently exchanged budget first. */
  private readonly demands = new Map<string, Map<string, { readonly demand: ProxyDemand; readonly expiresAtMs: number }>>();
  private readonly clock: Clock;
  private readonly sweepBatch: number;
  private readonly timer: NodeJS.Timeout | undefined;
  /** Reservations of descriptors, decided with these counters (see the Store port). */
  readonly reservations: MemoryReservations;

  constructor(options: MemoryStoreOptions) {
    if (!Number.isInteger(options.maxKeys) || options.maxKeys < 1) {
      throw new RangeError(`maxKeys must be a positive integer, got ${options.maxKeys}`);
    }
    this.records = new BoundedCache({ maxEntries: options.maxKeys, maxBytes: options.maxBytes ?? DEFAULT_MEMORY_MAX_BYTES });
    this.clock = options.clock ?? monotonicClock;
    this.sweepBatch = options.sweepBatch ?? DEFAULT_SWEEP_BATCH;
    this.reservations = new MemoryReservations({ ...options.reservations, clock: this.clock, decide: (counters, o) => this.decideNow(counters, o) });
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

  /** Publishes and removes demand entries of one budget and returns the live ones (see the Store port). */
  exchangeDemand(exchange: DemandExchange): Promise<ProxyDemand[]> {
    const now = this.clock.nowMs();
    const { key } = exchange;
    const entries = this.demands.get(key) ?? new Map<string, { readonly demand: ProxyDemand; readonly expiresAtMs: number }>();
    this.demands.delete(key);
    for (const member of exchange.remove) entries.delete(member);
    for (const demand of exchange.publish) {
      if (entries.size < DEMAND_MAX_MEMBERS || entries.has(demand.member)) entries.set(demand.member, { demand, expiresAtMs: now + exchange.ttlMs });
    }
    const live: ProxyDemand[] = [];
    for (const [member, e] of entries) {
      if (e.expiresAtMs <= now) entries.delete(member);
      else live.push(e.demand);
    }
    if (entries.size > 0) {
      this.demands.set(key, entries);
      if (this.demands.size > DEMAND_MAX_KEYS) this.demands.delete(this.demands.keys().next().value!);
    }
    return Promise.resolve(live);
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
    return this.records.sweep(this.clock.nowMs(), budget);
  }

  /** decide(), synchronously (see the Store port). */
  decideNow(counters: readonly CounterRequest[], options?: DecideOptions): CounterDecision[] {
    const countDenied = options?.countDenied === true;
    const now = this.clock.nowMs();
    const n = counters.length;
    const decisions: CounterDecision[] = new Array<CounterDecision>(n);
    // Each counter's record as read here, so that charging it takes no second lookup.
    const records: (CounterRecord | undefined)[] = new Array<CounterRecord | undefined>(n);
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
      const verdict = decideOne(c, record, now, before);
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
  private live(c: CounterRequest, now: number): CounterRecord | undefined {
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
  private charge(c: CounterRequest, now: number, existing: CounterRecord | undefined): void {
    const w = c.windowMs;
    const index = Math.floor(now / w);
    let record = existing;
    if (record === undefined) {
      const subWindows = c.subWindows ?? 1;
      record = {
        algorithm: c.algorithm,
        windowMs: w,
        subWindows,
        index,
        current: 0,
        previous: 0,
        counts: undefined,
        log: undefined,
        tatMs: 0,
        tatRem: 0,
        expiresAtMs: 0,
        bytes: 0,
      };
      record.bytes = recordBytes(c.key, record);
      this.records.set(c.key, record);
    }
    switch (c.algorithm) {
      case 'sliding_window':
        if (record.subWindows > 1) {
          chargeSubWindows(record, now, c.hits);
          break;
        }
        if (record.index !== index) {
          record.previous = record.index === index - 1 ? record.current : 0;
          record.current = 0;
          record.index = index;
        }
        record.current += c.hits;
        // The current window's hits weigh on the estimate until the end of the next window.
        record.expiresAtMs = (index + 2) * w;
        break;
      case 'fixed_window': {
        const period = c.calendar === undefined ? undefined : calendarPeriod(now, c.calendar.unit, c.calendar.offsetMs);
        const at = period === undefined ? index : period.startMs;
        if (record.index !== at) {
          record.current = 0;
          record.index = at;
        }
        record.current += c.hits;
        record.expiresAtMs = period === undefined ? (index + 1) * w : period.endMs;
        break;
      }
      case 'sliding_log': {
        const log = (record.log ??= []);
        pruneLog(log, now - w);
        const last = log.length > 0 ? log[log.length - 1] : undefined;
        // Hits in the same millisecond share one entry, which bounds the log by W as well as by L.
        if (last !== undefined && last.atMs === now) last.hits += c.hits;
        else log.push({ atMs: now, hits: c.hits });
        record.expiresAtMs = now + w;
        break;
      }
      case 'token_bucket':
      case 'leaky_bucket': {
        if (c.limit === 0) break; // a rate of 0 admits nothing and keeps no state
        const next = chargeBucket(record, now, w, c.limit, c.hits);
        record.tatMs = next.tatMs;
        record.tatRem = next.tatRem;
        // Once drained, the state says no more than an absent one.
        record.expiresAtMs = now + bucketDrainMs(next, now, c.limit);
        break;
      }
    }
    // Sub-window counts and log entries are what make a record grow after it was made.
    if (record.counts !== undefined || record.log !== undefined) this.records.resize(record, recordBytes(c.key, record));
  }
}

/** Adds hits to the newest sub-window, sliding the counts forward to the one containing now. */
function chargeSubWindows(record: CounterRecord, now: number, hits: number): void {
  const k = record.subWindows;
  const s = record.windowMs / k;
  const n = Math.floor(now / s);
  const counts = (record.counts = subWindowCounts(record, n, k));
  // (A clock that stepped back charges the newest sub-window it has seen.)
  record.index = Math.max(record.index, n);
  counts[k] += hits;
  // Sub-window n is read until the end of sub-window n + k.
  record.expiresAtMs = (record.index + k + 1) * s;
}

/** The k + 1 counts of sub-windows n - k .. n (oldest first) held by a record, zeros for any it has not seen. */
function subWindowCounts(record: CounterRecord | undefined, n: number, k: number): number[] {
  const out = new Array<number>(k + 1).fill(0);
  if (record === undefined) return out;
  if (record.subWindows === 1) {
    // The two-counter layout: current is window `index`, previous is `index - 1`.
    if (record.index >= n) {
      out[1] = record.current;
      out[0] = record.previous;
    } else if (record.index === n - 1) out[0] = record.current;
    return out;
  }
  const held = record.counts;
  if (held === undefined) return out;
  // (A clock that stepped back keeps reading the newest sub-windows: never admits more.)
  const shift = Math.max(0, n - record.index);
  for (let i = 0; i + shift <= k; i++) out[i] = held[i + shift];
  return out;
}

function decideOne(c: CounterRequest, record: CounterRecord | undefined, now: number, pending: number): Verdict {
  const w = c.windowMs;
  switch (c.algorithm) {
    case 'sliding_window': {
      const k = c.subWindows ?? 1;
      if (k > 1 || c.strict === true) {
        const counts = subWindowCounts(record, Math.floor(now / (w / k)), k);
        counts[k] += pending;
        return subWindowCounter({ counts, strict: c.strict === true, nowMs: now, windowMs: w, limit: c.limit, hits: c.hits });
      }
      let current = 0;
      let previous = 0;
      if (record !== undefined) {
        const index = Math.floor(now / w);
        if (record.index >= index) {
          // (A clock that stepped back keeps reading the newest window: never admits more.)
          current = record.current;
          previous = record.previous;
        } else if (record.index === index - 1) {
          previous = record.current;
        }
      }
      return slidingWindow({ current: current + pending, previous, nowMs: now, windowMs: w, limit: c.limit, hits: c.hits });
    }
    case 'fixed_window': {
      let count = 0;
      if (c.calendar !== undefined) {
        const { startMs, endMs } = calendarPeriod(now, c.calendar.unit, c.calendar.offsetMs);
        // Another period (or, after CALENDAR_TIMEZONE changed, another calendar's) counts nothing here.
        if (record !== undefined && record.index === startMs) count = record.current;
        return fixedPeriod({ count: count + pending, nowMs: now, startMs, endMs, limit: c.limit, hits: c.hits });
      }
      if (record !== undefined && record.index >= Math.floor(now / w)) count = record.current;
      return fixedWindow({ count: count + pending, nowMs: now, windowMs: w, limit: c.limit, hits: c.hits });
    }
    case 'sliding_log': {
      let entries: readonly LogRecordEntry[] = record?.log ?? EMPTY_LOG;
      if (record?.log !== undefined) pruneLog(record.log, now - w);
      if (pending > 0) entries = [...entries, { atMs: now, hits: pending }];
      return slidingLog({ entries, nowMs: now, windowMs: w, limit: c.limit, hits: c.hits });
    }
    case 'token_bucket':
    case 'leaky_bucket': {
      let state = record ?? EMPTY_BUCKET;
      // Earlier counters of this call on the same bucket took their hits at this same instant.
      if (pending > 0) state = chargeBucket(state, now, w, c.limit, pending);
      return bucket({ state, nowMs: now, windowMs: w, limit: c.limit, burst: c.burst ?? c.limit, hits: c.hits });
    }
  }
}

const EMPTY_LOG: readonly LogRecordEntry[] = Object.freeze([]);

/** Removes records at or before `from` (they have left the window), oldest first. */
function pruneLog(log: LogRecordEntry[], from: number): void {
  let k = 0;
  while (k < log.length && log[k].atMs <= from) k++;
  if (k > 0) log.splice(0, k);
}

/** Hits that earlier counters of this call will add to the same counter (calls of at most PENDING_SCAN_MAX counters). */
function pendingHits(counters: readonly CounterRequest[], decisions: readonly CounterDecision[], i: number, countDenied: boolean): number {
  const c = counters[i];
  let pending = 0;
  for (let j = 0; j < i; j++) {
    const o = counters[j];
    if (o.key === c.key && o.algorithm === c.algorithm && o.windowMs === c.windowMs && (decisions[j].allowed || countDenied || o.countDenied === true)) {
      pending += o.hits;
    }
  }
  return pending;
}
