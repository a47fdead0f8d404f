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

  it('answers nothing locally before it knows a denial, and decide() never answers from it', async () => {
    expect(cache.decideLocally([counter('a')])).toBeUndefined();
    for (let i = 0; i < 3; i++) await cache.decide([counter('a')]);
    expect(cache.decideLocally([counter('a')])).toBeDefined();
    // decide() asks the store even when a denial is known: the local answer is the caller's choice.
    await cache.decide([counter('a')]);
    expect(inner.calls).toBe(4);
    expect(hits).toBe(1);
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

  it('answers a call with one cached-denied counter locally and reports the others allowed with remaining 0', async () => {
    await ask(cache, [counter('a', 2, 2)]);
    await ask(cache, [counter('a', 1, 2)]);
    const calls = inner.calls;
    const local = cache.decideLocally([counter('b', 1, 10), counter('a', 1, 2)])!;
    const out = local.decisions;
    expect(inner.calls).toBe(calls);
    expect(out[0]).toEqual({ allowed: true, remaining: 0, resetMs: 0 });
    expect(out[1].allowed).toBe(false);
    expect(out[1].resetMs).toBeGreaterThan(0);
    // b was not consulted: no denial time; a's holds until its reset.
    expect(local.deniedUntilMs).toEqual([NaN, T0 + out[1].resetMs]);
    // Nothing was charged for b.
    expect((await memory.decide([counter('b', 0, 10)]))[0].remaining).toBe(10);
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
      counters: fc.uniqueArray(
        fc.record({
          key: fc.constantFrom('k1', 'k2', 'k3'),
          algorithm: fc.constantFrom(...Object.keys(modes)),
          hits: fc.oneof(fc.constant(1), fc.integer({ min: 0, max: 4 })),
        }),
        { minLength: 1, maxLength: 3, selector: (c) => `${c.key}/${c.algorithm}` },
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
            const got = await ask(cached, request);
            const want = await alone.decide(request);
            const gotAllowed = got.every((d) => d.allowed);
            const wantAllowed = want.every((d) => d.allowed);
            // A cached denial must match a store denial; everything else passes through unchanged,
            // so both stores stay in the same state.
            if (!gotAllowed) expect(wantAllowed).toBe(false);
            else expect(got).toEqual(want);
            for (let i = 0; i < request.length; i++) if (!got[i].allowed) expect(want[i].allowed).toBe(false);
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
