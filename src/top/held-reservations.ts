import { monotonicClock, type Clock, type Entry, type LimiterObserver, type ReservationEvent } from '../limiter/types';

/**
 * What each descriptor's book of reservations held when this process last reserved, committed or
 * released on it (the store holds the truth; this is the latest answer it gave here): for /rlmatch
 * (one descriptor) and /top/rules (per rule). Bounded: at most MAX_DESCRIPTORS books, least recently
 * heard of dropped first, a descriptor whose name passes MAX_NAME_CHARS is not kept, and a book not
 * heard of for `ttlMs` (RESERVATION_TTL: every hold it counted has lapsed in the store) is forgotten.
 */

export const MAX_DESCRIPTORS = 10_000;
export const MAX_NAME_CHARS = 1_024;

interface Book {
  readonly domain: string;
  readonly rule: string;
  readonly held: number;
  /** When it was heard of (the clock's ms). */
  readonly atMs: number;
}

/** Held reservations of one rule, summed over the descriptors heard of. */
export interface RuleHeld {
  readonly domain: string;
  readonly rule: string;
  readonly held: number;
  /** Descriptors of the rule heard of (each with what it held last). */
  readonly descriptors: number;
}

function nameOf(domain: string, entries: readonly Entry[]): string {
  let name = domain;
  for (const e of entries) name += `\u0000${e.key}\u0001${e.value}`;
  return name;
}

export class HeldReservations {
  /** Least recently heard of first. */
  private readonly books = new Map<string, Book>();
  private readonly ttlMs: number;
  private readonly clock: Clock;

  constructor(options: { readonly ttlMs: number; readonly clock?: Clock }) {
    this.ttlMs = options.ttlMs;
    this.clock = options.clock ?? monotonicClock;
  }

  record(e: ReservationEvent): void {
    const name = nameOf(e.domain, e.entries);
    if (name.length > MAX_NAME_CHARS) return;
    this.books.delete(name);
    if (e.held > 0) this.books.set(name, { domain: e.domain, rule: e.rule.statKey, held: e.held, atMs: this.clock.nowMs() });
    if (this.books.size > MAX_DESCRIPTORS) this.books.delete(this.books.keys().next().value!);
  }

  /** What the descriptor (without its reserve or commit entry) held at its last reservation call here; 0 when none is known. */
  heldOf(domain: string, entries: readonly Entry[]): number {
    this.forgetLapsed();
    return this.books.get(nameOf(domain, entries))?.held ?? 0;
  }

  /** Per rule, by domain and rule. */
  byRule(): RuleHeld[] {
    this.forgetLapsed();
    const rules = new Map<string, { domain: string; rule: string; held: number; descriptors: number }>();
    for (const b of this.books.values()) {
      const id = `${b.domain}\u0000${b.rule}`;
      const r = rules.get(id) ?? { domain: b.domain, rule: b.rule, held: 0, descriptors: 0 };
      r.held += b.held;
      r.descriptors++;
      rules.set(id, r);
    }
    return [...rules.values()].sort((a, b) => (a.domain < b.domain ? -1 : a.domain > b.domain ? 1 : a.rule < b.rule ? -1 : a.rule > b.rule ? 1 : 0));
  }

  /** Books are in the order they were heard of: the lapsed ones are at the front. */
  private forgetLapsed(): void {
    const now = this.clock.nowMs();
    for (const [name, b] of this.books) {
      if (now - b.atMs < this.ttlMs) return;
      this.books.delete(name);
    }
  }

  /** `observer` with these books fed from its reservation events (its other calls go to it as they are). */
  observing(observer: LimiterObserver): LimiterObserver {
    return {
      onDescriptor: observer.onDescriptor.bind(observer),
      onGlobalShadowMode: observer.onGlobalShadowMode?.bind(observer),
      onReplay: observer.onReplay?.bind(observer),
      onReservation: (e) => {
        this.record(e);
        observer.onReservation?.(e);
      },
    };
  }
}
