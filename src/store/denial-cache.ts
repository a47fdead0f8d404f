import { systemClock, type Clock } from '../limiter/types';
import type { CounterDecision, CounterRequest, DecideOptions, LocalAnswer, Store } from '../limiter/store';

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
 * requests with hits >= the denied request's hits are answered from the cache.
 *
 * Caveats, both conservative in the store's favour or bounded:
 * - Redis Cluster requests spanning slots refund a denied request's charges in the other slots;
 *   a denial observed during that brief window may be cached a little longer than needed.
 * - With countDenied, denials answered here are not charged to the store.
 *
 * A call with any cached-denied counter is answered locally: those counters denied with their
 * remaining wait, every other counter reported allowed with remaining 0 and resetMs 0 (it was not
 * consulted; nothing is charged anywhere, as the all-or-nothing rule requires).
 */

export interface DenialCacheOptions {
  readonly store: Store;
  /** Most cached denials; beyond it the least recently used is dropped. */
  readonly maxKeys: number;
  /** Local time source. */
  readonly clock?: Clock;
  /** Called once per call answered from the cache, for metrics. */
  readonly onHit?: () => void;
}

interface Denial {
  /** Local time from which the store may allow again. */
  readonly untilMs: number;
  /** Hits of the denied request: fewer hits might be allowed earlier. */
  readonly minHits: number;
  /**
   * The limit the denial was decided under. The counter key already encodes algorithm and window
   * (src/limiter/keys.ts), but a request-supplied override may ask another limit of the same key,
   * and a denial under one limit says nothing about another: such a request is not answered here.
   */
  readonly limit: number;
  readonly windowMs: number;
  readonly algorithm: CounterRequest['algorithm'];
}

/** Store decorator answering known denials locally; see the file comment for the guarantee. */
export class DenialCache implements Store {
  readonly name: string;
  private readonly store: Store;
  private readonly maxKeys: number;
  private readonly clock: Clock;
  private readonly onHit: () => void;
  private readonly denials = new Map<string, Denial>();

  constructor(options: DenialCacheOptions) {
    if (!Number.isInteger(options.maxKeys) || options.maxKeys < 1) {
      throw new RangeError(`maxKeys must be a positive integer, got ${options.maxKeys}`);
    }
    this.store = options.store;
    this.name = options.store.name;
    this.maxKeys = options.maxKeys;
    this.clock = options.clock ?? systemClock;
    this.onHit = options.onHit ?? (() => {});
  }

  /** Number of cached denials (expired ones included until touched or evicted). */
  get size(): number {
    return this.denials.size;
  }

  /** The answer when a counter of the call is known to be denied (see the file comment); undefined otherwise. */
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
      for (let i = 0; i < decisions.length; i++) {
        const d = decisions[i];
        if (!d.allowed && d.resetMs > 0) {
          const c = counters[i];
          this.remember(c.key, { untilMs: now + d.resetMs, minHits: c.hits, limit: c.limit, windowMs: c.windowMs, algorithm: c.algorithm });
        }
      }
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
    let decisions: CounterDecision[] | undefined;
    let deniedUntilMs: number[] | undefined;
    for (let i = 0; i < counters.length; i++) {
      const c = counters[i];
      const key = c.key;
      const denial = this.denials.get(key);
      if (denial === undefined) continue;
      if (denial.untilMs <= now) {
        this.denials.delete(key);
        continue;
      }
      if (c.hits < denial.minHits || c.limit !== denial.limit || c.windowMs !== denial.windowMs || c.algorithm !== denial.algorithm) continue;
      // Recently used: keep it over colder entries. Only worth two more hash operations per hit
      // once eviction is near; below half full the order never matters.
      if (this.denials.size * 2 > this.maxKeys) {
        this.denials.delete(key);
        this.denials.set(key, denial);
      }
      if (decisions === undefined) {
        decisions = counters.map(() => NOT_CONSULTED);
        deniedUntilMs = counters.map(() => NaN);
      }
      decisions[i] = { allowed: false, remaining: 0, resetMs: denial.untilMs - now };
      deniedUntilMs![i] = denial.untilMs;
    }
    return decisions === undefined ? undefined : { decisions, deniedUntilMs: deniedUntilMs! };
  }

  private remember(key: string, denial: Denial): void {
    this.denials.delete(key);
    this.denials.set(key, denial);
    if (this.denials.size > this.maxKeys) {
      const oldest = this.denials.keys().next();
      if (oldest.done !== true) this.denials.delete(oldest.value);
    }
  }
}

const NOT_CONSULTED: CounterDecision = Object.freeze({ allowed: true, remaining: 0, resetMs: 0 });
