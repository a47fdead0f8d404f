import { IN_PROCESS_STATE, newCounterState, type CounterState } from '../limiter/algorithms';
import type { CounterRequest, SettleAnswer } from '../limiter/store';
import { measureDemand, publishedDemand, type DemandMeter } from './demand-meter';
import { partFraction, usedOf } from './division';
import { settlementAnswered, settlementToSend, type SettlementSequence, type SettlingPart } from './settlement';
import type { SharedPart } from './shared-part';

/**
 * One sync of a member's settled part of a shared counter: the part a member decides against on its
 * own and settles in the background (a lease among replicas; a region among regions). Per sync:
 * - the hits admitted since the last settlement are charged to the shared counter once
 *   (./settlement.ts), and the counter's usage comes back;
 * - the member's demand (./demand-meter.ts) is exchanged with the others' (./shared-part.ts);
 * - its part is divided again (./division.ts partFraction: a part grows one sync after the demand,
 *   shrinks at once, and is capped by what the counter says the others use).
 * A part holds only while both halves went through recently (liveUntil). The user keeps these fields
 * on its own object, beside the ones its decision reads.
 */
export interface SettledShare extends DemandMeter, SettlingPart {
  readonly part: SharedPart;
  /** The counter as last asked, with hits 0. */
  counter: CounterRequest;
  /** The hits this member settled, charged to a copy of the counter as each settlement was made: its own share of the counter's usage. */
  mirror: CounterState | undefined;
  /** The counter decided locally (scaled to `fraction`): dropped when the fraction changes. */
  local: CounterRequest | undefined;
  fraction: number;
  /** The part in hits per second. */
  share: number;
  live: boolean;
  liveUntilMs: number;
  /** When the last settlement that went through (applied, or applied before) was sent. */
  settledSentMs: number;
  /** The last answer of the ledger, and of the exchange, had no room for this member. */
  ledgerRefused: boolean;
  exchangeRefused: boolean;
  /** The demand of the last exchange that recorded this member: what the others divided by since (undefined: they divided without it). */
  seenDemand: number | undefined;
  /** Hits settled since the share began. */
  settled: number;
  syncing: Promise<void> | undefined;
}

export interface PartSyncOptions<S extends SettledShare = SettledShare> {
  readonly seqs: SettlementSequence;
  /** How long a member's demand entry lives in the exchange, and its part after its last settlement, ms. */
  readonly ttlMs: number;
  readonly syncIntervalMs: number;
  /** An exchange went through (the others as it said are in share.part.others). */
  readonly onExchanged?: (share: S) => void;
  /** Hits the shared counter took from this member. */
  readonly onSettled?: (share: S, hits: number) => void;
  /** A settlement or exchange that failed: the part holds until liveUntil, the hits stay pending. */
  readonly onStoreError?: (err: unknown) => void;
}

/**
 * Settles the share's pending hits (or sends its unacknowledged settlement again), exchanges its
 * demand, then divides the limit again and renews the part. A failure keeps the hits for the next
 * sync, and the part until liveUntil(). One sync at a time per share.
 */
