import type { ReplicaDemand } from '../limiter/replica-exchange';

/**
 * The other members sharing a limit, as the demand exchange last said. Each member's entry lives a
 * TTL in the store after the call that wrote it, so what a member knows of the others ages, and what
 * the others know of it lapses unless it publishes again:
 * - `recorded`: whether the last answer held this member's own entry (a budget holding its cap of
 *   members has no room for it: the others divide without it, so it must take no part);
 * - `recordedSentMs`: when the last exchange that recorded it was sent (its entry lives at least
 *   until then + TTL: see ownEntryLive);
 * - `heardAtMs`: when the last exchange that went through was sent (see forgetAfter).
 */
export class Peers {
  others: readonly ReplicaDemand[] = [];
  recorded = false;
  recordedSentMs = -Infinity;
  heardAtMs: number;

  constructor(
    /** This member's name (unique among the members). */
    readonly member: string,
    heardAtMs = -Infinity,
  ) {
    this.heardAtMs = heardAtMs;
  }

  /** An exchange sent at `sentMs` answered `entries` (this member's included when recorded); returns whether it was. */
  heard(entries: readonly ReplicaDemand[], sentMs: number): boolean {
    const others: ReplicaDemand[] = [];
    let recorded = false;
    for (const d of entries) {
      if (d.member === this.member) recorded = true;
      else others.push(d);
    }
    this.others = others;
    this.recorded = recorded;
    this.heardAtMs = sentMs;
    if (recorded) this.recordedSentMs = sentMs;
    return recorded;
  }

  /** Whether this member's entry may still be live at the others at `nowMs` (entries live `ttlMs`). */
  ownEntryLive(nowMs: number, ttlMs: number): boolean {
    return nowMs < this.recordedSentMs + ttlMs;
  }

  /** After a failed exchange: the others are forgotten once nothing was heard from them for `ttlMs` (their entries would have lapsed). */
  forgetAfter(nowMs: number, ttlMs: number): void {
    if (nowMs - this.heardAtMs > ttlMs) this.others = [];
  }
}
