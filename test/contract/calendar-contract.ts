import { calendarPeriod, type CalendarWindow } from '../../src/limiter/calendar';
import type { CounterDecision, CounterRequest, Store } from '../../src/limiter/store';
import { UNIT_MS, type Unit } from '../../src/limiter/types';
import { requireBefore, untilUnstretched } from '../helpers/deadline';
import type { TimeCase } from './time-cases';

/**
 * Calendar windows on each store (part of the store contract, see ./store-contract.ts). Redis
 * decides at its own `TIME`, which no test can move, so these cases read the store's clock from
 * the harness (the redis-server runs on this machine's clock) and check that each answer ends its
 * window at the calendar boundary computed for that instant; the period arithmetic itself is pinned
 * exactly by the script's property tests (test/integration/store/redis-script.test.ts).
 */

/** The harness of the suite, as this part uses it. */
export interface CalendarHarness {
  readonly store: Store;
  advance(ms: number): Promise<void>;
  /** The store's clock now, ms. */
  nowMs(): number;
}

/** Room for real time spent between two calls (scheduling, a network round trip). */
const SLACK = 150;
const HALF_PAST = 5.5 * 3_600_000; // +05:30
const BEHIND = -8 * 3_600_000; // -08:00

let sequence = 0;
const run = `${process.pid}-${Date.now().toString(36)}`;

function calendarCounter(label: string, calendar: CalendarWindow, limit: number): (hits?: number) => CounterRequest {
  sequence += 1;
  const key = `contract-calendar|${run}|${sequence}|${label}`;
  return (hits = 1) => ({ key, algorithm: 'fixed_window', limit, hits, windowMs: UNIT_MS[calendar.unit], calendar });
}

/** Registers the calendar cases inside the store contract's describe (`overTime` registers a case that waits for real time). */
export function describeCalendarContract(harness: () => CalendarHarness, overTime: TimeCase): void {
  describe('calendar windows', () => {
    const one = async (c: CounterRequest): Promise<{ decision: CounterDecision; before: number; after: number }> => {
      const h = harness();
      const before = h.nowMs();
      const [decision] = await h.store.decide([c]);
      return { decision, before, after: h.nowMs() };
    };

    /** The decision's reset, read as an instant, is the end of the calendar period holding the call. */
    const expectPeriodEnd = (got: { decision: CounterDecision; before: number; after: number }, unit: Unit, offsetMs: number): void => {
      const end = calendarPeriod(got.before, unit, offsetMs).endMs;
      // A call straddling a boundary is judged by the period it ended in.
      const endAfter = calendarPeriod(got.after, unit, offsetMs).endMs;
      const resetAt = [got.before + got.decision.resetMs, got.after + got.decision.resetMs];
      expect(resetAt[0]).toBeLessThanOrEqual(endAfter);
      expect(resetAt[1]).toBeGreaterThanOrEqual(end);
    };

    it.each([
      ['month', HALF_PAST],
      ['month', BEHIND],
      ['week', 0],
      ['year', BEHIND],
      ['day', HALF_PAST],
    ] as const)('admits a calendar %s up to its limit (offset %d ms) and resets it at the period end', async (unit, offsetMs) => {
      const c = calendarCounter(`fill-${unit}`, { unit, offsetMs }, 3);
      for (let i = 0; i < 3; i++) {
        const got = await one(c());
        expect([got.decision.allowed, got.decision.remaining]).toEqual([true, 2 - i]);
        expectPeriodEnd(got, unit, offsetMs);
      }
      const denied = await one(c());
      expect([denied.decision.allowed, denied.decision.remaining]).toEqual([false, 0]);
      expectPeriodEnd(denied, unit, offsetMs);
      expect((await one(c(0))).decision.allowed).toBe(true);
    });

    overTime('rolls a calendar second over at its boundary, on a clock half an hour off UTC', () =>
      // A step that a loaded machine ends past the instant its expectation needs starts the case again.
      untilUnstretched(async () => {
        const h = harness();
        const calendar: CalendarWindow = { unit: 'second', offsetMs: HALF_PAST };
        /** `c`'s decision, made before `deadlineMs` (store clock). */
        const oneBefore = async (deadlineMs: number, c: CounterRequest): Promise<CounterDecision> => {
          const got = await one(c);
          requireBefore(deadlineMs, got.after, 'a call of the second');
          return got.decision;
        };
        // Line up with the start of a second, so that the case runs inside one.
        const probe = await one(calendarCounter('probe', calendar, 1)());
        if (probe.decision.resetMs < 600) await h.advance(probe.decision.resetMs + 10);
        const end = calendarPeriod(h.nowMs(), 'second', HALF_PAST).endMs;
        const c = calendarCounter('roll', calendar, 3);
        for (let i = 0; i < 3; i++) expect((await oneBefore(end, c())).allowed).toBe(true);
        const denied = await one(c());
        requireBefore(end, denied.after, 'the denied call');
        expect(denied.decision.allowed).toBe(false);
        expectPeriodEnd(denied, 'second', HALF_PAST);
        await h.advance(Math.max(0, end - h.nowMs() - SLACK));
        expect((await oneBefore(end, c())).allowed).toBe(false);
        await h.advance(Math.max(0, end - h.nowMs()) + 50);
        for (let i = 0; i < 3; i++) expect((await oneBefore(end + 1_000, c())).allowed).toBe(true);
        expect((await oneBefore(end + 1_000, c())).allowed).toBe(false);
      }),
    );
  });
}
