import {
  isPlannedCounters,
  plannedCounters,
  type CounterDecision,
  type CounterRequest,
  type DecideOptions,
  type LocalAnswer,
  type PlannedCounters,
  type Reservations,
  type Settlements,
  type Store,
} from '../../limiter/store';
import { scaledLimit } from './region-division';
import type { RegionShares } from './region-shares';

/**
 * The decision path of regions: a Store that hands the store it wraps (the leases) every
 * `scope: global` counter scaled to this region's part (limit and burst times the region's
 * fraction, RegionShares.fractionOf), and tells the region parts what each call asked and charged.
 * The leases then divide the region's part among its replicas as they divide any limit. Calls
 * without a global counter pass through untouched; a kept plan's array is answered with a kept
 * array of its own (made again only when a part's scaled limit changes), so the stores below
 * still key their work on it.
 */
export class RegionalStore implements Store {
  readonly name: string;
  readonly reservations: Reservations | undefined;
  readonly settlements: Settlements | undefined;
  private readonly store: Store;
  private readonly shares: RegionShares;
  /** The counter each global counter was last scaled to, by the counter object. */
  private readonly scaled = new WeakMap<CounterRequest, CounterRequest>();
  /** The scaled array of a kept plan's. */
  private readonly plans = new WeakMap<readonly CounterRequest[], PlannedCounters>();

  constructor(options: { readonly store: Store; readonly shares: RegionShares }) {
    this.store = options.store;
    this.shares = options.shares;
    this.name = options.store.name;
    this.reservations = options.store.reservations;
    this.settlements = options.store.settlements;
  }

  decideLocally(counters: readonly CounterRequest[]): LocalAnswer | undefined {
    if (this.store.decideLocally === undefined) return undefined;
    return this.store.decideLocally(this.regional(counters));
  }

  decideNow(counters: readonly CounterRequest[], options?: DecideOptions): CounterDecision[] | undefined {
    if (this.store.decideNow === undefined) return undefined;
    const regional = this.regional(counters);
    const decisions = this.store.decideNow(regional, options);
    if (decisions !== undefined && regional !== counters) this.record(counters, decisions, options);
    return decisions;
  }

  decide(counters: readonly CounterRequest[], options?: DecideOptions): Promise<CounterDecision[]> {
    const regional = this.regional(counters);
    if (regional === counters) return this.store.decide(counters, options);
    return this.store.decide(regional, options).then(
      (decisions) => {
        this.record(counters, decisions, options);
        return decisions;
      },
      (err: unknown) => {
        this.record(counters, undefined, options);
        throw err;
      },
    );
  }

  isHealthy(): boolean {
    return this.store.isHealthy();
  }

  clearCache(): void {
    this.store.clearCache?.();
  }

  close(): Promise<void> {
    return this.store.close();
  }

  /** `counters` with each global one scaled to the region's part; the same array when none is global. */
  private regional(counters: readonly CounterRequest[]): readonly CounterRequest[] {
    let global = false;
    for (let i = 0; i < counters.length && !global; i++) global = counters[i].global === true;
    if (!global) return counters;
    if (!isPlannedCounters(counters)) return counters.map((c) => (c.global === true ? this.scaledOf(c) : c));
    const kept = this.plans.get(counters);
    if (kept !== undefined && this.isCurrent(counters, kept)) return kept;
    const made = plannedCounters(counters.map((c) => (c.global === true ? this.scaledOf(c) : c)));
    this.plans.set(counters, made);
    return made;
  }

  /** Whether a kept scaled array still holds every global counter's scaling of now. */
  private isCurrent(counters: readonly CounterRequest[], kept: readonly CounterRequest[]): boolean {
    for (let i = 0; i < counters.length; i++) if (counters[i].global === true && this.scaledOf(counters[i]) !== kept[i]) return false;
    return true;
  }

  /** The global counter `c` scaled to the region's fraction now (the same object while its scaled limit is unchanged). */
  private scaledOf(c: CounterRequest): CounterRequest {
    const fraction = this.shares.fractionOf(c);
    const limit = scaledLimit(c.limit, fraction);
    const burst = c.burst === undefined ? undefined : scaledLimit(c.burst, fraction);
    const known = this.scaled.get(c);
    if (known !== undefined && known.limit === limit && known.burst === burst) return known;
    const made: CounterRequest = { ...c, limit, burst };
    this.scaled.set(c, made);
    return made;
  }

  /** Tells the region parts what a call asked of each global counter and whether it charged them (all-or-nothing). */
  private record(counters: readonly CounterRequest[], decisions: readonly CounterDecision[] | undefined, options: DecideOptions | undefined): void {
    let all = decisions !== undefined;
    if (decisions !== undefined) for (let i = 0; i < decisions.length; i++) if (!decisions[i].allowed) all = false;
    const countDenied = options?.countDenied === true;
    for (let i = 0; i < counters.length; i++) {
      const c = counters[i];
      if (c.global !== true) continue;
      this.shares.record(c, decisions !== undefined && (all || countDenied || c.countDenied === true));
    }
  }
}
