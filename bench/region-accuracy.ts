import { loadavg } from 'node:os';
import {
  admissions,
  countBetween,
  drivePaced,
  latencyOf,
  phasesOf,
  recoveryMs,
  sideBySide,
  timedOut,
  worstSpan,
  type CallRecord,
  type DemandStep,
} from './lease-accuracy';
import { fmt, markdownTable } from './markdown';
import { startRegionsWorld } from './regions-world';
import { encodeRateLimitRequest, grpcFrame } from './rls-codec';
import { startRedis, startService, withConfigDir, type RedisProcess, type Target } from './targets';

/**
 * Accuracy of global limits (`scope: global`) across regions, measured on real processes: three
 * regions, each its own redis-server and two services (WORKERS=1, so each process is one replica),
 * the global redis-server reached from each region through a proxy that adds REGION_DELAY_MS each
 * way (./regions-world.ts). This harness calls every replica at a paced rate (a region's rate split
 * evenly between its two), which it changes at a run's event, and notes when each call was
 * admitted. Figures per run:
 * - the most hits admitted over every region in any span of one window, against the bound of
 *   regions: L x (1 + REGION_EPSILON) + L x (REGION_SYNC_INTERVAL + one-way delay + LEASE_SYNC_INTERVAL) / W;
 * - what each region admitted per second, and all of them together as a share of the limit's rate;
 * - after a shift of demand, how long until the region that takes it first admits RISE_SHARE of what
 *   it can get (its ask capped by what the limit leaves it once the others have settled) over one
 *   region sync (reachMs), and from when on it admits that much on average (riseMs), in region syncs.
 *
 * An admission is dated at the middle of its call, as the lease runs date theirs (./lease-accuracy.ts).
 */

/** The regions of every run, in the order their rates are given. */
export const REGIONS = ['eu', 'us', 'ap'] as const;
export const REPLICAS_PER_REGION = 2;
/** The limit's rate in every run, hits per second: L = 400 per 10 s window, 2,400 per 60 s. Low: three regions of two processes share two cores. */
export const REGION_RATE = 40;
/** The bound's relative part under steady demand (README, Regions). */
export const REGION_EPSILON = 0.02;
/** REGION_SYNC_INTERVAL of every replica, ms. */
export const REGION_SYNC_MS = 1_000;
/** LEASE_SYNC_INTERVAL of every replica, ms. */
export const LEASE_SYNC_MS = 250;
/** The one-way delay between each region and the global store, ms. */
export const REGION_DELAY_MS = 100;
/** The region taking the demand "admits what it can get" at this share of it. */
export const RISE_SHARE = 0.95;
/** Seconds after the event whose admissions the results list, second by second. */
const RISE_SERIES_S = 15;

export type RegionRunName = 'uneven' | 'shift';

export interface RegionRunSpec {
  readonly name: RegionRunName;
  readonly description: string;
  readonly windowMs: number;
  /** Hits per window. */
  readonly limit: number;
  /** Calls from 0 to warmMs are not measured (the regions' first syncs, the window's first fill). */
  readonly warmMs: number;
  /** When the demand shifts (absent: steady all along). */
  readonly eventMs?: number;
  readonly endMs: number;
  /** Calls per second to each region (in REGIONS' order), split evenly between its replicas. */
  readonly steps: readonly DemandStep[];
  /** The region (an index of REGIONS) that takes the demand at eventMs: the one whose rise is timed. */
  readonly rising?: number;
}

