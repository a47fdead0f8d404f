import fc from 'fast-check';
import { BoundedCache, ENTRY_OVERHEAD_BYTES, entryBytes, OldestKey, type CacheEntry } from '../../../src/limiter/bounded-cache';

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

  it('evicts by use after tidy() has looked at the cold end: an entry used since is no longer the oldest', () => {
    const cache = new BoundedCache<Item>({ maxEntries: 3, maxBytes: 1e9 });
    for (const k of ['a', 'b', 'c']) cache.set(k, item(k, 1e9));
    cache.tidy(0, 0);
    cache.touch('a', cache.peek('a', 0)!);
    cache.set('d', item('d', 1e9));
    cache.set('e', item('e', 1e9));
    expect(['a', 'b', 'c', 'd', 'e'].map((k) => cache.peek(k, 0)?.name)).toEqual(['a', undefined, undefined, 'd', 'e']);
  });

  it('keeps exactly the entries a plain least-recently-used list keeps, through any sequence of calls', () => {
    // The model: keys in order of use, oldest first; expiry checked where the cache checks it.
    type Op = ['set', string, number] | ['touch', string] | ['peek', string] | ['delete', string] | ['tidy'] | ['grow', string] | ['clear'];
    const key = fc.constantFrom('a', 'b', 'c', 'd', 'e', 'f', 'g', 'h');
    const op: fc.Arbitrary<Op> = fc.oneof(
      fc.tuple(fc.constant('set' as const), key, fc.integer({ min: 1, max: 30 })),
      fc.tuple(fc.constant('touch' as const), key),
      fc.tuple(fc.constant('peek' as const), key),
      fc.tuple(fc.constant('delete' as const), key),
      fc.tuple(fc.constant('tidy' as const)),
      fc.tuple(fc.constant('grow' as const), key),
      fc.tuple(fc.constant('clear' as const)),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 200 }), (ops) => {
        const cache = new BoundedCache<Item>({ maxEntries: 4, maxBytes: 600 });
        let model: Item[] = [];
        let now = 0;
        const drop = (name: string): void => void (model = model.filter((i) => i.name !== name));
        const enforce = (): void => {
          while ((model.length > 4 || model.reduce((n, i) => n + i.bytes, 0) > 600) && model.length > 1) model.shift();
        };
        for (const o of ops) {
          now++;
          const held = model.find((i) => i.name === (o[1] as string));
          if (o[0] === 'set') {
            drop(o[1]);
            const it = item(o[1], now + o[2], 100);
            model.push(it);
            cache.set(o[1], it);
            enforce();
          } else if (o[0] === 'peek' || o[0] === 'touch') {
            const live = held !== undefined && now < held.expiresAtMs ? held : undefined;
            if (held !== undefined && live === undefined) drop(held.name);
            expect(cache.peek(o[1], now)).toBe(live);
            if (o[0] === 'touch' && live !== undefined) {
              cache.touch(o[1], live);
              drop(o[1]);
              model.push(live);
            }
          } else if (o[0] === 'delete') {
            cache.delete(o[1]);
            drop(o[1]);
          } else if (o[0] === 'grow') {
            if (held !== undefined) {
              cache.resize(held, held.bytes + 150);
              enforce();
            }
          } else if (o[0] === 'tidy') {
            cache.tidy(now, 0);
            for (let i = 0; i < 2 && model.length > 0 && now >= model[0].expiresAtMs; i++) model.shift();
          } else {
            cache.clear();
            model = [];
          }
          expect(cache.size).toBe(model.length);
          expect(cache.bytes).toBe(model.reduce((n, i) => n + i.bytes, 0));
        }
        for (const i of model) expect(cache.peek(i.name, 0)).toBe(i);
      }),
      { numRuns: 500 },
    );
  });
});

describe('OldestKey', () => {
  it('hands out the keys of a set oldest first while its owner deletes each one, however the set changes between calls', () => {
    fc.assert(
      fc.property(fc.array(fc.oneof(fc.integer({ min: 0, max: 20 }), fc.constant(-1)), { maxLength: 300 }), (ops) => {
        const set = new Set<number>();
        const oldest = new OldestKey(() => set.values());
        const order: number[] = [];
        for (const o of ops) {
          if (o >= 0) {
            // Added again: moves to the end.
            set.delete(o);
            set.add(o);
            const at = order.indexOf(o);
            if (at >= 0) order.splice(at, 1);
            order.push(o);
          } else {
            const k = oldest.next();
            expect(k).toBe(order[0]);
            if (k !== undefined) {
              set.delete(k);
              order.shift();
            }
          }
        }
      }),
      { numRuns: 500 },
    );
  });
});
