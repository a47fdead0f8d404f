import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  bucket,
  chargeBucket,
  EMPTY_BUCKET,
  fixedWindow,
  slidingLog,
  slidingWindow,
  subWindowCounter,
  windowStart,
  type BucketState,
  type LogEntry,
} from '../src/limiter/algorithms';
import { leaseAccuracyBlock, runLeaseAccuracy, type LeaseAccuracyResult } from './lease-accuracy';
import { fmt, markdownTable, replaceBetweenMarkers } from './markdown';
import { regionAccuracyBlock, runRegionAccuracy, type RegionAccuracyResult } from './region-accuracy';
import { isoDate, repoRoot } from './paths';
import { createRandom, type Random } from './prng';
import { barChartSvg } from './svg';

/**
 * Accuracy of the counting algorithms, measured by replaying synthetic traces through the pure
 * functions of src/limiter/algorithms.ts (the arithmetic every store implements) on a simulated clock.
 *
 * The reference for each decision is evaluated on the history that the algorithm under test has
 * itself admitted: "given what this limiter let through so far, would the exact limiter admit this
 * request?" For the windows the exact limiter is the sliding log; for the buckets it is the bucket's
 * own definition (tokens refilled continuously, or a queue draining continuously), restated here in
 * exact integers. Judging every decision against the same history keeps one early disagreement from
 * being counted again on every later request (two independent limiters drift apart after their first
 * different answer and would then disagree for reasons unrelated to the decision at hand). See
 * docs/performance.md for the full definitions.
 *
 * `make accuracy` then measures leased limits across two replicas on real processes
 * (bench/lease-accuracy.ts; `--no-leases` to skip them) and global limits across three regions
 * (bench/region-accuracy.ts, several minutes; `--no-regions` to skip them), `--quick` for short
 * runs of both, and writes the tables together.
 */

/** One algorithm with its options, as a rule would configure it. */
export interface Mode {
  /** Row label, e.g. "sliding_window sub_windows=10 strict". */
  readonly name: string;
  readonly counter: (limit: number, windowMs: number) => CounterSimulation;
  /** What a decision is judged against, given the history this mode admitted. */
  readonly reference: (limit: number, windowMs: number) => ReferenceLimiter;
}

/** The exact limiter a decision is judged against: `admits` before `add` of the same request. */
interface ReferenceLimiter {
  admits(t: number, hits: number): boolean;
  add(t: number, hits: number): void;
}

export type Scale = 'tiny' | 'full';

export interface AccuracyOptions {
  readonly scale: Scale;
  readonly seed: number;
}

/** How one algorithm did on one scenario. Percentages are of all requests in the scenario. */
export interface AlgorithmAccuracy {
  readonly requests: number;
  readonly admitted: number;
  /** Admitted although the exact limiter would have denied (windows: the count of the last W plus h exceeded L). */
  readonly wronglyAdmitted: number;
  /** Denied although the exact limiter would have admitted. */
  readonly wronglyDenied: number;
  readonly wronglyAdmittedPct: number;
  readonly wronglyDeniedPct: number;
  /** Mean of |estimate - exact| / exact over requests whose exact count of the last W was positive (windows only; NaN for buckets). */
  readonly meanRateError: number;
  /** Largest number of hits admitted in any interval of length W, over all sources. */
  readonly worstWindowAdmitted: number;
  /** worstWindowAdmitted / L. */
  readonly worstWindowRatio: number;
}

export interface ScenarioAccuracy {
  readonly name: string;
  readonly description: string;
  readonly limit: number;
  readonly windowMs: number;
  readonly sources: number;
  /** By mode name (see MODES). */
  readonly algorithms: Readonly<Record<string, AlgorithmAccuracy>>;
}

export interface AccuracyResult {
  readonly seed: number;
  readonly scale: Scale;
  readonly scenarios: readonly ScenarioAccuracy[];
}

/** Offers one request of `hits` from `source` at `t` (ms, non-decreasing per source); true when admitted. */
export type Offer = (source: number, t: number, hits: number) => boolean;

