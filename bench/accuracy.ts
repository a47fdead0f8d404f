import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fixedWindow, slidingLog, slidingWindow, windowStart, type LogEntry } from '../src/limiter/algorithms';
import { ALGORITHMS, type Algorithm } from '../src/limiter/types';
import { fmt, markdownTable, replaceBetweenMarkers } from './markdown';
import { isoDate, repoRoot } from './paths';
import { createRandom, type Random } from './prng';
import { barChartSvg } from './svg';

/**
 * Accuracy of the counting algorithms, measured by replaying synthetic traces through the pure
 * functions of src/limiter/algorithms.ts (the arithmetic every store implements) on a simulated clock.
 *
 * The reference for each decision is an exact sliding log evaluated on the history that the
 * algorithm under test has itself admitted: "given what this limiter let through so far, would an
 * exact limiter admit this request?" Judging every decision against the same history keeps one early
 * disagreement from being counted again on every later request (two independent limiters drift
 * apart after their first different answer and would then disagree for reasons unrelated to the
 * decision at hand). See docs/performance.md for the full definitions.
 */

export type Scale = 'tiny' | 'full';

export interface AccuracyOptions {
  readonly scale: Scale;
  readonly seed: number;
}

/** How one algorithm did on one scenario. Percentages are of all requests in the scenario. */
export interface AlgorithmAccuracy {
  readonly requests: number;
  readonly admitted: number;
  /** Admitted although the exact count of the last W plus h exceeded L. */
  readonly wronglyAdmitted: number;
  /** Denied although the exact count of the last W plus h was within L. */
  readonly wronglyDenied: number;
  readonly wronglyAdmittedPct: number;
  readonly wronglyDeniedPct: number;
  /** Mean of |estimate - exact| / exact over requests whose exact count of the last W was positive. */
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
  readonly algorithms: Readonly<Record<Algorithm, AlgorithmAccuracy>>;
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
  /** The algorithm's estimate of the hits in the last W, before this request. */
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

const COUNTERS: Readonly<Record<Algorithm, (limit: number, windowMs: number) => CounterSimulation>> = {
  sliding_window: slidingWindowCounter,
  sliding_log: slidingLogCounter,
  fixed_window: fixedWindowCounter,
};

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

/** Replays one scenario through one algorithm and scores every decision. */
export function replay(scenario: Scenario, algorithm: Algorithm, seed: number): AlgorithmAccuracy {
  const { limit, windowMs } = scenario;
  const counters = new Map<number, { sim: CounterSimulation; history: AdmittedHistory }>();
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
      c = { sim: COUNTERS[algorithm](limit, windowMs), history: new AdmittedHistory(windowMs) };
      counters.set(source, c);
    }
    const exact = c.history.advance(t);
    const exactAllows = exact + hits <= limit;
    const { allowed, estimate } = c.sim.offer(t, hits);
    requests++;
    if (allowed && !exactAllows) wronglyAdmitted++;
    if (!allowed && exactAllows) wronglyDenied++;
    if (exact > 0) {
      errorSum += Math.abs(estimate - exact) / exact;
      errorCount++;
    }
    if (allowed) {
      admitted++;
      if (hits > 0) {
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
    meanRateError: errorCount ? errorSum / errorCount : 0,
    worstWindowAdmitted: worst,
    worstWindowRatio: worst / limit,
  };
}

const SECOND = 1_000;
const MINUTE = 60_000;

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
        const spread = MINUTE / 100;
        const step = spread / 100;
        for (let c = 0; c < bursts; c++) {
          const boundary = (3 * c + 1) * MINUTE; // three windows apart, so each burst meets empty counters
          for (let i = 0; i < 100; i++) offer(0, Math.floor(boundary - spread + i * step), 1);
          for (let i = 0; i < 100; i++) offer(0, Math.floor(boundary + i * step), 1);
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
  ];
}

