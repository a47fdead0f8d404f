import type { CounterDecision, CounterRequest, DecideOptions, Store } from '../../src/limiter/store';

/** Wraps a store, counting the calls that reach it (and the cache clears passed to it). */
export class CountingStore implements Store {
  readonly name = 'counting';
  calls = 0;
  cleared = 0;
  constructor(private readonly inner: Store) {}
  decide(counters: readonly CounterRequest[], options?: DecideOptions): Promise<CounterDecision[]> {
    this.calls++;
    return this.inner.decide(counters, options);
  }
  isHealthy(): boolean {
    return true;
  }
  close(): Promise<void> {
    return this.inner.close();
  }
  clearCache(): void {
    this.cleared++;
  }
}
