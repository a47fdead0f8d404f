import { markedRule } from '../../limiter/lease-mark';
import type { ReplicaDemand, ReplicaExchange } from '../../limiter/replica-exchange';
import { counterIdentity, type CounterRequest, type Settlements, type Store } from '../../limiter/store';
import type { Clock } from '../../limiter/types';
import { measureDemand, newDemandMeter, publishedDemand, WINDOW_SLICES, WindowCount, type DemandMeter } from '../demand-meter';
import { usedOf } from '../division';
import { SettlementSequence, settlementAnswered, type SettlingPart } from '../settlement';
import { SharedPart } from '../shared-part';
import { fallbackFraction, heldByCutOff, regionFraction, regionMember, regionOf, scaledLimit, type GlobalFallback, type OtherRegion } from './region-division';

/**
 * Region parts: this replica's view of every `scope: global` counter it uses, kept in step with
 * the other regions through the global store, every `syncIntervalMs`, per counter:
 * - the hits admitted here since the last settlement are charged to the global counter once
 *   (Settlements on the global store, member `<region>/<replica>`, one seq each; a backlog after a
 *   cut-off is counted as settled in full but charged only for its hits of the last window, the
 *   older ones having slid out of the counter already);
 * - this replica's demand on the counter is exchanged with every replica of every region (one
 *   entry each, remembered ENTRY_MEMORY_MS, a heartbeat telling the live ones: ./region-division.ts);
 * - the regional counter's usage is read (the region's own hits, settled by its leases);
 * - the region's fraction of the limit is divided again (regionFraction).
 * The decision path asks only fractionOf() (no I/O): the region's leases then divide that part
 * among its replicas (./regional-store.ts scales the counter it hands them).
 *
 * A region that has not reached the global store for `ttlMs` (by the send time of the last sync
 * that went through) runs on its fallback (fallbackFraction) until a sync goes through again, then
 * keeps the fallback until the others have seen its demand once more.
 */

/** How long a member's entry stays in the global store after its last sync: how long a cut-off region is remembered. */
export const ENTRY_MEMORY_MS = 600_000;
/** Members a global counter's exchange and ledger record at most (every replica of every region). */
export const MAX_GLOBAL_MEMBERS = 256;
/** Region names read from the global store at most. */
const MAX_REGIONS = 256;
/** The kind of the documents naming the regions, in the global store. */
const REGIONS_DOCUMENT = 'regions';
/** Estimated bytes of one part beyond its key. */
const PART_BYTES = 2_048;

export interface RegionLimits {
  /** REGION_SYNC_INTERVAL, ms. */
  readonly syncIntervalMs: number;
  /** REGION_TTL, ms: a part holds this long after the last sync that went through was sent. */
  readonly ttlMs: number;
  readonly fallback: GlobalFallback;
  /** Global counters held at once; one beyond runs on the fallback fraction. */
  readonly maxParts: number;
  /** Estimated bytes of every part together; a counter beyond runs on the fallback fraction. */
  readonly maxBytes: number;
}

export interface RegionObserver {
  /** Hits of a rule this replica settled to the global counter (counted, charged: of the last window). */
  onSettled?(domain: string, statKey: string, counted: number): void;
  /** A sync call to the global store (or the regional check) that failed. */
  onSyncError?(domain: string, statKey: string, err: unknown): void;
}

export interface RegionSharesOptions {
  readonly region: string;
  readonly replicaId: string;
  /** The global store: its settlements and its exchange. */
  readonly settlements: Settlements;
  readonly exchange: ReplicaExchange;
  /** The region's own store (under the leases): read for the region's usage of a counter. */
  readonly regional: Store;
  readonly clock: Clock;
  readonly limits: RegionLimits;
  readonly observer?: RegionObserver;
}

/** One other region of a global counter as the views show it. */
export interface RegionSeen {
  readonly region: string;
  readonly demand: number;
  readonly members: number;
  /** Not a live member: cut off from the global store (or gone). */
  readonly cutOff: boolean;
  /** The fraction of the limit kept for it while cut off. */
  readonly held: number | undefined;
}