/** A traffic shape. `drive` may react to decisions (closed loop), so it is replayed once per algorithm. */
export interface Scenario {
  readonly name: string;
  readonly description: string;
  readonly limit: number;
  readonly windowMs: number;
  readonly sources: number;
  drive(random: Random, offer: Offer): void;
}

/** What the limiter reports for one request: its decision and the rate it believed it saw. */
interface Outcome {
  readonly allowed: boolean;
  /** The algorithm's estimate of the hits in the last W, before this request (NaN: a bucket estimates no window). */
  readonly estimate: number;
}

/** One counter of one algorithm, with exactly the state a store would keep. */
interface CounterSimulation {
  offer(t: number, hits: number): Outcome;
}

function slidingWindowCounter(limit: number, windowMs: number): CounterSimulation {
  let index = Number.NaN;
  let current = 0;
  let previous = 0;
  return {
    offer(t, hits) {
      const n = Math.floor(t / windowMs);
      if (n !== index) {
        previous = n === index + 1 ? current : 0;
        current = 0;
        index = n;
      }
      const toEnd = windowStart(t, windowMs) + windowMs - t;
      const estimate = current + (previous * toEnd) / windowMs;
      const v = slidingWindow({ current, previous, nowMs: t, windowMs, limit, hits });
      if (v.allowed) current += hits;
      return { allowed: v.allowed, estimate };
    },
  };
}

function fixedWindowCounter(limit: number, windowMs: number): CounterSimulation {
  let index = Number.NaN;
  let count = 0;
  return {
    offer(t, hits) {
      const n = Math.floor(t / windowMs);
      if (n !== index) {
        count = 0;
        index = n;
      }
      const estimate = count;
      const v = fixedWindow({ count, nowMs: t, windowMs, limit, hits });
      if (v.allowed) count += hits;
      return { allowed: v.allowed, estimate };
    },
  };
}

function slidingLogCounter(limit: number, windowMs: number): CounterSimulation {
  const entries: LogEntry[] = [];
  let count = 0;
  return {
    offer(t, hits) {
      // A store drops expired records too; pruning keeps each call O(L).
      while (entries.length > 0 && entries[0].atMs <= t - windowMs) count -= entries.shift()!.hits;
      const estimate = count;
      const v = slidingLog({ entries, nowMs: t, windowMs, limit, hits });
      if (v.allowed && hits > 0) {
        entries.push({ atMs: t, hits });
        count += hits;
      }
      return { allowed: v.allowed, estimate };
    },
  };
}

function subWindowSimulation(k: number, strict: boolean): (limit: number, windowMs: number) => CounterSimulation {
  return (limit, windowMs) => {
    const s = windowMs / k;
    let index = Number.NaN;
    let counts = new Array<number>(k + 1).fill(0); // sub-windows index - k .. index
    return {
      offer(t, hits) {
        const n = Math.floor(t / s);
        if (n !== index) {
          const shift = Number.isNaN(index) ? k + 1 : n - index;
          counts = counts.map((_, i) => (i + shift <= k ? counts[i + shift] : 0));
          index = n;
        }
        const toEnd = windowStart(t, s) + s - t;
        let estimate = counts[0] * (strict ? 1 : toEnd / s);
        for (let i = 1; i <= k; i++) estimate += counts[i];
        const v = subWindowCounter({ counts, strict, nowMs: t, windowMs, limit, hits });
        if (v.allowed) counts[k] += hits;
        return { allowed: v.allowed, estimate };
      },
    };
  };
}

function bucketSimulation(burstOf: (limit: number) => number): (limit: number, windowMs: number) => CounterSimulation {
  return (limit, windowMs) => {
    const burst = burstOf(limit);
    let state: BucketState = EMPTY_BUCKET;
    return {
      offer(t, hits) {
        const v = bucket({ state, nowMs: t, windowMs, limit, burst, hits });
        if (v.allowed && hits > 0) state = chargeBucket(state, t, windowMs, limit, hits);
        return { allowed: v.allowed, estimate: Number.NaN };
      },
    };
  };
}

