import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, loadavg, platform, release, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import type { BenchResult, BenchSettings, Machine, RunMeasure, ScenarioResult, ScenarioSummary } from './bench-result';
import { loadSettings } from '../src/settings/settings';
import { measureColdStart, type ColdStartResult } from './cold-start';
import { h2loadAvailable, runH2load, runH2loadMix } from './h2load';
import { median, TIMEOUT_MS } from './latency';
import type { GeneratorName, LoadResult } from './load-result';
import { fmt, replaceBetweenMarkers } from './markdown';
import { isoDate, repoRoot } from './paths';
import { processUsage, runCommand } from './processes';
import { benchSvg, docsBlock, resultMarkdown } from './report';
import { grpcFrame } from './rls-codec';
import {
  ATTACK_MIX_CONNECTIONS,
  ATTACK_MIX_SHARE,
  attackMixBodies,
  CONFIG_YAML,
  DOMAIN,
  GLOBAL_WARMUP_S,
  isGlobal,
  isLeased,
  LEASE_WARMUP_S,
  defaultWorkers,
  scenarioPlan,
  workloadBodies,
  WORKLOADS,
  type ScenarioSpec,
  type Workload,
} from './scenarios';
import { probeAnswers, redisCommandCalls, startNoop, startRedis, startService, type RedisProcess, type Target } from './targets';
import { loadRedisOverrides, measureImport, writeBenchOverridesFile, type ImportMeasure } from './overrides';

export type { BenchResult, RunMeasure, ScenarioResult, ScenarioSummary } from './bench-result';

/**
 * `make bench`: throughput and latency of the service as shipped, end to end over gRPC on 127.0.0.1.
 * Starts its own redis-server, the service (memory and redis stores; the http2 transport, and
 * grpc-js for comparison; for the `scope: global` rows, a service in a region with a second
 * redis-server as its global store) and the no-op servers (each transport's ceiling, with as many processes as
 * the service it bounds), drives every scenario of
 * bench/scenarios.ts with h2load, bench/http2-load.ts or bench/grpc-js-load.ts, and records
 * decisions/s, latency percentiles, errors, Redis commands per decision, CPU and RSS. Writes
 * bench/results/<date>.{json,svg,md} and, for full runs, the tables of README.md and
 * docs/performance.md. Every process it starts is killed on exit.
 *
 *   node dist/bench/run.js [--tiny] [--repeats N] [--duration S] [--warmup S] [--rate CALLS_PER_S]
 *                          [--generator auto|h2load|http2-load|grpc-js-load] [--only REGEX]
 *                          [--out DIR] [--no-docs]
 */

export interface BenchOptions {
  readonly tiny: boolean;
  readonly repeats: number;
  readonly durationS: number;
  readonly warmupS: number;
  /** Total calls/s of the fixed-rate scenarios. */
  readonly rate: number;
  readonly generator: 'auto' | GeneratorName;
  readonly only?: RegExp;
  readonly out: string;
  readonly docs: boolean;
  /** Streams in flight per connection (h2load's -m). */
  readonly streams: number;
}

interface WorkloadFiles {
  /** Every call's frame, concatenated (the node generators cycle through them). */
  readonly framesFile: string;
  /** The first call's frame alone (h2load's -d). */
  readonly bodyFile: string;
  readonly firstFrame: Buffer;
  readonly descriptors: number;
  /** The attack workload's two bodies for h2load-mix, one frame per file. */
  readonly mix?: { readonly attacker: MixBody; readonly normal: MixBody };
}

interface MixBody {
  readonly bodyFile: string;
  readonly frame: Buffer;
}

/** A scenario ready to run: its target, bodies and answer sizes, and the runs measured so far. */
interface Prepared {
  readonly spec: ScenarioSpec;
  readonly files: WorkloadFiles;
  readonly target: Target;
  readonly redis?: RedisProcess;
  sizes: AnswerSizes;
  readonly runs: RunMeasure[];
  error?: string;
  /** h2load-mix: the normal process's paced rate, set once per group (see mixNormalRps). */
  normalRps?: number;
}

type SizeRange = { readonly min: number; readonly max: number };

/** DATA sizes of successful answers, per body h2load posts (see h2load.ts). */
interface AnswerSizes {
  readonly first?: SizeRange;
  readonly attacker?: SizeRange;
  readonly normal?: SizeRange;
}

/** REGION of the service of the `scope: global` rows. */
const BENCH_REGION = 'bench';

