import { StoreUnavailableError, type Store } from '../../src/limiter/store';

/** A store that fails every call with StoreUnavailableError while `down` is set, and is `inner` otherwise. */
export class SwitchableStore implements Store {
  readonly name = 'switchable';
  down = false;
  constructor(private readonly inner: Store) {}
  decide(...args: Parameters<Store['decide']>): ReturnType<Store['decide']> {
    return this.down ? Promise.reject(new StoreUnavailableError('down')) : this.inner.decide(...args);
  }
  isHealthy(): boolean {
    return !this.down;
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}
