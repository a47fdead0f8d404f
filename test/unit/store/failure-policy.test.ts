import { DENY_RESET_MS, FailurePolicyStore } from '../../../src/store/failure-policy';
import { MemoryStore } from '../../../src/store/memory-store';
import { StoreUnavailableError, type CounterDecision, type CounterRequest, type Store } from '../../../src/limiter/store';
import type { FailurePolicy } from '../../../src/settings/settings';
import { FakeClock } from '../../helpers/fake-clock';

/** A primary store whose availability the test switches. */
class SwitchableStore implements Store {
  readonly name = 'primary';
  up = true;
  healthy = true;
  calls = 0;
  failWith: Error = new StoreUnavailableError('down');
  decide(counters: readonly CounterRequest[]): Promise<CounterDecision[]> {
    this.calls++;
    if (!this.up) return Promise.reject(this.failWith);
    return Promise.resolve(counters.map(() => ({ allowed: true, remaining: 42, resetMs: 7 })));
  }
  isHealthy(): boolean {
    return this.healthy;
  }
  close(): Promise<void> {
    return Promise.resolve();
  }
}

const counters: CounterRequest[] = [
  { key: 'a', limit: 10, windowMs: 1_000, algorithm: 'sliding_window', hits: 3 },
  { key: 'b', limit: 2, windowMs: 60_000, algorithm: 'fixed_window', hits: 5 },
];

function make(policy: FailurePolicy, fallback?: Store): { primary: SwitchableStore; store: FailurePolicyStore; fallbacks: FailurePolicy[] } {
  const primary = new SwitchableStore();
  const fallbacks: FailurePolicy[] = [];
  const store = new FailurePolicyStore({ store: primary, policy, fallback, onFallback: (p) => fallbacks.push(p) });
  return { primary, store, fallbacks };
}

describe('FailurePolicyStore', () => {
  it("forwards the primary's reservations and settlements as they are, and a primary's lack of them", () => {
    const memory = new MemoryStore({ maxKeys: 10, sweepIntervalMs: 0 });
    const wrapped = new FailurePolicyStore({ store: memory, policy: 'deny' });
    expect(wrapped.reservations).toBe(memory.reservations);
    expect(wrapped.settlements).toBe(memory.settlements);
    const { store } = make('deny');
    expect(store.reservations).toBeUndefined();
    expect(store.settlements).toBeUndefined();
  });

  it("passes the primary's local answers on, except under the local policy while the primary is down", () => {
    const local = { decisions: [{ allowed: false, remaining: 0, resetMs: 5 }], deniedUntilMs: [105] };
    for (const policy of ['error', 'allow', 'deny', 'local'] as const) {
      const { primary, store } = make(policy, new MemoryStore({ maxKeys: 10, sweepIntervalMs: 0 }));
      expect(store.decideLocally(counters)).toBeUndefined();
      Object.assign(primary, { decideLocally: () => local });
      expect(store.decideLocally(counters)).toBe(local);
      primary.healthy = false;
      // Remembered denials still answer while the primary is down; `local` asks its fallback instead.
      expect(store.decideLocally(counters)).toBe(policy === 'local' ? undefined : local);
    }
  });

  it('passes the primary store decisions through while it answers, whatever the policy', async () => {
    for (const policy of ['error', 'allow', 'deny'] as const) {
      const { store, fallbacks } = make(policy);
      expect(await store.decide(counters)).toEqual([
        { allowed: true, remaining: 42, resetMs: 7 },
        { allowed: true, remaining: 42, resetMs: 7 },
      ]);
      expect(fallbacks).toEqual([]);
    }
  });

  it('rethrows StoreUnavailableError under the error policy', async () => {
    const { primary, store } = make('error');
    primary.up = false;
    await expect(store.decide(counters)).rejects.toBeInstanceOf(StoreUnavailableError);
  });

  it('allows every counter with remaining limit minus hits under the allow policy', async () => {
    const { primary, store, fallbacks } = make('allow');
    primary.up = false;
    expect(await store.decide(counters)).toEqual([
      { allowed: true, remaining: 7, resetMs: 0 },
      { allowed: true, remaining: 0, resetMs: 0 },
    ]);
    expect(fallbacks).toEqual(['allow']);
  });

  it('denies every counter with a short retry hint under the deny policy', async () => {
    const { primary, store } = make('deny');
    primary.up = false;
    expect(await store.decide(counters)).toEqual([
      { allowed: false, remaining: 0, resetMs: DENY_RESET_MS },
      { allowed: false, remaining: 0, resetMs: DENY_RESET_MS },
    ]);
  });

  it('lets errors other than StoreUnavailableError propagate under every policy', async () => {
    for (const policy of ['error', 'allow', 'deny'] as const) {
      const { primary, store } = make(policy);
      primary.up = false;
      primary.failWith = new TypeError('bug');
      await expect(store.decide(counters)).rejects.toBeInstanceOf(TypeError);
    }
  });

  it('decides from the local store under the local policy when the primary fails, and returns to it once healthy', async () => {
    const clock = new FakeClock(1_000_000);
    const local = new MemoryStore({ maxKeys: 100, clock, sweepIntervalMs: 0 });
    const { primary, store, fallbacks } = make('local', local);
    const one: CounterRequest[] = [{ key: 'k', limit: 2, windowMs: 10_000, algorithm: 'sliding_window', hits: 1 }];

    primary.up = false;
    expect((await store.decide(one))[0]).toMatchObject({ allowed: true, remaining: 1 });
    expect(primary.calls).toBe(1);

    // Known unhealthy: the primary is not even tried.
    primary.healthy = false;
    expect((await store.decide(one))[0]).toMatchObject({ allowed: true, remaining: 0 });
    expect((await store.decide(one))[0].allowed).toBe(false);
    expect(primary.calls).toBe(1);
    expect(fallbacks).toEqual(['local', 'local', 'local']);

    primary.up = true;
    primary.healthy = true;
    expect((await store.decide(one))[0]).toEqual({ allowed: true, remaining: 42, resetMs: 7 });
    expect(primary.calls).toBe(2);
    await store.close();
  });

  it('refuses the local policy without a fallback store', () => {
    expect(() => make('local')).toThrow(/fallback/);
  });

  it('reports the primary store health and forwards clearCache to both stores', () => {
    const cleared: string[] = [];
    const fallback: Store = {
      name: 'memory',
      decide: async () => [],
      isHealthy: () => true,
      close: async () => {},
      clearCache: () => cleared.push('fallback'),
    };
    const { primary, store } = make('local', fallback);
    (primary as Store).clearCache = () => cleared.push('primary');
    primary.healthy = false;
    expect(store.isHealthy()).toBe(false);
    expect(store.name).toBe('primary');
    store.clearCache();
    expect(cleared).toEqual(['primary', 'fallback']);
  });
});