/** The exact sliding log over the admitted history: the reference of every window. */
function slidingLogReference(limit: number, windowMs: number): ReferenceLimiter {
  const history = new AdmittedHistory(windowMs);
  return {
    admits: (t, hits) => history.advance(t) + hits <= limit,
    add: (t, hits) => history.add(t, hits),
  };
}

/**
 * The token bucket as defined: `burst` tokens, refilled continuously at L per W; a request takes h
 * tokens or is denied. Counted in 1/W of a token, so every step is an exact integer.
 */
function tokenBucketReference(burstOf: (limit: number) => number): (limit: number, windowMs: number) => ReferenceLimiter {
  return (limit, windowMs) => {
    const full = burstOf(limit) * windowMs;
    let tokens = full;
    let last = Number.NaN;
    const refill = (t: number): void => {
      if (!Number.isNaN(last)) tokens = Math.min(full, tokens + limit * (t - last));
      last = t;
    };
    return {
      admits(t, hits) {
        refill(t);
        return tokens >= hits * windowMs;
      },
      add(t, hits) {
        refill(t);
        tokens -= hits * windowMs;
      },
    };
  };
}

/** The leaky bucket as a meter: a queue of capacity `burst` draining at L per W; admitted if it fits. */
function leakyBucketReference(burstOf: (limit: number) => number): (limit: number, windowMs: number) => ReferenceLimiter {
  return (limit, windowMs) => {
    const capacity = burstOf(limit) * windowMs;
    let level = 0;
    let last = Number.NaN;
    const drain = (t: number): void => {
      if (!Number.isNaN(last)) level = Math.max(0, level - limit * (t - last));
      last = t;
    };
    return {
      admits(t, hits) {
        drain(t);
        return level + hits * windowMs <= capacity;
      },
      add(t, hits) {
        drain(t);
        level += hits * windowMs;
      },
    };
  };
}

const fullBurst = (limit: number): number => limit;
const tenthBurst = (limit: number): number => Math.max(1, Math.floor(limit / 10));

/** Every algorithm, and the sliding window's modes, as the accuracy report lists them. */
export const MODES: readonly Mode[] = [
  { name: 'sliding_window', counter: slidingWindowCounter, reference: slidingLogReference },
  { name: 'sliding_window sub_windows=10', counter: subWindowSimulation(10, false), reference: slidingLogReference },
  { name: 'sliding_window sub_windows=10 strict', counter: subWindowSimulation(10, true), reference: slidingLogReference },
  { name: 'sliding_log', counter: slidingLogCounter, reference: slidingLogReference },
  { name: 'fixed_window', counter: fixedWindowCounter, reference: slidingLogReference },
  { name: 'token_bucket burst=L', counter: bucketSimulation(fullBurst), reference: tokenBucketReference(fullBurst) },
  { name: 'leaky_bucket burst=L/10', counter: bucketSimulation(tenthBurst), reference: leakyBucketReference(tenthBurst) },
];

function modeNamed(name: string): Mode {
  const mode = MODES.find((m) => m.name === name);
  if (mode === undefined) throw new Error(`no accuracy mode ${name}`);
  return mode;
}

/** The exact count of admitted hits in (t - W, t] for one source: a queue of admissions. */
class AdmittedHistory {
  private readonly times: number[] = [];
  private readonly hits: number[] = [];
  private head = 0;
  count = 0;

  constructor(private readonly windowMs: number) {}

  /** Drops admissions that left the window ending at t; returns the exact count in (t - W, t]. */
  advance(t: number): number {
    const from = t - this.windowMs;
    while (this.head < this.times.length && this.times[this.head] <= from) {
      this.count -= this.hits[this.head];
      this.head++;
    }
    if (this.head > 4096) {
      this.times.splice(0, this.head);
      this.hits.splice(0, this.head);
      this.head = 0;
    }
    return this.count;
  }

  add(t: number, hits: number): void {
    this.times.push(t);
    this.hits.push(hits);
    this.count += hits;
  }
}