/** `--only` matches the cold-start section by this name. */
const COLD_START_NAME = 'cold-start';
/** `--only` matches the override import section by this name (a tiny run measures it only when asked so). */
const IMPORT_NAME = 'override-import';
/** Overrides imported per store: a full run's, a tiny run's. */
const IMPORT_COUNT = 10_000;
const IMPORT_COUNT_TINY = 1_000;
const COLD_START_CONNECTIONS = 40;
const COLD_START_SECONDS = 2;

// How many answers (over one second) are sampled for the size range h2load's success count relies on.
const SIZE_SAMPLES = 50;

async function generate(
  s: ScenarioSpec,
  target: Target,
  files: WorkloadFiles,
  sizes: AnswerSizes,
  durationS: number,
  opts: BenchOptions,
  tmp: string,
  normalRps?: number,
): Promise<LoadResult> {
  if (s.generator === 'h2load') {
    return runH2load({
      port: target.port,
      bodyFile: files.bodyFile,
      clients: s.connections,
      streams: opts.streams,
      threads: 1,
      durationS,
      rps: s.rps,
      okBytes: sizes.first!,
      tmpDir: tmp,
    });
  }
  if (s.generator === 'h2load-mix') {
    const mix = files.mix!;
    return runH2loadMix({
      port: target.port,
      streams: opts.streams,
      threads: 1,
      durationS,
      tmpDir: tmp,
      attacker: { bodyFile: mix.attacker.bodyFile, clients: ATTACK_MIX_CONNECTIONS.attacker, okBytes: sizes.attacker! },
      normal: { bodyFile: mix.normal.bodyFile, clients: ATTACK_MIX_CONNECTIONS.normal, okBytes: sizes.normal!, rps: normalRps },
    });
  }
  // The node generators run in their own process, so they never share an event loop with the harness.
  const args =
    s.generator === 'http2-load'
      ? [
          join(__dirname, 'http2-load.js'),
          '--port',
          String(target.port),
          '--frames',
          files.framesFile,
          '--connections',
          String(s.connections),
          '--streams',
          String(opts.streams),
        ]
      : [
          join(__dirname, 'grpc-js-load.js'),
          '--target',
          `127.0.0.1:${target.port}`,
          '--bodies',
          files.framesFile,
          '--connections',
          String(s.connections),
          '--concurrency',
          String(s.connections * opts.streams),
        ];
  args.push('--duration', String(durationS));
  if (s.rps !== undefined) args.push('--rps', String(s.rps));
  // A larger young generation: the generators allocate a little per call, and scavenges were a fifth of their CPU.
  const r = await runCommand(process.execPath, ['--max-semi-space-size=64', ...args], (durationS + 30) * 1000);
  if (r.code !== 0) throw new Error(`${s.generator} exited ${r.code}: ${r.stderr.trim()}`);
  return JSON.parse(r.stdout.trim().split('\n').pop()!) as LoadResult;
}

/** One run of `run` against `target` (and its Redis); `descriptors`: counters per call, for the per-counter figures. */
async function measure(run: () => Promise<LoadResult>, target: Target, descriptors: number, redis?: RedisProcess): Promise<RunMeasure> {
  const before = processUsage(target.pid);
  const redisBefore = redis ? processUsage(redis.pid) : undefined;
  const callsBefore = redis ? await redisCommandCalls(redis.port) : undefined;
  const t0 = performance.now();
  const load = await run();
  const wallS = (performance.now() - t0) / 1000;
  const after = processUsage(target.pid);
  const m: RunMeasure = {
    load,
    wallS,
    cpuCores: (after.cpuSeconds - before.cpuSeconds) / wallS,
    rssMiB: after.rssBytes / 2 ** 20,
    loadAverage: loadavg()[0],
  };
  if (!redis || !redisBefore || !callsBefore) return m;
  const callsAfter = await redisCommandCalls(redis.port);
  const redisAfter = processUsage(redis.pid);
  const per = (n: number): number | undefined => (load.ok > 0 ? n / load.ok : undefined);
  const scripts = callsAfter.scripts - callsBefore.scripts;
  const perCounter = (n: number): number | undefined => (load.ok > 0 ? n / (load.ok * descriptors) : undefined);
  return {
    ...m,
    redisCpuCores: (redisAfter.cpuSeconds - redisBefore.cpuSeconds) / wallS,
    redisScriptsPerDecision: per(scripts),
    redisCommandsPerDecision: per(callsAfter.commands - callsBefore.commands),
    luaCommandsPerCounter: perCounter(callsAfter.commands - callsBefore.commands - scripts),
    scriptUsPerCounter: perCounter(callsAfter.scriptUsec - callsBefore.scriptUsec),
  };
}

