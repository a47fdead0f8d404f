import { keySlot } from './key-slot';
import { algorithmCode } from '../../limiter/types';
import type { CounterDecision, CounterRequest } from '../../limiter/store';

/**
 * Calls decided in parts. Redis Cluster: a call whose counters lie in several hash slots is split
 * into one part per slot; any Redis: a call too large for one script is cut into parts (see
 * ./part-gate.ts). Each part is decided atomically for its own counters; when any part denies
 * (or fails), the parts that charged are refunded with REFUND_SCRIPT, which removes exactly what
 * DECIDE added. Guarantee across parts:
 * - never more admitted than a single atomic store would admit: a charge is only ever kept when
 *   every part allowed, so no request is admitted on a quota it did not get;
 * - between a charge and its refund (a round trip; for a large call, until its last part has
 *   answered) other requests may see the extra hits and be denied when an atomic store would have
 *   admitted them (conservative, transient);
 * - a part that missed its deadline is refunded when its answer comes in after all (the store
 *   does that); a refund that cannot be delivered (node down) leaves the charge in place until its
 *   window expires: over-counting, never under-counting;
 * - a counter charged whatever the outcome (CounterRequest.countDenied) keeps its charge when
 *   another part denies the call, as it would in one atomic call; a failed call takes it back too.
 */

/** A multi-slot call's part in one slot: its decisions, and its charge tokens for a refund ('' for a counter not charged). */
export interface PartAnswer {
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

/** What the parts of a multi-slot call add up to. */
export interface MergedParts {
  /** The call's decisions in its counters' order (holes where a part failed). */
  readonly decisions: CounterDecision[];
  /** The first part's failure, if any: the call fails with it. */
  readonly failure: unknown;
  /** The parts to take back (indexes into `parts`): every charged part when one failed, or denied without countDenied. */
  readonly refund: number[];
}

/** Merges the answers of a call's slot parts (all-or-nothing: a failed or denying slot undoes the others' charges). */
export function mergePartAnswers(
  total: number,
  parts: readonly SlotPart[],
  settled: readonly PromiseSettledResult<PartAnswer>[],
  countDenied: boolean,
): MergedParts {
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
    argv.push(algorithmCode(counters[i].algorithm), counters[i].hits, tokens[i]);
  }
  if (keys.length === 0) return undefined;
  return [keys.length, ...keys, ...argv];
}

export interface DecideInPartsOptions {
  readonly counters: readonly CounterRequest[];
  readonly countDenied: boolean;
  /** The parts: each one's slot and the indexes of its counters; together every counter once. */
  readonly parts: readonly SlotPart[];
  /** Decides one part (its counters share `slot`), keeping its charge tokens. */
  readonly decidePart: (counters: readonly CounterRequest[], slot: number) => Promise<PartAnswer>;
  /** Takes back what a part charged (best effort, not awaited). */
  readonly refund: (counters: readonly CounterRequest[], tokens: readonly string[]) => void;
}

export interface DecideAcrossSlotsOptions extends Omit<DecideInPartsOptions, 'parts'> {
  /** A counter's Redis key (its hash tag decides the slot). */
  readonly keyOf: (counter: CounterRequest) => string;
  /** Decides counters that share `slot` atomically. */
  readonly decideInSlot: (counters: readonly CounterRequest[], slot: number) => Promise<CounterDecision[]>;
}

/** Decides a call on a cluster: atomically when its counters share a slot, otherwise part by part with refunds (see the file comment). */
export function decideAcrossSlots(options: DecideAcrossSlotsOptions): Promise<CounterDecision[]> {
  const parts = splitBySlot(options.counters, options.keyOf);
  if (parts.length === 1) return options.decideInSlot(options.counters, parts[0][0]);
  return decideInParts({ ...options, parts });
}

/** Cuts every part into parts of at most `max` counters (same slot, same order). */
export function cutParts(parts: readonly SlotPart[], max: number): SlotPart[] {
  const out: SlotPart[] = [];
  for (const [slot, indexes] of parts) {
    for (let i = 0; i < indexes.length; i += max) out.push([slot, indexes.slice(i, i + max)]);
  }
  return out;
}

/** Decides a call part by part, all-or-nothing through refunds (see the file comment). */
export async function decideInParts(options: DecideInPartsOptions): Promise<CounterDecision[]> {
  const { counters, countDenied, parts } = options;
  const settled = await Promise.allSettled(
    parts.map(([slot, idx]) =>
      options.decidePart(
        idx.map((i) => counters[i]),
        slot,
      ),
    ),
  );
  const merged = mergePartAnswers(counters.length, parts, settled, countDenied);
  for (const g of merged.refund) {
    const part = parts[g][1].map((i) => counters[i]);
    const tokens = (settled[g] as PromiseFulfilledResult<PartAnswer>).value.tokens;
    options.refund(part, merged.failure === undefined ? tokens.map((token, k) => (part[k].countDenied === true ? '' : token)) : tokens);
  }
  if (merged.failure !== undefined) throw merged.failure;
  return merged.decisions;
}
