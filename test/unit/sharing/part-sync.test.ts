import type { CounterRequest } from '../../../src/limiter/store';
import { newDemandMeter } from '../../../src/sharing/demand-meter';
import { isLive, syncShare, type PartSyncOptions, type SettledShare } from '../../../src/sharing/part-sync';
import { SettlementSequence } from '../../../src/sharing/settlement';
import { SharedPart } from '../../../src/sharing/shared-part';
import { MemoryExchange } from '../../../src/store/memory-exchange';
import { MemoryStore } from '../../../src/store/memory-store';
import { FakeClock } from '../../helpers/fake-clock';

const COUNTER: CounterRequest = { key: 'global', algorithm: 'fixed_window', limit: 600, windowMs: 60_000, hits: 0 };
const TTL_MS = 3_000;
const SYNC_MS = 1_000;

/** Members (regions, say) sharing COUNTER through one store, each a settled share of kind `region`. */
function world() {
  const clock = new FakeClock(1_000_000);
  const store = new MemoryStore({ clock, maxKeys: 1_000, sweepIntervalMs: 0 });
  const exchange = new MemoryExchange({ clock });
  const member = (name: string) => {
    const share: SettledShare = {
      ...newDemandMeter(clock.nowMs()),
      part: new SharedPart({ kind: 'region', key: COUNTER.key, member: name, exchange, ledger: store.settlements, maxMembers: 8 }),
      counter: COUNTER,
      mirror: undefined,
      local: undefined,
      fraction: 0,
      share: 0,
      live: false,
      liveUntilMs: -Infinity,
      settledSentMs: -Infinity,
      ledgerRefused: false,
      exchangeRefused: false,
      seenDemand: undefined,
      settled: 0,
      syncing: undefined,
      pending: 0,
      epoch: 0,
      unsettled: undefined,
    };
    const settledHits: number[] = [];
    const options: PartSyncOptions = { seqs: new SettlementSequence(), ttlMs: TTL_MS, syncIntervalMs: SYNC_MS, onSettled: (_, hits) => settledHits.push(hits) };
    return { share, settledHits, sync: () => syncShare(share, options, clock.nowMs()) };
  };
  const counted = async (): Promise<number> => 600 - (await store.decide([COUNTER]))[0].remaining;
  return { clock, store, member, counted };
}

describe('a settled share', () => {
  test('takes a part only once the others have seen its demand, and divides the limit by demand', async () => {
    const w = world();
    const a = w.member('a');
    const b = w.member('b');
    a.share.asked += 20;
    b.share.asked += 2;
    w.clock.advance(SYNC_MS);
    await Promise.all([a.sync(), b.sync()]);
    // First sync: published, not yet divided by the others.
    expect(isLive(a.share, w.clock.nowMs())).toBe(false);
    a.share.asked += 20;
    b.share.asked += 2;
    w.clock.advance(SYNC_MS);
    await Promise.all([a.sync(), b.sync()]);
    expect(isLive(a.share, w.clock.nowMs())).toBe(true);
    expect(isLive(b.share, w.clock.nowMs())).toBe(true);
    // 600 a minute is 10 a second: b asks 2/s and gets it with headroom (2.5/s), a takes the rest.
    expect(b.share.share).toBeCloseTo(2.5);
    expect(a.share.share).toBeCloseTo(7.5);
    expect(a.share.fraction + b.share.fraction).toBeCloseTo(1);
  });

  test('settles its pending hits once, and holds its part no longer than the TTL without a settlement', async () => {
    const w = world();
    const a = w.member('a');
    a.share.asked += 10;
    w.clock.advance(SYNC_MS);
    await a.sync();
    a.share.pending += 40;
    w.clock.advance(SYNC_MS);
    await a.sync();
    expect(a.settledHits).toEqual([40]);
    expect(await w.counted()).toBe(40);
    expect(a.share.unsettled).toBeUndefined();
    expect(isLive(a.share, w.clock.nowMs())).toBe(true);
    w.clock.advance(TTL_MS + 1);
    expect(isLive(a.share, w.clock.nowMs())).toBe(false);
  });

  test('a settlement whose answer was lost is sent again as it is and charged once', async () => {
    const w = world();
    const a = w.member('a');
    a.share.pending = 25;
    const settle = w.store.settlements.settle.bind(w.store.settlements);
    let lose = true;
    w.store.settlements.settle = async (call) => {
      const answer = await settle(call);
      if (lose) throw new Error('reply lost');
      return answer;
    };
    await a.sync();
    expect(a.share.unsettled).toEqual({ seq: expect.any(Number), hits: 25 });
    a.share.pending = 5;
    lose = false;
    w.clock.advance(SYNC_MS);
    await a.sync();
    expect(await w.counted()).toBe(25);
    expect(a.settledHits).toEqual([25]);
    w.clock.advance(SYNC_MS);
    await a.sync();
    expect(await w.counted()).toBe(30);
  });
});
