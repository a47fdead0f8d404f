import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { summarize } from './latency';
import type { LoadResult } from './load-result';
import { runCommand } from './processes';
import { SHOULD_RATE_LIMIT_PATH } from './rls-codec';

/**
 * Runs nghttp2's h2load against a gRPC endpoint: one fixed body (a prebuilt gRPC frame) on every
 * request; percentiles from its per-request log file, since its summary only has min/mean/max.
 *
 * h2load knows nothing of gRPC: a gRPC error is an HTTP 200 like a success, so its "succeeded" count
 * would hide every failed call. Successes are counted from the DATA bytes instead. A gRPC error is
 * a trailers-only answer and carries no DATA; a successful answer carries one framed message whose
 * size the caller measured beforehand (a range: durations and remaining counts make the size vary by
 * a few bytes). So `data / smallest size` bounds the successes from above, and `errors` is the count
 * of calls that certainly failed; `errorsUpperBound` is the most that may have. The two are equal
 * when every successful answer has the same size (the no-op servers).
 */

export interface H2loadOptions {
  readonly port: number;
  /** File holding exactly one gRPC frame. */
  readonly bodyFile: string;
  readonly clients: number;
  readonly streams: number;
  readonly threads: number;
  readonly durationS: number;
  /** Total rate across clients (h2load's own flag is per client, and it sends each client's share in bursts). */
  readonly rps?: number;
  /** DATA bytes of one successful answer (5-byte prefix included): the smallest and the largest seen. */
  readonly okBytes: { readonly min: number; readonly max: number };
  /** Where to put the per-request log (deleted afterwards). */
  readonly tmpDir: string;
}

/**
 * The successful calls consistent with the DATA bytes received, when a success carries between
 * okBytes.min and okBytes.max bytes and an error none: at most data / min, at least data / max.
 */
export function successesFromData(opts: { http200: number; dataBytes: number; okBytes: { readonly min: number; readonly max: number } }): {
  okAtMost: number;
  okAtLeast: number;
} {
  const okAtMost = Math.min(opts.http200, Math.floor(opts.dataBytes / opts.okBytes.min));
  return { okAtMost, okAtLeast: Math.min(okAtMost, Math.ceil(opts.dataBytes / opts.okBytes.max)) };
}

/** True when h2load is on PATH. */
export async function h2loadAvailable(): Promise<boolean> {
  try {
    const r = await runCommand('h2load', ['--version'], 5000);
    return r.code === 0;
  } catch {
    return false;
  }
}

/** One h2load process's counts: calls done, HTTP 200s, DATA bytes, the successes they imply, latencies (ms). */
interface H2loadCounts {
  readonly done: number;
  readonly http200: number;
  readonly data: number;
  readonly okAtMost: number;
  readonly okAtLeast: number;
  readonly samples: Float64Array;
}

async function h2loadCounts(opts: H2loadOptions, logName: string): Promise<H2loadCounts> {
  const log = join(opts.tmpDir, `h2load-${process.pid}-${Date.now()}-${logName}.log`);
  const args = [
    '-c',
    String(opts.clients),
    '-m',
    String(opts.streams),
    '-t',
    String(opts.threads),
    '-D',
    `${Math.max(1, Math.round(opts.durationS * 1000))}ms`,
    '-d',
    opts.bodyFile,
    '-H',
    'content-type: application/grpc',
    '-H',
    'te: trailers',
    `--log-file=${log}`,
  ];
  if (opts.rps !== undefined) args.push(`--rps=${Math.max(1, Math.round(opts.rps / opts.clients))}`);
  args.push(`http://127.0.0.1:${opts.port}${SHOULD_RATE_LIMIT_PATH}`);
  try {
    const r = await runCommand('h2load', args, (opts.durationS + 20) * 1000);
    if (r.code !== 0) throw new Error(`h2load exited ${r.code}: ${r.stderr.trim() || r.stdout.trim()}`);
    // "requests: 1000 total, 1000 started, 1000 done, 998 succeeded, 2 failed, 2 errored, 0 timeout"
    const m = /requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded/.exec(r.stdout);
    // "traffic: 3.66MB (3835812) total, 1.19MB (1250046) headers (space savings 93.21%), 1.91MB (2000040) data"
    const t = /traffic: .*\((\d+)\) data/.exec(r.stdout);
    if (!m || !t) throw new Error(`unexpected h2load output: ${r.stdout.slice(0, 500)}`);
    const done = Number(m[3]);
    const http200 = Number(m[4]);
    const data = Number(t[1]);
    const lines = readFileSync(log, 'utf8').split('\n');
    let samples = new Float64Array(lines.length);
    let n = 0;
    // Columns: start time (µs since the epoch), HTTP status, duration (µs).
    for (const line of lines) {
      const cols = line.split('\t');
      if (cols.length >= 3) samples[n++] = Number(cols[2]) / 1000;
    }
    samples = samples.subarray(0, n);
    return { done, http200, data, ...successesFromData({ http200, dataBytes: data, okBytes: opts.okBytes }), samples };
  } finally {
    rmSync(log, { force: true });
  }
}