/** One global counter as the views show it (metrics, debug port, page). */
export interface RegionPartView {
  readonly domain: string;
  readonly rule: string;
  readonly counter: string;
  readonly limit: number;
  readonly windowMs: number;
  /** This region's fraction of the limit now (the fallback's when cut off). */
  readonly fraction: number;
  /** Hits per window this region may admit now. */
  readonly part: number;
  /** The region's demand (every live member's), hits per second; Infinity until measured. */
  readonly demand: number;
  /** The region's live members (replicas) at the last exchange. */
  readonly members: number;
  /** Seconds since the last sync that went through (Infinity: none yet). */
  readonly syncAgeSeconds: number;
  readonly cutOff: boolean;
  /** Hits this replica settled to the global counter, and those it holds not yet settled. */
  readonly settled: number;
  readonly pending: number;
  readonly regions: readonly RegionSeen[];
}

interface MemberBeat {
  beat: number;
  /** This replica's clock when the beat last changed. */
  changedMs: number;
  demand: number;
}

/** One global counter's region part: the engine's shared part (kind `region`) and what regions add to it. */
interface Part extends DemandMeter, SettlingPart {
  readonly id: string;
  readonly rule: string;
  readonly bytes: number;
  readonly share: SharedPart;
  /** The counter as last asked, hits 0, its rule's own limit. */
  counter: CounterRequest;
  fraction: number;
  /** When it was opened: a part that never synced is cut off ttlMs later. */
  readonly openedMs: number;
  /** Hits asked per sync interval over the last WINDOW_SLICES of them: a fall of demand counts once they have passed. */
  readonly askedRecent: WindowCount;
  /** The region's demand the last exchange that went through held (what the others divided by). */
  regionDemand: number;
  regionMembers: number;
  seenRegionDemand: number | undefined;
  /** Of the settlement not yet acknowledged, the hits it settles (its charge may be less: see sync()). */
  unsettledCounted: number;
  settled: number;
  /** Hits admitted here over about the last window (what of a backlog is still in the counter). */
  readonly recent: WindowCount;
  settledSentMs: number;
  exchangedSentMs: number;
  members: Map<string, MemberBeat>;
  cutOff: Map<string, { sinceMs: number; lastFraction: number }>;
  regions: readonly RegionSeen[];
  lastUsedMs: number;
  syncing: Promise<void> | undefined;
}

export class RegionShares {
  readonly region: string;
  private readonly member: string;
  private readonly settlements: Settlements;
  private readonly exchange: ReplicaExchange;
  private readonly seqs = new SettlementSequence();
  private readonly regional: Store;
  private readonly clock: Clock;
  private readonly limits: RegionLimits;
  private readonly observer: RegionObserver;
  private readonly parts = new Map<string, Part>();
  private readonly byCounter = new WeakMap<CounterRequest, Part>();
  private usedBytes = 0;
  private beat = 0;
  /** Regions the global store named at the last reading (this one included), at least 1. */
  private knownRegions = 1;
  /** The regions' names being read, while they are. */
  private reading: Promise<void> | undefined;

  constructor(options: RegionSharesOptions) {
    this.region = options.region;
    this.member = regionMember(options.region, options.replicaId);
    this.settlements = options.settlements;
    this.exchange = options.exchange;
    this.regional = options.regional;
    this.clock = options.clock;
    this.limits = options.limits;
    this.observer = options.observer ?? {};
  }

  /** The fraction of `c`'s limit this region decides with now (a counter beyond the caps: the fallback's). */
  fractionOf(c: CounterRequest): number {
    const now = this.clock.nowMs();
    const part = this.partOf(c, now);
    return part === undefined ? this.fallback() : this.effective(part, now);
  }

  /** Records `hits` asked on `c` (admitted or not) and whether the call charged them. */
  record(c: CounterRequest, charged: boolean): void {
    const now = this.clock.nowMs();
    const part = this.partOf(c, now);
    if (part === undefined) return;
    part.asked += c.hits;
    part.askedRecent.add(c.hits, now);
    part.lastUsedMs = now;
    if (charged && c.hits > 0) {
      part.pending += c.hits;
      part.recent.add(c.hits, now);
    }
  }

