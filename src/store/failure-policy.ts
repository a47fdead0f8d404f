import type { FailurePolicy } from '../settings/settings';
import {
  StoreUnavailableError,
  type CounterDecision,
  type CounterRequest,
  type DecideOptions,
  type LocalAnswer,
  type Store,
  type Reservations,
  type Settlements,
} from '../limiter/store';

/**
 * What to answer when the store cannot (STORE_FAILURE_POLICY):
 *   error  reject with StoreUnavailableError -> gRPC UNAVAILABLE, and Envoy's failure_mode_deny decides
 *   allow  every counter allowed, remaining = limit - hits, resetMs 0 (fail open)
 *   deny   every counter denied, resetMs = DENY_RESET_MS (fail closed)
 *   local  decide from an in-process store while the primary is unhealthy or fails; the primary is
 *          asked again as soon as it reports healthy. Counters in the two stores are independent,
 *          so each replica of the service enforces the limit on its own during an outage.
 * Only StoreUnavailableError triggers the policy; any other error is a bug and propagates.
 */

/** Retry hint of a fail-closed answer, ms: long enough to shed load, short enough to recover fast. */
export const DENY_RESET_MS = 1_000;

export interface FailurePolicyOptions {
  readonly store: Store;
  readonly policy: FailurePolicy;
  /** The in-process store used by `local` (a MemoryStore); required for that policy. */
  readonly fallback?: Store;
  /** Called once per call answered by the policy instead of the store, for metrics. */
  readonly onFallback?: (policy: FailurePolicy) => void;
}

/** Store decorator applying the failure policy on StoreUnavailableError. */
export class FailurePolicyStore implements Store {
  readonly name: string;
  /** The wrapped store's reservations, forwarded as they are (they bypass this wrapper's own work). */
  readonly reservations: Reservations | undefined;
  /** The wrapped store's settlements, forwarded as they are (they bypass this wrapper's own work). */
  readonly settlements: Settlements | undefined;
  private readonly store: Store;
  private readonly policy: FailurePolicy;
  private readonly fallback: Store | undefined;
  private readonly onFallback: (policy: FailurePolicy) => void;

  constructor(options: FailurePolicyOptions) {
    if (options.policy === 'local' && options.fallback === undefined) {
      throw new TypeError('the local failure policy needs a fallback store');
    }
    this.store = options.store;
    this.name = options.store.name;
    this.reservations = options.store.reservations;
    this.settlements = options.store.settlements;
    this.policy = options.policy;
    this.fallback = options.fallback;
    this.onFallback = options.onFallback ?? (() => {});
  }

  /** The primary's decision, or the policy's answer when the primary is unavailable. */
  async decide(counters: readonly CounterRequest[], options?: DecideOptions): Promise<CounterDecision[]> {
    // Skip a primary known to be down: its failure would only cost the deadline on every call.
    if (this.policy === 'local' && !this.store.isHealthy()) return this.decideByFallback(counters, options);
    try {
      return await this.store.decide(counters, options);
    } catch (err) {
      if (!(err instanceof StoreUnavailableError)) throw err;
      switch (this.policy) {
        case 'error':
          throw err;
        case 'allow':
          this.onFallback('allow');
          return counters.map((c) => ({ allowed: true, remaining: Math.max(0, c.limit - c.hits), resetMs: 0 }));
        case 'deny':
          this.onFallback('deny');
          return counters.map(() => DENIED);
        case 'local':
          return this.decideByFallback(counters, options);
      }
    }
  }

  /** The primary's local answer, unless the policy skips the primary altogether (local, while it is down). */
  decideLocally(counters: readonly CounterRequest[]): LocalAnswer | undefined {
    if (this.store.decideLocally === undefined || (this.policy === 'local' && !this.store.isHealthy())) return undefined;
    return this.store.decideLocally(counters);
  }

  /** The primary's health: gRPC health reports NOT_SERVING while the store is unreachable, whatever the policy. */
  isHealthy(): boolean {
    return this.store.isHealthy();
  }

  /** Forwards to both stores. */
  clearCache(): void {
    this.store.clearCache?.();
    this.fallback?.clearCache?.();
  }

  async close(): Promise<void> {
    await Promise.all([this.store.close(), this.fallback?.close()]);
  }

  private decideByFallback(counters: readonly CounterRequest[], options?: DecideOptions): Promise<CounterDecision[]> {
    this.onFallback('local');
    return (this.fallback as Store).decide(counters, options);
  }
}

const DENIED: CounterDecision = Object.freeze({ allowed: false, remaining: 0, resetMs: DENY_RESET_MS });
