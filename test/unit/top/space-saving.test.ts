import fc from 'fast-check';
import { SpaceSaving } from '../../../src/top/space-saving';

/**
 * The Space-Saving summary against exact counting: every kept entry's true counts lie within its
 * stated errors, denials above D / k are never lost, and an absent descriptor is within the floors.
 */

interface Hit {
  readonly id: string;
  readonly denied: boolean;
}

function exact(hits: readonly Hit[]): Map<string, { allowed: number; denied: number }> {
  const counts = new Map<string, { allowed: number; denied: number }>();
  for (const { id, denied } of hits) {
    const c = counts.get(id) ?? { allowed: 0, denied: 0 };
    if (denied) c.denied++;
    else c.allowed++;
    counts.set(id, c);
  }
  return counts;
}

function record(summary: SpaceSaving, hits: readonly Hit[]): void {
  for (const { id, denied } of hits) summary.add(id, denied ? 0 : 1, denied ? 1 : 0, 0);
}

function kept(summary: SpaceSaving): Map<string, number> {
  const slots = new Map<string, number>();
  for (let slot = 0; slot < summary.size; slot++) slots.set(summary.idAt(slot), slot);
  return slots;
}

describe('SpaceSaving', () => {
  it('counts exactly while it has room', () => {
    const s = new SpaceSaving(4);
    s.add('a', 1, 0, 0);
    s.add('b', 0, 3, 0);
    s.add('a', 2, 1, 1);
    const slots = kept(s);
    const a = slots.get('a')!;
    expect([s.allowed[a], s.denied[a], s.nearLimit[a], s.errorAllowed[a], s.errorDenied[a]]).toEqual([3, 1, 1, 0, 0]);
    expect([s.allowedTotal, s.deniedTotal, s.nearLimitTotal]).toEqual([3, 4, 1]);
    expect([s.floorAllowed(), s.floorDenied()]).toEqual([0, 0]);
  });

  it('keeps a denied descriptor through any number of allowed one-shot values', () => {
    const s = new SpaceSaving(8);
    for (let i = 0; i < 60; i++) s.add('mallory', i < 5 ? 1 : 0, i < 5 ? 0 : 1, 0);
    for (let i = 0; i < 100_000; i++) s.add(`one-${i}`, 1, 0, 0);
    const m = kept(s).get('mallory')!;
    expect([s.allowed[m], s.denied[m], s.errorAllowed[m], s.errorDenied[m]]).toEqual([5, 55, 0, 0]);
    expect(s.size).toBe(8);
  });

  it('gives a newcomer the evicted weight as its error, then forgets everything on clear()', () => {
    const s = new SpaceSaving(2);
    s.add('a', 0, 2, 0);
    s.add('b', 3, 0, 0);
    s.add('c', 0, 1, 0); // evicts b (no denials): c may have had b's allowed hits
    const c = kept(s).get('c')!;
    expect([s.denied[c], s.errorDenied[c], s.errorAllowed[c]]).toEqual([1, 0, 3]);
    expect(kept(s).has('b')).toBe(false);
    expect([s.floorAllowed(), s.floorDenied()]).toEqual([3, 1]);
    s.clear();
    expect([s.size, s.allowedTotal, s.deniedTotal, s.floorAllowed(), s.floorDenied()]).toEqual([0, 0, 0, 0, 0]);
  });

  it('rejects a capacity that is not a positive integer', () => {
    expect(() => new SpaceSaving(0)).toThrow(RangeError);
    expect(() => new SpaceSaving(1.5)).toThrow(RangeError);
  });

  it('states bounds that hold for any stream (property)', () => {
    const hit = fc.record({ id: fc.integer({ min: 0, max: 30 }).map((n) => `d${n}`), denied: fc.boolean() });
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 8 }), fc.array(hit, { maxLength: 300 }), (k, hits) => {
        const s = new SpaceSaving(k);
        record(s, hits);
        const truth = exact(hits);
        const slots = kept(s);
        const deniedTotal = hits.filter((h) => h.denied).length;
        for (const [id, t] of truth) {
          const slot = slots.get(id);
          if (slot === undefined) {
            expect(t.denied).toBeLessThanOrEqual(s.floorDenied());
            expect(t.allowed).toBeLessThanOrEqual(s.floorAllowed());
            continue;
          }
          expect(s.denied[slot]).toBeLessThanOrEqual(t.denied);
          expect(t.denied).toBeLessThanOrEqual(s.denied[slot] + s.errorDenied[slot]);
          expect(s.allowed[slot]).toBeLessThanOrEqual(t.allowed);
          expect(t.allowed).toBeLessThanOrEqual(s.allowed[slot] + s.errorAllowed[slot]);
          expect(s.errorDenied[slot]).toBeLessThanOrEqual(deniedTotal / k);
          // More denials than D / k: always kept.
        }
        for (const [id, t] of truth) if (t.denied > deniedTotal / k) expect(slots.has(id)).toBe(true);
      }),
      { numRuns: 300 },
    );
  });
});