/**
 * Medians of a scenario's runs. The ratio to its ceiling is the median of the run-by-run ratios when
 * the two were measured in alternation (`paired`), else the ratio of the medians.
 */
function summarise(
  runs: readonly RunMeasure[],
  ceiling?: { readonly runs: readonly RunMeasure[]; readonly paired: boolean },
  beside?: readonly RunMeasure[],
): ScenarioSummary {
  const med = (f: (r: RunMeasure) => number | undefined): number => median(runs.map(f).filter((x): x is number => x !== undefined));
  const finite = (x: number): number | undefined => (Number.isFinite(x) ? x : undefined);
  const decisionsPerS = med((r) => r.load.rps);
  return {
    decisionsPerS,
    p50Ms: med((r) => r.load.latencyMs.p50),
    p99Ms: med((r) => r.load.latencyMs.p99),
    p999Ms: med((r) => r.load.latencyMs.p999),
    errors: runs.reduce((n, r) => n + r.load.errors, 0),
    calls: runs.reduce((n, r) => n + r.load.requests, 0),
    ratioToCeiling: ceiling === undefined ? undefined : ratioTo(runs, ceiling.runs, ceiling.paired, (r) => r.load.rps),
    cpuUsPerCall: finite(med(cpuUsPerCall)),
    cpuRatioToCeiling: ceiling === undefined ? undefined : finite(ratioTo(ceiling.runs, runs, ceiling.paired, cpuUsPerCall)),
    redisScriptsPerDecision: finite(med((r) => r.redisScriptsPerDecision)),
    redisCommandsPerDecision: finite(med((r) => r.redisCommandsPerDecision)),
    luaCommandsPerCounter: finite(med((r) => r.luaCommandsPerCounter)),
    scriptUsPerCounter: finite(med((r) => r.scriptUsPerCounter)),
    cpuCores: med((r) => r.cpuCores),
    redisCpuCores: finite(med((r) => r.redisCpuCores)),
    rssMiB: med((r) => r.rssMiB),
    attackShare: finite(med((r) => r.load.attackShare)),
    ratioToBeside: beside === undefined || beside.length === 0 ? undefined : finite(ratioTo(runs, beside, true, (r) => r.load.rps)),
    p99MsOverBeside: beside === undefined || beside.length === 0 ? undefined : finite(differenceTo(runs, beside, (r) => r.load.latencyMs.p99)),
    loadAverage: finite(med((r) => r.loadAverage)),
  };
}

/** of(a) / of(b): the median of the run-by-run ratios when paired, else the ratio of the medians. */
function ratioTo(a: readonly RunMeasure[], b: readonly RunMeasure[], paired: boolean, of: (r: RunMeasure) => number): number {
  if (paired && a.length === b.length) return median(a.map((r, i) => of(r) / of(b[i])));
  return median(a.map(of)) / median(b.map(of));
}

/** of(a) - of(b): the median of the run-by-run differences when the two ran in the same rounds, else the difference of the medians. */
function differenceTo(a: readonly RunMeasure[], b: readonly RunMeasure[], of: (r: RunMeasure) => number): number {
  if (a.length === b.length) return median(a.map((r, i) => of(r) - of(b[i])));
  return median(a.map(of)) - median(b.map(of));
}

/** CPU of the target and its redis-server per successful call, microseconds. */
function cpuUsPerCall(r: RunMeasure): number {
  return r.load.ok > 0 ? ((r.cpuCores + (r.redisCpuCores ?? 0)) * r.wallS * 1e6) / r.load.ok : NaN;
}

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

async function describeMachine(): Promise<Machine> {
  const version = async (cmd: string, args: string[]): Promise<string | undefined> => {
    try {
      const r = await runCommand(cmd, args, 5000);
      return r.code === 0 ? (r.stdout + r.stderr).trim().split('\n')[0] : undefined;
    } catch {
      return undefined;
    }
  };
  let model = cpus()[0]?.model ?? 'unknown';
  try {
    const m = /^model name\s*:\s*(.+)$/m.exec(readFileSync('/proc/cpuinfo', 'utf8'));
    if (m) model = m[1].trim();
  } catch {
    // not Linux: keep os.cpus()'s name
  }
  return {
    nproc: availableParallelism(),
    cpuModel: model,
    memoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    os: `${platform()} ${release()}`,
    node: process.version,
    redis: await version('redis-server', ['--version']),
    h2load: await version('h2load', ['--version']),
  };
}

