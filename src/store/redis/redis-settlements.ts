import { settleCallProblem, type CounterDecision, type SettleAnswer, type SettleCall, type Settlements } from '../../limiter/store';
import { callBeside, counterArguments, type BesideCallOptions } from './beside-call';

/**
 * The Redis store's settlements: one SETTLE script call (./settle-script.ts) per settlement,
 * outside the batcher (a lease's charges are written in the background, a few a second per
 * ledger), in the slot of the ledger's counters: on a Cluster the ledger and the counters are
 * decided together.
 */

export interface RedisSettlementsOptions extends BesideCallOptions {
  /** `<prefix>{`: a ledger's key is this, its counters' tag, and `}|settled`. */
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
    const keys = [...parts.keys, `${this.options.tagOpen}${call.key}}|settled`];
    return callBeside(this.options, [keys.length, ...keys, call.member, call.seq, call.ttlMs, ...parts.specs], (reply) => readReply(reply, counters.length));
  }
}

/** SETTLE's reply: applied (0 or 1), then `count` pairs of remaining (-1: denied) and resetMs. */
function readReply(reply: unknown, count: number): SettleAnswer {
  if (!Array.isArray(reply) || reply.length !== 1 + 2 * count || !reply.every((v) => typeof v === 'number' && Number.isSafeInteger(v))) {
    throw new Error(`malformed SETTLE reply: ${JSON.stringify(reply)?.slice(0, 200)}`);
  }
  const numbers = reply as number[];
  if (numbers[0] !== 0 && numbers[0] !== 1) throw new Error(`malformed SETTLE reply: applied ${numbers[0]}`);
  const decisions: CounterDecision[] = [];
  for (let i = 0; i < count; i++) {
    const remaining = numbers[1 + 2 * i];
    const resetMs = numbers[2 + 2 * i];
    if (remaining < -1 || resetMs < 0) throw new Error(`malformed SETTLE reply: counter ${i} remaining ${remaining}, reset ${resetMs} ms`);
    decisions.push(remaining < 0 ? { allowed: false, remaining: 0, resetMs } : { allowed: true, remaining, resetMs });
  }
  return { decisions, applied: numbers[0] === 1 };
}
