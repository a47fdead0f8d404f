import { addHold, dropLapsed, emptyBook, firstLapseMs, freeHold, judgeHeld, judgeInFlight, markCommitted, refuseAll } from '../../../src/limiter/reservations';
import type { CounterRequest } from '../../../src/limiter/store';
import { FakeClock } from '../../helpers/fake-clock';

const TTL = 600_000;
const counter: CounterRequest = { key: 'k', algorithm: 'sliding_window', limit: 1_000, windowMs: 60_000, hits: 0 };

describe('a book of holds', () => {
  it('sums the estimates it holds, and frees one hold exactly once', () => {
    const clock = new FakeClock(1_000);
    const book = emptyBook();
    addHold(book, 'a', 100, clock.nowMs(), TTL);
    addHold(book, 'b', 250, clock.nowMs(), TTL);
    expect(book).toMatchObject({ reserved: 350, held: 2 });
    expect(freeHold(book, 'a')).toBe(true);
    expect(freeHold(book, 'a')).toBe(false);
    expect(book).toMatchObject({ reserved: 250, held: 1 });
    expect(book.entries.size).toBe(1);
  });

  it('drops holds at their TTL, oldest first, and counts only holds (not remembered commits) as lapsed', () => {
    const clock = new FakeClock(5_000);
    const book = emptyBook();
    addHold(book, 'a', 100, clock.nowMs(), TTL);
    clock.advance(1_000);
    addHold(book, 'b', 40, clock.nowMs(), TTL);
    markCommitted(book, 'b', clock.nowMs(), TTL);
    addHold(book, 'c', 7, clock.nowMs(), TTL);
    expect(book).toMatchObject({ reserved: 107, held: 2 });
    expect(firstLapseMs(book, clock.nowMs())).toBe(TTL - 1_000);
    clock.advance(TTL - 1_001);
    expect(dropLapsed(book, clock.nowMs())).toBe(0);
    clock.advance(1);
    expect(dropLapsed(book, clock.nowMs())).toBe(1);
    expect(book).toMatchObject({ reserved: 7, held: 1 });
    clock.advance(1_000);
    // b (remembered) and c lapse together: one hold among them.
    expect(dropLapsed(book, clock.nowMs())).toBe(1);
    expect(book).toMatchObject({ reserved: 0, held: 0 });
    expect(book.entries.size).toBe(0);
    expect(firstLapseMs(book, clock.nowMs())).toBe(0);
  });

  it('moves a committed ID to the end of the book, so insertion order stays lapse order', () => {
    const book = emptyBook();
    addHold(book, 'a', 1, 0, TTL);
    addHold(book, 'b', 1, 10, TTL);
    markCommitted(book, 'a', 20, TTL);
    expect([...book.entries.keys()]).toEqual(['b', 'a']);
    expect(book.entries.get('a')).toEqual({ estimate: 0, committed: true, expiresAtMs: 20 + TTL });
    expect(book).toMatchObject({ reserved: 1, held: 1 });
  });
});

describe('judgeHeld', () => {
  it('admits when the check leaves room for what is held plus the estimate, and says what is left', () => {
    expect(judgeHeld({ allowed: true, remaining: 300, resetMs: 90_000 }, counter, 300)).toEqual({ allowed: true, remaining: 0, resetMs: 90_000 });
  });

  it('denies one hit short, waiting one window (holds may free it sooner)', () => {
    expect(judgeHeld({ allowed: true, remaining: 299, resetMs: 90_000 }, counter, 300)).toEqual({ allowed: false, remaining: 0, resetMs: 60_000 });
  });

  it('denies when the counter is over already, and for a calendar window waits until its period ends', () => {
    const calendar: CounterRequest = { ...counter, algorithm: 'fixed_window', calendar: { unit: 'day', offsetMs: 0 } };
    expect(judgeHeld({ allowed: false, remaining: 0, resetMs: 5_000 }, counter, 1)).toEqual({ allowed: false, remaining: 0, resetMs: 60_000 });
    expect(judgeHeld({ allowed: false, remaining: 0, resetMs: 5_000 }, calendar, 1)).toEqual({ allowed: false, remaining: 0, resetMs: 5_000 });
    expect(judgeHeld({ allowed: true, remaining: 10, resetMs: 5_000 }, calendar, 1_001)).toEqual({ allowed: false, remaining: 0, resetMs: 60_000 });
  });
});

describe('judgeInFlight', () => {
  it('admits a reserve while fewer than the limit are held, and waits for the oldest entry to lapse past it', () => {
    expect(judgeInFlight(4, 5, true, 1_234)).toEqual({ allowed: true, remaining: 0, resetMs: 0 });
    expect(judgeInFlight(5, 5, true, 1_234)).toEqual({ allowed: false, remaining: 0, resetMs: 1_234 });
  });

  it('reports what is left after a commit or a release', () => {
    expect(judgeInFlight(3, 5, false, 0)).toEqual({ allowed: true, remaining: 2, resetMs: 0 });
  });
});

it('refuseAll denies every decision with one wait', () => {
  expect(refuseAll(2, 700)).toEqual([
    { allowed: false, remaining: 0, resetMs: 700 },
    { allowed: false, remaining: 0, resetMs: 700 },
  ]);
});
