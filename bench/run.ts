import * as grpc from '@grpc/grpc-js';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync, readFileSync, existsSync } from 'node:fs';
import { cpus, freemem, platform, release, tmpdir, totalmem, availableParallelism } from 'node:os';
import { join } from 'node:path';
import { h2loadAvailable, runH2load } from './h2load';
import { median } from './latency';
import type { LoadResult } from './load-result';
import { fmt, markdownTable, replaceBetweenMarkers } from './markdown';
import { isoDate, repoRoot } from './paths';
import { freePort, processUsage, runCommand, sleep, spawnTracked, stopProcess, waitForPort } from './processes';
import { encodeRateLimitRequest, grpcFrame, overallCode, SHOULD_RATE_LIMIT_PATH, type BenchDescriptor } from './rls-codec';
import { barChartSvg } from './svg';

/**
 * Throughput and latency of the service, end to end over gRPC on 127.0.0.1: starts its own
 * redis-server, the service (memory and redis backends) and a no-op server (the transport ceiling),
 * drives each with h2load or the grpc-js generator, and records decisions/s, latency percentiles,
 * Redis commands per decision, CPU and RSS. Every process it starts is killed on exit.
 *
 *   node dist/bench/run.js [--tiny] [--repeats N] [--duration S] [--generator auto|node|h2load]
 *                          [--only REGEX] [--out DIR] [--no-docs]
 */

type Generator = 'h2load' | 'node';
type Transport = 'grpc-js' | 'http2';
type Backend = 'memory' | 'redis';
type Workload = 'one' | 'five' | 'keys10k' | 'attack';

export interface BenchOptions {
  readonly tiny: boolean;
  readonly repeats: number;
  readonly durationS: number;
  readonly warmupS: number;
  readonly generator: 'auto' | Generator;
  readonly only?: RegExp;
  readonly out: string;
  readonly docs: boolean;
  /** Connections x streams per connection: h2load's -c and -m; the node generator uses the same totals. */
  readonly clients: number;
  readonly streams: number;
}

interface ScenarioSpec {
  readonly name: string;
  readonly description: string;
  readonly target: 'noop' | 'service';
  readonly transport: Transport;
  readonly backend?: Backend;
  readonly workload: Workload;
  readonly generator: Generator;
  /** Fixed-rate run at this fraction of the named scenario's median throughput. */
  readonly rateOf?: { readonly scenario: string; readonly fraction: number };
}

/** One repeat of one scenario. */
export interface RunMeasure {
  readonly load: LoadResult;
  readonly wallS: number;
  /** CPU cores used by the target (service or no-op server, workers included). */
  readonly cpuCores: number;
  readonly rssMiB: number;
  readonly redisCpuCores?: number;
  readonly redisCommandsPerDecision?: number;
}

/** Medians over the repeats. */
export interface ScenarioSummary {
  readonly decisionsPerS: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly p999Ms: number;
  readonly errors: number;
  /** decisionsPerS / the no-op server's, same transport and generator. */
  readonly ratioToNoop?: number;
  readonly redisCommandsPerDecision?: number;
  readonly cpuCores: number;
  readonly redisCpuCores?: number;
  readonly rssMiB: number;
}

export interface ScenarioResult extends Omit<ScenarioSpec, 'rateOf'> {
  readonly descriptors: number;
  readonly targetRps?: number;
  readonly runs: readonly RunMeasure[];
  readonly summary?: ScenarioSummary;
  readonly error?: string;
}

export interface Machine {
  readonly nproc: number;
  readonly cpuModel: string;
  readonly memoryGiB: number;
  readonly os: string;
  readonly node: string;
  readonly redis?: string;
  readonly h2load?: string;
}

export interface BenchResult {
  readonly date: string;
  readonly machine: Machine;
  readonly options: Omit<BenchOptions, 'only' | 'out' | 'docs'> & { only?: string };
  readonly scenarios: readonly ScenarioResult[];
}

const DOMAIN = 'bench';

// Limits far above any reachable rate keep the normal keys under their limit; `attacker` allows one
// hit per hour, so after the first call every attacker key is over its limit.
const CONFIG_YAML = `domain: ${DOMAIN}
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: method
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1000000000}
  - key: region
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
  - key: attacker
    rate_limit: {unit: hour, requests_per_unit: 1}
`;

const d = (key: string, value: string): BenchDescriptor => ({ entries: [[key, value]] });

