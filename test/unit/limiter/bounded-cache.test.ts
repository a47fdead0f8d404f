import { BoundedCache, ENTRY_OVERHEAD_BYTES, entryBytes, type CacheEntry } from '../../../src/limiter/bounded-cache';

interface Item extends CacheEntry {
  readonly name: string;
}

const item = (name: string, expiresAtMs: number, bytes = 100): Item => ({ name, expiresAtMs, bytes });

describe('BoundedCache', () => {
  it('rejects bounds that are not positive integers', () => {
    expect(() => new BoundedCache<Item>({ maxEntries: 0, maxBytes: 10 })).toThrow(RangeError);
    expect(() => new BoundedCache<Item>({ maxEntries: 10, maxBytes: 1.5 })).toThrow(RangeError);
  });

  it('estimates an entry as its key, its own fields and a fixed overhead', () => {
    expect(entryBytes('abc', 10)).toBe(ENTRY_OVERHEAD_BYTES + 13);
  });

  it('holds at most maxEntries, dropping the least recently used', () => {
    const cache = new BoundedCache<Item>({ maxEntries: 2, maxBytes: 1e9 });
    cache.set('a', item('a', 1e9));
    cache.set('b', item('b', 1e9));
    cache.touch('a', cache.peek('a', 0)!);
    cache.set('c', item('c', 1e9));
    expect([cache.peek('a', 0)?.name, cache.peek('b', 0), cache.peek('c', 0)?.name]).toEqual(['a', undefined, 'c']);
  });

  it('holds at most maxBytes, dropping the least recently used, but always keeps the newest entry', () => {
    const cache = new BoundedCache<Item>({ maxEntries: 100, maxBytes: 250 });
    for (const k of ['a', 'b', 'c']) cache.set(k, item(k, 1e9));
    expect([cache.size, cache.bytes]).toEqual([2, 200]);
    cache.set('huge', item('huge', 1e9, 1_000));
    expect([cache.size, cache.bytes, cache.peek('huge', 0)?.name]).toEqual([1, 1_000, 'huge']);
    // Replacing an entry counts only the new one.
    cache.set('huge', item('huge', 1e9, 50));
    expect([cache.size, cache.bytes]).toEqual([1, 50]);
  });

  it('accounts an entry that grows in place, and evicts others for it', () => {
    const cache = new BoundedCache<Item>({ maxEntries: 100, maxBytes: 300 });
    cache.set('a', item('a', 1e9));
    const b = item('b', 1e9);
    cache.set('b', b);
    cache.resize(b, 250);
    expect([cache.size, cache.bytes, b.bytes]).toEqual([1, 250, 250]);
    cache.delete('b');
    expect([cache.size, cache.bytes]).toEqual([0, 0]);
  });

  it('drops an expired entry when it is met, and a few per tidy() at the cold end and in turn', () => {
    const cache = new BoundedCache<Item>({ maxEntries: 100, maxBytes: 1e9 });
    cache.set('old', item('old', 10));
    expect(cache.peek('old', 9)?.name).toBe('old');
    expect(cache.peek('old', 10)).toBeUndefined();
    expect(cache.size).toBe(0);
    // Expired entries behind a live one at the cold end: found by the sweep steps of tidy().
    cache.set('live', item('live', 1e9));
    for (let i = 0; i < 6; i++) cache.set(`x${i}`, item(`x${i}`, 10));
    for (let i = 0; i < 4; i++) cache.tidy(20);
    expect(cache.size).toBe(1);
    expect(cache.bytes).toBe(100);
  });

  it('sweeps in batches, resuming where the last batch stopped', () => {
    const cache = new BoundedCache<Item>({ maxEntries: 100, maxBytes: 1e9 });
    for (let i = 0; i < 10; i++) cache.set(`k${i}`, item(`k${i}`, 10));
    expect(cache.sweep(20, 4)).toBe(4);
    expect(cache.sweep(20, 4)).toBe(4);
    expect(cache.sweep(20, 4)).toBe(2);
    expect([cache.size, cache.bytes]).toEqual([0, 0]);
    cache.set('again', item('again', 10));
    cache.clear();
    expect([cache.size, cache.bytes]).toEqual([0, 0]);
  });
});
