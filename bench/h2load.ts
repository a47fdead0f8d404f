import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { summarize } from './latency';
import type { LoadResult } from './load-result';
import { runCommand } from './processes';
import { SHOULD_RATE_LIMIT_PATH } from './rls-codec';

/**
 * Runs nghttp2's h2load against a gRPC endpoint. h2load posts one fixed body (a prebuilt gRPC frame)
 * on every request and cannot read gRPC trailers: a 200 counts as success. Percentiles come from its
 * per-request log file, since its summary only has min/mean/max.
 */

export interface H2loadOptions {
  readonly port: number;
  /** File holding exactly one gRPC frame. */
  readonly bodyFile: string;
  readonly clients: number;
  readonly streams: number;
  readonly threads: number;
  readonly durationS: number;
  readonly warmupS?: number;
  /** Total rate across clients (h2load's own flag is per client). */
  readonly rps?: number;
  /** Where to put the per-request log (deleted afterwards). */
  readonly tmpDir: string;
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

export async function runH2load(opts: H2loadOptions): Promise<LoadResult> {
  const log = join(opts.tmpDir, `h2load-${process.pid}-${Date.now()}.log`);
  const args = [
    '-c', String(opts.clients),
    '-m', String(opts.streams),
    '-t', String(opts.threads),
    '-D', `${Math.max(1, Math.round(opts.durationS * 1000))}ms`,
    '-d', opts.bodyFile,
    '-H', 'content-type: application/grpc',
    '-H', 'te: trailers',
    `--log-file=${log}`,
  ];
  if (opts.warmupS) args.push(`--warm-up-time=${opts.warmupS}`);
  if (opts.rps !== undefined) args.push(`--rps=${Math.max(1, Math.round(opts.rps / opts.clients))}`);
  args.push(`http://127.0.0.1:${opts.port}${SHOULD_RATE_LIMIT_PATH}`);
  const timeoutMs = (opts.durationS + (opts.warmupS ?? 0) + 20) * 1000;
  const r = await runCommand('h2load', args, timeoutMs);
  if (r.code !== 0) throw new Error(`h2load exited ${r.code}: ${r.stderr.trim() || r.stdout.trim()}`);
  // "requests: 1000 total, 1000 started, 1000 done, 998 succeeded, 2 failed, 2 errored, 0 timeout"
  const m = /requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored/.exec(r.stdout);
  if (!m) throw new Error(`unexpected h2load output: ${r.stdout.slice(0, 500)}`);
  const done = Number(m[3]);
  const ok = Number(m[4]);
  let samples = new Float64Array(0);
  try {
    const lines = readFileSync(log, 'utf8').split('\n');
    samples = new Float64Array(lines.length);
    let n = 0;
    for (const line of lines) {
      const cols = line.split('\t');
      if (cols.length >= 3) samples[n++] = Number(cols[2]) / 1000;
    }
    samples = samples.subarray(0, n);
  } finally {
    rmSync(log, { force: true });
  }
  return {
    generator: 'h2load',
    requests: done,
    ok,
    errors: done - ok,
    durationS: opts.durationS,
    rps: ok / opts.durationS,
    latencyMs: summarize(samples),
    firstError: done > ok ? r.stdout.split('\n').find((l) => l.startsWith('status codes')) : undefined,
  };
}