/** Request bodies of each workload (protobuf messages, without the gRPC frame). */
function workloadBodies(w: Workload): { bodies: Buffer[]; descriptors: number } {
  switch (w) {
    case 'one':
      return { bodies: [encodeRateLimitRequest(DOMAIN, [d('client', 'c1')])], descriptors: 1 };
    case 'five':
      return {
        bodies: [encodeRateLimitRequest(DOMAIN, [d('client', 'c1'), d('path', '/api/v1/items'), d('method', 'GET'), d('tenant', 't1'), d('region', 'eu-west')])],
        descriptors: 5,
      };
    case 'keys10k':
      return { bodies: Array.from({ length: 10_000 }, (_, i) => encodeRateLimitRequest(DOMAIN, [d('client', `c${i}`)])), descriptors: 1 };
    case 'attack':
      // 90 attacker keys (over limit) for every 10 normal ones, interleaved.
      return {
        bodies: Array.from({ length: 100 }, (_, i) =>
          encodeRateLimitRequest(DOMAIN, [i % 10 === 9 ? d('client', `c${i}`) : d('attacker', `a${i}`)]),
        ),
        descriptors: 1,
      };
  }
}

function scenarioSpecs(opts: BenchOptions, hasH2load: boolean): ScenarioSpec[] {
  const primary: Generator = opts.generator === 'node' || !hasH2load ? 'node' : 'h2load';
  const specs: ScenarioSpec[] = [];
  const add = (s: ScenarioSpec): void => void specs.push(s);
  const noop = (transport: Transport, generator: Generator): void =>
    add({ name: `noop-${transport}/${generator}`, description: `no-op ${transport} server, 1 descriptor`, target: 'noop', transport, workload: 'one', generator });
  const svc = (backend: Backend, workload: Workload, generator: Generator, transport: Transport = 'grpc-js'): string => {
    const label = { one: '1-descriptor', five: '5-descriptors', keys10k: '10k-keys', attack: 'attack-90pct' }[workload];
    const name = `${backend}-${label}${transport === 'grpc-js' ? '' : '-' + transport}/${generator}`;
    const what = {
      one: 'one descriptor, one key',
      five: 'five descriptors per request',
      keys10k: '10,000 distinct keys, round robin',
      attack: '90% of requests on keys already over their limit',
    }[workload];
    add({ name, description: `${backend} store, ${what}`, target: 'service', transport, backend, workload, generator });
    return name;
  };
  const rate = (base: string, fraction: number, backend: Backend, generator: Generator): void =>
    add({
      name: `${base.split('/')[0]}@${Math.round(fraction * 100)}pct/${generator}`,
      description: `${backend} store, fixed rate at ${Math.round(fraction * 100)}% of the measured maximum`,
      target: 'service',
      transport: 'grpc-js',
      backend,
      workload: 'one',
      generator,
      rateOf: { scenario: base, fraction },
    });

  if (opts.tiny) {
    noop('grpc-js', 'node');
    const m = svc('memory', 'one', 'node');
    svc('memory', 'attack', 'node');
    svc('redis', 'one', 'node');
    rate(m, 0.5, 'memory', 'node');
    if (primary === 'h2load') {
      noop('grpc-js', 'h2load');
      svc('memory', 'one', 'h2load');
    }
  } else {
    noop('grpc-js', primary);
    noop('http2', primary);
    if (primary === 'h2load') noop('grpc-js', 'node');
    for (const backend of ['memory', 'redis'] as const) {
      const base = svc(backend, 'one', primary);
      svc(backend, 'five', primary);
      svc(backend, 'keys10k', 'node');
      svc(backend, 'attack', 'node');
      if (primary === 'h2load') svc(backend, 'one', 'node');
      rate(base, 0.5, backend, primary);
      rate(base, 0.9, backend, primary);
    }
    svc('memory', 'one', primary, 'http2');
  }
  return opts.only ? specs.filter((s) => opts.only!.test(s.name)) : specs;
}

/** A process under test: where to send load and which pid to measure. */
interface Target {
  readonly port: number;
  readonly pid: number;
  stop(): Promise<void>;
}

interface Redis {
  readonly port: number;
  readonly pid: number;
  stop(): Promise<void>;
}