/** Replays one scenario through one mode (a MODES name) and scores every decision. */
export function replay(scenario: Scenario, modeName: string, seed: number): AlgorithmAccuracy {
  const { limit, windowMs } = scenario;
  const mode = modeNamed(modeName);
  const counters = new Map<number, { sim: CounterSimulation; reference: ReferenceLimiter; history: AdmittedHistory }>();
  let requests = 0;
  let admitted = 0;
  let wronglyAdmitted = 0;
  let wronglyDenied = 0;
  let errorSum = 0;
  let errorCount = 0;
  let worst = 0;
  const offer: Offer = (source, t, hits) => {
    let c = counters.get(source);
    if (c === undefined) {
      c = { sim: mode.counter(limit, windowMs), reference: mode.reference(limit, windowMs), history: new AdmittedHistory(windowMs) };
      counters.set(source, c);
    }
    const exact = c.history.advance(t);
    const exactAllows = c.reference.admits(t, hits);
    const { allowed, estimate } = c.sim.offer(t, hits);
    requests++;
    if (allowed && !exactAllows) wronglyAdmitted++;
    if (!allowed && exactAllows) wronglyDenied++;
    if (exact > 0 && !Number.isNaN(estimate)) {
      errorSum += Math.abs(estimate - exact) / exact;
      errorCount++;
    }
    if (allowed) {
      admitted++;
      if (hits > 0) {
        c.reference.add(t, hits);
        c.history.add(t, hits);
        if (c.history.count > worst) worst = c.history.count;
      }
    }
    return allowed;
  };
  scenario.drive(createRandom(seed), offer);
  return {
    requests,
    admitted,
    wronglyAdmitted,
    wronglyDenied,
    wronglyAdmittedPct: requests ? (100 * wronglyAdmitted) / requests : 0,
    wronglyDeniedPct: requests ? (100 * wronglyDenied) / requests : 0,
    meanRateError: errorCount ? errorSum / errorCount : Number.NaN,
    worstWindowAdmitted: worst,
    worstWindowRatio: worst / limit,
  };
}

const SECOND = 1_000;
const MINUTE = 60_000;

// The boundary scenarios' bursts: 100 requests (L) spread evenly over 1% of a one-minute window.
const BURST_STEP = MINUTE / 100 / 100;

/** Source 0 offers one burst in the last 1% of the window ending at `boundary`. */
function burstBefore(offer: Offer, boundary: number): void {
  for (let i = 0; i < 100; i++) offer(0, Math.floor(boundary - MINUTE / 100 + i * BURST_STEP), 1);
}

