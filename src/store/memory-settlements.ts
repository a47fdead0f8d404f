import { BoundedCache, entryBytes, type CacheEntry } from '../limiter/bounded-cache';
import {
  MAX_SETTLE_MEMBERS,
  settleCallProblem,
  type CounterDecision,
  type CounterRequest,
  type DecideOptions,
  type SettleAnswer,
  type SettleCall,
  type Settlements,
} from '../limiter/store';
import type { Clock } from '../limiter/types';

/**
 * The memory store's settlements: one ledger per key in this process, each a map of member to its
 * last applied seq, decided with the store's own counters in one synchronous step (atomic, as every
 * call of the memory store). A member's entry lapses ttlMs after the call that wrote it; a ledger
 * goes when its last entry has lapsed. Bounded: a call's maxMembers members per ledger (lapsed
 * entries make room first; a new member beyond is refused, nothing charged), and ledgers in number
 * and in estimated bytes over all keys, the least recently written ledger dropped first (its
 * members' resends are then charged again: forgetting over-counts, it never lets a charge go unpaid).
 */

export interface MemorySettlementsOptions {
  readonly clock: Clock;
  /** The memory store's decideNow. */
  readonly decide: (counters: readonly CounterRequest[], options?: DecideOptions) => CounterDecision[];
  /** Ledgers kept at most. */
  readonly maxLedgers?: number;
  /** Estimated bytes of all ledgers together (keys and members included), at most. */
  readonly maxBytes?: number;
}

/** Defaults of the process-wide bounds. */
export const DEFAULT_SETTLEMENT_LEDGERS = 100_000;
export const DEFAULT_SETTLEMENT_MAX_BYTES = 32 * 1024 * 1024;

/** A ledger's own fields beside its key, and a member's entry beside its name's characters, estimated. */
const LEDGER_BYTES = 96;
const MEMBER_BYTES = 80;

interface MemberEntry {
  seq: number;
  /** The clock's ms from which the entry is read as absent. */
  lapseAtMs: number;
}

interface Ledger extends CacheEntry {
  readonly members: Map<string, MemberEntry>;
}

const COUNTED: DecideOptions = Object.freeze({ countDenied: true });

export class MemorySettlements implements Settlements {
  private readonly clock: Clock;
  private readonly decide: MemorySettlementsOptions['decide'];
  private readonly ledgers: BoundedCache<Ledger>;

  constructor(options: MemorySettlementsOptions) {
    this.clock = options.clock;
    this.decide = options.decide;
    this.ledgers = new BoundedCache({
      maxEntries: options.maxLedgers ?? DEFAULT_SETTLEMENT_LEDGERS,
      maxBytes: options.maxBytes ?? DEFAULT_SETTLEMENT_MAX_BYTES,
    });
  }

  /** Ledgers held (lapsed ones included until met or swept). */
  get size(): number {
    return this.ledgers.size;
  }

  /** Estimated bytes of the ledgers held. */
  get bytes(): number {
    return this.ledgers.bytes;
  }

  settle(call: SettleCall): Promise<SettleAnswer> {
    try {
      return Promise.resolve(this.settleNow(call));
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** settle(), synchronously. */
  settleNow(call: SettleCall): SettleAnswer {
    const problem = settleCallProblem(call);
    if (problem !== undefined) throw new Error(problem);
    const now = this.clock.nowMs();
    const { member, seq } = call;
    // A ledger named under a tag of its own is another than the one its name alone names; each kind's is its own.
    const named = call.tag === undefined || call.tag === call.key ? call.key : `${call.tag}}${call.key}`;
    const key = call.kind === undefined || call.kind === 'lease' ? named : `${named}|${call.kind}`;
    const ledger = this.ledgers.peek(key, now);
    const entry = ledger?.members.get(member);
    if (entry !== undefined && entry.lapseAtMs > now && seq <= entry.seq) {
      return { decisions: this.decide(asChecks(call.counters)), applied: false, full: false, heldSeq: entry.seq };
    }
    if (ledger !== undefined && entry === undefined && !this.hasRoom(key, ledger, now, call.maxMembers ?? MAX_SETTLE_MEMBERS)) {
      return { decisions: this.decide(asChecks(call.counters)), applied: false, full: true, heldSeq: 0 };
    }
    // Decided before anything is recorded: a call that throws leaves no trace in the ledger.
    const decisions = this.decide(call.counters, COUNTED);
    const lapseAtMs = now + call.ttlMs;
    if (ledger === undefined) {
      const created: Ledger = { members: new Map([[member, { seq, lapseAtMs }]]), expiresAtMs: lapseAtMs, bytes: 0 };
      created.bytes = ledgerBytes(key, created);
      this.ledgers.set(key, created);
    } else if (entry !== undefined) {
      entry.seq = seq;
      entry.lapseAtMs = lapseAtMs;
      this.written(key, ledger, lapseAtMs);
    } else {
      ledger.members.set(member, { seq, lapseAtMs });
      this.written(key, ledger, lapseAtMs);
      this.ledgers.resize(ledger, ledgerBytes(key, ledger));
    }
    this.ledgers.tidy(now);
    return { decisions, applied: true, full: false, heldSeq: seq };
  }

  /** Drops the lapsed ledgers among at most `budget` examined (the memory store's sweep). */
  sweep(budget: number): number {
    return this.ledgers.sweep(this.clock.nowMs(), budget);
  }

  /** Whether `ledger` can take a new member, its lapsed entries dropped first when it is full. */
  private hasRoom(key: string, ledger: Ledger, now: number, cap: number): boolean {
    if (ledger.members.size < cap) return true;
    for (const [name, e] of ledger.members) if (e.lapseAtMs <= now) ledger.members.delete(name);
    this.ledgers.resize(ledger, ledgerBytes(key, ledger));
    return ledger.members.size < cap;
  }

  /** A member's entry of `ledger` written, lapsing at `lapseAtMs`: the ledger lives as long, and is the most recently used. */
  private written(key: string, ledger: Ledger, lapseAtMs: number): void {
    if (lapseAtMs > ledger.expiresAtMs) ledger.expiresAtMs = lapseAtMs;
    this.ledgers.touch(key, ledger);
  }
}

function ledgerBytes(key: string, ledger: Ledger): number {
  let own = LEDGER_BYTES;
  for (const name of ledger.members.keys()) own += MEMBER_BYTES + name.length;
  return entryBytes(key, own);
}

function asChecks(counters: readonly CounterRequest[]): CounterRequest[] {
  return counters.map((c) => (c.hits === 0 ? c : { ...c, hits: 0 }));
}