async function startRedis(): Promise<Redis> {
  const port = await freePort();
  const child = spawnTracked('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--loglevel', 'warning']);
  let failed: Error | undefined;
  child.on('error', (e) => (failed = e));
  await waitForPort(port, 10_000, () => failed === undefined && child.exitCode === null).catch((e: unknown) => {
    throw new Error(`redis-server did not start${failed ? `: ${failed.message}` : ''} (${e instanceof Error ? e.message : e}); install it with \`make redis-server\``);
  });
  return { port, pid: child.pid!, stop: () => stopProcess(child) };
}

async function redisCommandCalls(port: number): Promise<number> {
  const r = await runCommand('redis-cli', ['-h', '127.0.0.1', '-p', String(port), 'INFO', 'commandstats'], 5000);
  let calls = 0;
  for (const m of r.stdout.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) if (m[1] !== 'info') calls += Number(m[2]);
  return calls;
}

/** Calls ShouldRateLimit until it answers OK (the service has its config and store), bounded by timeoutMs. */
async function probe(port: number, timeoutMs: number, alive: () => boolean): Promise<void> {
  const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const body = encodeRateLimitRequest(DOMAIN, [d('client', 'probe')]);
  const deadline = Date.now() + timeoutMs;
  let last = '';
  try {
    while (Date.now() < deadline) {
      if (!alive()) throw new Error('process exited');
      const ok = await new Promise<boolean>((resolve) =>
        client.makeUnaryRequest(SHOULD_RATE_LIMIT_PATH, (b: Buffer) => b, (b: Buffer) => b, body, { deadline: Date.now() + 1000 }, (err, reply) => {
          last = err ? `${err.code} ${err.details}` : `overall_code ${reply ? overallCode(reply) : '?'}`;
          resolve(!err && reply !== undefined && overallCode(reply) === 1);
        }),
      );
      if (ok) return;
      await sleep(100);
    }
    throw new Error(`no OK answer within ${timeoutMs} ms (last: ${last})`);
  } finally {
    client.close();
  }
}

async function startNoop(transport: Transport): Promise<Target> {
  const port = await freePort();
  const child = spawnTracked(process.execPath, [join(__dirname, 'noop-server.js'), '--transport', transport, '--port', String(port)]);
  await waitForPort(port, 10_000, () => child.exitCode === null);
  await probe(port, 5_000, () => child.exitCode === null);
  return { port, pid: child.pid!, stop: () => stopProcess(child) };
}

async function startService(opts: { backend: Backend; transport: Transport; configDir: string; redisPort?: number }): Promise<Target> {
  const main = join(repoRoot(__dirname), 'dist', 'src', 'main.js');
  if (!existsSync(main)) throw new Error(`${main} is missing: run \`make build\` first`);
  const [grpcPort, httpPort, debugPort] = [await freePort(), await freePort(), await freePort()];
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    GRPC_HOST: '127.0.0.1',
    GRPC_PORT: String(grpcPort),
    HOST: '127.0.0.1',
    PORT: String(httpPort),
    DEBUG_HOST: '127.0.0.1',
    DEBUG_PORT: String(debugPort),
    CONFIG_PATH: opts.configDir,
    BACKEND_TYPE: opts.backend,
    GRPC_TRANSPORT: opts.transport,
    LOG_LEVEL: 'warn',
    USE_STATSD: 'false',
  };
  if (opts.backend === 'redis') env.REDIS_URL = `redis://127.0.0.1:${opts.redisPort}`;
  const child = spawnTracked(process.execPath, [main], { env });
  const alive = (): boolean => child.exitCode === null && child.signalCode === null;
  try {
    await waitForPort(grpcPort, 20_000, alive);
    await probe(grpcPort, 10_000, alive);
  } catch (e) {
    await stopProcess(child);
    throw new Error(`service (${opts.backend}, ${opts.transport}) did not become ready: ${e instanceof Error ? e.message : e}\n${child.stderrTail()}`);
  }
  return { port: grpcPort, pid: child.pid!, stop: () => stopProcess(child, 6000) };
}

interface LoadPlan {
  readonly generator: Generator;
  readonly port: number;
  readonly bodiesFile: string;
  readonly singleBodyFile: string;
  readonly durationS: number;
  readonly rps?: number;
}

