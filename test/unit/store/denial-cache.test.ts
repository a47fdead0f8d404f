import fc from 'fast-check';
import type { Algorithm } from '../../../src/limiter/types';
import { DenialCache } from '../../../src/store/denial-cache';
import { MemoryStore } from '../../../src/store/memory-store';
import type { CounterDecision, CounterRequest, Store } from '../../../src/limiter/store';
import { CountingStore } from '../../helpers/counting-store';
import { FakeClock } from '../../helpers/fake-clock';

const T0 = 1_700_000_000_000;

/** As the limiter asks a store: its local answer first (decideLocally), else its decision. */
async function ask(store: Store, counters: CounterRequest[]): Promise<readonly CounterDecision[]> {
  return store.decideLocally?.(counters)?.decisions ?? store.decide(counters);
}

function counter(key: string, hits = 1, limit = 2, algorithm: Algorithm = 'sliding_window', windowMs = 10_000): CounterRequest {
  return { key, hits, limit, windowMs, algorithm };
}

describe('DenialCache', () => {
  let clock: FakeClock;
  let memory: MemoryStore;
  let inner: CountingStore;
  let hits: number;
  let cache: DenialCache;

  beforeEach(() => {
    clock = new FakeClock(T0);
    memory = new MemoryStore({ maxKeys: 1000, clock, sweepIntervalMs: 0 });
    inner = new CountingStore(memory);
    hits = 0;
    cache = new DenialCache({ store: inner, maxKeys: 100, clock, onHit: () => hits++ });
  });

  afterEach(() => cache.close());

  it("forwards the wrapped store's reservations and settlements as they are", () => {
    const wrapped = new DenialCache({ store: memory, maxKeys: 100, clock });
    expect(wrapped.reservations).toBe(memory.reservations);
    expect(wrapped.settlements).toBe(memory.settlements);
    expect(cache.settlements).toBeUndefined();
  });

  it('answers nothing locally before it knows a denial, and decide() never answers from it', async () => {
    expect(cache.decideLocally([counter('a')])).toBeUndefined();
    for (let i = 0; i < 3; i++) await cache.decide([counter('a')]);
    expect(cache.decideLocally([counter('a')])).toBeDefined();
    // decide() asks the store even when a denial is known: the local answer is the caller's choice.
    await cache.decide([counter('a')]);
    expect(inner.calls).toBe(4);
    expect(hits).toBe(1);
  });

  it('never answers a call carrying a charge made whatever the outcome, but answers its checks', async () => {
    const post = (hits: number): CounterRequest => ({ ...counter('post', hits), countDenied: true });
    await ask(cache, [post(2)]);
    expect((await ask(cache, [post(1)]))[0].allowed).toBe(false);
    expect(cache.decideLocally([post(1)])).toBeUndefined();
    expect(cache.decideLocally([counter('post', 5), post(1)])).toBeUndefined();
    // Charged although denied: 3 hits on a limit of 2, so a check is denied, and remembered as such.
    expect((await ask(cache, [post(0)]))[0].allowed).toBe(false);
    expect(cache.decideLocally([post(0)])?.decisions[0].allowed).toBe(false);
    expect(inner.calls).toBe(3);
  });

  it('answers a repeated denial locally until the store would allow it again', async () => {
    await ask(cache, [counter('a')]);
    await ask(cache, [counter('a')]);
    const denied = await ask(cache, [counter('a')]);
    expect(denied[0].allowed).toBe(false);
    expect(inner.calls).toBe(3);

    const again = cache.decideLocally([counter('a')]);
    expect(again).toEqual({ decisions: [{ allowed: false, remaining: 0, resetMs: denied[0].resetMs }], deniedUntilMs: [T0 + denied[0].resetMs] });
    expect(inner.calls).toBe(3);
    expect(hits).toBe(1);

    clock.advance(denied[0].resetMs - 1);
    expect(cache.decideLocally([counter('a')])).toEqual({ decisions: [{ allowed: false, remaining: 0, resetMs: 1 }], deniedUntilMs: [T0 + denied[0].resetMs] });
    expect(inner.calls).toBe(3);

    clock.advance(1);
    const after = await ask(cache, [counter('a')]);
    expect(inner.calls).toBe(4);
    expect(after[0].allowed).toBe(true);
  });

  it('lets requests with fewer hits than the cached denial through to the store', async () => {
    await ask(cache, [counter('a', 1, 3)]);
    await ask(cache, [counter('a', 1, 3)]);
    expect((await ask(cache, [counter('a', 2, 3)]))[0].allowed).toBe(false);
    expect(inner.calls).toBe(3);
    const one = await ask(cache, [counter('a', 1, 3)]);
    expect(inner.calls).toBe(4);
    expect(one[0].allowed).toBe(true);
    expect((await ask(cache, [counter('a', 5, 3)]))[0].allowed).toBe(false);
    expect(inner.calls).toBe(4);
  });

  it('answers a denial only for the limit, window and algorithm it was decided under', async () => {
    await ask(cache, [counter('a', 2, 2)]);
    expect((await ask(cache, [counter('a', 1, 2)]))[0].allowed).toBe(false);
    const calls = inner.calls;
    await ask(cache, [counter('a', 1, 5)]);
    await ask(cache, [counter('a', 1, 2, 'sliding_window', 20_000)]);
    await ask(cache, [counter('a', 1, 2, 'fixed_window')]);
    expect(inner.calls).toBe(calls + 3);
  });

  it('answers a denial only for the bucket capacity and strictness it was decided under (a runtime override may change either alone)', async () => {
    const bucket = (burst: number): CounterRequest => ({ ...counter('b', 1, 2, 'token_bucket'), burst });
    // Two tokens taken, the third call denied and remembered.
    for (let i = 0; i < 3; i++) await ask(cache, [bucket(2)]);
    expect(cache.decideLocally([bucket(2)])).toBeDefined();
    expect(cache.decideLocally([bucket(10)])).toBeUndefined();
    expect((await ask(cache, [bucket(10)]))[0].allowed).toBe(true);
    const strict = (on: boolean): CounterRequest => ({ ...counter('s', 2, 2), subWindows: 2, strict: on });
    await ask(cache, [strict(true)]);
    await ask(cache, [strict(true)]);
    expect(cache.decideLocally([strict(true)])).toBeDefined();
    expect(cache.decideLocally([strict(false)])).toBeUndefined();
  });

  it('answers locally only a call whose every counter it knows denied: the store reports the others as they are', async () => {
    await ask(cache, [counter('a', 2, 2)]);
    await ask(cache, [counter('b', 1, 10)]);
    expect((await ask(cache, [counter('a', 1, 2)]))[0].allowed).toBe(false);
    const calls = inner.calls;
    // b is not denied: the store decides the call, and reports b's remaining hits (9 - 1 for this call).
    expect(cache.decideLocally([counter('b', 1, 10), counter('a', 1, 2)])).toBeUndefined();
    const decided = await ask(cache, [counter('b', 1, 10), counter('a', 1, 2)]);
    expect(inner.calls).toBe(calls + 1);
    expect(decided[0]).toMatchObject({ allowed: true, remaining: 8 });
    expect(decided[1].allowed).toBe(false);
    // Nothing was charged for b: the call was denied.
    expect((await memory.decide([counter('b', 0, 10)]))[0].remaining).toBe(9);
    // Both known denied: answered here, each with its own wait.
    await ask(cache, [counter('c', 3, 2)]);
    const local = cache.decideLocally([counter('c', 3, 2), counter('a', 1, 2)])!;
    expect(local.decisions.map((d) => d.allowed)).toEqual([false, false]);
    expect(local.deniedUntilMs.every((t) => t > T0)).toBe(true);
  });

  it("takes a counter named twice in a call for the call's hits on it: [k, k] denied says nothing of [k]", async () => {
    const twice = [counter('k', 1, 1), counter('k', 1, 1)];
    const first = await ask(cache, twice);
    expect(first.map((d) => d.allowed)).toEqual([true, false]);
    // Two hits are known denied ...
    expect(cache.decideLocally([counter('k', 2, 1)])).toBeDefined();
    // ... but one hit alone is the store's to decide: nothing was charged, so it is allowed.
    expect(cache.decideLocally([counter('k', 1, 1)])).toBeUndefined();
    // The call naming it twice is the store's too: its verdicts differ by position.
    expect(cache.decideLocally(twice)).toBeUndefined();
    const calls = inner.calls;
    expect((await ask(cache, [counter('k', 1, 1)]))[0].allowed).toBe(true);
    expect(inner.calls).toBe(calls + 1);
  });

  it('finds repeated counters of a long call through a map, with the same verdicts', async () => {
    const many = Array.from({ length: 40 }, (_, i) => counter(`m${i % 20}`, 1, 1));
    const decided = await ask(cache, many);
    expect(decided.map((d) => d.allowed)).toEqual([...Array<boolean>(20).fill(true), ...Array<boolean>(20).fill(false)]);
    expect(cache.decideLocally(many)).toBeUndefined();
    expect(cache.decideLocally([counter('m7', 2, 1)])).toBeDefined();
    expect(cache.decideLocally([counter('m7', 1, 1)])).toBeUndefined();
  });

  it('forgets every denial on clear and passes clearCache on to the store it wraps', async () => {
    await ask(cache, [counter('a', 3, 2)]);
    expect(cache.size).toBe(1);
    cache.clearCache();
    expect(cache.size).toBe(0);
    expect(inner.cleared).toBe(1);
    const calls = inner.calls;
    await ask(cache, [counter('a', 3, 2)]);
    expect(inner.calls).toBe(calls + 1);
  });

  it('holds at most maxKeys denials, dropping the least recently used', async () => {
    const small = new DenialCache({ store: inner, maxKeys: 2, clock });
    await ask(small, [counter('x', 9, 1)]);
    await ask(small, [counter('y', 9, 1)]);
    await ask(small, [counter('x', 9, 1)]); // touches x: y is now the coldest
    await ask(small, [counter('z', 9, 1)]);
    expect(small.size).toBe(2);
    const calls = inner.calls;
    await ask(small, [counter('x', 9, 1)]);
    expect(inner.calls).toBe(calls);
    await ask(small, [counter('y', 9, 1)]);
    expect(inner.calls).toBe(calls + 1);
  });

  it('records the denial from the local time read before the store answered', async () => {
    // A store that takes 300 ms of local time to answer.
    const slow: Store = {
      name: 'slow',
      decide: async () => {
        clock.advance(300);
        return [{ allowed: false, remaining: 0, resetMs: 1_000 }];
      },
      isHealthy: () => true,
      close: async () => {},
    };
    const c = new DenialCache({ store: slow, maxKeys: 10, clock });
    await ask(c, [counter('a')]);
    expect((await ask(c, [counter('a')]))[0].resetMs).toBe(700);
  });

  it('reports the health of the store it wraps and closes it', async () => {
    const closed = jest.fn(async () => {});
    const s: Store = { name: 'x', decide: async () => [], isHealthy: () => false, close: closed };
    const c = new DenialCache({ store: s, maxKeys: 1, clock });
    expect(c.isHealthy()).toBe(false);
    expect(c.name).toBe('x');
    await c.close();
    expect(closed).toHaveBeenCalled();
  });

  it('never denies a request that the store alone would have allowed, under random traffic', async () => {
    // Every algorithm and mode, by a label that also names its counter (each divides every window below).
    const modes: Record<string, Pick<CounterRequest, 'algorithm' | 'subWindows' | 'strict' | 'burst'>> = {
      sw: { algorithm: 'sliding_window' },
      fw: { algorithm: 'fixed_window' },
      sl: { algorithm: 'sliding_log' },
      sw4: { algorithm: 'sliding_window', subWindows: 4 },
      sw4s: { algorithm: 'sliding_window', subWindows: 4, strict: true },
      tb: { algorithm: 'token_bucket', burst: 3 },
      lb: { algorithm: 'leaky_bucket' },
    };
    const step = fc.record({
      // Besides random waits, wait exactly until (or 1 ms before) the last denial's retry time:
      // the instants where a cache off by one would show.
      advance: fc.oneof(fc.integer({ min: 0, max: 50 }), fc.integer({ min: 0, max: 3_000 }), fc.constantFrom('reset' as const, 'before-reset' as const)),
      // Retrying the previous request is what a denied client does.
      repeat: fc.boolean(),
      // A counter may be named twice in one call.
      counters: fc.array(
        fc.record({
          key: fc.constantFrom('k1', 'k2', 'k3'),
          algorithm: fc.constantFrom(...Object.keys(modes)),
          hits: fc.oneof(fc.constant(1), fc.integer({ min: 0, max: 4 })),
        }),
        { minLength: 1, maxLength: 4 },
      ),
    });
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 0, max: 10_000 }),
        fc.constantFrom(1_000, 2_000, 7_000),
        fc.integer({ min: 1, max: 5 }),
        fc.array(step, { minLength: 1, maxLength: 80 }),
        async (start, windowMs, limit, steps) => {
          const fake = new FakeClock(T0 + start);
          // Two identical stores fed the same traffic: one behind the cache, one alone (the oracle).
          const behind = new MemoryStore({ maxKeys: 1000, clock: fake, sweepIntervalMs: 0 });
          const alone = new MemoryStore({ maxKeys: 1000, clock: fake, sweepIntervalMs: 0 });
          const cached = new DenialCache({ store: behind, maxKeys: 1000, clock: fake });
          let lastReset = 0;
          let previous: CounterRequest[] = [];
          for (const s of steps) {
            if (s.advance === 'reset') fake.advance(lastReset);
            else if (s.advance === 'before-reset') fake.advance(Math.max(0, lastReset - 1));
            else fake.advance(s.advance);
            const request =
              s.repeat && previous.length > 0
                ? previous
                : s.counters.map((c) => ({ key: `${c.key}/${c.algorithm}`, ...modes[c.algorithm], hits: c.hits, limit, windowMs }));
            previous = request;
            const local = cached.decideLocally(request);
            const got = local?.decisions ?? (await cached.decide(request));
            const want = await alone.decide(request);
            // A local answer is the store's verdict on every counter; everything else passes through
            // unchanged, so both stores stay in the same state.
            if (local === undefined) expect(got).toEqual(want);
            else expect(want.map((d) => d.allowed)).toEqual(got.map(() => false));
            const denied = want.filter((d) => !d.allowed);
            if (denied.length > 0) lastReset = denied[0].resetMs;
          }
          await Promise.all([behind.close(), alone.close()]);
        },
      ),
      { numRuns: 300 },
    );
  });
});
