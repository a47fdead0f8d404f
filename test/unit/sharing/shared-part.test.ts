import { SharedPart } from '../../../src/sharing/shared-part';
import { MemoryExchange } from '../../../src/store/memory-exchange';
import { MemoryStore } from '../../../src/store/memory-store';
import { FakeClock } from '../../helpers/fake-clock';
import type { ReplicaDemand } from '../../../src/limiter/replica-exchange';

const demand = (member: string, d: number): ReplicaDemand => ({ member, demand: d, admitted: 0, proxies: 1 });

describe('a shared part', () => {
  test('exchanges demand under its kind, withdraws, and divides with the others it heard of', async () => {
    const clock = new FakeClock(1_000);
    const exchange = new MemoryExchange({ clock });
    const a = new SharedPart({ kind: 'region', key: 'k', member: 'a', exchange });
    const b = new SharedPart({ kind: 'region', key: 'k', member: 'b', exchange });
    const lease = new SharedPart({ kind: 'lease', key: 'k', member: 'c', exchange });
    await a.exchange(demand('a', 20), 10_000);
    await lease.exchange(demand('c', 1_000), 10_000);
    const entries = (await b.exchange(demand('b', 200), 10_000))!;
    // The lease's entry on the same counter is another kind's: not among the regions.
    expect(entries.map((e) => e.member).sort()).toEqual(['a', 'b']);
    expect(a.peers.heard(entries, clock.nowMs())).toBe(true);
    expect(a.others).toEqual([demand('b', 200)]);
    b.peers.heard(entries, clock.nowMs());
    expect(b.others).toEqual([demand('a', 20)]);
    expect(b.part(100, 200)).toBe(75);
    expect(b.divide(100, 200)).toEqual([75, 25]);
    expect(await a.exchange(undefined, 10_000)).toEqual([demand('b', 200)]);
  });

  test('without an exchange it divides alone; without a ledger it settles nothing', async () => {
    const p = new SharedPart({ kind: 'rlqs', key: 'k', member: 'a' });
    expect(p.exchange(demand('a', 1), 1_000)).toBeUndefined();
    expect(p.part(40, 1)).toBe(40);
    await expect(p.settle({ seq: 1, hits: 1 }, { key: 'k', algorithm: 'fixed_window', limit: 1, windowMs: 1_000, hits: 0 })).rejects.toThrow('no settlements');
  });

  test('settles once per member and seq on its own ledger', async () => {
    const clock = new FakeClock(1_000);
    const store = new MemoryStore({ clock, maxKeys: 1_000, sweepIntervalMs: 0 });
    const counter = { key: 'c', algorithm: 'fixed_window' as const, limit: 100, windowMs: 60_000, hits: 0 };
    const region = new SharedPart({ kind: 'region', key: 'c', member: 'a', ledger: store.settlements, maxMembers: 3 });
    const lease = new SharedPart({ kind: 'lease', key: 'c', member: 'a', ledger: store.settlements, maxMembers: 3 });
    expect(await region.settle({ seq: 7, hits: 10 }, counter)).toMatchObject({ applied: true, decisions: [{ remaining: 90 }] });
    expect(await region.settle({ seq: 7, hits: 10 }, counter)).toMatchObject({ applied: false, heldSeq: 7 });
    // The same member and seq as a lease: its own ledger, charged.
    expect(await lease.settle({ seq: 7, hits: 5 }, counter)).toMatchObject({ applied: true, decisions: [{ remaining: 85 }] });
    await store.close();
  });
});
