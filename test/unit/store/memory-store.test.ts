import type { Algorithm, Clock } from '../../../src/limiter/types';
import { MemoryStore } from '../../../src/store/memory-store';
import type { CounterRequest } from '../../../src/limiter/store';
import { FakeClock } from '../../helpers/fake-clock';

const W = 1_000;

function c(key: string, limit: number, hits = 1, algorithm: Algorithm = 'sliding_window', windowMs = W): CounterRequest {
  return { key, limit, hits, algorithm, windowMs };
}

describe('MemoryStore', () => {
  let clock: FakeClock;
  let store: MemoryStore;

  const make = (maxKeys = 1_000): MemoryStore => new MemoryStore({ clock, maxKeys, sweepIntervalMs: 0 });

  beforeEach(() => {
    clock = new FakeClock(10 * W);
    store = make();
  });

  afterEach(async () => {
    await store.close();
  });

  it('holds at most maxBytes of records however long their keys, evicting the least recently used', async () => {
    const small = new MemoryStore({ clock, maxKeys: 1_000, maxBytes: 64 * 1024, sweepIntervalMs: 0 });
    for (let i = 0; i < 100; i++) await small.decide([c(`${i}`.padEnd(5_000, 'k'), 5)]);
    expect(small.bytes).toBeLessThanOrEqual(64 * 1024);
    expect(small.size).toBe(12);
    // The newest ones are kept, with their hits.
    expect((await small.decide([c('99'.padEnd(5_000, 'k'), 5, 0)]))[0].remaining).toBe(4);
    // A sliding log grows with its entries, and its bytes with it.
    const before = small.bytes;
    for (let i = 0; i < 5; i++) {
      clock.advance(1);
      await small.decide([c('log', 10, 1, 'sliding_log')]);
    }
    expect(small.bytes).toBeGreaterThan(before);
    await small.close();
  });

  it('rejects a maxKeys that is not a positive integer', () => {
    expect(() => new MemoryStore({ clock, maxKeys: 0 })).toThrow(RangeError);
    expect(() => new MemoryStore({ clock, maxKeys: 1.5 })).toThrow(RangeError);
  });

  it('predicts the exact retry instant of a denied sliding-window request', async () => {
    clock.set(10 * W + 250);
    await store.decide([c('k', 2, 2)]);
    const [denied] = await store.decide([c('k', 2)]);
    // 2 hits in the current window decay below 2 at 1 ms into the next one: 750 + 1 ms.
    expect(denied).toEqual({ allowed: false, remaining: 0, resetMs: 751 });
    clock.advance(750);
    expect((await store.decide([c('k', 2)]))[0].allowed).toBe(false);
    clock.advance(1);
    expect((await store.decide([c('k', 2)]))[0].allowed).toBe(true);
  });

  it('keeps a bucket exactly until it has drained, and sub-windows until the newest one has left the window', async () => {
    clock.set(10 * W);
    const bucket: CounterRequest = { key: 'b', limit: 5, hits: 3, algorithm: 'token_bucket', windowMs: W, burst: 10 };
    // 3 hits at 5 per second: 600 ms until the bucket is full again.
    expect((await store.decide([bucket]))[0]).toEqual({ allowed: true, remaining: 7, resetMs: 600 });
    const sub: CounterRequest = { key: 's', limit: 5, hits: 1, algorithm: 'sliding_window', windowMs: W, subWindows: 4 };
    // Charged in sub-window 40 (of 250 ms), read until the end of sub-window 44.
    expect((await store.decide([sub]))[0]).toEqual({ allowed: true, remaining: 4, resetMs: 250 + 4 * 250 });
    clock.advance(599);
    expect(store.sweep()).toBe(0);
    clock.advance(1);
    expect(store.sweep()).toBe(1);
    expect(store.size).toBe(1);
    clock.advance(1_250 - 600);
    expect(store.sweep()).toBe(1);
    expect(store.size).toBe(0);
  });

  it('moves sub-window counts forward as time passes, and reads a strict window from the same counts', async () => {
    const sub = (hits: number, strict = false): CounterRequest => ({
      key: 's',
      limit: 4,
      hits,
      algorithm: 'sliding_window',
      windowMs: W,
      subWindows: 2,
      strict,
    });
    clock.set(10 * W + 100); // sub-window 20 of 500 ms
    expect((await store.decide([sub(3)]))[0].allowed).toBe(true);
    clock.set(11 * W + 400); // sub-window 22: sub-window 20 is the oldest, 100 ms of it left to weigh
    expect((await store.decide([sub(0)]))[0]).toEqual({ allowed: true, remaining: 4, resetMs: 100 });
    // Strict counts those 3 hits in full until sub-window 20 has left the window.
    expect((await store.decide([sub(2, true)]))[0]).toEqual({ allowed: false, remaining: 0, resetMs: 100 });
    expect((await store.decide([sub(2)]))[0].allowed).toBe(true);
  });

  it('reads its clock once per call, so every counter of a call is decided at the same instant', async () => {
    let reads = 0;
    const counting: Clock = { nowMs: () => (reads++, clock.nowMs()) };
    const s = new MemoryStore({ clock: counting, maxKeys: 10, sweepIntervalMs: 0 });
    await s.decide([c('a', 5), c('b', 5), c('c', 5, 1, 'sliding_log')]);
    expect(reads).toBe(1);
    await s.close();
  });

  it('sees the earlier hits of the same counter named twice in one call', async () => {
    const decisions = await store.decide([c('same', 3, 2), c('same', 3, 2)]);
    expect(decisions.map((d) => d.allowed)).toEqual([true, false]);
    // All-or-nothing: the first copy was not charged either.
    expect((await store.decide([c('same', 3, 3)]))[0]).toMatchObject({ allowed: true, remaining: 0 });

    const fits = await store.decide([c('twice', 4, 2, 'sliding_log'), c('twice', 4, 2, 'sliding_log')]);
    expect(fits.map((d) => d.remaining)).toEqual([2, 0]);
    expect((await store.decide([c('twice', 4, 1, 'sliding_log')]))[0].allowed).toBe(false);
  });

  it('creates no record for a check with zero hits', async () => {
    await store.decide([c('only-checked', 5, 0), c('also', 5, 0, 'sliding_log')]);
    expect(store.size).toBe(0);
  });

  it('starts a key over when it is reused with another algorithm or window', async () => {
    await store.decide([c('k', 1, 1, 'fixed_window')]);
    expect((await store.decide([c('k', 1, 1, 'sliding_log')]))[0].allowed).toBe(true);
    expect((await store.decide([c('k', 1, 1, 'sliding_log', 2 * W)]))[0].allowed).toBe(true);
    expect(store.size).toBe(1);
  });

  describe('memory bound', () => {
    it('never holds more than maxKeys records, evicting the least recently used', async () => {
      store = make(3);
      for (const key of ['a', 'b', 'c']) await store.decide([c(key, 1)]);
      // Touch "a" (a denied request is a use too), then add "d": "b" is the coldest and goes.
      expect((await store.decide([c('a', 1)]))[0].allowed).toBe(false);
      await store.decide([c('d', 1)]);
      expect(store.size).toBe(3);
      expect((await store.decide([c('b', 1)]))[0].allowed).toBe(true); // forgotten: a fresh quota
      expect((await store.decide([c('a', 1)]))[0].allowed).toBe(false); // kept
    });

    it('evicts a counter used since the store grew past half of maxKeys after every counter not used since', async () => {
      store = make(4);
      for (const key of ['a', 'b']) await store.decide([c(key, 1)]);
      // At half of maxKeys or below, reads leave the order alone; above it, a read makes a record the youngest.
      expect((await store.decide([c('a', 1)]))[0].allowed).toBe(false);
      await store.decide([c('c', 1)]);
      expect((await store.decide([c('a', 1)]))[0].allowed).toBe(false);
      await store.decide([c('d', 1)]);
      await store.decide([c('e', 1)]);
      expect(store.size).toBe(4);
      expect((await store.decide([c('a', 1)]))[0].allowed).toBe(false); // kept
      expect((await store.decide([c('b', 1)]))[0].allowed).toBe(true); // the coldest: forgotten
    });

    it('stays bounded under many distinct keys', async () => {
      store = make(100);
      for (let i = 0; i < 1_000; i++) await store.decide([c(`k${i}`, 10)]);
      expect(store.size).toBe(100);
    });
  });

  describe('expiry', () => {
    it('drops a sliding-window record once both of its windows are over', async () => {
      await store.decide([c('sw', 5)]);
      clock.advance(2 * W - 1); // window index + 1 still weighs the record
      expect(store.sweep()).toBe(0);
      clock.advance(1);
      expect(store.sweep()).toBe(1);
      expect(store.size).toBe(0);
    });

    it('drops a fixed-window record at the end of its window and a log record one window after its newest hit', async () => {
      clock.set(10 * W + 400);
      await store.decide([c('fw', 5, 1, 'fixed_window'), c('sl', 5, 1, 'sliding_log')]);
      clock.advance(600);
      expect(store.sweep()).toBe(1);
      clock.advance(399);
      expect(store.sweep()).toBe(0);
      clock.advance(1);
      expect(store.sweep()).toBe(1);
      expect(store.size).toBe(0);
    });

    it('sweeps in batches, resuming where the last batch stopped', async () => {
      for (let i = 0; i < 10; i++) await store.decide([c(`k${i}`, 5)]);
      clock.advance(3 * W);
      expect(store.sweep(4)).toBe(4);
      expect(store.sweep(4)).toBe(4);
      expect(store.sweep(4)).toBe(2);
      expect(store.size).toBe(0);
    });

    it('drops expired records lazily as calls arrive, without a sweep', async () => {
      await store.decide([c('old-1', 5)]);
      await store.decide([c('old-2', 5)]);
      clock.advance(5 * W);
      await store.decide([c('new', 5)]);
      expect(store.size).toBe(1);
    });

    it('forgets an expired counter even before it is swept', async () => {
      await store.decide([c('k', 1, 1, 'fixed_window')]);
      clock.advance(W);
      expect((await store.decide([c('k', 1, 1, 'fixed_window')]))[0].allowed).toBe(true);
    });

    it('keeps only the records of a sliding log that are still in the window', async () => {
      for (let i = 0; i < 5; i++) {
        await store.decide([c('log', 100, 1, 'sliding_log')]);
        clock.advance(300);
      }
      // Hits at +0, +300, +600, +900, +1200; now +1500: only +600 and later remain.
      expect((await store.decide([c('log', 100, 0, 'sliding_log')]))[0].remaining).toBe(97);
    });
  });

  it('runs its background sweep on an unref-ed timer and stops it on close', async () => {
    jest.useFakeTimers();
    try {
      const s = new MemoryStore({ clock, maxKeys: 10, sweepIntervalMs: 1_000 });
      await s.decide([c('k', 5)]);
      clock.advance(10 * W);
      jest.advanceTimersByTime(1_000);
      expect(s.size).toBe(0);
      await s.close();
      expect(jest.getTimerCount()).toBe(0);
    } finally {
      jest.useRealTimers();
    }
  });
});