  /**
   * The background work, every syncIntervalMs: the regions are read, each part syncs, an unused
   * part (two windows, nothing pending) is dropped. Never rejects.
   */
  tick(): Promise<void> {
    const now = this.clock.nowMs();
    // Each part syncs on its own (one sync in flight per part): a slow global store delays none of the others' turns.
    const work: Promise<void>[] = [this.reading ?? this.readRegions()];
    for (const part of this.parts.values()) {
      const idle = now - part.lastUsedMs > Math.max(2 * part.counter.windowMs, 2 * this.limits.ttlMs) && part.pending === 0 && part.unsettled === undefined;
      if (idle) this.drop(part);
      else work.push(this.sync(part, now));
    }
    return Promise.all(work).then(() => undefined);
  }

  /** Settles what is pending (at shutdown); the entries lapse on their own. */
  async shutdown(): Promise<void> {
    const now = this.clock.nowMs();
    await Promise.all([...this.parts.values()].map((p) => this.sync(p, now)));
  }

  view(max: number): { readonly parts: readonly RegionPartView[]; readonly total: number; readonly regionsKnown: number } {
    const now = this.clock.nowMs();
    const parts: RegionPartView[] = [];
    for (const p of this.parts.values()) {
      if (parts.length >= max) break;
      const { domain, statKey } = markedRule(p.rule);
      const fraction = this.effective(p, now);
      const lastOk = Math.min(p.settledSentMs, p.exchangedSentMs);
      parts.push({
        domain,
        rule: statKey,
        counter: p.counter.key,
        limit: p.counter.limit,
        windowMs: p.counter.windowMs,
        fraction,
        part: scaledLimit(p.counter.limit, fraction),
        demand: p.regionDemand,
        members: p.regionMembers,
        syncAgeSeconds: Number.isFinite(lastOk) ? (now - lastOk) / 1000 : Infinity,
        cutOff: this.isCutOff(p, now),
        settled: p.settled,
        pending: p.pending + (p.unsettled === undefined ? 0 : p.unsettledCounted),
        regions: p.regions,
      });
    }
    return { parts, total: this.parts.size, regionsKnown: this.knownRegions };
  }

  /* ---------- deciding ---------- */

  private partOf(c: CounterRequest, now: number): Part | undefined {
    const known = this.byCounter.get(c);
    if (known !== undefined && this.parts.get(known.id) === known) return known;
    const id = counterIdentity(c);
    let part = this.parts.get(id);
    if (part === undefined) part = this.open(id, c, now);
    if (part !== undefined) this.byCounter.set(c, part);
    return part;
  }

  private open(id: string, c: CounterRequest, now: number): Part | undefined {
    const bytes = PART_BYTES + 2 * id.length;
    if (this.parts.size >= this.limits.maxParts || this.usedBytes + bytes > this.limits.maxBytes) return undefined;
    const { syncIntervalMs } = this.limits;
    const part: Part = {
      ...newDemandMeter(now),
      id,
      rule: c.lease ?? '',
      bytes,
      share: new SharedPart({
        kind: 'region',
        key: c.key,
        tag: c.tag === undefined || c.tag === c.key ? undefined : c.tag,
        member: this.member,
        exchange: this.exchange,
        ledger: this.settlements,
        maxMembers: MAX_GLOBAL_MEMBERS,
      }),
      counter: c.hits === 0 ? c : { ...c, hits: 0 },
      // Until the others have seen it: an even part among the regions known (as all cut off would take).
      fraction: fallbackFraction('split', this.knownRegions),
      openedMs: now,
      askedRecent: new WindowCount(syncIntervalMs),
      regionDemand: Infinity,
      regionMembers: 0,
      seenRegionDemand: undefined,
      pending: 0,
      epoch: 0,
      unsettled: undefined,
      unsettledCounted: 0,
      settled: 0,
      recent: new WindowCount(c.windowMs / WINDOW_SLICES),
      settledSentMs: -Infinity,
      exchangedSentMs: -Infinity,
      members: new Map(),
      cutOff: new Map(),
      regions: [],
      lastUsedMs: now,
      syncing: undefined,
    };
    this.parts.set(id, part);
    this.usedBytes += bytes;
    void this.sync(part, now);
    return part;
  }