/** Runs every scenario through every algorithm. Pure: no clock, no I/O; same seed, same result. */
export function runAccuracy(opts: AccuracyOptions): AccuracyResult {
  const result: ScenarioAccuracy[] = [];
  scenarios(opts.scale).forEach((scenario, i) => {
    const seed = (opts.seed + i * 7919) >>> 0; // every algorithm sees the same trace of a scenario
    const algorithms = {} as Record<Algorithm, AlgorithmAccuracy>;
    for (const a of ALGORITHMS) algorithms[a] = replay(scenario, a, seed);
    const { name, description, limit, windowMs, sources } = scenario;
    result.push({ name, description, limit, windowMs, sources, algorithms });
  });
  return { seed: opts.seed, scale: opts.scale, scenarios: result };
}

/** The summary table: one row per scenario and algorithm. */
export function accuracyTable(result: AccuracyResult): string {
  const rows: string[][] = [];
  for (const s of result.scenarios) {
    for (const a of ALGORITHMS) {
      const r = s.algorithms[a];
      rows.push([
        s.name,
        a,
        fmt(r.requests),
        fmt(r.wronglyAdmittedPct, 3) + '%',
        fmt(r.wronglyDeniedPct, 3) + '%',
        fmt(100 * r.meanRateError, 1) + '%',
        fmt(r.worstWindowRatio, 2) + ' x L',
      ]);
    }
  }
  return markdownTable(
    ['scenario', 'algorithm', 'requests', 'wrongly admitted', 'wrongly denied', 'mean rate error', 'most admitted in any W'],
    rows,
    ['l', 'l', 'r', 'r', 'r', 'r', 'r'],
  );
}

/** Two panels: the worst window (against 1 x L) and the share of wrong decisions. */
export function accuracySvg(result: AccuracyResult): string {
  return barChartSvg({
    title: `Algorithm accuracy (seed ${result.seed}, ${result.scale})`,
    series: [...ALGORITHMS],
    panels: [
      {
        title: 'Most admitted in any window of length W',
        unit: 'x L',
        reference: 1,
        groups: result.scenarios.map((s) => ({ label: s.name, values: ALGORITHMS.map((a) => s.algorithms[a].worstWindowRatio) })),
      },
      {
        title: 'Wrong decisions',
        unit: '% of requests',
        decimals: 3,
        groups: result.scenarios.map((s) => ({
          label: s.name,
          values: ALGORITHMS.map((a) => s.algorithms[a].wronglyAdmittedPct + s.algorithms[a].wronglyDeniedPct),
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
}

function parseArgs(argv: readonly string[]): CliOptions {
  const root = repoRoot();
  const o: CliOptions = { scale: 'full', seed: 20240601, out: join(root, 'bench', 'results'), docs: true };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--tiny') o.scale = 'tiny';
    else if (a === '--seed') o.seed = Number(argv[++i]);
    else if (a === '--out') o.out = argv[++i];
    else if (a === '--no-docs') o.docs = false;
    else throw new Error(`unknown argument ${a} (use --tiny, --seed N, --out DIR, --no-docs)`);
  }
  if (!Number.isInteger(o.seed)) throw new Error('--seed must be an integer');
  if (o.scale === 'tiny') o.docs = false; // tiny runs are for smoke tests, not for the published numbers
  return o;
}

function main(): void {
  const o = parseArgs(process.argv.slice(2));
  const started = Date.now();
  const result = runAccuracy({ scale: o.scale, seed: o.seed });
  const date = isoDate();
  mkdirSync(o.out, { recursive: true });
  const base = join(o.out, `accuracy-${date}`);
  const table = accuracyTable(result);
  writeFileSync(`${base}.json`, JSON.stringify({ date, durationMs: Date.now() - started, ...result }, null, 2) + '\n');
  writeFileSync(`${base}.svg`, accuracySvg(result));
  writeFileSync(`${base}.md`, table + '\n');
  if (o.docs) {
    const root = repoRoot();
    const block = `${table}\n\nSeed ${result.seed}, ${date}; \`make accuracy\` regenerates it (bench/results/accuracy-${date}.json).`;
    for (const file of [join(root, 'docs', 'performance.md'), join(root, 'README.md')]) replaceBetweenMarkers(file, 'accuracy', block);
  }
  process.stdout.write(`${table}\n\nwrote ${base}.json, .svg, .md in ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
}

if (require.main === module) main();
