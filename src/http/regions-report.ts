import type { RegionPartView } from '../sharing/regions/region-shares';

/** Global limits shown on the live page at most (every one is in /regions). */
export const REGIONS_SHOWN = 50;

/** One global limit as the live page draws it (snake_case, as the page's other JSON). */
export interface RegionReport {
  readonly domain: string;
  readonly rule: string;
  readonly counter: string;
  readonly limit: number;
  readonly window_s: number;
  readonly region: string;
  readonly part: number;
  readonly cut_off: boolean;
  readonly sync_age_s: number | null;
  readonly regions: readonly { readonly region: string; readonly demand: number | null; readonly members: number; readonly state: string }[];
}

/** This region's parts of the global limits, with every region seen, for the live page. */
export function regionsReport(region: string, parts: readonly RegionPartView[]): RegionReport[] {
  return parts.slice(0, REGIONS_SHOWN).map((p) => ({
    domain: p.domain,
    rule: p.rule,
    counter: p.counter,
    limit: p.limit,
    window_s: p.windowMs / 1000,
    region,
    part: p.part,
    cut_off: p.cutOff,
    sync_age_s: Number.isFinite(p.syncAgeSeconds) ? p.syncAgeSeconds : null,
    regions: [
      {
        region: `${region} (this region)`,
        demand: Number.isFinite(p.demand) ? p.demand : null,
        members: p.members,
        state: p.cutOff ? 'cut off: fallback' : 'live',
      },
      ...p.regions.map((r) => ({
        region: r.region,
        demand: Number.isFinite(r.demand) ? r.demand : null,
        members: r.members,
        state: r.cutOff ? `cut off: ${Math.round((r.held ?? 0) * p.limit)} per window kept for it` : 'live',
      })),
    ],
  }));
}
