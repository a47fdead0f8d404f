import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { callOn, connectSession } from './http2-load';
import { repoRoot } from './paths';
import { freePort, runCommand, sleep, spawnTracked, stopProcess, waitForPort } from './processes';
import { overallCode } from './rls-codec';
import { defaultWorkers, type Backend, type Transport } from './scenarios';

/** The processes a benchmark measures: its own redis-server, the no-op servers and the service. */

/** A process under load: where to send calls and which pid (with its descendants) to measure. */
export interface Target {
  readonly port: number;
  /** The HTTP port (`PORT`) of a service; absent for a no-op server. */
  readonly httpPort?: number;
  readonly pid: number;
  /** Processes answering calls: the service's worker count, 1 otherwise. */
  readonly workers: number;
  stop(): Promise<void>;
}

export interface RedisProcess {
  readonly port: number;
  readonly pid: number;
  stop(): Promise<void>;
}

/** Starts redis-server on a free port (never 6379's), without persistence. */
export async function startRedis(): Promise<RedisProcess> {
  const port = await freePort();
  const child = spawnTracked('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--loglevel', 'warning']);
  let failed: Error | undefined;
  child.on('error', (e) => (failed = e));
  await waitForPort(port, 10_000, () => failed === undefined && child.exitCode === null).catch((e: unknown) => {
    throw new Error(
      `redis-server did not start${failed ? `: ${failed.message}` : ''} (${e instanceof Error ? e.message : e}); install it with \`make redis-server\``,
    );
  });
  return { port, pid: child.pid!, stop: () => stopProcess(child) };
}

/** Commands Redis has executed so far (`INFO` itself excluded), and how many of them were script calls. */
export interface RedisCommandCount {
  /** Every command, those a script runs inside Redis included. */
  readonly commands: number;
  /** EVAL, EVALSHA and FCALL (and their read-only forms): what a client sends to run a script. */
  readonly scripts: number;
  /** Microseconds Redis spent running those scripts (the commands they ran included). */
  readonly scriptUsec: number;
}

const SCRIPT_CALLS = /^(eval|evalsha|eval_ro|evalsha_ro|fcall|fcall_ro)$/;

export async function redisCommandCalls(port: number): Promise<RedisCommandCount> {
  const r = await runCommand('redis-cli', ['-h', '127.0.0.1', '-p', String(port), 'INFO', 'commandstats'], 5000);
  let commands = 0;
  let scripts = 0;
  let scriptUsec = 0;
  for (const m of r.stdout.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) {
    if (m[1] === 'info') continue;
    commands += Number(m[2]);
    if (SCRIPT_CALLS.test(m[1])) {
      scripts += Number(m[2]);
      scriptUsec += Number(m[3]);
    }
  }
  return { commands, scripts, scriptUsec };
}

/**
 * Calls ShouldRateLimit with `frame` until an answer is OK (config loaded, store reachable), then
 * `samples` more times spread over `spreadMs`, and returns the range of DATA sizes of the OK answers
 * (h2load's success count needs it). An answer's size follows the clock: the milliseconds of
 * duration_until_reset are a varint of 0 to 5 bytes, and they cycle once a second. So the samples
 * span a whole second to meet every common size; the rarest (a few per thousand, a few bytes
 * smaller) weigh far less in a run's total than the common sizes above the smallest.
 */
export async function probeAnswers(
  port: number,
  frame: Buffer,
  opts: { timeoutMs: number; samples: number; spreadMs?: number; alive: () => boolean },
): Promise<{ min: number; max: number }> {
  const deadline = Date.now() + opts.timeoutMs;
  let last = 'no answer';
  while (Date.now() < deadline) {
    if (!opts.alive()) throw new Error('process exited');
    const session = await connectSession(port).catch((e: unknown) => {
      last = e instanceof Error ? e.message : String(e);
      return undefined;
    });
    if (session) {
      try {
        const sizes: number[] = [];
        const gapMs = opts.samples > 0 ? (opts.spreadMs ?? 0) / opts.samples : 0;
        for (let i = 0; i <= opts.samples && Date.now() < deadline; i++) {
          if (i > 1 && gapMs > 0) await sleep(gapMs);
          const a = await callOn(session, frame, 1000);
          const code = a.status === 0 && a.data.length > 5 ? overallCode(a.data.subarray(5)) : -1;
          if (a.status === 0 && (code === 1 || code === 2)) sizes.push(a.data.length);
          else {
            last = a.status === undefined ? 'stream failed' : a.status === 0 ? `overall_code ${code}` : `grpc-status ${a.status}`;
            sizes.length = 0;
            break;
          }
        }
        if (sizes.length > opts.samples) return { min: Math.min(...sizes), max: Math.max(...sizes) };
      } finally {
        session.close();
      }
    }
    await sleep(100);
  }
  throw new Error(`no OK answer within ${opts.timeoutMs} ms (last: ${last})`);
}

