import type { ReservationEvent } from '../../../src/limiter/types';
import { HeldReservations, MAX_DESCRIPTORS, MAX_NAME_CHARS } from '../../../src/top/held-reservations';
import { FakeClock } from '../../helpers/fake-clock';
import { FIVE_PER_MINUTE } from '../../helpers/top-fixtures';

const TTL = 600_000;
const clock = new FakeClock(1_000_000);

/** What each descriptor's book held at its last reservation call, per descriptor and per rule, bounded. */

const rule = (statKey: string) => ({ statKey, limit: FIVE_PER_MINUTE, shadowMode: false });
const event = (value: string, held: number, statKey = 'tenant'): ReservationEvent => ({
  domain: 'llm',
  rule: rule(statKey),
  kind: 'reserve',
  entries: [{ key: statKey, value }],
  outcome: 'held',
  held,
  lapsed: 0,
});

describe('HeldReservations', () => {
  it("keeps each descriptor's latest count and sums them per rule", () => {
    const h = new HeldReservations({ ttlMs: TTL, clock });
    h.record(event('a', 1));
    h.record(event('a', 3));
    h.record(event('b', 2));
    h.record(event('k', 4, 'api_key'));
    expect(h.heldOf('llm', [{ key: 'tenant', value: 'a' }])).toBe(3);
    expect(h.heldOf('llm', [{ key: 'tenant', value: 'zzz' }])).toBe(0);
    expect(h.byRule()).toEqual([
      { domain: 'llm', rule: 'api_key', held: 4, descriptors: 1 },
      { domain: 'llm', rule: 'tenant', held: 5, descriptors: 2 },
    ]);
    h.record(event('a', 0));
    expect(h.byRule()).toEqual([
      { domain: 'llm', rule: 'api_key', held: 4, descriptors: 1 },
      { domain: 'llm', rule: 'tenant', held: 2, descriptors: 1 },
    ]);
  });

  it('keeps at most MAX_DESCRIPTORS books, the least recently heard of dropped first, and no over-long name', () => {
    const h = new HeldReservations({ ttlMs: TTL, clock });
    for (let i = 0; i <= MAX_DESCRIPTORS; i++) h.record(event(`d${i}`, 1));
    expect(h.heldOf('llm', [{ key: 'tenant', value: 'd0' }])).toBe(0);
    expect(h.heldOf('llm', [{ key: 'tenant', value: `d${MAX_DESCRIPTORS}` }])).toBe(1);
    expect(h.byRule()[0].descriptors).toBe(MAX_DESCRIPTORS);
    h.record(event('x'.repeat(MAX_NAME_CHARS), 7));
    expect(h.heldOf('llm', [{ key: 'tenant', value: 'x'.repeat(MAX_NAME_CHARS) }])).toBe(0);
  });

  it('passes every event on to the observer it wraps', () => {
    const h = new HeldReservations({ ttlMs: TTL, clock });
    const seen: string[] = [];
    const observer = h.observing({ onDescriptor: () => seen.push('descriptor'), onReservation: (e) => seen.push(`reservation ${e.held}`) });
    observer.onReservation!(event('a', 2));
    expect(seen).toEqual(['reservation 2']);
    expect(h.heldOf('llm', [{ key: 'tenant', value: 'a' }])).toBe(2);
  });

  it('forgets a book not heard of for the reservation TTL: every hold it counted has lapsed', () => {
    const h = new HeldReservations({ ttlMs: TTL, clock });
    h.record(event('old', 2));
    clock.advance(TTL / 2);
    h.record(event('new', 1));
    clock.advance(TTL / 2);
    expect(h.heldOf('llm', [{ key: 'tenant', value: 'old' }])).toBe(0);
    expect(h.byRule()).toEqual([{ domain: 'llm', rule: 'tenant', held: 1, descriptors: 1 }]);
  });
});
