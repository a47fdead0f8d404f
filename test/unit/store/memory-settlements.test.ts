import { MAX_SETTLE_MEMBERS, type CounterRequest, type SettleCall } from '../../../src/limiter/store';
import { MemorySettlements, type MemorySettlementsOptions } from '../../../src/store/memory-settlements';
import { MemoryStore } from '../../../src/store/memory-store';
import { FakeClock } from '../../helpers/fake-clock';

const T0 = 1_700_000_000_000;
const DAY = 86_400_000;
const TTL = 1_000;

const counter = (key: string, hits = 1): CounterRequest => ({ key, algorithm: 'fixed_window', limit: 1_000_000, windowMs: DAY, hits });

const call = (key: string, member: string, seq: number, ttlMs = TTL): SettleCall => ({ key, member, seq, ttlMs, counters: [counter(key)] });

describe('MemorySettlements', () => {
  let clock: FakeClock;
  let store: MemoryStore;

  const make = (bounds: Omit<MemorySettlementsOptions, 'clock' | 'decide'> = {}): MemorySettlements =>
    new MemorySettlements({ ...bounds, clock, decide: (counters, options) => store.decideNow(counters, options) });

  /** Hits counted on `key`'s counter. */
  const counted = (key: string): number => 1_000_000 - store.decideNow([counter(key, 0)])[0].remaining;

  beforeEach(() => {
    clock = new FakeClock(T0);
    store = new MemoryStore({ clock, maxKeys: 10_000, sweepIntervalMs: 0 });
  });

  afterEach(() => store.close());

  it('keeps at most maxLedgers ledgers, the least recently written dropped first (its resend is then charged again)', () => {
    const s = make({ maxLedgers: 3 });
    for (const key of ['k0', 'k1', 'k2']) expect(s.settleNow(call(key, 'm', 1)).applied).toBe(true);
    // k0 written again: k1 is now the least recently written.
    expect(s.settleNow(call('k0', 'm', 2)).applied).toBe(true);
    expect(s.settleNow(call('k3', 'm', 1)).applied).toBe(true);
    expect(s.size).toBe(3);
    expect(s.settleNow(call('k0', 'm', 2)).applied).toBe(false);
    expect(s.settleNow(call('k2', 'm', 1)).applied).toBe(false);
    expect(s.settleNow(call('k1', 'm', 1)).applied).toBe(true);
    expect(counted('k1')).toBe(2);
    expect(s.size).toBe(3);
  });

  it('holds at most maxBytes of ledgers however long their keys and members', () => {
    const s = make({ maxBytes: 16 * 1024 });
    for (let i = 0; i < 50; i++) s.settleNow(call(`${i}`.padEnd(2_000, 'k'), 'm'.repeat(1_000), 1));
    expect(s.bytes).toBeLessThanOrEqual(16 * 1024);
    expect(s.size).toBe(5);
    // The newest are kept.
    expect(s.settleNow(call('49'.padEnd(2_000, 'k'), 'm'.repeat(1_000), 1)).applied).toBe(false);
    // A ledger's bytes grow with its members: one more ledger makes way.
    s.settleNow(call('49'.padEnd(2_000, 'k'), 'n'.repeat(1_000), 1));
    expect(s.size).toBe(4);
    expect(s.bytes).toBeLessThanOrEqual(16 * 1024);
  });

  it("forgets a member's seq ttlMs after the call that wrote it, and a ledger with its last entry", () => {
    const s = make();
    s.settleNow(call('a', 'm', 1));
    clock.advance(TTL - 1);
    expect(s.settleNow(call('a', 'm', 1)).applied).toBe(false);
    clock.advance(1);
    expect(s.settleNow(call('a', 'm', 1)).applied).toBe(true);
    expect(counted('a')).toBe(2);
    // Another member written later keeps the ledger, not the first member's entry.
    s.settleNow(call('b', 'x', 1));
    clock.advance(TTL / 2);
    s.settleNow(call('b', 'y', 1, 10 * TTL));
    clock.advance(TTL / 2);
    expect(s.settleNow(call('b', 'x', 1)).applied).toBe(true);
    expect(s.settleNow(call('b', 'y', 1)).applied).toBe(false);
    // The sweep drops ledgers whose entries have all lapsed.
    clock.advance(TTL);
    s.sweep(100);
    expect(s.size).toBe(1);
    clock.advance(10 * TTL);
    s.sweep(100);
    expect(s.size).toBe(0);
    expect(s.bytes).toBe(0);
  });

  it(`records ${MAX_SETTLE_MEMBERS} members of a ledger at most, refusing (charging nothing) a new one beyond; lapsed ones make room, and its bytes follow them`, () => {
    const s = make();
    for (let i = 0; i < MAX_SETTLE_MEMBERS; i++) s.settleNow(call('cap', `member-${i}`, 1, i === 0 ? 10 * TTL : TTL));
    const full = s.bytes;
    expect(s.settleNow(call('cap', 'late', 1))).toMatchObject({ applied: false, full: true, heldSeq: 0 });
    expect(s.settleNow(call('cap', 'late', 1))).toMatchObject({ applied: false, full: true });
    expect(s.bytes).toBe(full);
    expect(counted('cap')).toBe(MAX_SETTLE_MEMBERS);
    clock.advance(TTL);
    // member-0 alone is live: the others' entries go, and the late member takes a place.
    expect(s.settleNow(call('cap', 'late', 1))).toMatchObject({ applied: true, full: false, heldSeq: 1 });
    expect(s.settleNow(call('cap', 'late', 1))).toMatchObject({ applied: false, full: false, heldSeq: 1 });
    expect(s.settleNow(call('cap', 'member-0', 1)).applied).toBe(false);
    expect(counted('cap')).toBe(MAX_SETTLE_MEMBERS + 1);
    expect(s.bytes).toBeLessThan(full / 50);
  });

  it("takes a call's maxMembers as the ledger's cap, and keeps a tagged ledger apart from its name's", () => {
    const s = make();
    const capped = (member: string, seq = 1): SettleCall => ({ ...call('small', member, seq), maxMembers: 2 });
    expect(s.settleNow(capped('a')).applied).toBe(true);
    expect(s.settleNow(capped('b')).applied).toBe(true);
    expect(s.settleNow(capped('c'))).toMatchObject({ applied: false, full: true });
    // A member recorded keeps its place: its next seq is applied, an old one answered with the seq held.
    expect(s.settleNow(capped('a', 5)).applied).toBe(true);
    expect(s.settleNow(capped('a', 3))).toMatchObject({ applied: false, full: false, heldSeq: 5 });
    expect(counted('small')).toBe(3);
    // The same name under a tag of its own is another ledger.
    expect(s.settleNow({ ...call('small', 'a', 5), tag: 'descriptor' }).applied).toBe(true);
    expect(s.settleNow({ ...call('small', 'a', 5), tag: 'small' }).applied).toBe(false);
  });

  it('records nothing of a call whose decision throws', () => {
    let fail = true;
    const s = new MemorySettlements({
      clock,
      decide: (counters, options) => {
        if (fail) throw new Error('decision failed');
        return store.decideNow(counters, options);
      },
    });
    expect(() => s.settleNow(call('t', 'm', 1))).toThrow('decision failed');
    expect(s.size).toBe(0);
    fail = false;
    expect(s.settleNow(call('t', 'm', 1)).applied).toBe(true);
    expect(s.settleNow(call('t', 'm', 1)).applied).toBe(false);
  });

  it("is the memory store's: charged on its counters, bounded by its options, swept by its sweep", async () => {
    const m = new MemoryStore({ clock, maxKeys: 100, sweepIntervalMs: 0, settlements: { maxLedgers: 2 } });
    for (const key of ['x', 'y', 'z']) expect((await m.settlements.settle(call(key, 'm', 1))).applied).toBe(true);
    expect(m.settlements.size).toBe(2);
    expect((await m.decide([counter('z', 0)]))[0].remaining).toBe(1_000_000 - 1);
    clock.advance(TTL);
    m.sweep();
    expect(m.settlements.size).toBe(0);
    await m.close();
  });
});
