import fc from 'fast-check';
import { SpaceSaving } from '../../../src/top/space-saving';

/**
 * The Space-Saving summary against exact counting: kept counts are at or above the truth and at
 * most their error above it, errors and the floor stay within W / k, a descriptor above W / k is
 * never lost, and the buckets keep counts in order whatever the weights.
 */

interface Hit {
  readonly id: string;
  readonly weight: number;
  readonly near: number;
}

function kept(summary: SpaceSaving): Map<string, number> {
  const slots = new Map<string, number>();
  for (let slot = 0; slot < summary.size; slot++) slots.set(summary.idAt(slot), slot);
  return slots;
}

const countsOf = (s: SpaceSaving, id: string) => {
  const slot = kept(s).get(id);
  return slot === undefined ? undefined : [s.countAt(slot), s.error[slot], s.near[slot]];
};

describe('SpaceSaving', () => {
  it('counts exactly while it has room', () => {
    const s = new SpaceSaving(4);
    s.add('a', 1, 0);
    s.add('b', 3, 1);
    s.add('a', 2, 1);
    expect(countsOf(s, 'a')).toEqual([3, 0, 1]);
    expect(countsOf(s, 'b')).toEqual([3, 0, 1]);
    expect([s.total, s.nearTotal, s.size, s.floor()]).toEqual([6, 2, 2, 0]);
  });

  it('gives a newcomer the lowest count as its start and its error, then forgets everything on clear()', () => {
    const s = new SpaceSaving(2);
    s.add('a', 5, 0);
    s.add('b', 2, 0);
    s.add('c', 1, 1); // takes b's place: it may have had up to 2 before
    expect(kept(s).has('b')).toBe(false);
    expect(countsOf(s, 'c')).toEqual([3, 2, 3]);
    expect(countsOf(s, 'a')).toEqual([5, 0, 0]);
    expect(s.floor()).toBe(3);
    s.clear();
    expect([s.size, s.total, s.nearTotal, s.floor()]).toEqual([0, 0, 0, 0]);
    s.add('d', 1, 0);
    expect(countsOf(s, 'd')).toEqual([1, 0, 0]);
  });

  it('lets a flood push out a descriptor below W / k, which comes back with the floor as its error', () => {
    const s = new SpaceSaving(8);
    for (let i = 0; i < 60; i++) s.add('mallory', 1, 0);
    for (let i = 0; i < 100_000; i++) s.add(`one-${i}`, 1, 0);
    // 100,060 hits over 8 entries: a floor near 12,500, far above mallory's 60 ...
    expect(s.floor()).toBeGreaterThan(12_000);
    // ... so mallory was pushed out, and could only come back with the floor as its error.
    s.add('mallory', 1, 0);
    const [count, error] = countsOf(s, 'mallory')!;
    expect(count - error).toBe(1);
    expect(error).toBeLessThanOrEqual(s.total / 8);
    expect(s.size).toBe(8);
  });

  it('rejects a capacity that is not a positive integer', () => {
    expect(() => new SpaceSaving(0)).toThrow(RangeError);
    expect(() => new SpaceSaving(1.5)).toThrow(RangeError);
  });

  it('states bounds that hold for any stream of any weights (property)', () => {
    const hit = fc
      .record({
        id: fc.oneof(
          fc.integer({ min: 0, max: 3 }).map((n) => `heavy${n}`),
          fc.integer({ min: 0, max: 1e6 }).map((n) => `one${n}`),
        ),
        weight: fc.integer({ min: 1, max: 4 }),
      })
      .chain(({ id, weight }) => fc.record({ id: fc.constant(id), weight: fc.constant(weight), near: fc.integer({ min: 0, max: weight }) }));
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 8 }), fc.array(hit, { maxLength: 400 }), (k, hits: Hit[]) => {
        const s = new SpaceSaving(k);
        const truth = new Map<string, { count: number; near: number }>();
        for (const { id, weight, near } of hits) {
          s.add(id, weight, near);
          const t = truth.get(id) ?? { count: 0, near: 0 };
          t.count += weight;
          t.near += near;
          truth.set(id, t);
        }
        const total = hits.reduce((sum, h) => sum + h.weight, 0);
        const slots = kept(s);
        let sum = 0;
        let lowest = Infinity;
        for (const [id, slot] of slots) {
          const t = truth.get(id)!;
          const [count, error, near] = [s.countAt(slot), s.error[slot], s.near[slot]];
          sum += count;
          lowest = Math.min(lowest, count);
          expect(t.count).toBeLessThanOrEqual(count);
          expect(count).toBeLessThanOrEqual(t.count + error);
          expect(t.near).toBeLessThanOrEqual(near);
          expect(near).toBeLessThanOrEqual(t.near + error);
          expect(error).toBeLessThanOrEqual(s.floor());
        }
        // The counts add up to the weight; the floor is the lowest count once full, and at most W / k.
        expect(sum).toBe(total);
        expect(s.floor()).toBe(slots.size < k ? 0 : lowest);
        expect(s.floor() * k).toBeLessThanOrEqual(total);
        for (const [id, t] of truth) {
          if (!slots.has(id)) expect(t.count).toBeLessThanOrEqual(s.floor());
          if (t.count * k > total) expect(slots.has(id)).toBe(true);
        }
      }),
      { numRuns: 300 },
    );
  });
});