function writeWorkloads(tmp: string): Map<Workload, WorkloadFiles> {
  const files = new Map<Workload, WorkloadFiles>();
  for (const w of WORKLOADS) {
    const { bodies, descriptors } = workloadBodies(w);
    const frames = bodies.map(grpcFrame);
    const framesFile = join(tmp, `${w}.frames`);
    const bodyFile = join(tmp, `${w}.body`);
    writeFileSync(framesFile, Buffer.concat(frames));
    writeFileSync(bodyFile, frames[0]);
    let mix: WorkloadFiles['mix'];
    if (w === 'attack') {
      const body = (name: string, message: Buffer): MixBody => {
        const frame = grpcFrame(message);
        writeFileSync(join(tmp, `attack-${name}.body`), frame);
        return { bodyFile: join(tmp, `attack-${name}.body`), frame };
      };
      const m = attackMixBodies();
      mix = { attacker: body('attacker', m.attacker), normal: body('normal', m.normal) };
    }
    files.set(w, { framesFile, bodyFile, firstFrame: frames[0], descriptors, mix });
  }
  return files;
}

/** Runs the scenarios and returns the result; never leaves a process behind. */
export async function runBench(opts: BenchOptions): Promise<BenchResult> {
  const hasH2load = await h2loadAvailable();
  if (opts.generator === 'h2load' && !hasH2load) throw new Error('h2load not found: apt-get install -y nghttp2-client');
  const primary: GeneratorName = opts.generator === 'auto' ? (hasH2load ? 'h2load' : 'http2-load') : opts.generator;
  const varied: GeneratorName = opts.generator === 'grpc-js-load' ? 'grpc-js-load' : 'http2-load';
  const specs = scenarioPlan({ tiny: opts.tiny, primary, varied, rate: opts.rate }).filter((s) => !opts.only || opts.only.test(s.name));
  const machine = await describeMachine();
  const tmp = mkdtempSync(join(tmpdir(), 'slidegate-bench-'));
  const configDir = join(tmp, 'config');
  mkdirSync(configDir);
  writeFileSync(join(configDir, 'bench.yaml'), CONFIG_YAML);
  const files = writeWorkloads(tmp);
  const probeFrame = files.get('one')!.firstFrame;
  // The smoke run shares the machine with other test files: a store call may wait far longer than
  // the 10 ms default, and it checks the harness, not latency.
  const serviceEnv: Record<string, string> = opts.tiny ? { STORE_TIMEOUT_MS: '1000' } : {};

  // One process per target kind, started on first use and shared by the scenarios that need it.
  const targets = new Map<string, Promise<Target>>();
  let redis: Promise<RedisProcess> | undefined;
  const getRedis = (): Promise<RedisProcess> => (redis ??= startRedis());
  // The global store of the `scope: global` rows: a redis-server of its own, as a region's would be
  // apart from the store every region reaches (here on the same machine, without distance).
  let globalRedis: Promise<RedisProcess> | undefined;
  const getGlobalRedis = (): Promise<RedisProcess> => (globalRedis ??= startRedis());
  /** The environment that puts a service in a region: the only region of its global store. */
  const regionEnv = async (): Promise<Record<string, string>> => ({
    REGION: BENCH_REGION,
    GLOBAL_REDIS_URL: `redis://127.0.0.1:${(await getGlobalRedis()).port}`,
  });
  const getTarget = (s: ScenarioSpec): Promise<Target> => {
    const key = `${s.target}:${s.transport}:${s.backend ?? ''}:${s.workers}:${s.overrides ?? 0}:${isGlobal(s.workload) ? 'region' : ''}`;
    // A service started with another process count than its store's default says so (WORKERS).
    const workers = s.backend !== undefined && s.workers !== defaultWorkers(s.backend) ? s.workers : undefined;
    let t = targets.get(key);
    if (!t) {
      t =
        s.target === 'noop'
          ? startNoop(s.transport, probeFrame, s.workers)
          : (s.backend === 'redis' ? getRedis() : Promise.resolve(undefined)).then(async (r) => {
              const env = {
                ...serviceEnv,
                ...(s.overrides === undefined ? {} : await loadOverrides(s, r)),
                ...(isGlobal(s.workload) ? await regionEnv() : {}),
              };
              return startService({ backend: s.backend!, transport: s.transport, configDir, redisPort: r?.port, probeFrame, env, workers });
            });
      t.catch(() => undefined); // reported by the scenario that awaits it
      targets.set(key, t);
    }
    return t;
  };

  /**
   * The overrides of a row that loads them, in place before its service starts (which reads them
   * before it answers): the memory store's OVERRIDES_FILE, or Redis under a key prefix of the row's own.
   */
  const loadOverrides = async (s: ScenarioSpec, r: RedisProcess | undefined): Promise<Record<string, string>> => {
    const count = s.overrides!;
    if (r === undefined) {
      const file = join(tmp, `overrides-${count}.ndjson`);
      await writeBenchOverridesFile(file, DOMAIN, count);
      return { OVERRIDES_FILE: file };
    }
    const prefix = `bench-overrides-${count}:`;
    await loadRedisOverrides(r.port, prefix, DOMAIN, count);
    return { CACHE_KEY_PREFIX: prefix };
  };

  const answerSizes = new Map<string, AnswerSizes>();
  const sizesKey = (s: Pick<ScenarioSpec, 'target' | 'transport' | 'backend' | 'workers' | 'workload' | 'generator'>): string =>
    `${s.target}:${s.transport}:${s.backend ?? ''}:${s.workers}:${s.workload}:${s.generator}`;
  const sample = (port: number, frame: Buffer): Promise<SizeRange> =>
    probeAnswers(port, frame, { timeoutMs: 10_000, samples: SIZE_SAMPLES, spreadMs: 1000, alive: () => true });
  // One call first puts the attacker key over its limit, so the sizes sampled next (and every call
  // of the run) are OVER_LIMIT answers; the normal key's are OK answers. The wait an OVER_LIMIT
  // answer reports changes when its hour-long window rolls over, and with it the answer's size:
  // the mix samples again before each run.
  const sampleMix = async (port: number, f: WorkloadFiles): Promise<AnswerSizes> => {
    await probeAnswers(port, f.mix!.attacker.frame, { timeoutMs: 10_000, samples: 0, alive: () => true });
    // Two keys, sampled side by side: each sample spreads its calls over a second, mostly waiting.
    const [attacker, normal] = await Promise.all([sample(port, f.mix!.attacker.frame), sample(port, f.mix!.normal.frame)]);
    return { attacker, normal };
  };
  /** Starts (or reuses) the scenario's target, learns its answer sizes and warms it up. */
  const prepare = async (s: ScenarioSpec): Promise<Prepared> => {
    const f = files.get(s.workload)!;
    const target = await getTarget(s);
    const r = s.backend === 'redis' ? await getRedis() : undefined;
    const key = sizesKey(s);
    let sizes = answerSizes.get(key) ?? {};
    if (s.generator === 'h2load' && !sizes.first) sizes = { first: await sample(target.port, f.firstFrame) };
    if (s.generator === 'h2load-mix' && !sizes.attacker) sizes = await sampleMix(target.port, f);
    answerSizes.set(key, sizes);
    const warmupS = Math.max(opts.warmupS, isGlobal(s.workload) ? GLOBAL_WARMUP_S : isLeased(s.workload) ? LEASE_WARMUP_S : 0);
    if (warmupS > 0) await generate(s, target, f, sizes, warmupS, opts, tmp);
    return { spec: s, files: f, target, redis: r, sizes, runs: [] };
  };
  /**
   * The attack mix's normal rate, the same for every row of a group: the attacker process alone,
   * posting as fast as it can to the group's first target (the no-op ceiling when there is one), times
   * (1 - share) / share. Two closed-loop processes would split the calls by their latencies instead
   * (a normal call waits for Redis, an attacker's does not), so the rows would compare different mixes.
   */
  const mixNormalRps = async (p: Prepared): Promise<number> => {
    const attacker = await runH2load({
      port: p.target.port,
      bodyFile: p.files.mix!.attacker.bodyFile,
      clients: ATTACK_MIX_CONNECTIONS.attacker,
      streams: opts.streams,
      threads: 1,
      durationS: Math.min(2, opts.durationS),
      okBytes: p.sizes.attacker!,
      tmpDir: tmp,
    });
    if (!(attacker.rps > 0)) throw new Error('attack mix: the attacker process alone completed no call');
    return (attacker.rps * (1 - ATTACK_MIX_SHARE)) / ATTACK_MIX_SHARE;
  };
  const results: ScenarioResult[] = [];
  const failed = (s: ScenarioSpec, error: string): void => {
    results.push({ ...s, descriptors: files.get(s.workload)!.descriptors, runs: [], error });
    process.stderr.write(`${s.name}: FAILED ${error.split('\n')[0]}\n`);
  };
  /**
   * Measures scenarios together: each is prepared, then their runs alternate (a, b, a, b, ...), so
   * a no-op ceiling and the service it bounds see the same machine.
   */
  const measureTogether = async (group: readonly ScenarioSpec[]): Promise<void> => {
    const ready: Prepared[] = [];
    // Without a warm-up, preparing is starting processes and sampling answers (mostly waiting): the
    // scenarios of a group prepare side by side. A warm-up drives load, so each has the machine alone.
    const prepared: PromiseSettledResult<Prepared>[] = [];
    if (opts.warmupS > 0) for (const s of group) prepared.push(...(await Promise.allSettled([prepare(s)])));
    else prepared.push(...(await Promise.allSettled(group.map(prepare))));
    prepared.forEach((p, i) => {
      if (p.status === 'fulfilled') ready.push(p.value);
      else failed(group[i], message(p.reason));
    });
    const mixed = ready.filter((p) => p.spec.generator === 'h2load-mix' && p.error === undefined);
    if (mixed.length > 0) {
      try {
        const normalRps = await mixNormalRps(mixed[0]);
        for (const p of mixed) p.normalRps = normalRps;
      } catch (e) {
        for (const p of mixed) p.error = message(e);
      }
    }
    for (let i = 0; i < opts.repeats; i++) {
      for (const p of ready) {
        if (p.error !== undefined) continue;
        try {
          if (p.spec.generator === 'h2load-mix' && i > 0) p.sizes = await sampleMix(p.target.port, p.files);
          // A lease idle for 2 x LEASE_TTL (4 s) while another row of the group ran is dropped: synced again first.
          if (isLeased(p.spec.workload) && ready.length > 1) await generate(p.spec, p.target, p.files, p.sizes, LEASE_WARMUP_S, opts, tmp);
          p.runs.push(
            await measure(() => generate(p.spec, p.target, p.files, p.sizes, opts.durationS, opts, tmp, p.normalRps), p.target, p.files.descriptors, p.redis),
          );
        } catch (e) {
          p.error = message(e);
        }
      }
    }
    for (const p of ready) {
      const s = p.spec;
      if (p.error !== undefined) {
        failed(s, p.error);
        continue;
      }
      const ceiling =
        s.kind === 'max' && s.ceiling ? (ready.find((x) => x.spec.name === s.ceiling && !x.error) ?? results.find((x) => x.name === s.ceiling)) : undefined;
      const beside = s.beside === undefined ? undefined : ready.find((x) => x.spec.name === s.beside && !x.error)?.runs;
      const summary = summarise(p.runs, ceiling?.runs.length ? { runs: ceiling.runs, paired: 'spec' in ceiling } : undefined, beside);
      // The processes that actually served (the plan's count, unless the service was started otherwise).
      results.push({ ...s, descriptors: p.files.descriptors, workers: p.target.workers, runs: p.runs, summary });
      const share = summary.attackShare === undefined ? '' : `, attack share ${fmt(100 * summary.attackShare, 1)}%`;
      const cmds = summary.redisCommandsPerDecision === undefined ? '' : `, Redis ${fmt(summary.redisCommandsPerDecision, 4)} cmds/decision`;
      const p99Over = summary.p99MsOverBeside === undefined ? '' : `, p99 ${summary.p99MsOverBeside >= 0 ? '+' : ''}${fmt(summary.p99MsOverBeside, 2)} ms`;
      const besideText = summary.ratioToBeside === undefined ? '' : `, ${fmt(summary.ratioToBeside, 3)} of ${s.beside}${p99Over}`;
      const loadText = summary.loadAverage === undefined ? '' : `, load average ${fmt(summary.loadAverage, 2)}`;
      process.stderr.write(
        `${s.name}: ${fmt(summary.decisionsPerS)} decisions/s, p99 ${fmt(summary.p99Ms, 2)} ms, ${summary.errors} errors${share}${cmds}${besideText}${loadText}\n`,
      );
    }
  };
  /** Cold start (bench/cold-start.ts): the service with Redis, with and without its start-up warm-up. */
  const coldStart = async (): Promise<ColdStartResult[]> => {
    const r = await getRedis();
    const start = (env: Readonly<Record<string, string>>): Promise<Target> =>
      startService({ backend: 'redis', transport: 'http2', configDir, redisPort: r.port, probeFrame, env: { ...serviceEnv, ...env } });
    const one = files.get('one')!;
    // The sizes of an OK answer to that call, as a scenario on the same service sampled them (a full
    // or tiny run has one), else from a service started for it.
    const sampled = answerSizes.get(
      sizesKey({ target: 'service', transport: 'http2', backend: 'redis', workers: defaultWorkers('redis'), workload: 'one', generator: 'h2load' }),
    )?.first;
    let okBytes: SizeRange;
    if (sampled !== undefined) okBytes = sampled;
    else {
      const probe = await start({});
      try {
        okBytes = await sample(probe.port, one.firstFrame);
      } finally {
        await probe.stop();
      }
    }
    const shipped = loadSettings({}).warmUpCalls;
    return measureColdStart({
      variants: [0, shipped],
      defaultWarmUpCalls: shipped,
      // Each run is a new service: more runs than the scenarios get, as one run says little.
      repeats: opts.tiny ? 1 : Math.max(5, opts.repeats),
      rps: opts.rate,
      connections: COLD_START_CONNECTIONS,
      durationS: opts.tiny ? 1 : COLD_START_SECONDS,
      streams: opts.streams,
      start,
      bodyFile: one.bodyFile,
      okBytes,
      tmpDir: tmp,
    });
  };
  /** `slidegate overrides import` into a fresh service per store, each alone on the machine. */
  const overrideImport = async (): Promise<ImportMeasure[]> => {
    const r = await getRedis();
    const count = opts.tiny ? IMPORT_COUNT_TINY : IMPORT_COUNT;
    const stores: { store: string; backend: 'memory' | 'redis'; env: Record<string, string> }[] = [
      { store: 'memory', backend: 'memory', env: {} },
      { store: 'memory, OVERRIDES_FILE', backend: 'memory', env: { OVERRIDES_FILE: join(tmp, 'import-overrides.ndjson') } },
      { store: 'redis', backend: 'redis', env: { CACHE_KEY_PREFIX: 'bench-import:' } },
    ];
    const out: ImportMeasure[] = [];
    for (const s of stores) {
      out.push(
        await measureImport({
          store: s.store,
          count,
          domain: DOMAIN,
          tmp,
          start: (env) =>
            startService({ backend: s.backend, transport: 'http2', configDir, redisPort: r.port, probeFrame, env: { ...serviceEnv, ...s.env, ...env } }),
        }).catch((e: unknown): ImportMeasure => ({
          store: s.store,
          overrides: count,
          seconds: NaN,
          perSecond: NaN,
          loadAverage: loadavg()[0],
          error: message(e),
        })),
      );
    }
    return out;
  };
  let cold: ColdStartResult[] | undefined;
  let imports: ImportMeasure[] | undefined;
  try {
    // A no-op scenario that bounds others is measured with the first of them, not on its own.
    const bounding = new Set(specs.map((s) => s.ceiling).filter((c): c is string => c !== undefined));
    const measured = new Set<string>();
    for (const s of specs) {
      if (measured.has(s.name) || (bounding.has(s.name) && specs.some((x) => x.ceiling === s.name && !measured.has(x.name)))) continue;
      // A row measured beside another (runtime overrides beside none) runs in that row's rounds.
      if (s.beside !== undefined && specs.some((x) => x.name === s.beside && !measured.has(x.name))) continue;
      const c = s.ceiling === undefined || measured.has(s.ceiling) ? undefined : specs.find((x) => x.name === s.ceiling);
      const group = [...(c ? [c] : []), s, ...specs.filter((x) => x.beside === s.name && !measured.has(x.name))];
      await measureTogether(group);
      for (const g of group) measured.add(g.name);
    }
    if (opts.only ? opts.only.test(IMPORT_NAME) : !opts.tiny) {
      // Alone: the services of the scenarios would share the cores.
      for (const t of targets.values()) await t.then((x) => x.stop()).catch(() => undefined);
      targets.clear();
      imports = await overrideImport();
      for (const m of imports) {
        process.stderr.write(
          `${IMPORT_NAME} ${m.store}: ${m.error ?? `${fmt(m.overrides)} overrides in ${fmt(m.seconds, 2)} s, ${fmt(m.perSecond)} per second, load average ${fmt(m.loadAverage, 2)}`}\n`,
        );
      }
    }
    if (primary === 'h2load' && (!opts.only || opts.only.test(COLD_START_NAME))) {
      // Last, and alone: the services of the scenarios would share the cores.
      for (const t of targets.values()) await t.then((x) => x.stop()).catch(() => undefined);
      targets.clear();
      cold = await coldStart();
      for (const c of cold) {
        process.stderr.write(
          `${COLD_START_NAME} WARM_UP_CALLS=${c.warmUpCalls}: ${c.error ?? `calls over ${TIMEOUT_MS} ms per run ${c.runs.map((x) => x.overTimeout).join(', ')}`}\n`,
        );
      }
    }
  } finally {
    for (const t of targets.values()) await t.then((x) => x.stop()).catch(() => undefined);
    if (redis) await redis.then((x) => x.stop()).catch(() => undefined);
    if (globalRedis) await globalRedis.then((x) => x.stop()).catch(() => undefined);
    rmSync(tmp, { recursive: true, force: true });
  }
  const options: BenchSettings = {
    tiny: opts.tiny,
    repeats: opts.repeats,
    durationS: opts.durationS,
    warmupS: opts.warmupS,
    streams: opts.streams,
    rate: opts.rate,
    generator: opts.generator,
    only: opts.only?.source,
  };
  return { date: isoDate(), machine, options, scenarios: results, coldStart: cold, overrideImport: imports };
}

