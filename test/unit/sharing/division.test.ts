import { divideAmong, divideCapacity, ownPart, partFraction, usedOf } from '../../../src/sharing/division';
import type { ReplicaDemand } from '../../../src/limiter/replica-exchange';

const member = (name: string, demand: number): ReplicaDemand => ({ member: name, demand, admitted: 0, proxies: 1 });

describe('dividing a limit among members', () => {
  test('this member comes first, the others in the order the exchange gave them', () => {
    expect(divideAmong(100, 20, [member('b', 200)])).toEqual([25, 75]);
    expect(divideAmong(100, 200, [member('b', 20)])).toEqual([75, 25]);
    expect(ownPart(90, Infinity, [member('b', 100), member('c', 500)])).toBe(30);
  });

  test('alone, a member takes the whole capacity whatever its demand', () => {
    expect(ownPart(50, 1, [])).toBe(50);
    expect(divideAmong(50, 0, [])).toEqual([50]);
  });

  test('the parts add up to the capacity, as divideCapacity divides it', () => {
    const others = [member('b', 30), member('c', 1000)];
    const parts = divideAmong(100, 10, others);
    expect(parts).toEqual(divideCapacity(100, [10, 30, 1000]));
    expect(parts.reduce((a, b) => a + b, 0)).toBeCloseTo(100);
  });

  test("a counter's answer says what is used: all of it when it denied", () => {
    expect(usedOf({ allowed: true, remaining: 30, resetMs: 0 }, 100)).toBe(70);
    expect(usedOf({ allowed: false, remaining: 0, resetMs: 0 }, 100)).toBe(100);
  });
});

describe("a member's part of a shared counter", () => {
  const base = { perSecond: 10, capacity: 100, used: 0, ownUsed: 0, others: [member('b', 100)] };

  test('grows only as far as the demand the others have seen allows, and shrinks at once', () => {
    // Busy now, but the others divided by a low demand: the smaller part holds.
    expect(partFraction({ ...base, demand: 100, seenDemand: 1 })).toBeCloseTo(0.125);
    // Quiet now though the others saw it busy: the smaller part again.
    expect(partFraction({ ...base, demand: 1, seenDemand: 100 })).toBeCloseTo(0.125);
    expect(partFraction({ ...base, demand: 100, seenDemand: 100 })).toBeCloseTo(0.5);
  });

  test("is capped by what the counter says the others use, this member's own usage left out", () => {
    expect(partFraction({ ...base, others: [], demand: 100, seenDemand: 100, used: 80, ownUsed: 20 })).toBeCloseTo(0.4);
    expect(partFraction({ ...base, others: [], demand: 100, seenDemand: 100, used: 80, ownUsed: 80 })).toBe(1);
    expect(partFraction({ ...base, others: [], demand: 100, seenDemand: 100, used: 150, ownUsed: 0 })).toBe(0);
  });

  test('nothing of a counter without capacity or rate', () => {
    expect(partFraction({ ...base, perSecond: 0, demand: 1, seenDemand: 1 })).toBe(0);
    expect(partFraction({ ...base, capacity: 0, demand: 1, seenDemand: 1 })).toBe(0);
  });
});
