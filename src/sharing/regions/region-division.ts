import { divideCapacity } from '../division';

/**
 * Regions: one limit (`scope: global`) divided among regions by demand, as leases divide a
 * region's part among its replicas. Pure: what the global store said in, a region's fraction of
 * the limit out; time is a parameter. The region parts (./region-shares.ts) feed it.
 *
 * Each replica publishes its own demand on a global limit to the global store under the member
 * name `<region>/<replica>`; a region's demand is the sum over its live members. A member is live
 * while its heartbeat (a number it changes at every sync) changed within REGION_TTL by the reader's
 * clock, so regions whose clocks differ still agree. A region none of whose members is live is cut
 * off: it runs on GLOBAL_FALLBACK, and the others keep room for what it may admit meanwhile
 * (heldByCutOff), so that the parts never add up past the limit under `split` and `deny`.
 */

/** What a region does once it has not reached the global store for REGION_TTL (GLOBAL_FALLBACK). */
export const GLOBAL_FALLBACKS = ['split', 'allow', 'deny'] as const;
export type GlobalFallback = (typeof GLOBAL_FALLBACKS)[number];

/** The separator of a member's region and replica (a region name has none). */
const MEMBER_SEPARATOR = '/';

/** A replica's member name in a global limit's demand exchange. */
export function regionMember(region: string, replica: string): string {
  return `${region}${MEMBER_SEPARATOR}${replica}`;
}

/** The region of a member name (the whole name when it has no separator). */
export function regionOf(member: string): string {
  const at = member.indexOf(MEMBER_SEPARATOR);
  return at < 0 ? member : member.slice(0, at);
}

/**
 * The fraction of the limit a region takes on its own when cut off from the global store:
 * `split` an even part among the regions it last knew of (so that, all cut off, they never add up
 * past the limit), `allow` the whole limit, `deny` nothing.
 */
export function fallbackFraction(fallback: GlobalFallback, knownRegions: number): number {
  if (fallback === 'allow') return 1;
  if (fallback === 'deny') return 0;
  return 1 / Math.max(1, knownRegions);
}

/**
 * The fraction the other regions keep for a cut-off region: it may hold its last part until it
 * notices (REGION_TTL after its last sync by its own clock, about when the others notice too), then
 * its fallback. `split`: the larger of the two, as long as the region is remembered. `deny`: its
 * last part for one more `ttlMs` after the others noticed, then nothing. `allow`: its last part
 * (the fallback's whole limit cannot be made room for; `allow` gives up the bound on purpose).
 */
export function heldByCutOff(options: {
  readonly fallback: GlobalFallback;
  readonly lastFraction: number;
  readonly knownRegions: number;
  /** How long ago this replica noticed, ms. */
  readonly cutOffForMs: number;
  readonly ttlMs: number;
}): number {
  const { fallback, lastFraction, knownRegions, cutOffForMs, ttlMs } = options;
  if (fallback === 'split') return Math.max(lastFraction, fallbackFraction('split', knownRegions));
  if (fallback === 'deny') return cutOffForMs < ttlMs ? lastFraction : 0;
  return lastFraction;
}

/** One other region as this replica divides: its demand and, when cut off, what it holds. */
export interface OtherRegion {
  /** Hits per second its live members ask; Infinity while one is not measured yet. */
  readonly demand: number;
  /** Set for a cut-off region: the fraction of the limit kept for it (heldByCutOff); its demand is then ignored. */
  readonly held?: number;
}

export interface RegionDivision {
  /** Requests per window (the rule's limit) and the window, ms. */
  readonly limit: number;
  readonly windowMs: number;
  /** This region's demand as just measured (the sum over its live members), hits per second. */
  readonly demand: number;
  /**
   * This region's demand as the others last divided by (the previous sync's), or undefined when
   * they may not have seen this region yet (new, or back from a cut-off).
   */
  readonly seenDemand: number | undefined;
  readonly others: readonly OtherRegion[];
  /** The global counter's usage (hits of the current window, every region's settlements). */
  readonly globalUsed: number;
  /** This region's own usage as its regional counter says: what of globalUsed is its own, and more (not settled yet). */
  readonly regionUsed: number;
}

/**
 * This region's fraction of the limit (0..1), or undefined while the others have not seen its
 * demand (then it keeps what it holds). Divided by demand among the live regions, within what the
 * cut-off ones hold, from the smaller of the demand just measured and the one the others divided
 * by (a part grows one sync after the demand, once the others have made room, and shrinks at once),
 * and capped by what the global counter says the others use (their hits stay in the counter until
 * they slide out of its window, whatever the new division says).
 */
export function regionFraction(d: RegionDivision): number | undefined {
  if (d.seenDemand === undefined) return undefined;
  let held = 0;
  const demands: number[] = [];
  for (const o of d.others) {
    if (o.held === undefined) demands.push(o.demand);
    else held += o.held;
  }
  const perSecond = d.limit / (d.windowMs / 1000);
  const capacity = Math.max(0, 1 - held) * perSecond;
  const share = Math.min(divideCapacity(capacity, [d.demand, ...demands])[0], divideCapacity(capacity, [d.seenDemand, ...demands])[0]);
  const byDemand = perSecond > 0 ? share / perSecond : 0;
  const othersUsed = Math.max(0, d.globalUsed - d.regionUsed);
  const byUsage = d.limit > 0 ? Math.max(0, d.limit - othersUsed) / d.limit : 0;
  return Math.max(0, Math.min(1, byDemand, byUsage));
}

/** `limit` scaled to `fraction`, rounded down (a part is never exceeded). */
export function scaledLimit(limit: number, fraction: number): number {
  return Math.floor(fraction * limit + 1e-9);
}
