import { demandMembersCap, type DemandExchange, type ReplicaDemand, type ReplicaExchange } from '../limiter/replica-exchange';
import { monotonicClock, type Clock } from '../limiter/types';

/** Budgets whose demand is kept; beyond it the least recently exchanged one is dropped. */
export const MEMORY_EXCHANGE_MAX_BUDGETS = 100_000;
/** Documents kept per kind; a new name beyond it is refused, as Redis's MAX_MEMBERS. */
export const MEMORY_EXCHANGE_MAX_DOCUMENTS = 1_024;

interface Timed<T> {
  readonly value: T;
  readonly expiresAtMs: number;
}

/**
 * The ReplicaExchange in this process (BACKEND_TYPE=memory: every replica is one process, so it
 * only ever hears itself; and the reference the contract suite holds the Redis one to). Entries
 * expire by the injected clock; every map is bounded.
 */
export class MemoryExchange implements ReplicaExchange {
  private readonly clock: Clock;
  /** Least recently exchanged budget first. */
  private readonly demands = new Map<string, Map<string, Timed<ReplicaDemand>>>();
  private readonly documents = new Map<string, Map<string, Timed<string>>>();

  constructor(options: { readonly clock?: Clock } = {}) {
    this.clock = options.clock ?? monotonicClock;
  }

  exchangeDemand(exchange: DemandExchange): Promise<ReplicaDemand[]> {
    const now = this.clock.nowMs();
    // Each kind of demand on a counter is a budget of its own.
    const budget = exchange.kind === undefined || exchange.kind === 'rlqs' ? exchange.key : `${exchange.key}|${exchange.kind}`;
    const entries = this.demands.get(budget) ?? new Map<string, Timed<ReplicaDemand>>();
    this.demands.delete(budget);
    // Expired entries make room first, as in Redis.
    liveValues(entries, now);
    if (exchange.withdraw !== undefined) entries.delete(exchange.withdraw);
    const p = exchange.publish;
    if (p !== undefined && (entries.has(p.member) || entries.size < demandMembersCap(exchange))) {
      entries.set(p.member, { value: p, expiresAtMs: now + exchange.ttlMs });
    }
    const live = liveValues(entries, now);
    if (entries.size > 0) {
      this.demands.set(budget, entries);
      if (this.demands.size > MEMORY_EXCHANGE_MAX_BUDGETS) this.demands.delete(this.demands.keys().next().value!);
    }
    return Promise.resolve(live);
  }

  put(kind: string, name: string, document: string, ttlMs: number): Promise<void> {
    const now = this.clock.nowMs();
    let docs = this.documents.get(kind);
    if (docs === undefined) {
      docs = new Map();
      this.documents.set(kind, docs);
    }
    liveValues(docs, now);
    if (!docs.has(name) && docs.size >= MEMORY_EXCHANGE_MAX_DOCUMENTS)
      return Promise.reject(new Error(`${kind}: more than ${MEMORY_EXCHANGE_MAX_DOCUMENTS} members publish`));
    docs.set(name, { value: document, expiresAtMs: now + Math.max(1, ttlMs) });
    return Promise.resolve();
  }

  all(kind: string, max: number): Promise<string[]> {
    const docs = this.documents.get(kind);
    return Promise.resolve(docs === undefined ? [] : liveValues(docs, this.clock.nowMs()).slice(0, max));
  }
}

/** The live values of `entries`, the expired ones removed. */
function liveValues<T>(entries: Map<string, Timed<T>>, now: number): T[] {
  const live: T[] = [];
  for (const [name, e] of entries) {
    if (e.expiresAtMs <= now) entries.delete(name);
    else live.push(e.value);
  }
  return live;
}
