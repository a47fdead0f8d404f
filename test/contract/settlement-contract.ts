import { MAX_SETTLE_MEMBERS, type CounterRequest, type SettleAnswer, type SettleCall, type Store } from '../../src/limiter/store';
import { requireBefore, untilUnstretched } from '../helpers/deadline';

/**
 * Settlements on each store (part of the store contract, see ./store-contract.ts): charges applied
 * once per (member, seq) on a ledger, whichever replica (`peer`, a second connection to the same
 * Redis; the memory store is one process, so its peer is itself) sends them, forgotten ttlMs after
 * they were written, at most MAX_SETTLE_MEMBERS members per ledger (or a call's maxMembers), a new
 * member beyond refused. Each call carries its own TTL and cap: the fixtures need nothing for them.
 */

interface SettlementHarness {
  readonly store: Store;
  readonly peer: Store;
  /** Moves the store's clock forward by at least `ms`. */
  advance(ms: number): Promise<void>;
  /** The store's clock now, ms. */
  nowMs(): number;
}

const DAY = 86_400_000;
/** A TTL no case waits out. */
const LONG_TTL = DAY;
/** The TTL of the cases that wait one out (real time on Redis): short, with room for a slow machine before it. */
const SHORT_TTL = 2_000;
/** Room past an instant that the store's clock and ours read alike (a Redis server on this machine). */
const MARGIN = 100;

let sequence = 0;
const run = `${process.pid}-${Date.now().toString(36)}`;

function freshKey(label: string): string {
  sequence += 1;
  return `settle|${run}|${sequence}|${label}`;
}

/** A counter of a day's window (no boundary passes during a case), charged `hits`. */
const counter = (key: string, limit: number, hits: number, extra: Partial<CounterRequest> = {}): CounterRequest => ({
  key,
  algorithm: 'sliding_window',
  limit,
  windowMs: DAY,
  hits,
  ...extra,
});

const settlement = (key: string, member: string, seq: number, counters: readonly CounterRequest[], ttlMs = LONG_TTL): SettleCall => ({
  key,
  member,
  seq,
  counters,
  ttlMs,
});

