import fc from 'fast-check';
import type { DescriptorOutcome } from '../../../src/limiter/types';
import { API_KEY_RULE, TOP_T0 } from '../../helpers/top-fixtures';
import { joinCounts } from '../../../src/top/summary';
import { mergeViews } from '../../../src/top/top-report';
import { SLICES, TopSketch } from '../../../src/top/top-sketch';

/**
 * What /top promises, against exact counting, for streams cut into slices and spread over
 * several processes whose views are merged: every listed count is at or above the true count and
 * at most its error above it, every error is at most the count's total over the view / TOP_ENTRIES,
 * and every descriptor above that bound is listed.
 */

const SLICE_MS = 60_000 / SLICES;

interface Hit {
  readonly process: number;
  readonly slice: number;
  readonly value: string;
  readonly denied: boolean;
  readonly hits: number;
  readonly near: number;
}

function outcomeOf(h: Hit): DescriptorOutcome {
  return {
    domain: 'edge',
    statKey: API_KEY_RULE.statKey,
    hits: h.hits,
    overLimit: h.denied ? h.hits : 0,
    nearLimit: h.denied ? 0 : h.near,
    withinLimit: h.denied ? 0 : h.hits,
    shadowMode: 0,
    overLimitWithLocalCache: 0,
    rule: API_KEY_RULE,
    key: `edge|sw60000|api_key=${h.value}`,
  };
}

// A few heavy hitters among many values seen once or twice: far more distinct values than entries.
const value = fc.oneof(
  { weight: 2, arbitrary: fc.constantFrom('mallory', 'eve', 'trudy') },
  { weight: 3, arbitrary: fc.integer({ min: 0, max: 100_000 }).map((n) => `one-${n}`) },
);
const hit = (processes: number) =>
  fc
    .record({
      process: fc.integer({ min: 0, max: processes - 1 }),
      slice: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: SLICES - 1 })),
      value,
      denied: fc.boolean(),
      hits: fc.integer({ min: 1, max: 3 }),
    })
    .chain((h) => fc.record({ near: fc.integer({ min: 0, max: h.hits }) }).map(({ near }): Hit => ({ ...h, near })));

const stream = fc
  .record({ k: fc.integer({ min: 1, max: 6 }), processes: fc.integer({ min: 1, max: 3 }) })
  .chain(({ k, processes }) => fc.record({ k: fc.constant(k), processes: fc.constant(processes), hits: fc.array(hit(processes), { maxLength: 500 }) }));

describe('the live view against exact counting', () => {
  it('lists every count at or above the truth and within its error, errors within total / k, and every descriptor above it (property)', () => {
    fc.assert(
      fc.property(stream, ({ k, processes, hits }) => {
        const sketches = Array.from({ length: processes }, () => new TopSketch({ windowMs: 60_000, entries: k, maxRules: 4, nowMs: TOP_T0 }));
        const truth = new Map<string, { allowed: number; denied: number; near: number }>();
        const ordered = [...hits].sort((a, b) => a.slice - b.slice);
        for (const h of ordered) {
          // Every slice stays within the window: the view covers the 10 slices.
          sketches[h.process].advance(TOP_T0 + h.slice * SLICE_MS);
          sketches[h.process].record(outcomeOf(h));
          const id = `edge|sw60000|api_key=${h.value}`;
          const t = truth.get(id) ?? { allowed: 0, denied: 0, near: 0 };
          if (h.denied) t.denied += h.hits;
          else {
            t.allowed += h.hits;
            t.near += h.near;
          }
          truth.set(id, t);
        }
        for (const s of sketches) s.advance(TOP_T0 + (SLICES - 1) * SLICE_MS);
        const view = mergeViews(
          sketches.map((s) => s.view()),
          k,
        );
        if (hits.length === 0) return expect(view.rules).toEqual([]);
        const [rule] = view.rules;
        const denied = [...truth.values()].reduce((sum, t) => sum + t.denied, 0);
        const allowed = [...truth.values()].reduce((sum, t) => sum + t.allowed, 0);
        expect([rule.denied, rule.allowed]).toEqual([denied, allowed]);
        const rows = new Map(joinCounts(rule.byDenied, rule.byAllowed).map((r) => [r.id, r]));
        for (const [id, r] of rows) {
          const t = truth.get(id)!;
          expect(t.denied).toBeLessThanOrEqual(r.denied);
          expect(r.denied).toBeLessThanOrEqual(t.denied + r.errorDenied);
          expect(t.allowed).toBeLessThanOrEqual(r.allowed);
          expect(r.allowed).toBeLessThanOrEqual(t.allowed + r.errorAllowed);
          expect(t.near).toBeLessThanOrEqual(r.nearLimit);
          expect(r.nearLimit).toBeLessThanOrEqual(t.near + r.errorAllowed);
          expect(r.errorDenied * k).toBeLessThanOrEqual(denied);
          expect(r.errorAllowed * k).toBeLessThanOrEqual(allowed);
        }
        for (const [id, t] of truth) {
          if (t.denied * k > denied || t.allowed * k > allowed) expect(rows.has(id)).toBe(true);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('counts exactly while every slice has room, whatever the number of processes', () => {
    const a = new TopSketch({ windowMs: 60_000, entries: 4, maxRules: 4, nowMs: TOP_T0 });
    const b = new TopSketch({ windowMs: 60_000, entries: 4, maxRules: 4, nowMs: TOP_T0 });
    for (let i = 0; i < 30; i++) a.record(outcomeOf({ process: 0, slice: 0, value: 'mallory', denied: true, hits: 1, near: 0 }));
    b.advance(TOP_T0 + SLICE_MS);
    for (let i = 0; i < 25; i++) b.record(outcomeOf({ process: 1, slice: 1, value: 'mallory', denied: true, hits: 1, near: 0 }));
    b.record(outcomeOf({ process: 1, slice: 1, value: 'mallory', denied: false, hits: 5, near: 1 }));
    const [rule] = mergeViews([a.view(), b.view()], 4).rules;
    expect(joinCounts(rule.byDenied, rule.byAllowed)).toEqual([
      { id: 'edge|sw60000|api_key=mallory', denied: 55, allowed: 5, nearLimit: 1, errorDenied: 0, errorAllowed: 0 },
    ]);
  });
});