export function syncShare<S extends SettledShare>(share: S, options: PartSyncOptions<S>, now: number): Promise<void> {
  if (share.syncing !== undefined) return share.syncing;
  const c = share.counter;
  const settlement = settlementToSend(share, options.seqs, now, (hits) => {
    if (hits > 0) share.mirror = charged(share.mirror, { ...c, hits }, now);
  });
  // This member's part of the counter's usage once the settlement is in: the rest is the others'.
  const ownUsed = share.mirror === undefined ? 0 : usedHits(c, share.mirror, now);
  measureDemand(share, now);
  const part = share.part;
  // What the others divided by since this member's last exchange: nothing of it when its entry
  // may have expired since (they have divided without it, as for a new member).
  const seenDemand = part.peers.ownEntryLive(now, options.ttlMs) ? share.seenDemand : undefined;
  const settling = part.settle(settlement, c);
  const exchanging = part.exchange({ member: part.member, demand: publishedDemand(share.demand), admitted: 0, proxies: 1 }, options.ttlMs)!;
  share.syncing = Promise.allSettled([settling, exchanging]).then(([settled, exchanged]) => {
    share.syncing = undefined;
    if (exchanged.status === 'fulfilled') {
      // Recorded or not: a budget holding its cap of members has no room for this one, and the
      // others divide without it, so it must not decide on its own.
      const recorded = part.peers.heard(exchanged.value, now);
      share.exchangeRefused = !recorded;
      share.seenDemand = recorded ? share.demand : undefined;
      options.onExchanged?.(share);
    } else {
      options.onStoreError?.(exchanged.reason);
    }
    if (settled.status === 'rejected') {
      options.onStoreError?.(settled.reason);
      return;
    }
    const answer = settled.value;
    const outcome = settlementAnswered(share, settlement, answer, options.seqs, now);
    share.ledgerRefused = outcome === 'refused';
    if (outcome === 'taken') {
      share.settled += settlement.hits;
      share.settledSentMs = now;
      if (settlement.hits > 0) options.onSettled?.(share, settlement.hits);
      if (!share.ledgerRefused && !share.exchangeRefused) divide(share, options, answer, ownUsed, seenDemand, now);
    }
    if (share.ledgerRefused || share.exchangeRefused) share.live = false;
  });
  return share.syncing;
}

/**
 * Until when a part holds: while both halves of the sync went through recently.
 * - The exchange: this member's demand entry lives `ttlMs` in the store after the call that wrote
 *   it, which was sent no later than the send time kept here (the store writes it later still). The
 *   other members drop it at their first sync after that, and then divide as if this one were gone:
 *   so this member stops deciding one sync interval before it can expire, and what it admitted until
 *   then reaches the shared counter with its next settlement, before the others stop counting it.
 * - The settlement: the part lives `ttlMs` after the last settlement the store took was sent (what is
 *   admitted meanwhile is pending, and the others do not see it in the counter).
 * Past it the shared counter decides, exactly, until both go through again.
 */
export function liveUntil(share: SettledShare, ttlMs: number, syncIntervalMs: number): number {
  return Math.min(share.settledSentMs + ttlMs, share.part.peers.recordedSentMs + ttlMs - syncIntervalMs);
}

/** Whether the part holds at `now` (a part past liveUntil is dropped here). */
export function isLive(share: SettledShare, now: number): boolean {
  if (share.live && now > share.liveUntilMs) share.live = false;
  return share.live;
}

/** The part from the division by demand, capped by what the counter says the others use (partFraction); renewed until liveUntil(). */
function divide<S extends SettledShare>(
  share: S,
  options: PartSyncOptions<S>,
  answer: SettleAnswer,
  ownUsed: number,
  seenDemand: number | undefined,
  now: number,
): void {
  // Not seen by the others yet (a new member, or one whose entry may have expired): they divided
  // the whole limit among themselves. A part taken now, beside theirs, could add up to twice the
  // limit when a new counter gets busy on several members at once.
  if (seenDemand === undefined) return;
  const c = share.counter;
  const capacity = c.burst ?? c.limit;
  const perSecond = c.limit / (c.windowMs / 1000);
  const fraction = partFraction({
    perSecond,
    capacity,
    used: usedOf(answer.decisions[0], capacity),
    ownUsed,
    demand: share.demand,
    seenDemand,
    others: share.part.others,
  });
  if (fraction !== share.fraction) {
    share.fraction = fraction;
    share.local = undefined;
  }
  share.share = fraction * perSecond;
  share.liveUntilMs = liveUntil(share, options.ttlMs, options.syncIntervalMs);
  share.live = now <= share.liveUntilMs;
}

/** `state` (made when there is none) with `c`'s hits charged at `now`. */
export function charged(state: CounterState | undefined, c: CounterRequest, now: number): CounterState {
  const s = state ?? newCounterState(c, now);
  IN_PROCESS_STATE[c.algorithm].charge(c, s, now);
  return s;
}

/** How much of counter `c`'s capacity (hits 0) `state` uses at `now`, in hits. */
export function usedHits(c: CounterRequest, state: CounterState, now: number): number {
  const check = IN_PROCESS_STATE[c.algorithm].decide(c, state, now, 0);
  return Math.max(0, (c.burst ?? c.limit) - check.remaining);
}