function parseArgs(argv: readonly string[]): BenchOptions {
  let tiny = false;
  let repeats: number | undefined;
  let durationS: number | undefined;
  let warmupS: number | undefined;
  let rate: number | undefined;
  let generator: string = 'auto';
  let only: RegExp | undefined;
  let out = join(repoRoot(__dirname), 'bench', 'results');
  let docs = true;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = (): string => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${a} needs a value`);
      return v;
    };
    if (a === '--tiny') tiny = true;
    else if (a === '--repeats') repeats = Number(value());
    else if (a === '--duration') durationS = Number(value());
    else if (a === '--warmup') warmupS = Number(value());
    else if (a === '--rate') rate = Number(value());
    else if (a === '--generator') generator = value();
    else if (a === '--only') only = new RegExp(value());
    else if (a === '--out') out = value();
    else if (a === '--no-docs') docs = false;
    else throw new Error(`unknown argument ${a}`);
  }
  if (!['auto', 'h2load', 'http2-load', 'grpc-js-load'].includes(generator)) throw new Error('--generator must be auto, h2load, http2-load or grpc-js-load');
  const o: BenchOptions = {
    tiny,
    repeats: repeats ?? (tiny ? 1 : 3),
    // Tiny runs check the harness, not the numbers: 1 s gives every scenario thousands of calls.
    durationS: durationS ?? (tiny ? 1 : 8),
    warmupS: warmupS ?? (tiny ? 0 : 2),
    // Tiny runs share the machine with other tests: a rate every machine holds.
    rate: rate ?? (tiny ? 1000 : 8000),
    generator: generator as BenchOptions['generator'],
    only,
    out,
    // Tiny numbers check the harness and subsets are partial: neither is ever published.
    docs: docs && !tiny && only === undefined,
    streams: 50,
  };
  if (!Number.isInteger(o.repeats) || o.repeats < 1 || o.repeats > 20) throw new Error('--repeats must be 1..20');
  if (!(o.durationS > 0 && o.durationS <= 600)) throw new Error('--duration must be in (0, 600] seconds');
  if (!(o.warmupS >= 0 && o.warmupS <= 60)) throw new Error('--warmup must be in [0, 60] seconds');
  if (!(o.rate >= 1 && o.rate <= 1_000_000)) throw new Error('--rate must be in [1, 1000000] calls/s');
  return o;
}

async function main(): Promise<void> {
  const opts = parseArgs(process.argv.slice(2));
  const result = await runBench(opts);
  mkdirSync(opts.out, { recursive: true });
  const base = join(opts.out, opts.tiny ? `tiny-${result.date}` : result.date);
  const md = resultMarkdown(result);
  writeFileSync(`${base}.json`, JSON.stringify(result, null, 2) + '\n');
  writeFileSync(`${base}.svg`, benchSvg(result));
  writeFileSync(`${base}.md`, md);
  if (opts.docs) {
    const root = repoRoot(__dirname);
    replaceBetweenMarkers(join(root, 'README.md'), 'bench', docsBlock(result, ''));
    replaceBetweenMarkers(join(root, 'docs', 'performance.md'), 'bench', docsBlock(result, '../'));
  }
  process.stdout.write(`${md}\nwrote ${base}.json, .svg, .md\n`);
  if (result.scenarios.some((s) => s.error) || result.coldStart?.some((c) => c.error)) process.exitCode = 1;
}

if (require.main === module) {
  main().catch((e: unknown) => {
    process.stderr.write(`${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    process.exit(1);
  });
}
