import type { CounterRequest, HoldCall } from '../../../src/limiter/store';
import { MemoryStore } from '../../../src/store/memory-store';
import { FakeClock } from '../../helpers/fake-clock';

/**
 * The memory store's reservations over all books: the process-wide bounds take room from the least
 * recently used other books, dropped whole, and never refuse a reserve whose own book has room; a
 * book's own bounds refuse only its own reserves.
 */

const budget = (key: string, limit = 1_000): CounterRequest => ({ key, algorithm: 'sliding_window', limit, windowMs: 60_000, hits: 0 });
const reserve = (key: string, id: string, hits = 1): HoldCall => ({ kind: 'reserve', key, id, hits, counters: [budget(key)], maxHeld: undefined });

function setup(reservations: { maxEntries?: number; maxBytes?: number; maxPerKey?: number }): { store: MemoryStore; clock: FakeClock } {
  const clock = new FakeClock(1_700_000_000_000);
  return { store: new MemoryStore({ clock, maxKeys: 10_000, sweepIntervalMs: 0, reservations: { ttlMs: 600_000, ...reservations } }), clock };
}

describe('memory reservations over all books', () => {
  it('makes room by dropping the least recently used other books: a flood of fresh books never refuses a reserve, and spares a book in use', () => {
    const { store } = setup({ maxEntries: 50 });
    const r = store.reservations;
    expect(r.holdNow(reserve('legit', 'l0', 10)).outcome).toBe('held');
    const outcomes = new Set<string>();
    for (let i = 0; i < 200; i++) {
      outcomes.add(r.holdNow(reserve(`flood-${i}`, 'x', 0)).outcome);
      // The legit book is used all along: it stays, its hold counted.
      if (i % 10 === 9)
        expect(r.holdNow(reserve('legit', `l${i}`, 10))).toMatchObject({ outcome: 'held', decisions: [{ remaining: 1_000 - 10 * (1 + (i + 1) / 10) }] });
    }
    expect([...outcomes]).toEqual(['held']);
    expect(r.size).toBe(50);
    // Every flood book but the 29 most recent dropped; the legit book's 21 holds all kept.
    expect(r.evictedHolds).toBe(200 - 29);
  });

  it('bounds the estimated bytes too: long IDs on fresh books drop the oldest books', () => {
    const { store } = setup({ maxBytes: 64 * 1024 });
    const r = store.reservations;
    for (let i = 0; i < 1_000; i++) expect(r.holdNow(reserve(`k${i}`, 'y'.repeat(250), 0)).outcome).toBe('held');
    expect(r.bytes).toBeLessThanOrEqual(64 * 1024);
    expect(r.size).toBeGreaterThan(100);
    expect(r.size).toBeLessThan(1_000);
  });

  it("refuses a reserve only when its own book is full, or when the process-wide bounds are below one book's", () => {
    const { store } = setup({ maxEntries: 3, maxPerKey: 10 });
    const r = store.reservations;
    for (let i = 0; i < 3; i++) expect(r.holdNow(reserve('one', `a${i}`)).outcome).toBe('held');
    // The book alone fills the process: nothing else to drop, its next hold is refused.
    expect(r.holdNow(reserve('one', 'a3'))).toMatchObject({ outcome: 'full', held: 3 });
    // Another book takes the room, the first dropped whole.
    expect(r.holdNow(reserve('two', 'b0'))).toMatchObject({ outcome: 'held', held: 1 });
    expect(r.size).toBe(1);
    expect(r.evictedHolds).toBe(3);
  });

  it('frees every count with its book: lapsed, committed and dropped holds leave no bytes behind', () => {
    const { store, clock } = setup({ maxEntries: 4 });
    const r = store.reservations;
    r.holdNow(reserve('a', '1'));
    r.holdNow(reserve('a', '2'));
    r.holdNow({ ...reserve('a', '2'), kind: 'commit' });
    r.holdNow(reserve('b', '1'));
    clock.advance(60_000);
    // Held for the store's TTL (no hold time asked): still there a minute later.
    expect(r.size).toBe(2);
    clock.advance(600_000);
    expect(r.sweep()).toBe(2);
    expect([r.size, r.bytes]).toEqual([0, 0]);
  });
});
