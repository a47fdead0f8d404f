import {
  ledgerSuffix,
  MAX_SETTLE_MEMBERS,
  settleCallProblem,
  type CounterDecision,
  type SettleAnswer,
  type SettleCall,
  type Settlements,
} from '../../limiter/store';
import { callBeside, counterArguments, type BesideCallOptions } from './beside-call';

/**
 * The Redis store's settlements: one SETTLE script call (./settle-script.ts) per settlement,
 * outside the batcher (a lease's charges are written in the background, a few a second per
 * ledger), in the slot of the ledger's counters: on a Cluster the ledger and the counters are
 * decided together.
 */

export interface RedisSettlementsOptions extends BesideCallOptions {
  /** `<prefix>{`: a ledger's key is this, its tag, `}`, its name when it has a tag of its own, and `|settled`. */
  readonly tagOpen: string;
}

export class RedisSettlements implements Settlements {
  constructor(private readonly options: RedisSettlementsOptions) {}

  settle(call: SettleCall): Promise<SettleAnswer> {
    const problem = settleCallProblem(call);
    if (problem !== undefined) return Promise.reject(new Error(problem));
    const { counters } = call;
    const parts = counterArguments(counters, this.options.keyOf);
    if (parts instanceof Error) return Promise.reject(parts);
    const { tagOpen } = this.options;
    const suffix = ledgerSuffix(call.kind);
    const ledger = call.tag === undefined || call.tag === call.key ? `${tagOpen}${call.key}}${suffix}` : `${tagOpen}${call.tag}}${call.key}${suffix}`;
    const keys = parts.keys;
    // A ledger that is its first counter's own is named by the script: the key goes once.
    if (keys.length === 0 || ledger !== `${keys[0]}|settled`) keys.push(ledger);
    const args = [keys.length, ...keys, call.member, call.seq, call.ttlMs, call.maxMembers ?? MAX_SETTLE_MEMBERS, ...parts.specs];
    return callBeside(this.options, args, (reply) => readReply(reply, counters.length));
  }
}

/** SETTLE's reply: the outcome (1 applied, 0 again, 2 refused), the seq held, then `count` pairs of remaining (-1: denied) and resetMs. */
function readReply(reply: unknown, count: number): SettleAnswer {
  if (!Array.isArray(reply) || reply.length !== 2 + 2 * count || !reply.every((v) => typeof v === 'number' && Number.isSafeInteger(v))) {
    throw new Error(`malformed SETTLE reply: ${JSON.stringify(reply)?.slice(0, 200)}`);
  }
  const numbers = reply as number[];
  const outcome = numbers[0];
  if (outcome !== 0 && outcome !== 1 && outcome !== 2) throw new Error(`malformed SETTLE reply: outcome ${outcome}`);
  const heldSeq = numbers[1];
  if (heldSeq < 0) throw new Error(`malformed SETTLE reply: seq ${heldSeq}`);
  const decisions: CounterDecision[] = [];
  for (let i = 0; i < count; i++) {
    const remaining = numbers[2 + 2 * i];
    const resetMs = numbers[3 + 2 * i];
    if (remaining < -1 || resetMs < 0) throw new Error(`malformed SETTLE reply: counter ${i} remaining ${remaining}, reset ${resetMs} ms`);
    decisions.push(remaining < 0 ? { allowed: false, remaining: 0, resetMs } : { allowed: true, remaining, resetMs });
  }
  return { decisions, applied: outcome === 1, full: outcome === 2, heldSeq };
}
