import { monotonicClock, type Clock } from '../limiter/types';
import {
  counterIdentity,
  type CounterDecision,
  type CounterRequest,
  type DecideOptions,
  type LocalAnswer,
  type Store,
  type Reservations,
  type Settlements,
} from '../limiter/store';
import { BoundedCache, entryBytes, type CacheEntry } from '../limiter/bounded-cache';

/**
 * A Store decorator that remembers denials and answers them locally until their retry time,
 * saving a store round trip for clients hammering a limit they have already hit. decide() asks
 * the store and records its denials; decideLocally() answers from them (the Store port's local
 * answer, which callers ask first). The answer says, per counter, until when its denial holds:
 * that is all the limiter's replay of whole requests (src/limiter/replay.ts) is built from.
 *
 * Why it never denies what the store would have allowed: a denial is recorded with the local time
 * read BEFORE the store call plus the store's resetMs. The store decided at some later instant, so
 * the true retry instant is never earlier than the cached expiry. Until then, with no other
 * traffic the same request stays denied, and other traffic only adds hits (stores never decrement),
 * so it stays denied; a request with more hits than the denied one needs even longer. Hence only
 * requests with hits >= the denied request's hits are answered from the cache. The hits that count
 * are the call's for that counter: a counter named twice in a call (`[k=v, k=v]`) was denied for
 * both namings' hits, and says nothing of a call naming it once. A call naming a counter twice is
 * never answered here (the store's verdicts then differ by position).
 *
 * Why it answers only calls whose every counter it knows denied: an answer must be the store's, for
 * every counter. A counter it knows nothing of would have to be reported without its state (the
 * store reports its remaining hits even when another counter denies the call); asking the store
 * for the whole call gives the same verdict with the true figures.
 *
 * Local time is a monotonic clock by default (../limiter/types): a wall-clock step back does not
 * stretch a denial. Memory is bounded in entries and estimated bytes (../limiter/bounded-cache);
 * expired denials are dropped as they are met and swept a few per recorded denial.
 *
 * A call holding a counter charged whatever its outcome (CounterRequest.countDenied, with hits) is
 * never answered here: its charge must reach the store. Its checks (hits 0) are.
 *
 * Caveats, both conservative in the store's favour or bounded:
 * - Redis Cluster requests spanning slots refund a denied request's charges in the other slots;
 *   a denial observed during that brief window may be cached a little longer than needed.
 * - With countDenied, denials answered here are not charged to the store.
 */

export interface DenialCacheOptions {
  readonly store: Store;
  /** Most cached denials; beyond it the least recently used is dropped. */
  readonly maxKeys: number;
  /** Most estimated bytes of cached denials (keys included); beyond it the least recently used is dropped. Default 32 MiB. */
  readonly maxBytes?: number;
  /** Local time source; the monotonic clock by default. */
  readonly clock?: Clock;
  /** Called once per call answered from the cache, for metrics. */
  readonly onHit?: () => void;
}

export const DEFAULT_DENIAL_CACHE_MAX_BYTES = 32 * 1024 * 1024;

interface Denial extends CacheEntry {
  /** Local time from which the store may allow again (the cache entry's expiry). */
  readonly expiresAtMs: number;
  /** Hits of the denied call on this counter: fewer hits might be allowed earlier. */
  readonly minHits: number;
  /**
   * The limit the denial was decided under. The counter key already encodes algorithm and window
   * (src/limiter/keys.ts), but a request-supplied override or a runtime override may ask another
   * limit of the same key (or another bucket capacity, or strictness), and a denial under one says
   * nothing about another: such a request is not answered here.
   */
  readonly limit: number;
  readonly windowMs: number;
  readonly algorithm: CounterRequest['algorithm'];
  readonly burst: CounterRequest['burst'];
  readonly strict: CounterRequest['strict'];
}

/** A Denial's own fields, estimated. */
const DENIAL_BYTES = 64;

/** Store decorator answering known denials locally; see the file comment for the guarantee. */
export class DenialCache implements Store {
  readonly name: string;
  /** The wrapped store's reservations, forwarded as they are (they bypass this wrapper's own work). */
  readonly reservations: Reservations | undefined;
  /** The wrapped store's settlements, forwarded as they are (they bypass this wrapper's own work). */
  readonly settlements: Settlements | undefined;
  private readonly store: Store;
  private readonly clock: Clock;
  private readonly onHit: () => void;
  private readonly denials: BoundedCache<Denial>;

  constructor(options: DenialCacheOptions) {
    if (!Number.isInteger(options.maxKeys) || options.maxKeys < 1) {
      throw new RangeError(`maxKeys must be a positive integer, got ${options.maxKeys}`);
    }
    this.store = options.store;
    this.name = options.store.name;
    this.denials = new BoundedCache({ maxEntries: options.maxKeys, maxBytes: options.maxBytes ?? DEFAULT_DENIAL_CACHE_MAX_BYTES });
    this.clock = options.clock ?? monotonicClock;
    this.reservations = options.store.reservations;
    this.settlements = options.store.settlements;
    this.onHit = options.onHit ?? (() => {});
  }

  /** Number of cached denials (expired ones included until met or swept). */
  get size(): number {
    return this.denials.size;
  }

