import { runH2load } from './h2load';
import { median } from './latency';
import type { Target } from './targets';

/**
 * Cold start: the service (Redis, its default workers) started afresh and driven at a fixed rate
 * from the moment it answers, as when a pod joins a mesh under load. Each run starts a new service;
 * the variants (WARM_UP_CALLS values) take turns, so that a machine whose speed drifts moves them alike.
 * What counts is how many calls Envoy would have given up on (slower than its 20 ms default).
 */

export interface ColdStartRun {
  readonly calls: number;
  readonly errors: number;
  /** Calls slower than Envoy's default timeout. */
  readonly overTimeout: number;
  readonly p99Ms: number;
  readonly p999Ms: number;
  readonly maxMs: number;
}

export interface ColdStartResult {
  /** The service's WARM_UP_CALLS in these runs. */
  readonly warmUpCalls: number;
  /** Whether that is the shipped default. */
  readonly isDefault: boolean;
  readonly rps: number;
  readonly connections: number;
  readonly durationS: number;
  readonly runs: readonly ColdStartRun[];
  /** Medians over the runs. */
  readonly summary?: { readonly overTimeout: number; readonly p99Ms: number; readonly p999Ms: number; readonly maxMs: number; readonly errors: number };
  readonly error?: string;
}

export interface ColdStartOptions {
  /** WARM_UP_CALLS values to compare. */
  readonly variants: readonly number[];
  /** The shipped default, marked in the results. */
  readonly defaultWarmUpCalls: number;
  readonly repeats: number;
  readonly rps: number;
  readonly connections: number;
  readonly durationS: number;
  readonly streams: number;
  /** Starts a fresh service with these extra environment variables; resolves once it answers. */
  readonly start: (env: Readonly<Record<string, string>>) => Promise<Target>;
  /** The call to post (h2load -d) and the DATA size range of its OK answers. */
  readonly bodyFile: string;
  readonly okBytes: { readonly min: number; readonly max: number };
  readonly tmpDir: string;
}

/** Runs every variant `repeats` times, in turns; a variant whose service fails to start or run reports the error. */
export async function measureColdStart(opts: ColdStartOptions): Promise<ColdStartResult[]> {
  const runs = opts.variants.map(() => [] as ColdStartRun[]);
  const errors: (string | undefined)[] = opts.variants.map(() => undefined);
  for (let i = 0; i < opts.repeats; i++) {
    for (let v = 0; v < opts.variants.length; v++) {
      if (errors[v] !== undefined) continue;
      let target: Target | undefined;
      try {
        target = await opts.start({ WARM_UP_CALLS: String(opts.variants[v]) });
        const load = await runH2load({
          port: target.port,
          bodyFile: opts.bodyFile,
          clients: opts.connections,
          streams: opts.streams,
          threads: 1,
          durationS: opts.durationS,
          rps: opts.rps,
          okBytes: opts.okBytes,
          tmpDir: opts.tmpDir,
        });
        const l = load.latencyMs;
        runs[v].push({ calls: load.requests, errors: load.errors, overTimeout: l.overTimeout, p99Ms: l.p99, p999Ms: l.p999, maxMs: l.max });
      } catch (e) {
        errors[v] = e instanceof Error ? e.message : String(e);
      } finally {
        await target?.stop();
      }
    }
  }
  return opts.variants.map((warmUpCalls, v) => {
    const r = runs[v];
    const med = (f: (x: ColdStartRun) => number): number => median(r.map(f));
    return {
      warmUpCalls,
      isDefault: warmUpCalls === opts.defaultWarmUpCalls,
      rps: opts.rps,
      connections: opts.connections,
      durationS: opts.durationS,
      runs: r,
      summary:
        errors[v] === undefined && r.length > 0
          ? {
              overTimeout: med((x) => x.overTimeout),
              p99Ms: med((x) => x.p99Ms),
              p999Ms: med((x) => x.p999Ms),
              maxMs: med((x) => x.maxMs),
              errors: r.reduce((n, x) => n + x.errors, 0),
            }
          : undefined,
      error: errors[v],
    };
  });
}