function loadResult(generator: 'h2load' | 'h2load-mix', parts: readonly H2loadCounts[], durationS: number, attackShare?: number): LoadResult {
  const sum = (f: (c: H2loadCounts) => number): number => parts.reduce((n, c) => n + f(c), 0);
  const done = sum((c) => c.done);
  const okAtMost = sum((c) => c.okAtMost);
  const samples = new Float64Array(sum((c) => c.samples.length));
  let at = 0;
  for (const c of parts) {
    samples.set(c.samples, at);
    at += c.samples.length;
  }
  const errors = done - okAtMost;
  return {
    generator,
    requests: done,
    ok: okAtMost,
    errors,
    errorsUpperBound: done - sum((c) => c.okAtLeast),
    durationS,
    rps: okAtMost / durationS,
    latencyMs: summarize(samples),
    attackShare,
    firstError:
      errors > 0
        ? `${done} calls, ${sum((c) => c.http200)} HTTP 200, ${sum((c) => c.data)} DATA bytes: at least ${errors} answers without a message (gRPC errors)`
        : undefined,
  };
}

/** Runs h2load once and reports successes as gRPC sees them. */
export async function runH2load(opts: H2loadOptions): Promise<LoadResult> {
  return loadResult('h2load', [await h2loadCounts(opts, 'one')], opts.durationS);
}

/** The attack mix: two bodies, each posted by its own h2load process, with the DATA size of its answers. */
export interface H2loadMixOptions extends Omit<H2loadOptions, 'bodyFile' | 'clients' | 'okBytes' | 'rps'> {
  readonly attacker: { readonly bodyFile: string; readonly clients: number; readonly okBytes: { readonly min: number; readonly max: number } };
  /** `rps`: the normal process's total rate; unset, it posts as fast as its answers come back. */
  readonly normal: {
    readonly bodyFile: string;
    readonly clients: number;
    readonly okBytes: { readonly min: number; readonly max: number };
    readonly rps?: number;
  };
}

/**
 * Runs two h2load processes at once for the same duration, one posting the attacker body and one
 * the normal body, and sums their counts and latencies. Each counts its successes from its own DATA
 * bytes and answer size (an OVER_LIMIT answer is a success, of another size than an OK one).
 * `attackShare` is the attacker's share of all calls done, as measured. With `normal.rps` the
 * normal process is paced (open loop), so the share does not follow the target's latencies.
 */
export async function runH2loadMix(opts: H2loadMixOptions): Promise<LoadResult> {
  const [attacker, normal] = await Promise.all([h2loadCounts({ ...opts, ...opts.attacker }, 'attacker'), h2loadCounts({ ...opts, ...opts.normal }, 'normal')]);
  const all = attacker.done + normal.done;
  return loadResult('h2load-mix', [attacker, normal], opts.durationS, all > 0 ? attacker.done / all : undefined);
}
