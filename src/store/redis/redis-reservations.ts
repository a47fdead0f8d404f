import { DEFAULT_RESERVATION_TTL_MS, DEFAULT_RESERVATIONS_KEY_BYTES, DEFAULT_RESERVATIONS_PER_KEY, holdTimeMs } from '../../limiter/reservations';
import type { CounterDecision, HoldAnswer, HoldCall, Reservations } from '../../limiter/store';
import { RESERVE_OUTCOMES } from './reserve-script';
import { callBeside, counterArguments, type BesideCallOptions } from './beside-call';

/**
 * The Redis store's reservations: one RESERVE script call (./reserve-script.ts) per reservation
 * call, outside the batcher (a reserve and a commit per stream, not per request check), in the
 * slot of the descriptor's counters: on a Cluster the book and the counters are decided together.
 */

export interface RedisReservationsOptions extends BesideCallOptions {
  /** `<prefix>{`: a book's key is this, its descriptor's tag, and `}|holds`. */
  readonly tagOpen: string;
  readonly ttlMs?: number;
  /** Holds of one book, at most (RESERVATIONS_MAX_PER_KEY). */
  readonly maxPerKey?: number;
  /** Bytes of one book's holds (holdBytes each), at most (RESERVATIONS_MAX_KEY_BYTES). */
  readonly maxKeyBytes?: number;
}

const KIND_CODE = { reserve: 'r', commit: 'c', release: 'x' } as const;

export class RedisReservations implements Reservations {
  readonly ttlMs: number;
  private readonly maxPerKey: number;
  private readonly maxKeyBytes: number;

  constructor(private readonly options: RedisReservationsOptions) {
    this.ttlMs = options.ttlMs ?? DEFAULT_RESERVATION_TTL_MS;
    this.maxPerKey = options.maxPerKey ?? DEFAULT_RESERVATIONS_PER_KEY;
    this.maxKeyBytes = options.maxKeyBytes ?? DEFAULT_RESERVATIONS_KEY_BYTES;
  }

  hold(call: HoldCall): Promise<HoldAnswer> {
    const { counters } = call;
    const parts = counterArguments(counters, this.options.keyOf, (c) => (c.hits === 0 ? c : { ...c, hits: 0 }));
    if (parts instanceof Error) return Promise.reject(parts);
    const keys = [...parts.keys, `${this.options.tagOpen}${call.key}}|holds`];
    const holdMs = holdTimeMs(this.ttlMs, call.holdMs);
    const args = [
      keys.length,
      ...keys,
      KIND_CODE[call.kind],
      call.id,
      call.hits,
      holdMs,
      this.ttlMs,
      this.maxPerKey,
      this.maxKeyBytes,
      call.maxHeld ?? -1,
      ...parts.specs,
    ];
    return callBeside(this.options, args, (reply) => readReply(reply, counters.length + (call.maxHeld === undefined ? 0 : 1)));
  }
}

/** RESERVE's reply: outcome, holds, lapsed, then `count` pairs of remaining (-1: denied) and resetMs. */
function readReply(reply: unknown, count: number): HoldAnswer {
  if (!Array.isArray(reply) || reply.length !== 3 + 2 * count || !reply.every((v) => typeof v === 'number' && Number.isSafeInteger(v))) {
    throw new Error(`malformed RESERVE reply: ${JSON.stringify(reply)?.slice(0, 200)}`);
  }
  const numbers = reply as number[];
  const outcome = RESERVE_OUTCOMES[numbers[0]];
  if (outcome === undefined) throw new Error(`malformed RESERVE reply: outcome ${numbers[0]}`);
  const decisions: CounterDecision[] = [];
  for (let i = 0; i < count; i++) {
    const remaining = numbers[3 + 2 * i];
    const resetMs = numbers[4 + 2 * i];
    decisions.push(remaining < 0 ? { allowed: false, remaining: 0, resetMs } : { allowed: true, remaining, resetMs });
  }
  return { decisions, outcome, held: numbers[1], lapsed: numbers[2] };
}
