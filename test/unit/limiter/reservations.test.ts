import {
  addHold,
  commitCharge,
  dropLapsed,
  emptyBook,
  firstLapseMs,
  freeHold,
  hasRoom,
  HOLD_ENTRY_BYTES,
  holdBytes,
  holdTimeMs,
  holdTimeOf,
  judgeHeld,
  judgeInFlight,
  refuseAll,
} from '../../../src/limiter/reservations';
import type { CounterRequest } from '../../../src/limiter/store';
import { FakeClock } from '../../helpers/fake-clock';

const TTL = 600_000;
const counter: CounterRequest = { key: 'k', algorithm: 'sliding_window', limit: 1_000, windowMs: 60_000, hits: 0 };

describe('a book of holds', () => {
  it('sums the estimates and bytes it holds, and frees one hold exactly once', () => {
    const clock = new FakeClock(1_000);
    const book = emptyBook();
    addHold(book, 'a', 100, clock.nowMs(), TTL);
    addHold(book, 'bé', 250, clock.nowMs(), TTL);
    // 64 a hold beside its ID's UTF-8 bytes ('é' is two).
    expect(book).toMatchObject({ reserved: 350, bytes: HOLD_ENTRY_BYTES * 2 + 1 + 3 });
    expect(holdBytes('bé')).toBe(HOLD_ENTRY_BYTES + 3);
    expect(freeHold(book, 'a')).toBe(true);
    expect(freeHold(book, 'a')).toBe(false);
    expect(book).toMatchObject({ reserved: 250, bytes: HOLD_ENTRY_BYTES + 3 });
    expect(book.entries.size).toBe(1);
  });

  it('drops holds at their hold time, oldest first, each told to its owner', () => {
    const clock = new FakeClock(5_000);
    const book = emptyBook();
    addHold(book, 'a', 100, clock.nowMs(), TTL);
    clock.advance(1_000);
    addHold(book, 'b', 40, clock.nowMs(), TTL);
    addHold(book, 'c', 7, clock.nowMs(), TTL);
    expect(firstLapseMs(book, clock.nowMs())).toBe(TTL - 1_000);
    clock.advance(TTL - 1_001);
    expect(dropLapsed(book, clock.nowMs())).toBe(0);
    clock.advance(1);
    const gone: string[] = [];
    expect(dropLapsed(book, clock.nowMs(), (id) => gone.push(id))).toBe(1);
    expect(book).toMatchObject({ reserved: 47, bytes: 2 * (HOLD_ENTRY_BYTES + 1) });
    clock.advance(1_000);
    expect(dropLapsed(book, clock.nowMs(), (id) => gone.push(id))).toBe(2);
    expect(gone).toEqual(['a', 'b', 'c']);
    expect(book).toMatchObject({ reserved: 0, bytes: 0 });
    expect(book.entries.size).toBe(0);
    expect(firstLapseMs(book, clock.nowMs())).toBe(0);
  });

  it('has room while under both bounds with the new ID counted', () => {
    const book = emptyBook();
    addHold(book, 'a', 1, 0, TTL);
    expect(hasRoom(book, 'b', 2, 2 * (HOLD_ENTRY_BYTES + 1))).toBe(true);
    expect(hasRoom(book, 'bb', 2, 2 * (HOLD_ENTRY_BYTES + 1))).toBe(false);
    expect(hasRoom(book, 'b', 1, 1_000)).toBe(false);
  });
});

describe('hold time and commit charge', () => {
  it("holds for the rule's shortest window, or its own hold time, never past the TTL", () => {
    expect(holdTimeOf([60_000, 86_400_000], 0)).toBe(60_000);
    expect(holdTimeOf([], 0)).toBeUndefined();
    expect(holdTimeOf([1_000], 300)).toBe(300_000);
    expect(holdTimeMs(TTL, undefined)).toBe(TTL);
    expect(holdTimeMs(TTL, 60_000)).toBe(60_000);
    expect(holdTimeMs(TTL, 3_600_000)).toBe(TTL);
  });

  it("charges a commit at most the counter's limit", () => {
    expect(commitCharge(counter, 700)).toBe(700);
    expect(commitCharge(counter, 4_294_967_295)).toBe(1_000);
    expect(commitCharge(counter, 0)).toBe(0);
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