async function generate(plan: LoadPlan, opts: BenchOptions, tmp: string): Promise<LoadResult> {
  if (plan.generator === 'h2load') {
    return runH2load({
      port: plan.port,
      bodyFile: plan.singleBodyFile,
      clients: opts.clients,
      streams: opts.streams,
      threads: 1,
      durationS: plan.durationS,
      rps: plan.rps,
      tmpDir: tmp,
    });
  }
  // The generator runs in its own process so that it never shares an event loop with the measurement.
  const args = [
    join(__dirname, 'node-load.js'),
    '--target', `127.0.0.1:${plan.port}`,
    '--bodies', plan.bodiesFile,
    '--concurrency', String(opts.clients * opts.streams),
    '--connections', String(opts.clients),
    '--duration', String(plan.durationS),
  ];
  if (plan.rps !== undefined) args.push('--rps', String(Math.round(plan.rps)));
  const r = await runCommand(process.execPath, args, (plan.durationS + 30) * 1000);
  if (r.code !== 0) throw new Error(`node load generator exited ${r.code}: ${r.stderr.trim()}`);
  return JSON.parse(r.stdout.trim().split('\n').pop()!) as LoadResult;
}

async function measure(plan: LoadPlan, opts: BenchOptions, tmp: string, target: Target, redis?: Redis): Promise<RunMeasure> {
  const before = processUsage(target.pid);
  const redisBefore = redis ? processUsage(redis.pid) : undefined;
  const callsBefore = redis ? await redisCommandCalls(redis.port) : 0;
  const t0 = performance.now();
  const load = await generate(plan, opts, tmp);
  const wallS = (performance.now() - t0) / 1000;
  const after = processUsage(target.pid);
  const m: RunMeasure = {
    load,
    wallS,
    cpuCores: (after.cpuSeconds - before.cpuSeconds) / wallS,
    rssMiB: after.rssBytes / 2 ** 20,
  };
  if (!redis || !redisBefore) return m;
  const callsAfter = await redisCommandCalls(redis.port);
  const redisAfter = processUsage(redis.pid);
  return {
    ...m,
    redisCpuCores: (redisAfter.cpuSeconds - redisBefore.cpuSeconds) / wallS,
    redisCommandsPerDecision: load.ok > 0 ? (callsAfter - callsBefore) / load.ok : undefined,
  };
}