export interface RegionRunResult {
  readonly name: RegionRunName;
  readonly description: string;
  readonly windowMs: number;
  readonly limit: number;
  readonly regionSyncMs: number;
  readonly leaseSyncMs: number;
  readonly delayMs: number;
  readonly measuredMs: number;
  /** Demand (calls/s) of each region before the event, and after it when there is one. */
  readonly demand: readonly (readonly number[])[];
  /** Admitted per second by each region over the measured phase before the event, and after it (from the event + one window). */
  readonly admittedPerS: readonly (readonly number[])[];
  readonly calls: number;
  /** Calls without an answer (grpc error, timeout). */
  readonly errors: number;
  /** Of the errors, calls given up after CALL_TIMEOUT_MS without an answer. */
  readonly timeouts: number;
  /** Admitted over every region in the measured phase / (the limit's rate x its length). */
  readonly ofLimit: number;
  /** The most admitted over every region in any span of one window within the measured phase. */
  readonly worstSpan: number;
  readonly worstSpanAtMs: number;
  /** The same from the run's start (the first syncs and the window's first fill included). */
  readonly worstSpanFromStart: number;
  /** L x (1 + REGION_EPSILON) + L x (regionSyncMs + delayMs + leaseSyncMs) / W. */
  readonly bound: number;
  /**
   * What the rising region can get after the event, hits per second: its ask, capped by what the
   * limit's rate leaves it once the others have settled (the limit's rate less what the others
   * admitted from one window after the event to the end).
   */
  readonly canGetPerS?: number;
  /** ms from the event until the rising region first admits RISE_SHARE of canGetPerS in one region sync (reachMs); null when it never did; absent without event. */
  readonly reachMs?: number | null;
  /** reachMs in region syncs. */
  readonly reachSyncs?: number | null;
  /**
   * ms from the event until the rising region admits RISE_SHARE of canGetPerS: when its shortfall
   * against that rate since the event was largest (recoveryMs in ./lease-accuracy.ts); null when
   * still at its largest in the run's last region sync; absent without event.
   */
  readonly riseMs?: number | null;
  /** riseMs in region syncs. */
  readonly riseSyncs?: number | null;
  /** What the rising region admitted in each second after the event. */
  readonly riseSeries?: readonly number[];
  readonly latencyP99Ms: number;
  readonly latencyMaxMs: number;
  /** Load average (1 min) of the machine when the run began, and at its end. */
  readonly loadAverageStart: number;
  readonly loadAverage: number;
}

export interface RegionAccuracyResult {
  readonly quick: boolean;
  readonly rate: number;
  readonly regions: readonly string[];
  readonly replicasPerRegion: number;
  readonly regionSyncMs: number;
  readonly leaseSyncMs: number;
  readonly delayMs: number;
  readonly runs: readonly RegionRunResult[];
}

/**
 * The runs: for each window (10 s, and 60 s unless quick), steady uneven demand (1.5, 0.5 and 0.1
 * times the limit's rate) for three windows, and a shift (1.5, 0.1 and 0.5, then 0.1, 1.5 and 0.5:
 * the busiest region goes quiet and a quiet one takes its demand) one window before the event, two
 * after it. A warm-up of two windows first. Quick runs: the 10 s window only, one window of
 * warm-up, one of uneven demand.
 */
export function regionRunSpecs(quick: boolean): RegionRunSpec[] {
  const r = REGION_RATE;
  const specs: RegionRunSpec[] = [];
  for (const windowMs of quick ? [10_000] : [10_000, 60_000]) {
    const warmMs = (quick ? 1 : 2) * windowMs;
    const limit = (r * windowMs) / 1000;
    const eventMs = warmMs + windowMs;
    specs.push(
      {
        name: 'uneven',
        description: 'eu, us and ap ask 1.5, 0.5 and 0.1 x the limit’s rate',
        windowMs,
        limit,
        warmMs,
        endMs: warmMs + (quick ? 1 : 3) * windowMs,
        steps: [{ fromMs: 0, perSecond: [1.5 * r, 0.5 * r, 0.1 * r] }],
      },
      {
        name: 'shift',
        description: 'eu, us and ap ask 1.5, 0.1 and 0.5 x the limit’s rate; then eu 0.1 and us 1.5',
        windowMs,
        limit,
        warmMs,
        eventMs,
        endMs: eventMs + 2 * windowMs,
        rising: 1,
        steps: [
          { fromMs: 0, perSecond: [1.5 * r, 0.1 * r, 0.5 * r] },
          { fromMs: eventMs, perSecond: [0.1 * r, 1.5 * r, 0.5 * r] },
        ],
      },
    );
  }
  return specs;
}

/** Each replica's steps: its region's rate divided among the region's replicas, replicas region by region. */
export function replicaSteps(steps: readonly DemandStep[]): DemandStep[] {
  return steps.map((s) => ({
    fromMs: s.fromMs,
    perSecond: s.perSecond.flatMap((rate) => Array<number>(REPLICAS_PER_REGION).fill(rate / REPLICAS_PER_REGION)),
  }));
}

/** The region (an index of REGIONS) of a replica of replicaSteps' order. */
export const regionOfReplica = (replica: number): number => Math.floor(replica / REPLICAS_PER_REGION);

