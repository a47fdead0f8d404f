import {
  LEDGER_TTL_MS,
  returnPending,
  settleCallOf,
  settlementAnswered,
  settlementToSend,
  SettlementSequence,
  type SettlingPart,
} from '../../../src/sharing/settlement';
import type { SettleAnswer } from '../../../src/limiter/store';

const answer = (applied: boolean, heldSeq: number, full = false): SettleAnswer => ({ applied, full, heldSeq, decisions: [] });
const part = (pending: number): SettlingPart => ({ pending, epoch: 0, unsettled: undefined });

describe('a sequence of settlements', () => {
  test('follows the clock and always rises', () => {
    const seqs = new SettlementSequence();
    expect(seqs.next(5)).toBe(5_000);
    expect(seqs.next(5)).toBe(5_001);
    expect(seqs.next(4)).toBe(5_002);
    seqs.raiseTo(9_000);
    expect(seqs.next(5)).toBe(9_001);
  });
});

describe("a member's settlement", () => {
  test('takes every pending hit once, and is sent again as it is until taken', () => {
    const seqs = new SettlementSequence();
    const p = part(7);
    const taken: number[] = [];
    const sent = settlementToSend(p, seqs, 1, (hits) => taken.push(hits));
    expect(sent).toEqual({ seq: 1_000, hits: 7 });
    expect(p).toMatchObject({ pending: 0, epoch: 1 });
    p.pending += 3;
    // Not acknowledged yet: the same one, the new hits wait.
    expect(settlementToSend(p, seqs, 2, (hits) => taken.push(hits))).toBe(sent);
    expect(taken).toEqual([7]);
    expect(settlementAnswered(p, sent, answer(false, 1_000), seqs, 2)).toBe('taken');
    expect(p.unsettled).toBeUndefined();
    expect(settlementToSend(p, seqs, 3)).toEqual({ seq: 3_000, hits: 3 });
  });

  test('refused by a full ledger, stays unsettled; behind an earlier run, goes again above its seq', () => {
    const seqs = new SettlementSequence();
    const p = part(4);
    const sent = settlementToSend(p, seqs, 1);
    expect(settlementAnswered(p, sent, answer(false, 0, true), seqs, 1)).toBe('refused');
    expect(p.unsettled).toBe(sent);
    expect(settlementAnswered(p, sent, answer(false, 50_000), seqs, 2)).toBe('behind');
    expect(p.unsettled).toEqual({ seq: 50_001, hits: 4 });
  });

  test('hits given back leave pending only while no settlement has taken them', () => {
    const seqs = new SettlementSequence();
    const p = part(10);
    returnPending(p, 0, 4);
    expect(p.pending).toBe(6);
    settlementToSend(p, seqs, 1);
    p.pending = 2;
    // Taken by the settlement of epoch 1: the shared counter counts them now.
    returnPending(p, 0, 2);
    expect(p.pending).toBe(2);
  });

  test("names its kind's ledger (leases' the default) and charges its hits whatever the outcome", () => {
    const counter = { key: 'k', algorithm: 'fixed_window' as const, limit: 10, windowMs: 1_000, hits: 0 };
    const sent = { seq: 3, hits: 5 };
    expect(settleCallOf({ kind: 'lease', key: 'k', tag: undefined, member: 'a', maxMembers: 4 }, sent, counter)).toEqual({
      key: 'k',
      tag: undefined,
      member: 'a',
      seq: 3,
      counters: [{ ...counter, hits: 5, countDenied: true }],
      ttlMs: LEDGER_TTL_MS,
      maxMembers: 4,
    });
    expect(settleCallOf({ kind: 'region', key: 'k', tag: 't', member: 'eu' }, sent, counter)).toMatchObject({ kind: 'region', tag: 't', member: 'eu' });
  });
});