export function describeSettlementContract(harness: () => SettlementHarness): void {
  describe('settlements', () => {
    const settle = (store: Store, call: SettleCall): Promise<SettleAnswer> => store.settlements!.settle(call);

    /** Hits counted on `c`'s counter: a check under a limit far above anything a case charges. */
    const counted = async (store: Store, c: CounterRequest): Promise<number> => {
      const [d] = await store.decide([{ ...c, limit: 1_000_000, hits: 0 }]);
      return 1_000_000 - d.remaining;
    };

    /** Waits until the store's clock is past `instant` by MARGIN. */
    const after = async (h: SettlementHarness, instant: number): Promise<void> => {
      const left = instant + MARGIN - h.nowMs();
      if (left > 0) await h.advance(left);
    };

    it('charges every counter its hits, past the limit, and answers the same (member, seq) again as a check through either replica', async () => {
      const h = harness();
      const key = freshKey('once');
      const c = counter(key, 100, 60);
      expect(await settle(h.store, settlement(key, 'replica-a', 1, [c]))).toEqual({
        applied: true,
        full: false,
        heldSeq: 1,
        decisions: [{ allowed: true, remaining: 40, resetMs: expect.any(Number) }],
      });
      // Sent again (a timeout that Redis had run): nothing charged, wherever it lands.
      expect(await settle(h.peer, settlement(key, 'replica-a', 1, [c]))).toMatchObject({
        applied: false,
        full: false,
        heldSeq: 1,
        decisions: [{ allowed: true, remaining: 40 }],
      });
      expect(await settle(h.store, settlement(key, 'replica-a', 1, [c]))).toMatchObject({ applied: false, decisions: [{ allowed: true, remaining: 40 }] });
      expect(await counted(h.store, c)).toBe(60);
      // Past the limit: denied, and counted all the same (decided in process, too late to refuse).
      expect(await settle(h.peer, settlement(key, 'replica-a', 2, [c]))).toMatchObject({ applied: true, decisions: [{ allowed: false, remaining: 0 }] });
      expect(await counted(h.peer, c)).toBe(120);
      expect(await settle(h.store, settlement(key, 'replica-a', 2, [c]))).toMatchObject({ applied: false, decisions: [{ allowed: false, remaining: 0 }] });
      expect(await counted(h.store, c)).toBe(120);
    });

    it("keeps each kind's ledger of a key apart: a region's seq is never taken for a lease's", async () => {
      const h = harness();
      const key = freshKey('kinds');
      const c = counter(key, 1_000, 10);
      expect(await settle(h.store, settlement(key, 'a', 5, [c]))).toMatchObject({ applied: true, heldSeq: 5 });
      // The same member and seq under another kind: applied on its own ledger.
      expect(await settle(h.peer, { ...settlement(key, 'a', 5, [c]), kind: 'region' })).toMatchObject({ applied: true, heldSeq: 5 });
      expect(await settle(h.store, { ...settlement(key, 'a', 5, [c]), kind: 'region' })).toMatchObject({ applied: false, heldSeq: 5 });
      expect(await settle(h.store, { ...settlement(key, 'a', 5, [c]), kind: 'lease' })).toMatchObject({ applied: false, heldSeq: 5 });
      expect(await counted(h.store, c)).toBe(20);
      await expect(settle(h.store, { ...settlement(key, 'a', 6, [c]), kind: 'nobody' as never })).rejects.toThrow('settlement kind "nobody"');
      expect(await counted(h.store, c)).toBe(20);
    });

    it('charges nothing for a lower seq, charges a higher one, and keeps each member to its own seq', async () => {
      const h = harness();
      const key = freshKey('seqs');
      const c = counter(key, 1_000, 10);
      const applied = async (store: Store, member: string, seq: number): Promise<boolean> => (await settle(store, settlement(key, member, seq, [c]))).applied;
      expect(await applied(h.store, 'a', 5)).toBe(true);
      expect(await applied(h.peer, 'a', 3)).toBe(false);
      // The seq held is said: a sender tells its own resend (the same seq) from an earlier process's higher one.
      expect(await settle(h.store, settlement(key, 'a', 3, [c]))).toMatchObject({ applied: false, full: false, heldSeq: 5 });
      expect(await applied(h.store, 'a', 5)).toBe(false);
      expect(await counted(h.store, c)).toBe(10);
      // Another member's seq, below a's: its own.
      expect(await applied(h.peer, 'b', 1)).toBe(true);
      expect(await applied(h.store, 'b', 1)).toBe(false);
      expect(await counted(h.store, c)).toBe(20);
      expect(await applied(h.peer, 'a', 6)).toBe(true);
      expect(await applied(h.store, 'b', 4)).toBe(true);
      expect(await applied(h.store, 'a', 4)).toBe(false);
      expect(await counted(h.store, c)).toBe(40);
      // A ledger is its key's: the same member and seq on another ledger is charged there.
      const other = freshKey('seqs-other');
      const d = counter(other, 1_000, 10);
      expect((await settle(h.peer, settlement(other, 'a', 6, [d]))).applied).toBe(true);
      expect(await counted(h.store, d)).toBe(10);
      expect(await counted(h.store, c)).toBe(40);
    });

    it('charges a settlement sent twice at once through two replicas exactly once', async () => {
      const h = harness();
      const key = freshKey('race');
      const c = counter(key, 1_000, 7);
      const answers = await Promise.all(Array.from({ length: 6 }, (_, i) => settle(i % 2 ? h.peer : h.store, settlement(key, 'racer', 1, [c]))));
      expect(answers.filter((a) => a.applied)).toHaveLength(1);
      expect(await counted(h.store, c)).toBe(7);
    });

    it('settles every limit of one tag in one call, each its own hits, and answers a resend with checks of them all', async () => {
      const h = harness();
      const tag = freshKey('limits');
      const counters = [counter(tag, 100, 30, { tag }), counter(`${tag}|day`, 1_000, 40, { tag, algorithm: 'fixed_window' })];
      const first = await settle(h.store, settlement(tag, 'm', 1, counters));
      expect(first.applied).toBe(true);
      expect(first.decisions.map((d) => d.remaining)).toEqual([70, 960]);
      const again = await settle(h.peer, settlement(tag, 'm', 1, counters));
      expect(again).toMatchObject({
        applied: false,
        decisions: [
          { allowed: true, remaining: 70 },
          { allowed: true, remaining: 960 },
        ],
      });
      // One limit denies: both charged whatever the outcome.
      const heavy = counters.map((c) => ({ ...c, hits: 80 }));
      const second = await settle(h.peer, settlement(tag, 'm', 2, heavy));
      expect(second).toMatchObject({
        applied: true,
        decisions: [
          { allowed: false, remaining: 0 },
          { allowed: true, remaining: 880 },
        ],
      });
      expect(await counted(h.store, counters[0])).toBe(110);
      expect(await counted(h.store, counters[1])).toBe(120);
    });

    it('records a settlement of no counters all the same', async () => {
      const h = harness();
      const key = freshKey('empty');
      expect(await settle(h.store, settlement(key, 'm', 1, []))).toEqual({ applied: true, full: false, heldSeq: 1, decisions: [] });
      expect(await settle(h.peer, settlement(key, 'm', 1, []))).toEqual({ applied: false, full: false, heldSeq: 1, decisions: [] });
    });

    it('rejects a call no store takes, charging and recording nothing', async () => {
      const h = harness();
      const key = freshKey('invalid');
      const c = counter(key, 100, 5);
      const bad: SettleCall[] = [
        settlement(key, 'm', 0, [c]),
        settlement(key, 'm', 1.5, [c]),
        settlement(key, 'm', 2 ** 53, [c]),
        settlement(key, 'm', 1, [c], 0),
        settlement(key, '', 1, [c]),
        settlement(`${key}{x}`, 'm', 1, [c]),
        { ...settlement(key, 'm', 1, [c]), tag: 'a}b' },
        { ...settlement(key, 'm', 1, [c]), maxMembers: 0 },
        { ...settlement(key, 'm', 1, [c]), maxMembers: MAX_SETTLE_MEMBERS + 1 },
      ];
      for (const call of bad) await expect(settle(h.store, call)).rejects.toThrow(/settlement/);
      expect(await counted(h.store, c)).toBe(0);
      // Nothing recorded either: the first valid call is applied.
      expect((await settle(h.store, settlement(key, 'm', 1, [c]))).applied).toBe(true);
    });

    it("forgets a member's seq ttlMs after the call that wrote it, while another member keeps writing to the ledger", async () => {
      const h = harness();
      await untilUnstretched(async () => {
        const key = freshKey('lapse');
        const c = counter(key, 1_000, 1);
        const sent = h.nowMs();
        expect((await settle(h.store, settlement(key, 'a', 1, [c], SHORT_TTL))).applied).toBe(true);
        // Written no later than this answer: lapsed by answeredAt + SHORT_TTL.
        const answeredAt = h.nowMs();
        expect((await settle(h.peer, settlement(key, 'a', 1, [c], SHORT_TTL))).applied).toBe(false);
        requireBefore(sent + SHORT_TTL, h.nowMs(), 'the resend within the TTL');
        await h.advance(SHORT_TTL / 2);
        const bSent = h.nowMs();
        expect((await settle(h.peer, settlement(key, 'b', 1, [c], 4 * SHORT_TTL))).applied).toBe(true);
        await after(h, answeredAt + SHORT_TTL);
        expect((await settle(h.store, settlement(key, 'a', 1, [c], SHORT_TTL))).applied).toBe(true);
        expect((await settle(h.store, settlement(key, 'b', 1, [c], 4 * SHORT_TTL))).applied).toBe(false);
        requireBefore(bSent + 4 * SHORT_TTL, h.nowMs(), "b's resend within its TTL");
        expect(await counted(h.store, c)).toBe(3);
      });
    });

    it(`records at most ${MAX_SETTLE_MEMBERS} members: one beyond is refused, charged nothing, until lapsed entries make room`, async () => {
      const h = harness();
      await untilUnstretched(async () => {
        const key = freshKey('cap');
        const c = counter(key, 1_000_000, 1);
        const sent = h.nowMs();
        const fill = await Promise.all(
          Array.from({ length: MAX_SETTLE_MEMBERS }, (_, i) => settle(i % 2 ? h.peer : h.store, settlement(key, `member-${i}`, 1, [c], SHORT_TTL))),
        );
        const filledAt = h.nowMs();
        expect(fill.every((a) => a.applied)).toBe(true);
        // Beyond the cap: refused, charged nothing, not recorded.
        expect(await settle(h.store, settlement(key, 'late', 1, [c], SHORT_TTL))).toMatchObject({ applied: false, full: true, heldSeq: 0 });
        expect(await settle(h.peer, settlement(key, 'late', 1, [c], SHORT_TTL))).toMatchObject({ applied: false, full: true, heldSeq: 0 });
        // The members recorded still are.
        expect((await settle(h.store, settlement(key, 'member-0', 1, [c], SHORT_TTL))).applied).toBe(false);
        expect((await settle(h.peer, settlement(key, `member-${MAX_SETTLE_MEMBERS - 1}`, 1, [c], SHORT_TTL))).applied).toBe(false);
        requireBefore(sent + SHORT_TTL, h.nowMs(), 'the resends within the TTL');
        // One member settles again with a longer TTL: the ledger outlives the others' entries.
        const renewedAt = h.nowMs();
        expect((await settle(h.store, settlement(key, 'member-0', 2, [c], 4 * SHORT_TTL))).applied).toBe(true);
        expect(await counted(h.store, c)).toBe(MAX_SETTLE_MEMBERS + 1);
        // Every other entry lapsed: they make room, and the late member is recorded now.
        await after(h, filledAt + SHORT_TTL);
        expect((await settle(h.peer, settlement(key, 'late', 1, [c], SHORT_TTL))).applied).toBe(true);
        expect((await settle(h.store, settlement(key, 'late', 1, [c], SHORT_TTL))).applied).toBe(false);
        expect((await settle(h.peer, settlement(key, 'member-0', 2, [c], 4 * SHORT_TTL))).applied).toBe(false);
        requireBefore(renewedAt + 4 * SHORT_TTL, h.nowMs(), "the renewed member's resend within its TTL");
        expect(await counted(h.store, c)).toBe(MAX_SETTLE_MEMBERS + 2);
      });
    });

    it("takes a call's maxMembers as the cap: a member recorded keeps its place, a new one beyond is refused through either replica", async () => {
      const h = harness();
      const key = freshKey('small-cap');
      const c = counter(key, 1_000, 1);
      const capped = (member: string, seq: number): SettleCall => ({ ...settlement(key, member, seq, [c]), maxMembers: 2 });
      expect((await settle(h.store, capped('a', 1))).applied).toBe(true);
      expect((await settle(h.peer, capped('b', 1))).applied).toBe(true);
      expect(await settle(h.store, capped('c', 1))).toMatchObject({ applied: false, full: true, decisions: [{ allowed: true, remaining: 998 }] });
      expect(await settle(h.peer, capped('c', 2))).toMatchObject({ applied: false, full: true });
      expect((await settle(h.peer, capped('a', 2))).applied).toBe(true);
      expect(await counted(h.store, c)).toBe(3);
    });

    it("keeps a counter's own ledger under its tag apart from the tag's ledger, each applied once", async () => {
      const h = harness();
      const tag = freshKey('own');
      const limits = [counter(tag, 1_000, 5, { tag }), counter(`${tag}|hour`, 1_000, 7, { tag, algorithm: 'fixed_window' })];
      // The second limit's own ledger (what a lease settles on), in the tag's slot.
      const own = (seq: number): SettleCall => ({ ...settlement(limits[1].key, 'm', seq, [limits[1]]), tag });
      expect((await settle(h.store, own(1))).applied).toBe(true);
      expect((await settle(h.peer, own(1))).applied).toBe(false);
      // The first limit's own ledger is the tag's (no tag of its own): another than the second's.
      expect((await settle(h.store, settlement(tag, 'm', 1, [limits[0]]))).applied).toBe(true);
      expect((await settle(h.peer, settlement(tag, 'm', 1, [limits[0]]))).applied).toBe(false);
      expect((await settle(h.store, own(2))).applied).toBe(true);
      expect(await counted(h.store, limits[0])).toBe(5);
      expect(await counted(h.store, limits[1])).toBe(14);
    });
  });
}
