import type { ReplicaDemand } from '../limiter/replica-exchange';
import type { CounterDecision } from '../limiter/store';

/**
 * Dividing one limit among members by demand: proxies of a quota budget, replicas holding a lease,
 * regions sharing a global limit. Pure: numbers in, numbers out.
 */

/**
 * A member's demand counts this much more when a limit is divided: a member below an even part gets
 * room to grow until it is measured again, and a demand measured a little low does not starve it.
 */
export const DEMAND_HEADROOM = 1.25;

/**
 * Max-min fair division of `capacity` by demand: in increasing order of demand (with
 * DEMAND_HEADROOM), each member gets the smaller of its demand and an even split of what is left;
 * what nobody asked for is then spread evenly, so the parts always add up to `capacity`.
 * A member whose demand is unknown (Infinity) takes an even part. Returns parts in input order.
 */
export function divideCapacity(capacity: number, demands: readonly number[]): number[] {
  const n = demands.length;
  const shares = new Array<number>(n).fill(0);
  if (n === 0 || !(capacity > 0)) return shares;
  // Increasing demand; unknown (Infinity) last, in input order.
  const order = demands.map((_, i) => i).sort((a, b) => (demands[a] === demands[b] ? a - b : demands[a] < demands[b] ? -1 : 1));
  let left = capacity;
  for (let k = 0; k < n; k++) {
    const i = order[k];
    const wanted = Math.max(0, demands[i]) * DEMAND_HEADROOM;
    const share = Math.min(wanted, left / (n - k));
    shares[i] = share;
    left -= share;
  }
  if (left > 0) for (let i = 0; i < n; i++) shares[i] += left / n;
  return shares;
}

/** `capacity` divided between this member (`own` demand, first) and the others as the exchange last said. */
export function divideAmong(capacity: number, own: number, others: readonly ReplicaDemand[]): number[] {
  const demands = new Array<number>(others.length + 1);
  demands[0] = own;
  for (let i = 0; i < others.length; i++) demands[i + 1] = others[i].demand;
  return divideCapacity(capacity, demands);
}

/** This member's part of `capacity` (see divideAmong). */
export function ownPart(capacity: number, own: number, others: readonly ReplicaDemand[]): number {
  return divideAmong(capacity, own, others)[0];
}

/** What a counter's answer says is used of `capacity` (all of it when it denied). */
export function usedOf(decision: CounterDecision, capacity: number): number {
  return decision.allowed ? capacity - decision.remaining : capacity;
}

/** What a member's part of a shared counter is divided from (see partFraction). */
export interface PartInput {
  /** The limit per second (limit / window seconds). */
  readonly perSecond: number;
  /** The counter's capacity (a bucket's burst, else its limit) and how much of it the shared counter says is used. */
  readonly capacity: number;
  readonly used: number;
  /** Of `used`, what this member put there itself (its settled hits, in the shared counter's time). */
  readonly ownUsed: number;
  /** This member's demand just measured, and the one the others have seen (and divided by) since its last exchange. */
  readonly demand: number;
  readonly seenDemand: number;
  /** The other members' demands, as the exchange last said. */
  readonly others: readonly ReplicaDemand[];
}

/**
 * A member's part of a shared counter, as a fraction of it (0..1): the division by demand, capped by
 * what the counter says the others use. Divided by the smaller part of two demands of this member:
 * the one just measured, and the one the others have seen since the last exchange. The others hold
 * the parts they took from the latter until their next sync, and what they admit meanwhile is not in
 * the counter yet: a part taken from a higher demand alone could add up with theirs to more than the
 * limit, by as much as the others' whole parts when every member gets busy at once. So a part grows
 * one sync after the demand (once the others have made room), and shrinks at once.
 */
export function partFraction(input: PartInput): number {
  const { perSecond, capacity, used, ownUsed, demand, seenDemand, others } = input;
  const othersUsed = Math.max(0, used - ownUsed);
  const share = Math.min(ownPart(perSecond, demand, others), ownPart(perSecond, seenDemand, others));
  const byDemand = perSecond > 0 ? share / perSecond : 0;
  const byUsage = capacity > 0 ? Math.max(0, capacity - othersUsed) / capacity : 0;
  return Math.max(0, Math.min(1, byDemand, byUsage));
}