function summarise(runs: readonly RunMeasure[], noopRps?: number): ScenarioSummary {
  const med = (f: (r: RunMeasure) => number | undefined): number => median(runs.map(f).filter((x): x is number => x !== undefined));
  const decisionsPerS = med((r) => r.load.rps);
  const redisCmds = med((r) => r.redisCommandsPerDecision);
  const redisCpu = med((r) => r.redisCpuCores);
  return {
    decisionsPerS,
    p50Ms: med((r) => r.load.latencyMs.p50),
    p99Ms: med((r) => r.load.latencyMs.p99),
    p999Ms: med((r) => r.load.latencyMs.p999),
    errors: runs.reduce((s, r) => s + r.load.errors, 0),
    ratioToNoop: noopRps ? decisionsPerS / noopRps : undefined,
    redisCommandsPerDecision: Number.isFinite(redisCmds) ? redisCmds : undefined,
    cpuCores: med((r) => r.cpuCores),
    redisCpuCores: Number.isFinite(redisCpu) ? redisCpu : undefined,
    rssMiB: med((r) => r.rssMiB),
  };
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

/** Runs the scenarios and returns the result; never leaves a process behind. */
export async function runBench(opts: BenchOptions): Promise<BenchResult> {
  const hasH2load = opts.generator !== 'node' && (await h2loadAvailable());
  if (opts.generator === 'h2load' && !hasH2load) throw new Error('h2load not found: apt-get install -y nghttp2-client');
  const specs = scenarioSpecs(opts, hasH2load);
  const machine = await describeMachine();
  const tmp = mkdtempSync(join(tmpdir(), 'slidegate-bench-'));
  const configDir = join(tmp, 'config');
  mkdirSync(configDir);
  writeFileSync(join(configDir, 'bench.yaml'), CONFIG_YAML);
  const files = new Map<Workload, { bodiesFile: string; singleBodyFile: string; descriptors: number }>();
  for (const w of ['one', 'five', 'keys10k', 'attack'] as const) {
    const { bodies, descriptors } = workloadBodies(w);
    const bodiesFile = join(tmp, `${w}.frames`);
    const singleBodyFile = join(tmp, `${w}.body`);
    writeFileSync(bodiesFile, Buffer.concat(bodies.map(grpcFrame)));
    writeFileSync(singleBodyFile, grpcFrame(bodies[0]));
    files.set(w, { bodiesFile, singleBodyFile, descriptors });
  }

  const targets = new Map<string, Promise<Target>>();
  let redis: Promise<Redis> | undefined;
  const getRedis = (): Promise<Redis> => (redis ??= startRedis());
  const getTarget = (s: ScenarioSpec): Promise<Target> => {
    const key = `${s.target}:${s.transport}:${s.backend ?? ''}`;
    let t = targets.get(key);
    if (!t) {
      t =
        s.target === 'noop'
          ? startNoop(s.transport)
          : (s.backend === 'redis' ? getRedis() : Promise.resolve(undefined)).then((r) =>
              startService({ backend: s.backend!, transport: s.transport, configDir, redisPort: r?.port }),
            );
      t.catch(() => undefined); // reported by the scenario that awaits it
      targets.set(key, t);
    }
    return t;
  };

  const results: ScenarioResult[] = [];
  const noopRps = new Map<string, number>();
  try {
    for (const s of specs) {
      const f = files.get(s.workload)!;
      const base = { name: s.name, description: s.description, target: s.target, transport: s.transport, backend: s.backend, workload: s.workload, generator: s.generator, descriptors: f.descriptors };
      let targetRps: number | undefined;
      try {
        if (s.rateOf) {
          const ref = results.find((r) => r.name === s.rateOf!.scenario)?.summary?.decisionsPerS;
          if (!ref) throw new Error(`no measured maximum from ${s.rateOf.scenario}`);
          targetRps = ref * s.rateOf.fraction;
        }
        const target = await getTarget(s);
        const r = s.backend === 'redis' ? await getRedis() : undefined;
        const plan = { generator: s.generator, port: target.port, bodiesFile: f.bodiesFile, singleBodyFile: f.singleBodyFile, rps: targetRps };
        if (opts.warmupS > 0) await generate({ ...plan, durationS: opts.warmupS }, opts, tmp);
        const runs: RunMeasure[] = [];
        for (let i = 0; i < opts.repeats; i++) runs.push(await measure({ ...plan, durationS: opts.durationS }, opts, tmp, target, r));
        const summary = summarise(runs, s.target === 'noop' ? undefined : noopRps.get(`${s.transport}/${s.generator}`));
        if (s.target === 'noop') noopRps.set(`${s.transport}/${s.generator}`, summary.decisionsPerS);
        results.push({ ...base, targetRps, runs, summary });
        process.stderr.write(`${s.name}: ${fmt(summary.decisionsPerS)} decisions/s, p99 ${fmt(summary.p99Ms, 2)} ms\n`);
      } catch (e) {
        const error = e instanceof Error ? e.message : String(e);
        results.push({ ...base, targetRps, runs: [], error });
        process.stderr.write(`${s.name}: FAILED ${error.split('\n')[0]}\n`);
      }
    }
  } finally {
    for (const t of targets.values()) await t.then((x) => x.stop()).catch(() => undefined);
    if (redis) await redis.then((x) => x.stop()).catch(() => undefined);
    rmSync(tmp, { recursive: true, force: true });
  }
  const { only, out: _out, docs: _docs, ...rest } = opts;
  return { date: isoDate(), machine, options: { ...rest, only: only?.source }, scenarios: results };
}

/** A one-line description of the machine, for tables. */
export function machineLine(m: Machine): string {
  return `${m.nproc} CPUs (${m.cpuModel}), ${m.memoryGiB} GiB RAM, ${m.os}, Node ${m.node}${m.redis ? `, ${m.redis.replace(/ sha=.*/, '')}` : ''}${m.h2load ? `, ${m.h2load}` : ''}`;
}

/** The summary table, one row per scenario (medians of the repeats). */
export function benchTable(result: BenchResult): string {
  const rows = result.scenarios.map((s) => {
    const m = s.summary;
    if (!m) return [s.name, 'failed', '-', '-', '-', '-', '-', '-', '-'];
    return [
      s.name,
      fmt(m.decisionsPerS),
      fmt(m.p50Ms, 2),
      fmt(m.p99Ms, 2),
      fmt(m.p999Ms, 2),
      m.ratioToNoop === undefined ? '-' : fmt(m.ratioToNoop, 2),
      m.redisCommandsPerDecision === undefined ? '-' : fmt(m.redisCommandsPerDecision, 2),
      fmt(m.cpuCores, 2) + (m.redisCpuCores === undefined ? '' : ` + ${fmt(m.redisCpuCores, 2)}`),
      fmt(m.rssMiB),
    ];
  });
  return markdownTable(
    ['scenario / generator', 'decisions/s', 'p50 ms', 'p99 ms', 'p99.9 ms', 'vs no-op', 'Redis cmds/decision', 'CPU cores (svc + redis)', 'RSS MiB'],
    rows,
    ['l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
  );
}

/** Throughput and p99 per scenario. */
export function benchSvg(result: BenchResult): string {
  const ok = result.scenarios.filter((s) => s.summary);
  return barChartSvg({
    title: `Throughput and tail latency (${result.date}, ${result.machine.nproc} CPUs)`,
    series: ['median of repeats'],
    panels: [
      { title: 'Decisions per second', unit: 'thousands', decimals: 1, groups: ok.map((s) => ({ label: s.name, values: [s.summary!.decisionsPerS / 1000] })) },
      { title: 'p99 latency', unit: 'ms', decimals: 2, groups: ok.map((s) => ({ label: s.name, values: [s.summary!.p99Ms] })) },
    ],
  });
}

function parseArgs(argv: readonly string[]): BenchOptions {
  const root = repoRoot(__dirname);
  let tiny = false;
  let repeats: number | undefined;
  let durationS: number | undefined;
  let generator: BenchOptions['generator'] = 'auto';
  let only: RegExp | undefined;
  let out = join(root, 'bench', 'results');
  let docs = true;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--tiny') tiny = true;
    else if (a === '--repeats') repeats = Number(argv[++i]);
    else if (a === '--duration') durationS = Number(argv[++i]);
    else if (a === '--generator') generator = argv[++i] as BenchOptions['generator'];
    else if (a === '--only') only = new RegExp(argv[++i]);
    else if (a === '--out') out = argv[++i];
    else if (a === '--no-docs') docs = false;
    else throw new Error(`unknown argument ${a}`);
  }
  if (!['auto', 'node', 'h2load'].includes(generator)) throw new Error('--generator must be auto, node or h2load');
  const o: BenchOptions = {
    tiny,
    repeats: repeats ?? (tiny ? 1 : 3),
    durationS: durationS ?? (tiny ? 1.5 : 10),
    warmupS: tiny ? 0 : 2,
    generator,
    only,
    out,
    docs: docs && !tiny, // tiny numbers are for smoke tests, never for the published table
    clients: 4,
    streams: 50,
  };
  if (!Number.isInteger(o.repeats) || o.repeats < 1 || o.repeats > 20) throw new Error('--repeats must be 1..20');
  if (!(o.durationS > 0 && o.durationS <= 600)) throw new Error('--duration must be in (0, 600] seconds');
  return o;
}

async function main(): Promise<void> {
  const opts = parseArgs(process.argv.slice(2));
  const result = await runBench(opts);
  mkdirSync(opts.out, { recursive: true });
  const base = join(opts.out, opts.tiny ? `tiny-${result.date}` : result.date);
  const table = benchTable(result);
  const machine = machineLine(result.machine);
  writeFileSync(`${base}.json`, JSON.stringify(result, null, 2) + '\n');
  writeFileSync(`${base}.svg`, benchSvg(result));
  writeFileSync(`${base}.md`, `${table}\n\nMachine: ${machine}\n`);
  if (opts.docs) {
    const root = repoRoot(__dirname);
    const block = `${table}\n\nMedians of ${opts.repeats} runs of ${opts.durationS} s, ${opts.clients} connections x ${opts.streams} streams, ${result.date}. Machine: ${machine}, free memory ${fmt(freemem() / 2 ** 30, 1)} GiB at the end. \`make bench\` regenerates it (bench/results/${result.date}.json).`;
    for (const file of [join(root, 'docs', 'performance.md'), join(root, 'README.md')]) replaceBetweenMarkers(file, 'bench', block);
  }
  process.stdout.write(`${table}\n\nMachine: ${machine}\nwrote ${base}.json, .svg, .md\n`);
  const failed = result.scenarios.filter((s) => s.error);
  if (failed.length > 0) process.exitCode = 1;
}

if (require.main === module) {
  main().catch((e: unknown) => {
    process.stderr.write(`${e instanceof Error ? e.stack ?? e.message : String(e)}\n`);
    process.exit(1);
  });
}