const DOMAIN = 'region-accuracy';
/** The key of the global rule of a window. */
const keyOf = (windowMs: number): string => `global_${windowMs / 1000}s`;

/** The rules of every window the runs use: one global sliding window each, at REGION_RATE. */
export function regionConfigYaml(windows: readonly number[]): string {
  const rules = [...new Set(windows)].map((w) => {
    const seconds = w / 1000;
    const unit = seconds % 60 === 0 ? `unit: minute, unit_multiplier: ${seconds / 60}` : `unit: second, unit_multiplier: ${seconds}`;
    return `  - key: ${keyOf(w)}\n    rate_limit: {${unit}, requests_per_unit: ${(REGION_RATE * w) / 1000}, algorithm: sliding_window, scope: global}\n`;
  });
  return `domain: ${DOMAIN}\ndescriptors:\n${rules.join('')}`;
}

/**
 * When a region first admits `share` of `perSecond` over a span of `spanMs`: the first admission
 * after `eventMs` (and by `endMs`) that ends a span (t - spanMs, t] holding that many admissions of
 * `times` (sorted) made since the event; ms after the event, null when none does.
 */
export function reachMs(times: readonly number[], perSecond: number, eventMs: number, endMs: number, share: number, spanMs: number): number | null {
  const needed = (share * perSecond * spanMs) / 1000;
  if (!(needed > 0)) return 0;
  let oldest = 0;
  while (oldest < times.length && times[oldest] < eventMs) oldest++;
  for (let i = oldest; i < times.length && times[i] <= endMs; i++) {
    while (times[oldest] <= times[i] - spanMs) oldest++;
    if (i - oldest + 1 >= needed) return times[i] - eventMs;
  }
  return null;
}

/** Admission dates of the replicas of `region` (every region when undefined), sorted. */
function admittedOf(calls: readonly CallRecord[], region?: number): number[] {
  return admissions(region === undefined ? calls : calls.filter((c) => regionOfReplica(c.replica) === region));
}

/** The bound of a window: L x (1 + REGION_EPSILON) + L x (sync + delay + lease sync) / W. */
export function regionBound(
  limit: number,
  windowMs: number,
  o: { readonly regionSyncMs: number; readonly delayMs: number; readonly leaseSyncMs: number },
): number {
  return limit * (1 + REGION_EPSILON) + (limit * (o.regionSyncMs + o.delayMs + o.leaseSyncMs)) / windowMs;
}

/** Scores one run's calls (pure: exported for the tests); `loadAverageStart` as it was when the run began. */
export function scoreRegionRun(spec: RegionRunSpec, calls: readonly CallRecord[], loadAverageStart = NaN): RegionRunResult {
  const perSecond = (spec.limit * 1000) / spec.windowMs;
  const all = admittedOf(calls);
  const worst = worstSpan(all, spec.windowMs, spec.warmMs, spec.endMs);
  const measuredMs = spec.endMs - spec.warmMs;
  const byRegion = REGIONS.map((_, i) => admittedOf(calls, i));
  const rateOf = (region: number, fromMs: number, toMs: number): number =>
    toMs > fromMs ? (countBetween(byRegion[region], fromMs, toMs) * 1000) / (toMs - fromMs) : NaN;
  const phases = phasesOf(spec);
  const settings = { regionSyncMs: REGION_SYNC_MS, leaseSyncMs: LEASE_SYNC_MS, delayMs: REGION_DELAY_MS };
  let rise: Pick<RegionRunResult, 'canGetPerS' | 'reachMs' | 'reachSyncs' | 'riseMs' | 'riseSyncs' | 'riseSeries'> = {};
  if (spec.eventMs !== undefined && spec.rising !== undefined) {
    const eventMs = spec.eventMs;
    const rising = spec.rising;
    const own = byRegion[rising];
    const [settledFrom, settledTo] = phases[phases.length - 1];
    const othersPerS = REGIONS.reduce((sum, _, i) => (i === rising ? sum : sum + rateOf(i, settledFrom, settledTo)), 0);
    const canGetPerS = Math.min(spec.steps[spec.steps.length - 1].perSecond[rising], Math.max(0, perSecond - othersPerS));
    const ms = recoveryMs(own, canGetPerS, eventMs, spec.endMs, RISE_SHARE, REGION_SYNC_MS);
    const reach = reachMs(own, canGetPerS, eventMs, spec.endMs, RISE_SHARE, REGION_SYNC_MS);
    rise = {
      canGetPerS,
      reachMs: reach,
      reachSyncs: reach === null ? null : reach / REGION_SYNC_MS,
      riseMs: ms,
      riseSyncs: ms === null ? null : ms / REGION_SYNC_MS,
      riseSeries: Array.from({ length: RISE_SERIES_S }, (_, s) => countBetween(own, eventMs + 1000 * s, eventMs + 1000 * (s + 1))),
    };
  }
  return {
    name: spec.name,
    description: spec.description,
    windowMs: spec.windowMs,
    limit: spec.limit,
    ...settings,
    measuredMs,
    demand: spec.steps.map((s) => s.perSecond),
    admittedPerS: phases.map(([a, b]) => REGIONS.map((_, i) => rateOf(i, a, b))),
    calls: calls.length,
    errors: calls.filter((c) => c.code === undefined).length,
    timeouts: calls.filter(timedOut).length,
    ofLimit: countBetween(all, spec.warmMs, spec.endMs) / ((perSecond * measuredMs) / 1000),
    worstSpan: worst.count,
    worstSpanAtMs: worst.atMs,
    worstSpanFromStart: worstSpan(all, spec.windowMs, 0, spec.endMs).count,
    bound: regionBound(spec.limit, spec.windowMs, settings),
    ...rise,
    ...latencyOf(calls),
    loadAverageStart,
    loadAverage: loadavg()[0],
  };
}

