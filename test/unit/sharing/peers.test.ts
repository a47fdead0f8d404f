import { Peers } from '../../../src/sharing/peers';
import type { ReplicaDemand } from '../../../src/limiter/replica-exchange';

const entry = (name: string, demand: number): ReplicaDemand => ({ member: name, demand, admitted: 0, proxies: 1 });

describe('the peers of a member', () => {
  test("keep the others apart from this member's own entry, and say whether it was recorded", () => {
    const p = new Peers('a');
    expect(p.heard([entry('b', 1), entry('a', 2), entry('c', 3)], 1_000)).toBe(true);
    expect(p.others).toEqual([entry('b', 1), entry('c', 3)]);
    expect(p.recorded).toBe(true);
    expect(p.recordedSentMs).toBe(1_000);
    // A full budget left this member out: the others are still known, the last record kept.
    expect(p.heard([entry('b', 1)], 2_000)).toBe(false);
    expect(p.recorded).toBe(false);
    expect(p.recordedSentMs).toBe(1_000);
    expect(p.heardAtMs).toBe(2_000);
  });

  test("tell whether this member's entry may still be live at the others", () => {
    const p = new Peers('a');
    expect(p.ownEntryLive(0, 1_000)).toBe(false);
    p.heard([entry('a', 1)], 500);
    expect(p.ownEntryLive(1_499, 1_000)).toBe(true);
    expect(p.ownEntryLive(1_500, 1_000)).toBe(false);
  });

  test('forget the others once nothing was heard for a TTL', () => {
    const p = new Peers('a', 0);
    p.heard([entry('b', 1)], 1_000);
    p.forgetAfter(2_000, 1_000);
    expect(p.others).toHaveLength(1);
    p.forgetAfter(2_001, 1_000);
    expect(p.others).toEqual([]);
  });
});