/**
 * Starts a no-op server (bench/noop-server.ts) with `workers` processes (more than one: node:cluster
 * workers under a primary, as the service runs) and resolves once every one listens and a call is answered.
 */
export async function startNoop(transport: Transport, probeFrame: Buffer, workers = 1): Promise<Target> {
  const port = await freePort();
  const child = spawnTracked(process.execPath, [
    join(__dirname, 'noop-server.js'),
    '--transport',
    transport,
    '--port',
    String(port),
    '--workers',
    String(workers),
  ]);
  const listening = countLines(child, 'listening ');
  const alive = (): boolean => child.exitCode === null && child.signalCode === null;
  try {
    await waitForPort(port, 10_000, alive);
    await waitForWorkers(workers, listening, alive);
    await probeAnswers(port, probeFrame, { timeoutMs: 5_000, samples: 0, alive });
  } catch (e) {
    await stopProcess(child);
    throw new Error(`no-op ${transport} server did not become ready: ${e instanceof Error ? e.message : e}\n${child.stderrTail()}`);
  }
  return { port, pid: child.pid!, workers, stop: () => stopProcess(child) };
}

/** Counts the lines a child (and its cluster workers, which share its stdout) writes containing `marker`. */
function countLines(child: ReturnType<typeof spawnTracked>, marker: string): () => number {
  let n = 0;
  const count = (d: Buffer): void => {
    n += d.toString().split(marker).length - 1;
  };
  child.stdout?.on('data', count);
  child.stderr?.on('data', count);
  return () => n;
}

// Until every worker listens, node:cluster hands every connection to the ones that do, and a load
// generator's few long-lived connections would stay on them for the whole run.
async function waitForWorkers(workers: number, listening: () => number, alive: () => boolean): Promise<void> {
  const until = Date.now() + 20_000;
  while (listening() < workers) {
    if (!alive()) throw new Error('process exited');
    if (Date.now() > until) throw new Error(`${listening()} of ${workers} workers listening after 20 s`);
    await sleep(50);
  }
}

export interface ServiceOptions {
  readonly backend: Backend;
  readonly transport: Transport;
  readonly configDir: string;
  readonly redisPort?: number;
  readonly probeFrame: Buffer;
  /** Extra environment (tiny runs raise STORE_TIMEOUT_MS). */
  readonly env?: Readonly<Record<string, string>>;
  /** WORKERS; the service's default for its store when absent (what `make bench` measures). */
  readonly workers?: number;
}

/**
 * Starts the service as shipped (`node dist/src/main.js`, default WORKERS: one per core with Redis,
 * unless told otherwise) and resolves once every worker listens and a call is answered OK.
 */
export async function startService(opts: ServiceOptions): Promise<Target> {
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
    // info, not warn: each worker logs one line when it listens, which tells when all of them serve.
    // Nothing is logged per call at this level.
    LOG_LEVEL: 'info',
    LOG_FORMAT: 'json',
    USE_STATSD: 'false',
    ...opts.env,
  };
  if (opts.backend === 'redis') env.REDIS_URL = `redis://127.0.0.1:${opts.redisPort}`;
  // The service's own default (src/settings/settings.ts): the benchmark measures what ships.
  const workers = opts.workers ?? defaultWorkers(opts.backend);
  if (opts.workers !== undefined) env.WORKERS = String(opts.workers);
  const child = spawnTracked(process.execPath, [main], { env });
  // info-level logs: each worker logs this once it listens.
  const listening = countLines(child, '"gRPC listening"');
  const alive = (): boolean => child.exitCode === null && child.signalCode === null;
  try {
    await waitForPort(grpcPort, 20_000, alive);
    await waitForWorkers(workers, listening, alive);
    await probeAnswers(grpcPort, opts.probeFrame, { timeoutMs: 10_000, samples: 0, alive });
  } catch (e) {
    await stopProcess(child, 6000);
    throw new Error(`service (${opts.backend}, ${opts.transport}) did not become ready: ${e instanceof Error ? e.message : e}\n${child.stderrTail()}`);
  }
  return { port: grpcPort, httpPort, pid: child.pid!, workers, stop: () => stopProcess(child, 6000) };
}

/** A config directory of its own holding `<name>.yaml` (`yaml`), for `use`; removed once it is done. */
export async function withConfigDir<T>(name: string, yaml: string, use: (configDir: string) => Promise<T>): Promise<T> {
  const tmp = mkdtempSync(join(tmpdir(), `slidegate-${name}-`));
  try {
    const configDir = join(tmp, 'config');
    mkdirSync(configDir);
    writeFileSync(join(configDir, `${name}.yaml`), yaml);
    return await use(configDir);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}
