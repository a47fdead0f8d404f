import type { SharingKind } from '../limiter/sharing-kind';
import type { CounterRequest, SettleAnswer, SettleCall } from '../limiter/store';

/**
 * Settling a member's admitted hits to the shared counters once per member and sequence number
 * (the Settlements port: a resend after a timeout is never charged twice). A member keeps what it
 * admitted since its last settlement (`pending`) and at most one settlement sent and not yet
 * acknowledged (`unsettled`), sent again as it is until the ledger takes it. Each kind (leases,
 * regions) settles on ledgers of its own.
 */

/**
 * How long a ledger remembers a member's last settlement: a settlement whose reply was lost is sent
 * again until the store answers, and is recognised as applied within this time. So it is the longest
 * a member may go without an answer from the store (a partition, an outage) and still never have a
 * settlement charged twice; the price is that a member that went away holds its place among the
 * ledger's members as long (a stable name lets a restarted one take its own place again).
 */
export const LEDGER_TTL_MS = 600_000;

/** A settlement sent and not yet acknowledged. */
export interface Unsettled {
  readonly seq: number;
  readonly hits: number;
}

/** The fields of a member's settlement state; a user keeps them on its own object (a lease). */
export interface SettlingPart {
  /** Hits admitted and not yet taken into a settlement. */
  pending: number;
  /** Counts the times pending was taken into a settlement: hits given back in the same count are still pending. */
  epoch: number;
  unsettled: Unsettled | undefined;
}

/**
 * Sequence numbers of one member's settlements: above every one sent before, and drawn from the clock
 * (ms x 1000), so that a process restarted under the same name continues above the seqs of its
 * previous run, whose highest the ledgers keep. Safe integers until the year 2255; up to 1,000
 * settlements a millisecond keep it at the clock. A ledger holding a higher seq of this name still is
 * told apart (settlementAnswered).
 */
export class SettlementSequence {
  private seq = 0;

  next(nowMs: number): number {
    this.seq = Math.max(this.seq + 1, nowMs * 1000);
    return this.seq;
  }

  /** A ledger said it holds `heldSeq`: the next seq goes above it. */
  raiseTo(heldSeq: number): void {
    this.seq = Math.max(this.seq, heldSeq);
  }
}

/**
 * The settlement to send: the one not yet acknowledged, or (when there is none) a new one taking
 * every pending hit (the epoch moves on). `onTaken` sees the hits a new settlement takes, first.
 */
export function settlementToSend(part: SettlingPart, seqs: SettlementSequence, nowMs: number, onTaken?: (hits: number) => void): Unsettled {
  if (part.unsettled === undefined) {
    onTaken?.(part.pending);
    part.unsettled = { seq: seqs.next(nowMs), hits: part.pending };
    part.pending = 0;
    part.epoch += 1;
  }
  return part.unsettled;
}

/**
 * What became of a settlement (`sent`):
 * - `refused`: the ledger has no room for this member; nothing charged, the same one goes again;
 * - `behind`: the ledger holds a higher seq of this name than any sent (an earlier process under the
 *   same name): not applied, replaced by one above it;
 * - `taken`: applied now, or by an earlier send of it (its reply lost); no longer unsettled.
 */
export type SettleOutcome = 'refused' | 'behind' | 'taken';

/** Reads a ledger's answer to `sent` into the part's state (see SettleOutcome). */
export function settlementAnswered(part: SettlingPart, sent: Unsettled, answer: SettleAnswer, seqs: SettlementSequence, nowMs: number): SettleOutcome {
  if (answer.full) return 'refused';
  if (!answer.applied && answer.heldSeq > sent.seq) {
    seqs.raiseTo(answer.heldSeq);
    part.unsettled = { seq: seqs.next(nowMs), hits: sent.hits };
    return 'behind';
  }
  if (part.unsettled === sent) part.unsettled = undefined;
  return 'taken';
}

/**
 * Takes `hits` out of what is pending, when no settlement has taken them since `epoch` (one that
 * has wrote them to the shared counter, which then counts them: over-counting by what one
 * settlement held, never under-counting).
 */
export function returnPending(part: SettlingPart, epoch: number, hits: number): void {
  if (part.epoch === epoch) part.pending = Math.max(0, part.pending - hits);
}

/** Where a member's settlements of one shared counter go. */
export interface LedgerName {
  readonly kind: SharingKind;
  /** The ledger: the counter's key; `tag` its hash tag when it has one of its own. */
  readonly key: string;
  readonly tag: string | undefined;
  readonly member: string;
  /** Members the ledger records at most; absent: the port's own cap. */
  readonly maxMembers?: number;
}

/** The Settlements call of `sent`, charging `counter` its hits (whatever the outcome). */
export function settleCallOf(ledger: LedgerName, sent: Unsettled, counter: CounterRequest): SettleCall {
  return {
    key: ledger.key,
    tag: ledger.tag,
    // Leases' calls name no kind: their ledgers are the adapters' default.
    ...(ledger.kind === 'lease' ? {} : { kind: ledger.kind }),
    member: ledger.member,
    seq: sent.seq,
    counters: [{ ...counter, hits: sent.hits, countDenied: true }],
    ttlMs: LEDGER_TTL_MS,
    ...(ledger.maxMembers === undefined ? {} : { maxMembers: ledger.maxMembers }),
  };
}
