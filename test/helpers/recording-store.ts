import type { CounterDecision, CounterRequest, DecideOptions, Store } from '../../src/limiter/store';

/** A Store that records every decide() call (a copy of its counters, the array it was handed, its options) around another store. */
export class RecordingStore implements Store {
  readonly name = 'recording';
  readonly calls: { counters: CounterRequest[]; given: readonly CounterRequest[]; options?: DecideOptions }[] = [];
  constructor(private readonly inner: Store) {}
  decide(counters: readonly CounterRequest[], options?: DecideOptions): Promise<CounterDecision[]> {
    this.calls.push({ counters: [...counters], given: counters, options });
    return this.inner.decide(counters, options);
  }
  isHealthy(): boolean {
    return true;
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}