/** The environment of every replica of the runs: the syncs the bound is stated for. */
const REPLICA_ENV: Readonly<Record<string, string>> = Object.freeze({
  REGION_SYNC_INTERVAL: `${REGION_SYNC_MS}ms`,
  LEASE_SYNC_INTERVAL: `${LEASE_SYNC_MS}ms`,
});

const frameOf = (key: string, value: string): Buffer => grpcFrame(encodeRateLimitRequest(DOMAIN, [{ entries: [[key, value]] }]));

/**
 * One run: a world of its own (three regions of two fresh services, config from `configDir`:
 * regionConfigYaml, and `env` beside REPLICA_ENV), driven, then stopped; its calls.
 */
export async function driveRegionRun(spec: RegionRunSpec, configDir: string, env: Readonly<Record<string, string>> = {}): Promise<{ calls: CallRecord[] }> {
  const probeFrame = frameOf('probe', 'p');
  const world = await startRegionsWorld<RedisProcess, Target>(
    { regions: REGIONS, replicasPerRegion: REPLICAS_PER_REGION, delayMs: REGION_DELAY_MS, env: { ...REPLICA_ENV, ...env } },
    {
      startRedis: () => startRedis(),
      startReplica: (_region, _index, env, redis) =>
        startService({ backend: 'redis', transport: 'http2', configDir, redisPort: redis.port, probeFrame, env, workers: 1 }),
    },
  );
  try {
    return await drivePaced({ steps: replicaSteps(spec.steps), endMs: spec.endMs, targets: world.replicas(), frame: frameOf(keyOf(spec.windowMs), spec.name) });
  } finally {
    await world.stop();
  }
}

/** Region syncs, one decimal, or 'not within the run'. */
const inSyncs = (n: number | null | undefined): string => (n === null || n === undefined ? 'not within the run' : fmt(n, 1));
const syncs = (n: number | null | undefined): string => (n === null || n === undefined ? 'not within the run' : `${fmt(n, 1)} syncs`);

