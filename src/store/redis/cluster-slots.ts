import { keySlot } from './key-slot';
import { ALGORITHM_CODE } from './script';
import type { CounterDecision, CounterRequest } from '../../limiter/store';

/**
 * Redis Cluster: a call whose counters lie in several hash slots. Its counters are split into one
 * share per slot, each decided atomically for its own counters; when any slot denies (or fails),
 * the slots that charged are refunded with REFUND_SCRIPT, which removes exactly what DECIDE added.
 * Guarantee across slots:
 * - never more admitted than a single atomic store would admit: a charge is only ever kept when
 *   every slot allowed, so no request is admitted on a quota it did not get;
 * - between a charge and its refund (about one round trip) other requests may see the extra hits
 *   and be denied when an atomic store would have admitted them (conservative, transient);
 * - a share that missed its deadline is refunded when its answer comes in after all (the store
 *   does that); a refund that cannot be delivered (node down) leaves the charge in place until its
 *   window expires: over-counting, never under-counting.
 */

/** A multi-slot call's share in one slot: its decisions, and its charge tokens for a refund ('' for a counter not charged). */
export interface SlotShare {
  readonly decisions: CounterDecision[];
  readonly tokens: string[];
}

/** One slot's part of a call: the slot and the indexes of the call's counters that hash to it, in order. */
export type SlotPart = readonly [slot: number, indexes: number[]];

/** Groups `counters` by the hash slot of their Redis key (`keyOf`), in order of first appearance. */
export function splitBySlot(counters: readonly CounterRequest[], keyOf: (counter: CounterRequest) => string): SlotPart[] {
  const groups = new Map<number, number[]>();
  for (let i = 0; i < counters.length; i++) {
    const slot = keySlot(keyOf(counters[i]));
    const g = groups.get(slot);
    if (g === undefined) groups.set(slot, [i]);
    else g.push(i);
  }
  return [...groups.entries()];
}

/** What the shares of a multi-slot call add up to. */
export interface MergedShares {
  /** The call's decisions in its counters' order (holes where a share failed). */
  readonly decisions: CounterDecision[];
  /** The first share's failure, if any: the call fails with it. */
  readonly failure: unknown;
  /** The shares to take back (indexes into `parts`): every charged share when one failed, or denied without countDenied. */
  readonly refund: number[];
}

/** Merges the answers of a call's slot shares (all-or-nothing: a failed or denying slot undoes the others' charges). */
export function mergeSlotShares(
  total: number,
  parts: readonly SlotPart[],
  settled: readonly PromiseSettledResult<SlotShare>[],
  countDenied: boolean,
): MergedShares {
  const decisions = new Array<CounterDecision>(total);
  let failure: unknown;
  let anyDenied = false;
  settled.forEach((r, g) => {
    if (r.status === 'rejected') {
      failure ??= r.reason;
      return;
    }
    parts[g][1].forEach((i, k) => {
      decisions[i] = r.value.decisions[k];
      if (!r.value.decisions[k].allowed) anyDenied = true;
    });
  });
  const refund: number[] = [];
  if (failure !== undefined || (anyDenied && !countDenied)) {
    settled.forEach((r, g) => {
      if (r.status === 'fulfilled') refund.push(g);
    });
  }
  return { decisions, failure, refund };
}

/** The REFUND script's arguments (key count, keys, then algorithm, hits, token per key) for the charged ones among `counters`; undefined when none was charged. */
export function refundArgs(
  counters: readonly CounterRequest[],
  tokens: readonly string[],
  keyOf: (counter: CounterRequest) => string,
): (string | number)[] | undefined {
  const keys: string[] = [];
  const argv: (string | number)[] = [];
  for (let i = 0; i < counters.length; i++) {
    if (tokens[i] === '') continue;
    keys.push(keyOf(counters[i]));
    argv.push(ALGORITHM_CODE[counters[i].algorithm], counters[i].hits, tokens[i]);
  }
  if (keys.length === 0) return undefined;
  return [keys.length, ...keys, ...argv];
}

export interface DecideAcrossSlotsOptions {
  readonly counters: readonly CounterRequest[];
  readonly countDenied: boolean;
  /** A counter's Redis key (its hash tag decides the slot). */
  readonly keyOf: (counter: CounterRequest) => string;
  /** Decides counters that share `slot` atomically. */
  readonly decideInSlot: (counters: readonly CounterRequest[], slot: number) => Promise<CounterDecision[]>;
  /** Decides one slot's share of a multi-slot call, keeping its charge tokens. */
  readonly decideShare: (counters: readonly CounterRequest[], slot: number) => Promise<SlotShare>;
  /** Takes back what a share charged (best effort, not awaited). */
  readonly refund: (counters: readonly CounterRequest[], tokens: readonly string[]) => void;
}

/** Decides a call on a cluster: atomically when its counters share a slot, otherwise share by share with refunds (see the file comment). */
export async function decideAcrossSlots(options: DecideAcrossSlotsOptions): Promise<CounterDecision[]> {
  const { counters, countDenied } = options;
  const parts = splitBySlot(counters, options.keyOf);
  if (parts.length === 1) return options.decideInSlot(counters, parts[0][0]);
  const settled = await Promise.allSettled(
    parts.map(([slot, idx]) =>
      options.decideShare(
        idx.map((i) => counters[i]),
        slot,
      ),
    ),
  );
  const merged = mergeSlotShares(counters.length, parts, settled, countDenied);
  for (const g of merged.refund) {
    options.refund(
      parts[g][1].map((i) => counters[i]),
      (settled[g] as PromiseFulfilledResult<SlotShare>).value.tokens,
    );
  }
  if (merged.failure !== undefined) throw merged.failure;
  return merged.decisions;
}