  /** Estimated bytes of the cached denials. */
  get bytes(): number {
    return this.denials.bytes;
  }

  /** The answer when every counter of the call is known to be denied (see the file comment); undefined otherwise. */
  decideLocally(counters: readonly CounterRequest[]): LocalAnswer | undefined {
    if (this.denials.size === 0) return undefined;
    const local = this.lookup(counters, this.clock.nowMs());
    if (local !== undefined) this.onHit();
    return local;
  }

  /** Asks the store and records its denials (read before the call: see the file comment). */
  decide(counters: readonly CounterRequest[], options?: DecideOptions): Promise<CounterDecision[]> {
    const now = this.clock.nowMs();
    return this.store.decide(counters, options).then((decisions) => {
      let denied = false;
      let hitsOf: readonly number[] | undefined;
      for (let i = 0; i < decisions.length; i++) {
        const d = decisions[i];
        if (!d.allowed && d.resetMs > 0) {
          const c = counters[i];
          if (!denied) hitsOf = callHits(counters);
          denied = true;
          const denial: Denial = {
            expiresAtMs: now + d.resetMs,
            minHits: hitsOf?.[i] ?? c.hits,
            limit: c.limit,
            windowMs: c.windowMs,
            algorithm: c.algorithm,
            burst: c.burst,
            strict: c.strict,
            bytes: entryBytes(c.key, DENIAL_BYTES),
          };
          this.denials.set(c.key, denial);
        }
      }
      if (denied) this.denials.tidy(now);
      return decisions;
    });
  }

  /** Forgets every denial (the limits may have changed: config reload). */
  clearCache(): void {
    this.denials.clear();
    this.store.clearCache?.();
  }

  isHealthy(): boolean {
    return this.store.isHealthy();
  }

  close(): Promise<void> {
    this.denials.clear();
    return this.store.close();
  }

  private lookup(counters: readonly CounterRequest[], now: number): LocalAnswer | undefined {
    const n = counters.length;
    // Most calls meet no denial: their first counter ends the lookup.
    const first = this.denialOf(counters[0], now);
    if (first === undefined) return undefined;
    const found: Denial[] = [first];
    for (let i = 1; i < n; i++) {
      const denial = this.denialOf(counters[i], now);
      if (denial === undefined) return undefined;
      found.push(denial);
    }
    for (let i = 0; i < n; i++) if (counters[i].countDenied === true && counters[i].hits > 0) return undefined;
    for (let i = 0; i < n; i++) if (counters[i].hits < found[i].minHits) return undefined;
    // A counter named twice is decided once per naming, the later ones seeing the earlier ones'
    // hits: the store's verdicts differ by position, which no remembered denial tells.
    if (n > 1 && callHits(counters) !== undefined) return undefined;
    const decisions: CounterDecision[] = new Array<CounterDecision>(n);
    const deniedUntilMs: number[] = new Array<number>(n);
    // Recently used: keep them over colder entries. Only worth two more hash operations per hit
    // once eviction is near; below half full the order never matters.
    const reorder = this.denials.halfFull;
    for (let i = 0; i < n; i++) {
      const denial = found[i];
      if (reorder) this.denials.touch(counters[i].key, denial);
      decisions[i] = { allowed: false, remaining: 0, resetMs: denial.expiresAtMs - now };
      deniedUntilMs[i] = denial.expiresAtMs;
    }
    return { decisions, deniedUntilMs };
  }

  /** The live denial of `c`'s counter decided under `c`'s limit, window, algorithm, capacity and strictness. */
  private denialOf(c: CounterRequest, now: number): Denial | undefined {
    const denial = this.denials.peek(c.key, now);
    if (denial === undefined || c.limit !== denial.limit || c.windowMs !== denial.windowMs || c.algorithm !== denial.algorithm) return undefined;
    if (c.burst !== denial.burst || c.strict !== denial.strict) return undefined;
    return denial;
  }
}

// Calls with more counters than this find repeated counters through a map instead of by scanning.
const REPEAT_SCAN_MAX = 8;

/**
 * Per counter, the hits of the whole call on that counter (a counter may be named more than once);
 * undefined when no counter is named twice (each one's own hits are then the call's).
 */
function callHits(counters: readonly CounterRequest[]): number[] | undefined {
  const n = counters.length;
  if (n < 2) return undefined;
  if (n <= REPEAT_SCAN_MAX) {
    let sums: number[] | undefined;
    for (let i = 1; i < n; i++) {
      for (let j = 0; j < i; j++) {
        const a = counters[i];
        const b = counters[j];
        if (a.key !== b.key || a.algorithm !== b.algorithm || a.windowMs !== b.windowMs) continue;
        sums ??= counters.map((c) => c.hits);
        sums[i] += b.hits;
        sums[j] += a.hits;
      }
    }
    return sums;
  }
  const totals = new Map<string, number>();
  const ids = counters.map(counterIdentity);
  for (let i = 0; i < n; i++) totals.set(ids[i], (totals.get(ids[i]) ?? 0) + counters[i].hits);
  if (totals.size === n) return undefined;
  return ids.map((id) => totals.get(id)!);
}