  /** The fraction a part decides with at `now`: its own until ttlMs after the last sync that went through, then the fallback. */
  private effective(part: Part, now: number): number {
    return this.isCutOff(part, now) ? this.fallback() : part.fraction;
  }

  /** Cut off: no sync went through (settlement and exchange) for ttlMs, or none since the part was opened ttlMs ago. */
  private isCutOff(part: Part, now: number): boolean {
    return now > Math.max(part.openedMs, Math.min(part.settledSentMs, part.exchangedSentMs)) + this.limits.ttlMs;
  }

  private fallback(): number {
    return fallbackFraction(this.limits.fallback, this.knownRegions);
  }

  /* ---------- in the background ---------- */

  /** The regions' names, read once (at start, before the service serves: a new counter's first part is an even one among them). */
  start(): Promise<void> {
    return this.readRegions();
  }

  /** Publishes this region's name and reads every region's: how many share the fallback's `split`. */
  private readRegions(): Promise<void> {
    this.reading = (async () => {
      try {
        await this.exchange.put(REGIONS_DOCUMENT, this.member, this.region, ENTRY_MEMORY_MS);
        const names = await this.exchange.all(REGIONS_DOCUMENT, MAX_REGIONS * 4);
        this.knownRegions = Math.max(1, new Set([this.region, ...names]).size);
      } catch {
        // The parts' own syncs count the failure; the regions known stay as last read.
      } finally {
        this.reading = undefined;
      }
    })();
    return this.reading;
  }

  private sync(part: Part, now: number): Promise<void> {
    if (part.syncing !== undefined) return part.syncing;
    const c = part.counter;
    if (part.unsettled === undefined) {
      // A backlog (after a cut-off) is settled in full, charged for what of it is still in the window.
      part.unsettled = { seq: this.seqs.next(now), hits: Math.min(part.pending, part.recent.sum(now)) };
      part.unsettledCounted = part.pending;
      part.pending = 0;
      part.epoch += 1;
    }
    const settlement = part.unsettled;
    const counted = part.unsettledCounted;
    part.demand = this.demandOf(part, now);
    this.beat += 1;
    const { domain, statKey } = markedRule(part.rule);
    const failed = (err: unknown): undefined => {
      this.observer.onSyncError?.(domain, statKey, err);
      return undefined;
    };
    const settling = part.share.settle(settlement, c).catch(failed);
    const exchanging = part.share
      .exchange({ member: this.member, demand: publishedDemand(part.demand), admitted: 0, proxies: 1, beat: this.beat }, ENTRY_MEMORY_MS)!
      .catch(failed);
    const checking = this.regional.decide([{ ...c, hits: 0, lease: undefined, global: undefined }]).catch(failed);
    const wasCutOff = this.isCutOff(part, now);
    part.syncing = Promise.all([settling, exchanging, checking]).then(([settled, entries, regional]) => {
      part.syncing = undefined;
      const at = this.clock.nowMs();
      const capacity = c.burst ?? c.limit;
      let globalUsed: number | undefined;
      if (settled !== undefined && settlementAnswered(part, settlement, settled, this.seqs, at) === 'taken') {
        part.settled += counted;
        part.settledSentMs = now;
        if (counted > 0) this.observer.onSettled?.(domain, statKey, counted);
        globalUsed = usedOf(settled.decisions[0], capacity);
      }
      // Recorded among the members (a global counter holding MAX_GLOBAL_MEMBERS others has no room: then cut off).
      if (entries === undefined || !entries.some((e) => e.member === this.member)) return;
      // What the others divided by: this region's demand of the last exchange, unless it was cut off since.
      const seen = wasCutOff ? undefined : part.seenRegionDemand;
      this.exchanged(part, entries, now, at);
      part.seenRegionDemand = part.regionDemand;
      const others = this.othersOf(part, at);
      // Not divided yet (the others have not seen this region): no more than an even part among the regions using the counter.
      if (seen === undefined) part.fraction = Math.min(part.fraction, 1 / (1 + others.length));
      if (wasCutOff) part.fraction = Math.min(part.fraction, this.fallback());
      if (globalUsed === undefined || regional === undefined) return;
      const fraction = regionFraction({
        limit: capacity,
        windowMs: c.windowMs,
        demand: part.regionDemand,
        seenDemand: seen,
        others,
        globalUsed,
        regionUsed: usedOf(regional[0], capacity),
      });
      if (fraction !== undefined) part.fraction = fraction;
    });
    return part.syncing;
  }