/** The traffic shapes, sized by scale. Each is deterministic given the seed. */
export function scenarios(scale: Scale): Scenario[] {
  const full = scale === 'full';
  const steadySources = full ? 100 : 5;
  const steadyMs = full ? 2 * 3_600_000 : 10 * MINUTE;
  const bursts = full ? 200 : 5;
  const paretoSources = full ? 2_000 : 200;
  const paretoMs = full ? 30 * MINUTE : 5 * MINUTE;
  const retryClients = full ? 50 : 3;
  const retryMs = full ? 3_600_000 : 10 * MINUTE;
  return [
    {
      name: 'spec-example',
      description: '5 per 10 s, one request per second for 60 s (SPEC section 4)',
      limit: 5,
      windowMs: 10 * SECOND,
      sources: 1,
      drive(_random, offer) {
        for (let t = 0; t < 60 * SECOND; t += SECOND) offer(0, t, 1);
      },
    },
    {
      name: 'steady-over',
      description: 'evenly spaced requests at 1.5 x the limit, random phase per source',
      limit: 100,
      windowMs: MINUTE,
      sources: steadySources,
      drive(random, offer) {
        const gap = MINUTE / 150;
        for (let s = 0; s < steadySources; s++) {
          const phase = random.next() * MINUTE;
          for (let t = phase; t < phase + steadyMs; t += gap) offer(s, Math.floor(t), 1);
        }
      },
    },
    {
      name: 'boundary-burst',
      description: 'L requests in the last 1% of a window, L more in the first 1% of the next',
      limit: 100,
      windowMs: MINUTE,
      sources: 1,
      drive(_random, offer) {
        for (let c = 0; c < bursts; c++) {
          const boundary = (3 * c + 1) * MINUTE; // three windows apart, so each burst meets empty counters
          burstBefore(offer, boundary);
          for (let i = 0; i < 100; i++) offer(0, Math.floor(boundary + i * BURST_STEP), 1);
        }
      },
    },
    {
      name: 'pareto-sources',
      description: `${paretoSources} sources, Poisson arrivals, Pareto(alpha 1.2) rates from 0.1 x to 20 x the limit`,
      limit: 100,
      windowMs: MINUTE,
      sources: paretoSources,
      drive(random, offer) {
        const limitRate = 100 / MINUTE; // per ms
        for (let s = 0; s < paretoSources; s++) {
          const rate = Math.min(random.pareto(0.1 * limitRate, 1.2), 20 * limitRate);
          let t = random.next() * MINUTE;
          const end = t + paretoMs;
          while (t < end) {
            offer(s, Math.floor(t), 1);
            t += random.exponential(1 / rate);
          }
        }
      },
    },
    {
      name: 'retry-storm',
      description: 'clients wanting 1.25 x the limit that retry every 20 ms while denied (10 per 10 s)',
      limit: 10,
      windowMs: 10 * SECOND,
      sources: retryClients,
      drive(random, offer) {
        const think = (10 * SECOND) / 10 / 1.25;
        for (let s = 0; s < retryClients; s++) {
          let t = random.next() * 10 * SECOND;
          const end = t + retryMs;
          while (t < end) {
            if (offer(s, Math.floor(t), 1)) t += random.exponential(think);
            else t += 20;
          }
        }
      },
    },
    {
      name: 'burst-then-steady',
      description: 'L requests in the last 1% of a window, then one every W / L for three windows',
      limit: 100,
      windowMs: MINUTE,
      sources: 1,
      drive(_random, offer) {
        for (let c = 0; c < bursts; c++) {
          const boundary = (6 * c + 1) * MINUTE; // six windows apart: every cycle meets drained counters
          burstBefore(offer, boundary);
          for (let t = boundary; t < boundary + 3 * MINUTE; t += MINUTE / 100) offer(0, Math.floor(t), 1);
        }
      },
    },
  ];
}

/** Runs every scenario through every algorithm. Pure: no clock, no I/O; same seed, same result. */
export function runAccuracy(opts: AccuracyOptions): AccuracyResult {
  const result: ScenarioAccuracy[] = [];
  scenarios(opts.scale).forEach((scenario, i) => {
    // Every algorithm sees the same trace of a scenario; scenarios added later come last, so the
    // earlier ones keep their seeds and their numbers.
    const seed = (opts.seed + i * 7919) >>> 0;
    const algorithms: Record<string, AlgorithmAccuracy> = {};
    for (const m of MODES) algorithms[m.name] = replay(scenario, m.name, seed);
    const { name, description, limit, windowMs, sources } = scenario;
    result.push({ name, description, limit, windowMs, sources, algorithms });
  });
  return { seed: opts.seed, scale: opts.scale, scenarios: result };
}

/** The summary table: one row per scenario and algorithm. */
export function accuracyTable(result: AccuracyResult): string {
  const rows: string[][] = [];
  for (const s of result.scenarios) {
    for (const { name: a } of MODES) {
      const r = s.algorithms[a];
      rows.push([
        s.name,
        a,
        fmt(r.requests),
        fmt(r.wronglyAdmittedPct, 3) + '%',
        fmt(r.wronglyDeniedPct, 3) + '%',
        Number.isNaN(r.meanRateError) ? '-' : fmt(100 * r.meanRateError, 1) + '%',
        fmt(r.worstWindowRatio, 2) + ' x L',
      ]);
    }
  }
  return markdownTable(['scenario', 'algorithm', 'requests', 'wrongly admitted', 'wrongly denied', 'mean rate error', 'most admitted in any W'], rows, [
    'l',
    'l',
    'r',
    'r',
    'r',
    'r',
    'r',
  ]);
}

