import type { CounterDecision, CounterRequest, DecideOptions, LocalAnswer, Store } from '../../src/limiter/store';

/** Wraps a store, counting the calls that reach it, the local answers it gave (and the cache clears passed to it). */
export class CountingStore implements Store {
  readonly name = 'counting';
  calls = 0;
  localAnswers = 0;
  cleared = 0;
  constructor(private readonly inner: Store) {}
  decideLocally(counters: readonly CounterRequest[]): LocalAnswer | undefined {
    const local = this.inner.decideLocally?.(counters);
    if (local !== undefined) this.localAnswers++;
    return local;
  }
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