  /** An exchange that recorded this replica: the members' heartbeats and the regions' demand. */
  private exchanged(part: Part, entries: readonly ReplicaDemand[], sentMs: number, at: number): void {
    part.exchangedSentMs = sentMs;
    const members = new Map<string, MemberBeat>();
    for (const e of entries) {
      const before = part.members.get(e.member);
      const beat = e.beat ?? 0;
      members.set(e.member, { beat, changedMs: before === undefined || before.beat !== beat ? at : before.changedMs, demand: e.demand });
    }
    part.members = members;
    let own = 0;
    let live = 0;
    for (const [name, m] of members) {
      if (regionOf(name) !== this.region) continue;
      if (name === this.member || at - m.changedMs <= this.limits.ttlMs) {
        own += m.demand;
        live += 1;
      }
    }
    part.regionDemand = own;
    part.regionMembers = live;
  }

  /** The other regions of a part: live ones by demand, cut-off ones by what they may hold. */
  private othersOf(part: Part, at: number): OtherRegion[] {
    const regions = new Map<string, { demand: number; lastDemand: number; members: number; live: boolean }>();
    for (const [name, m] of part.members) {
      const region = regionOf(name);
      if (region === this.region) continue;
      const r = regions.get(region) ?? { demand: 0, lastDemand: 0, members: 0, live: false };
      r.members += 1;
      r.lastDemand += m.demand;
      if (at - m.changedMs <= this.limits.ttlMs) {
        r.live = true;
        r.demand += m.demand;
      }
      regions.set(region, r);
    }
    const known = Math.max(this.knownRegions, regions.size + 1);
    const others: OtherRegion[] = [];
    const seen: RegionSeen[] = [];
    // About the fraction a region held when it was cut off: its last demand's among the regions' (at least an even part when it asked for more).
    const shareOf = (demands: readonly number[]): number => {
      const total = demands.reduce((a, b) => a + b, 0);
      return total > 0 && Number.isFinite(total) ? Math.min(1, demands[0] / total) : 1 / known;
    };
    const liveDemands = [...regions.values()].filter((r) => r.live).map((r) => r.demand);
    for (const [region, r] of regions) {
      if (r.live) {
        part.cutOff.delete(region);
        others.push({ demand: r.demand });
        seen.push({ region, demand: r.demand, members: r.members, cutOff: false, held: undefined });
        continue;
      }
      let cut = part.cutOff.get(region);
      if (cut === undefined) {
        cut = { sinceMs: at, lastFraction: shareOf([r.lastDemand, part.regionDemand, ...liveDemands]) };
        part.cutOff.set(region, cut);
      }
      const held = heldByCutOff({
        fallback: this.limits.fallback,
        lastFraction: cut.lastFraction,
        knownRegions: known,
        cutOffForMs: at - cut.sinceMs,
        ttlMs: this.limits.ttlMs,
      });
      others.push({ demand: 0, held });
      seen.push({ region, demand: r.demand, members: r.members, cutOff: true, held });
    }
    part.regions = seen;
    return others;
  }

  /**
   * Hits per second asked: the higher of the rate over the last two sync intervals (a rise counts at
   * once) and over the last WINDOW_SLICES (a quiet region's few calls, unevenly spread over short
   * intervals, do not make its demand, and its part, swing low between them). A fall counts once
   * those have passed: the hits of a region that goes quiet stay in the global counter longer than
   * that anyway (a window is at least 10 sync intervals).
   */
  private demandOf(part: Part, now: number): number {
    const short = measureDemand(part, now);
    const spanMs = Math.min(WINDOW_SLICES * this.limits.syncIntervalMs, now - part.openedMs);
    return spanMs > 0 ? Math.max(short, (part.askedRecent.sum(now) * 1000) / spanMs) : short;
  }

  private drop(part: Part): void {
    if (this.parts.get(part.id) !== part) return;
    this.parts.delete(part.id);
    this.usedBytes -= part.bytes;
  }
}
