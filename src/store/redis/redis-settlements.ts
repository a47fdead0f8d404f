import {
  settleCallProblem,
  StoreUnavailableError,
  type CounterDecision,
  type CounterRequest,
  type SettleAnswer,
  type SettleCall,
  type Settlements,
} from '../../limiter/store';
import { counterProblem, counterSpec } from './script';

/**
 * The Redis store's settlements: one SETTLE script call (./settle-script.ts) per settlement,
 * outside the batcher (a lease's charges are written in the background, a few a second per
 * ledger), in the slot of the ledger's counters: on a Cluster the ledger and the counters are
 * decided together.
 */

export interface RedisSettlementsOptions {
  /** Sends SETTLE: [numkeys, ...keys, ...argv]. */
  readonly call: (args: (string | number)[]) => Promise<unknown>;
  /** A counter's Redis key (the store's keyOf). */
  readonly keyOf: (c: CounterRequest) => string;
  /** `<prefix>{`: a ledger's key is this, its counters' tag, and `}|settled`. */
  readonly tagOpen: string;
  /** Deadline of one call, ms. */
  readonly timeoutMs: number;
  /** A failed call, for metrics and the health probe; returns the error to reject with. */
  readonly failed: (err: unknown) => Error;
}

export class RedisSettlements implements Settlements {
  constructor(private readonly options: RedisSettlementsOptions) {}

  settle(call: SettleCall): Promise<SettleAnswer> {
    const problem = settleCallProblem(call);
    if (problem !== undefined) return Promise.reject(new Error(problem));
    const { counters } = call;
    const keys: string[] = [];
    const specs: string[] = [];
    for (const c of counters) {
      const counter = counterProblem(c);
      if (counter !== undefined) return Promise.reject(new Error(`counter ${JSON.stringify(c.key)}: ${counter}`));
      keys.push(this.options.keyOf(c));
      specs.push(counterSpec(c));
    }
    keys.push(`${this.options.tagOpen}${call.key}}|settled`);
    const args = [keys.length, ...keys, call.member, call.seq, call.ttlMs, ...specs];
    const deadlineMs = this.options.timeoutMs;
    return new Promise<SettleAnswer>((resolve, reject) => {
      const timer = setTimeout(() => reject(this.options.failed(new StoreUnavailableError(`redis did not answer within ${deadlineMs} ms`))), deadlineMs);
      this.options.call(args).then(
        (reply) => {
          clearTimeout(timer);
          try {
            resolve(readReply(reply, counters.length));
          } catch (err) {
            reject(this.options.failed(err));
          }
        },
        (err: unknown) => {
          clearTimeout(timer);
          reject(this.options.failed(err));
        },
      );
    });
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