/** Two panels: the worst window (against 1 x L) and the share of wrong decisions. */
export function accuracySvg(result: AccuracyResult): string {
  return barChartSvg({
    title: `Algorithm accuracy (seed ${result.seed}, ${result.scale})`,
    series: MODES.map((m) => m.name),
    panels: [
      {
        title: 'Most admitted in any window of length W',
        unit: 'x L',
        reference: 1,
        groups: result.scenarios.map((s) => ({ label: s.name, values: MODES.map((m) => s.algorithms[m.name].worstWindowRatio) })),
      },
      {
        title: 'Wrong decisions',
        unit: '% of requests',
        decimals: 3,
        groups: result.scenarios.map((s) => ({
          label: s.name,
          values: MODES.map((m) => s.algorithms[m.name].wronglyAdmittedPct + s.algorithms[m.name].wronglyDeniedPct),
        })),
      },
    ],
  });
}

interface CliOptions {
  scale: Scale;
  seed: number;
  out: string;
  docs: boolean;
  /** Run the leases across two replicas on Redis (bench/lease-accuracy.ts). */
  leases: boolean;
  /** Run the global limits across three regions (bench/region-accuracy.ts). */
  regions: boolean;
  /** The short form of both: 1 s windows for leases, 10 s for regions, and short phases. */
  quick: boolean;
}

function parseArgs(argv: readonly string[]): CliOptions {
  const root = repoRoot();
  const o: CliOptions = { scale: 'full', seed: 20240601, out: join(root, 'bench', 'results'), docs: true, leases: true, regions: true, quick: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--tiny') o.scale = 'tiny';
    else if (a === '--seed') o.seed = Number(argv[++i]);
    else if (a === '--out') o.out = argv[++i];
    else if (a === '--no-docs') o.docs = false;
    else if (a === '--quick') o.quick = true;
    else if (a === '--no-leases') o.leases = false;
    else if (a === '--no-regions') o.regions = false;
    else throw new Error(`unknown argument ${a} (use --tiny, --quick, --no-leases, --no-regions, --seed N, --out DIR, --no-docs)`);
  }
  if (!Number.isInteger(o.seed)) throw new Error('--seed must be an integer');
  // Tiny, quick and partial runs are for smoke tests, not for the published numbers.
  if (o.scale === 'tiny' || o.quick || !o.leases || !o.regions) o.docs = false;
  return o;
}

async function main(): Promise<void> {
  const o = parseArgs(process.argv.slice(2));
  const started = Date.now();
  const result = runAccuracy({ scale: o.scale, seed: o.seed });
  const leases: LeaseAccuracyResult | undefined = o.leases ? await runLeaseAccuracy({ quick: o.quick }) : undefined;
  const regions: RegionAccuracyResult | undefined = o.regions ? await runRegionAccuracy({ quick: o.quick }) : undefined;
  const date = isoDate();
  mkdirSync(o.out, { recursive: true });
  const base = join(o.out, `accuracy-${date}`);
  const table = accuracyTable(result) + (leases ? `\n\n${leaseAccuracyBlock(leases)}` : '') + (regions ? `\n\n${regionAccuracyBlock(regions)}` : '');
  writeFileSync(`${base}.json`, JSON.stringify({ date, durationMs: Date.now() - started, ...result, leases, regions }, null, 2) + '\n');
  writeFileSync(`${base}.svg`, accuracySvg(result));
  writeFileSync(`${base}.md`, table + '\n');
  if (o.docs) {
    const root = repoRoot();
    const block = `${table}\n\nSeed ${result.seed}, ${date}; \`make accuracy\` regenerates it (bench/results/accuracy-${date}.json).`;
    for (const file of [join(root, 'docs', 'performance.md'), join(root, 'README.md')]) replaceBetweenMarkers(file, 'accuracy', block);
  }
  process.stdout.write(`${table}\n\nwrote ${base}.json, .svg, .md in ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
}

if (require.main === module) {
  main().catch((e: unknown) => {
    process.stderr.write(`${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exit(1);
  });
}