/** Every run of regionRunSpecs(quick), one after the other; a run's progress lines go to stderr. */
export async function runRegionAccuracy(opts: { readonly quick: boolean }): Promise<RegionAccuracyResult> {
  const specs = regionRunSpecs(opts.quick);
  const runs: RegionRunResult[] = [];
  await withConfigDir('region-accuracy', regionConfigYaml(specs.map((s) => s.windowMs)), async (configDir) => {
    for (const spec of specs) {
      process.stderr.write(`regions ${spec.name}, W = ${spec.windowMs / 1000} s: ${(spec.endMs / 1000).toFixed(0)} s of calls...\n`);
      const loadAverageStart = loadavg()[0];
      const { calls } = await driveRegionRun(spec, configDir);
      const r = scoreRegionRun(spec, calls, loadAverageStart);
      runs.push(r);
      const rise =
        r.riseMs === undefined
          ? ''
          : `, ${fmt(100 * RISE_SHARE)}% of what it can get (${fmt(r.canGetPerS, 1)}/s) reached after ${syncs(r.reachSyncs)}, held from ${syncs(r.riseSyncs)}`;
      process.stderr.write(
        `  worst span ${fmt(r.worstSpan)} of L = ${fmt(r.limit)} (bound ${fmt(r.bound, 1)}), admitted ${fmt(100 * r.ofLimit, 1)}% of the limit${rise}, ` +
          `${r.errors} errors, load average ${fmt(r.loadAverageStart, 2)} → ${fmt(r.loadAverage, 2)}\n`,
      );
    }
  });
  return {
    quick: opts.quick,
    rate: REGION_RATE,
    regions: REGIONS,
    replicasPerRegion: REPLICAS_PER_REGION,
    regionSyncMs: REGION_SYNC_MS,
    leaseSyncMs: LEASE_SYNC_MS,
    delayMs: REGION_DELAY_MS,
    runs,
  };
}

/** The regions' table: one row per run. */
export function regionAccuracyTable(result: RegionAccuracyResult): string {
  const rows = result.runs.map((r) => [
    r.name,
    `${r.windowMs / 1000} s`,
    fmt(r.limit),
    r.demand.map((d) => sideBySide(d)).join(' → '),
    r.admittedPerS.map((d) => sideBySide(d, 1)).join(' → '),
    `${fmt(100 * r.ofLimit, 1)}%`,
    `${fmt(r.worstSpan)} (${fmt(r.worstSpan / r.limit, 3)} x L)`,
    `${fmt(r.bound)} (${fmt(r.bound / r.limit, 3)} x L)`,
    r.worstSpan <= r.bound ? 'yes' : '**no**',
    r.riseMs === undefined ? '-' : `${inSyncs(r.reachSyncs)} / ${inSyncs(r.riseSyncs)} syncs (of ${fmt(r.canGetPerS, 1)}/s)`,
    `${fmt(r.latencyP99Ms, 1)} / ${fmt(r.latencyMaxMs, 0)}`,
    fmt(r.errors),
    `${fmt(r.loadAverageStart, 2)} → ${fmt(r.loadAverage, 2)}`,
  ]);
  return markdownTable(
    [
      'region run',
      'W',
      'L',
      'calls/s asked, eu : us : ap',
      'admitted/s, eu : us : ap',
      'admitted of the limit',
      'most admitted in any W',
      'bound',
      'within',
      `${fmt(100 * RISE_SHARE)}% of what it can get: reached / held from`,
      'latency p99 / max ms',
      'errors',
      'load average',
    ],
    rows,
    ['l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'l', 'r', 'r', 'r', 'r'],
  );
}

/** A paragraph saying what the regions' table shows, and the table. */
export function regionAccuracyBlock(result: RegionAccuracyResult): string {
  return (
    `Regions (\`scope: global\`, sliding window): ${result.regions.length} regions (${result.regions.join(', ')}), each its own redis-server and ` +
    `${result.replicasPerRegion} replicas (separate processes, \`WORKERS=1\`), the global redis-server reached through a proxy adding ` +
    `${fmt(result.delayMs)} ms each way; the limit's rate ${fmt(result.rate)} hits/s, \`REGION_SYNC_INTERVAL\` ${fmt(result.regionSyncMs)} ms, ` +
    `\`LEASE_SYNC_INTERVAL\` ${fmt(result.leaseSyncMs)} ms; *bound*: L x ${1 + REGION_EPSILON} + L x (region sync + one-way delay + lease sync) / W, ` +
    `over spans of W after a warm-up of ${result.quick ? 'one window' : 'two windows'}; ` +
    `*admitted/s* before the event, then from one window after it; *what it can get*: the rising region's ask, capped by the limit's rate ` +
    `less what the others admitted from one window after the shift; *reached*: region syncs from the shift until it first admits ${fmt(100 * RISE_SHARE)}% ` +
    `of that in one region sync; *held from*: region syncs from the shift until it admits, from then on, at least ${fmt(100 * RISE_SHARE)}% of it on average ` +
    `(when its shortfall against that rate since the shift was largest)` +
    `${result.quick ? ' (quick run: 10 s windows, short phases)' : ''}:\n\n` +
    regionAccuracyTable(result)
  );
}
