import fc from 'fast-check';
import { counterKey, counterKeyPrefix, escapeComponent } from '../../../src/limiter/keys';
import { ALGORITHMS, type Algorithm, type Entry } from '../../../src/limiter/types';

const key = (domain: string, entries: readonly Entry[], algorithm: Algorithm = 'sliding_window', windowMs = 1_000): string =>
  counterKey(counterKeyPrefix(domain, algorithm, windowMs), entries);

describe('counter keys', () => {
  it('keep (a_b, c) and (a, b_c) apart', () => {
    expect(key('d', [{ key: 'a_b', value: 'c' }])).not.toBe(key('d', [{ key: 'a', value: 'b_c' }]));
    expect(
      key('d', [
        { key: 'a', value: 'b' },
        { key: 'c', value: 'd' },
      ]),
    ).not.toBe(key('d', [{ key: 'a', value: 'b|c=d' }]));
  });

  it('leave plain text untouched and escape separators, braces and the escape character', () => {
    expect(key('edge', [{ key: 'remote_address', value: '10.0.0.1:443' }])).toBe('edge|sw1000|remote_address=10.0.0.1:443');
    expect(escapeComponent('a|b=c{d}%')).toBe('a%7Cb%3Dc%7Bd%7D%25');
  });

  it('differ by algorithm and by window', () => {
    const entries = [{ key: 'k', value: 'v' }];
    const keys = new Set([
      key('d', entries, 'sliding_window', 1_000),
      key('d', entries, 'sliding_log', 1_000),
      key('d', entries, 'fixed_window', 1_000),
      key('d', entries, 'sliding_window', 10_000),
    ]);
    expect(keys.size).toBe(4);
  });

  // Components drawn from an alphabet rich in separators and escape-like text, plus arbitrary code points.
  const tricky = fc.oneof(
    fc.string({ unit: fc.constantFrom('a', 'b', '_', ':', '{', '}', '|', '=', '%', '7', 'C', '.', ' ', '\u0000', '\n', 'é', '😀'), maxLength: 6 }),
    fc.string({ unit: 'binary', maxLength: 6 }),
    fc.string({ maxLength: 6 }),
  );
  const entryArb = fc.record({ key: tricky, value: tricky });
  const tupleArb = fc.record({
    domain: tricky,
    algorithm: fc.constantFrom(...ALGORITHMS),
    windowMs: fc.constantFrom(1_000, 10_000, 100_000),
    entries: fc.array(entryArb, { minLength: 1, maxLength: 3 }),
  });
  type Tuple = typeof tupleArb extends fc.Arbitrary<infer T> ? T : never;
  const same = (a: Tuple, b: Tuple): boolean =>
    a.domain === b.domain &&
    a.algorithm === b.algorithm &&
    a.windowMs === b.windowMs &&
    a.entries.length === b.entries.length &&
    a.entries.every((e, i) => e.key === b.entries[i].key && e.value === b.entries[i].value);
  const keyOf = (t: Tuple): string => key(t.domain, t.entries, t.algorithm, t.windowMs);

  it('never map distinct (domain, algorithm, window, entries) tuples to the same key', () => {
    fc.assert(
      fc.property(tupleArb, tupleArb, (a, b) => {
        expect(keyOf(a) === keyOf(b)).toBe(same(a, b));
      }),
      { numRuns: 5_000 },
    );
  });

  it('never map a re-split of the same text to the same key', () => {
    // Adversarial pairs: the same characters cut into components at different places.
    const text = fc.string({ unit: fc.constantFrom('a', '_', '|', '=', '%', '{'), minLength: 2, maxLength: 10 });
    fc.assert(
      fc.property(text, fc.nat(), fc.nat(), (s, i, j) => {
        const cut = (n: number): Entry[] => {
          const p = 1 + (n % (s.length - 1));
          return [
            { key: s.slice(0, p), value: '' },
            { key: s.slice(p), value: '' },
          ];
        };
        const a = cut(i);
        const b = cut(j);
        expect(key('d', a) === key('d', b)).toBe(a[0].key === b[0].key);
        expect(key('d', a)).not.toBe(key('d', [{ key: s.slice(0, 1), value: s.slice(1) }]));
      }),
    );
  });

  it('never contain a brace, so a Redis hash tag can wrap them', () => {
    fc.assert(
      fc.property(tupleArb, (t) => {
        expect(keyOf(t)).not.toMatch(/[{}]/);
      }),
      { numRuns: 2_000 },
    );
  });
});
