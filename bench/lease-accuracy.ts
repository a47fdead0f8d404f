import type { ClientHttp2Session } from 'node:http2';
import { loadavg } from 'node:os';
import { loadSettings } from '../src/settings/settings';
import { callOn, connectSession } from './http2-load';
import { fmt, markdownTable } from './markdown';
import { sleep } from './processes';
import { encodeRateLimitRequest, grpcFrame, overallCode } from './rls-codec';
import { startRedis, startService, withConfigDir, type Target } from './targets';

/**
 * Accuracy of leases (`lease: true`) across replicas, measured on real processes: two services
 * (BACKEND_TYPE=redis, WORKERS=1, so each process is one replica) share one redis-server and one
 * leased sliding-window counter. This harness calls both at a paced rate per replica, which it
 * changes at a run's event, and notes when each call was admitted. Figures per run:
 * - the most hits admitted over both replicas in any span of one window, against the bound of
 *   leases: L x (1 + LEASE_EPSILON) plus one sync interval of the limit's rate (L x sync / W);
 * - what was admitted, as a share of the limit's rate (a quiet replica's headroom is left unused);
 * - after a demand shift or a replica's death, how long until the replica that takes the demand
 *   admits the whole limit (see recoveryMs()).
 *
 * An admission is dated at the middle of its call (sent, answered): the decision happened between
 * the two, so a span of W on these dates may hold what the service admitted in W plus the calls'
 * latency (the p99 and the longest are reported beside).
 */

/** The limit's rate in every run, hits per second: L = 400 per 1 s window, 4,000 per 10 s. */
export const LEASE_RATE = 400;
/** The bound's relative part, eps: leases under steady demand admit at most L x (1 + eps) plus one sync interval's worth. */
export const LEASE_EPSILON = 0.05;
/** A replica "admits the whole limit" at this share of the limit's rate (paced calls jitter a little). */
export const RECOVERY_SHARE = 0.9;
/** A replica whose shortfall is still at its largest this close to the run's end has not recovered within it. */
export const RECOVERY_TAIL_MS = 1000;

/** Calls per second to each replica (A, B here; as many as a run calls) from `fromMs` (since the run's start) until the next step. */
export interface DemandStep {
  readonly fromMs: number;
  readonly perSecond: readonly number[];
}

export type LeaseRunName = 'uneven-3-1' | 'demand-shift' | 'replica-killed';

export interface LeaseRunSpec {
  readonly name: LeaseRunName;
  readonly description: string;
  readonly windowMs: number;
  /** Hits per window. */
  readonly limit: number;
  /** Calls from 0 to warmMs are not measured (the leases' first syncs, the window's first fill). */
  readonly warmMs: number;
  /** When the demand shifts or a replica is killed (absent: steady all along). */
  readonly eventMs?: number;
  readonly endMs: number;
  readonly steps: readonly DemandStep[];
  /** The replica killed with SIGKILL at eventMs. */
  readonly killed?: 0 | 1;
  /** The replica that takes the demand at eventMs: the one recoveryMs() watches. */
  readonly rising?: 0 | 1;
}

export interface LeaseRunResult {
  readonly name: LeaseRunName;
  readonly description: string;
  readonly windowMs: number;
  readonly limit: number;
  readonly syncIntervalMs: number;
  readonly measuredMs: number;
  /** Demand (calls/s) of A and B before the event, and after it when there is one. */
  readonly demand: readonly (readonly number[])[];
  /** Admitted per second by A and B over the measured phase before the event, and after it (from the event + one window). */
  readonly admittedPerS: readonly (readonly [number, number])[];
  readonly calls: number;
  /** Calls without an answer (grpc error, timeout), those in flight to a killed replica excluded. */
  readonly errors: number;
  /** Of the errors, calls given up after CALL_TIMEOUT_MS without an answer. */
  readonly timeouts: number;
  /** Calls in flight to the killed replica when it died. */
  readonly lostToKill: number;
  /** Admitted over both replicas in the measured phase / (the limit's rate x its length). */
  readonly ofLimit: number;
  /** The most admitted over both replicas in any span of one window within the measured phase. */
  readonly worstSpan: number;
  readonly worstSpanAtMs: number;
  /** L x (1 + LEASE_EPSILON) + L x syncIntervalMs / W. */
  readonly bound: number;
  /** ms from the event until the rising replica admits the whole limit (see recoveryMs); null when it did not within the run; absent without event. */
  readonly recoveryMs?: number | null;
  readonly latencyP99Ms: number;
  readonly latencyMaxMs: number;
  /** Load average (1 min) of the machine at the run's end. */
  readonly loadAverage: number;
}

export interface LeaseAccuracyResult {
  readonly quick: boolean;
  readonly rate: number;
  readonly syncIntervalMs: number;
  readonly ttlMs: number;
  readonly runs: readonly LeaseRunResult[];
}

/**
 * The runs: for each window (1 s, and 10 s unless quick), uneven demand (3:1), a demand shift (2:1,
 * then all of it on B) and a replica killed (1:1, then B dies and its demand moves to A). The total
 * demand is 1.5 x the limit's rate throughout. Phases: a warm-up of two windows (at least 4 s), one
 * window (at least 4 s) before the event and two (at least 6 s) after it; quick runs take 2, 2 and 4 s.
 */
export function leaseRunSpecs(quick: boolean): LeaseRunSpec[] {
  const r = LEASE_RATE;
  const specs: LeaseRunSpec[] = [];
  for (const windowMs of quick ? [1000] : [1000, 10_000]) {
    const warmMs = quick ? 2000 : Math.max(2 * windowMs, 4000);
    const eventMs = warmMs + (quick ? 2000 : Math.max(windowMs, 4000));
    const endMs = eventMs + (quick ? 4000 : Math.max(2 * windowMs, 6000));
    const limit = (r * windowMs) / 1000;
    const base = { windowMs, limit, warmMs, endMs };
    specs.push(
      {
        ...base,
        name: 'uneven-3-1',
        description: 'A asks 3 times what B asks, 1.5 x the limit together',
        steps: [{ fromMs: 0, perSecond: [1.125 * r, 0.375 * r] }],
      },
      {
        ...base,
        name: 'demand-shift',
        description: 'A asks twice what B asks, 1.5 x the limit together; then B asks it all and A nothing',
        eventMs,
        rising: 1,
        steps: [
          { fromMs: 0, perSecond: [r, 0.5 * r] },
          { fromMs: eventMs, perSecond: [0, 1.5 * r] },
        ],
      },
      {
        ...base,
        name: 'replica-killed',
        description: 'A and B ask 0.75 x the limit each; then B is killed (SIGKILL) and its demand moves to A',
        eventMs,
        killed: 1,
        rising: 0,
        steps: [
          { fromMs: 0, perSecond: [0.75 * r, 0.75 * r] },
          { fromMs: eventMs, perSecond: [1.5 * r, 0] },
        ],
      },
    );
  }
  return specs;
}

/** Calls due to `replica` by `t` (ms since the start): the integral of its demand steps, rounded down. */
export function callsDue(steps: readonly DemandStep[], replica: number, t: number): number {
  let due = 0;
  for (let i = 0; i < steps.length && t > steps[i].fromMs; i++) {
    const to = Math.min(t, i + 1 < steps.length ? steps[i + 1].fromMs : Infinity);
    due += (steps[i].perSecond[replica] * (to - steps[i].fromMs)) / 1000;
  }
  return Math.floor(due + 1e-9);
}

/**
 * The most times (sorted ascending) in any span (t - windowMs, t], counting only times in
 * [fromMs, toMs], and the end of that span.
 */
export function worstSpan(times: readonly number[], windowMs: number, fromMs: number, toMs: number): { readonly count: number; readonly atMs: number } {
  let best = 0;
  let atMs = fromMs;
  let i = 0;
  while (i < times.length && times[i] < fromMs) i++;
  for (let j = i; j < times.length && times[j] <= toMs; j++) {
    while (times[i] <= times[j] - windowMs) i++;
    if (j - i + 1 > best) {
      best = j - i + 1;
      atMs = times[j];
    }
  }
  return { count: best, atMs };
}

/**
 * How long after `eventMs` a replica admits the whole limit. Its shortfall at t is what it would
 * have admitted since the event at RECOVERY_SHARE of the limit's rate (`perSecond`) less what it
 * did admit (`times`, sorted); the answer is when that shortfall was largest, less the event: from
 * then on, every stretch of the run that starts there admits at least that share of the rate, so a
 * part that grows in steps (each sync frees a little, used at once) counts once it has caught up,
 * and a dip after it counts only if it undoes the catching up. 0 when the replica never fell
 * short; null when its shortfall was still at its largest within `tailMs` of `endMs`. The region
 * runs (./region-accuracy.ts) ask the same of a region, with a share and a tail of their own.
 */
export function recoveryMs(
  times: readonly number[],
  perSecond: number,
  eventMs: number,
  endMs: number,
  share = RECOVERY_SHARE,
  tailMs = RECOVERY_TAIL_MS,
): number | null {
  const slope = (share * perSecond) / 1000;
  let worst = 0;
  let worstAt = eventMs;
  let admitted = 0;
  const consider = (t: number): void => {
    const short = slope * (t - eventMs) - admitted;
    if (short > worst) {
      worst = short;
      worstAt = t;
    }
  };
  for (const t of times) {
    if (t < eventMs) continue;
    if (t > endMs) break;
    consider(t);
    admitted++;
  }
  consider(endMs);
  if (worst <= 0) return 0;
  return worstAt > endMs - tailMs ? null : worstAt - eventMs;
}

/** One call of a run: to which replica, when it left and was answered (ms since the start), and its overall_code (undefined: failed). */
export interface CallRecord {
  readonly replica: number;
  readonly sentMs: number;
  readonly doneMs: number;
  readonly code: number | undefined;
  /** The answer's grpc-status; undefined when none came (a failed stream, or none within CALL_TIMEOUT_MS). */
  readonly status?: number;
}

/** A call given up after CALL_TIMEOUT_MS without an answer (not one answered with an error). */
export const timedOut = (c: CallRecord): boolean => c.status === undefined && c.doneMs - c.sentMs >= CALL_TIMEOUT_MS;

const DOMAIN = 'lease-accuracy';
/** The key of the leased rule of a window. */
const keyOf = (windowMs: number): string => `lease_${windowMs / 1000}s`;

/** The rules of every window the runs use: one leased sliding window each, at LEASE_RATE. */
export function leaseConfigYaml(windows: readonly number[]): string {
  const rules = [...new Set(windows)].map((w) => {
    const seconds = w / 1000;
    return `  - key: ${keyOf(w)}\n    rate_limit: {unit: second, unit_multiplier: ${seconds}, requests_per_unit: ${(LEASE_RATE * w) / 1000}, algorithm: sliding_window, lease: true}\n`;
  });
  return `domain: ${DOMAIN}\ndescriptors:\n${rules.join('')}`;
}

const frameOf = (key: string, value: string): Buffer => grpcFrame(encodeRateLimitRequest(DOMAIN, [{ entries: [[key, value]] }]));

/** A call timing out after this long counts as an error. */
const CALL_TIMEOUT_MS = 2000;
/** How long the answers still due at a run's end are waited for. */
const DRAIN_MS = 3000;

/** A paced run's calls: to whom, at which rates, until when. */
export interface PacedCalls {
  /** Each replica's rate (DemandStep.perSecond, one entry per target). */
  readonly steps: readonly DemandStep[];
  readonly endMs: number;
  /** The replicas called: the port their calls go to, the pid a kill signals. */
  readonly targets: readonly Pick<Target, 'port' | 'pid'>[];
  /** The call every replica is sent (protobuf with its gRPC frame). */
  readonly frame: Buffer;
  /** The replica killed with SIGKILL at `atMs`: no call is sent to it from then on. */
  readonly kill?: { readonly replica: number; readonly atMs: number };
}

/** Calls every replica at its paced rate (killing one when told) and returns every call once answered (or given up). */
export async function drivePaced(run: PacedCalls): Promise<{ calls: CallRecord[]; killedAtMs?: number }> {
  const sessions: ClientHttp2Session[] = await Promise.all(run.targets.map((r) => connectSession(r.port)));
  const calls: CallRecord[] = [];
  const sent = run.targets.map(() => 0);
  let inFlight = 0;
  let killedAtMs: number | undefined;
  const start = performance.now();
  const send = (replica: number): void => {
    const sentMs = performance.now() - start;
    inFlight++;
    let answer: ReturnType<typeof callOn>;
    try {
      answer = callOn(sessions[replica], run.frame, CALL_TIMEOUT_MS);
    } catch {
      answer = Promise.resolve({ status: undefined, data: Buffer.alloc(0) });
    }
    void answer.then((a) => {
      inFlight--;
      const code = a.status === 0 && a.data.length > 5 ? overallCode(a.data.subarray(5)) : undefined;
      calls.push({ replica, sentMs, doneMs: performance.now() - start, code, status: a.status });
    });
  };
  await new Promise<void>((resolve) => {
    const tick = (): void => {
      const t = performance.now() - start;
      if (run.kill !== undefined && killedAtMs === undefined && t >= run.kill.atMs) {
        process.kill(run.targets[run.kill.replica].pid, 'SIGKILL');
        killedAtMs = t;
      }
      const until = Math.min(t, run.endMs);
      for (let replica = 0; replica < run.targets.length; replica++) {
        if (replica === run.kill?.replica && killedAtMs !== undefined) continue;
        const due = callsDue(run.steps, replica, until);
        while (sent[replica] < due) {
          sent[replica]++;
          send(replica);
        }
      }
      if (t < run.endMs) setTimeout(tick, 1);
      else resolve();
    };
    tick();
  });
  const drainUntil = performance.now() + DRAIN_MS;
  while (inFlight > 0 && performance.now() < drainUntil) await sleep(10);
  for (const s of sessions) s.destroy();
  return { calls, killedAtMs };
}

/** Admission dates (middle of each admitted call) of one replica, or of all; sorted. */
export function admissions(calls: readonly CallRecord[], replica?: number): number[] {
  return calls
    .filter((c) => c.code === 1 && (replica === undefined || c.replica === replica))
    .map((c) => (c.sentMs + c.doneMs) / 2)
    .sort((a, b) => a - b);
}

export function countBetween(times: readonly number[], fromMs: number, toMs: number): number {
  let n = 0;
  for (const t of times) if (t >= fromMs && t < toMs) n++;
  return n;
}

/**
 * The phases of steady demand of a run, [from, to) in ms: the measured part before the event, and
 * after it once a window has passed (the whole measured part when there is no event).
 */
export function phasesOf(spec: { readonly warmMs: number; readonly endMs: number; readonly windowMs: number; readonly eventMs?: number }): [number, number][] {
  return spec.eventMs === undefined
    ? [[spec.warmMs, spec.endMs]]
    : [
        [spec.warmMs, spec.eventMs],
        [Math.min(spec.endMs, spec.eventMs + spec.windowMs), spec.endMs],
      ];
}

/** The p99 and the most of the answered calls' latencies, ms (NaN when none was answered). */
export function latencyOf(calls: readonly CallRecord[]): { latencyP99Ms: number; latencyMaxMs: number } {
  const latencies = calls
    .filter((c) => c.code !== undefined)
    .map((c) => c.doneMs - c.sentMs)
    .sort((a, b) => a - b);
  const n = latencies.length;
  return { latencyP99Ms: n ? latencies[Math.min(n - 1, Math.ceil(0.99 * n) - 1)] : NaN, latencyMaxMs: n ? latencies[n - 1] : NaN };
}

/** Scores one run's calls (pure: exported for the tests). */
export function scoreLeaseRun(spec: LeaseRunSpec, calls: readonly CallRecord[], syncIntervalMs: number, killedAtMs?: number): LeaseRunResult {
  const perSecond = (spec.limit * 1000) / spec.windowMs;
  const all = admissions(calls);
  const worst = worstSpan(all, spec.windowMs, spec.warmMs, spec.endMs);
  const measuredMs = spec.endMs - spec.warmMs;
  const lost = (c: CallRecord): boolean => killedAtMs !== undefined && c.replica === spec.killed && c.code === undefined && c.doneMs >= killedAtMs;
  const byReplica = [admissions(calls, 0), admissions(calls, 1)] as const;
  const rateOf = (r: 0 | 1, fromMs: number, toMs: number): number =>
    toMs > fromMs ? (countBetween(byReplica[r], fromMs, toMs) * 1000) / (toMs - fromMs) : NaN;
  const phases = phasesOf(spec);
  const rising = spec.rising;
  return {
    name: spec.name,
    description: spec.description,
    windowMs: spec.windowMs,
    limit: spec.limit,
    syncIntervalMs,
    measuredMs,
    demand: spec.steps.map((s) => s.perSecond),
    admittedPerS: phases.map(([a, b]) => [rateOf(0, a, b), rateOf(1, a, b)] as const),
    calls: calls.length,
    errors: calls.filter((c) => c.code === undefined && !lost(c)).length,
    timeouts: calls.filter((c) => timedOut(c) && !lost(c)).length,
    lostToKill: calls.filter(lost).length,
    ofLimit: countBetween(all, spec.warmMs, spec.endMs) / ((perSecond * measuredMs) / 1000),
    worstSpan: worst.count,
    worstSpanAtMs: worst.atMs,
    bound: spec.limit * (1 + LEASE_EPSILON) + (spec.limit * syncIntervalMs) / spec.windowMs,
    recoveryMs: spec.eventMs === undefined || rising === undefined ? undefined : recoveryMs(byReplica[rising], perSecond, spec.eventMs, spec.endMs),
    ...latencyOf(calls),
    loadAverage: loadavg()[0],
  };
}

/**
 * One run: its own redis-server and two fresh services (config from `configDir`, see leaseConfigYaml,
 * and `env` beside the defaults), driven, then stopped; its calls, and the kill's time.
 */
export async function driveLeaseRun(
  spec: LeaseRunSpec,
  configDir: string,
  env: Readonly<Record<string, string>> = {},
): Promise<{ calls: CallRecord[]; killedAtMs?: number }> {
  const redis = await startRedis();
  const started: Target[] = [];
  try {
    const probeFrame = frameOf('probe', 'p');
    const start = (): Promise<Target> =>
      startService({ backend: 'redis', transport: 'http2', configDir, redisPort: redis.port, probeFrame, env, workers: 1 }).then((t) => {
        started.push(t);
        return t;
      });
    const replicas = [await start(), await start()] as const;
    const kill = spec.killed === undefined || spec.eventMs === undefined ? undefined : { replica: spec.killed, atMs: spec.eventMs };
    return await drivePaced({ steps: spec.steps, endMs: spec.endMs, targets: replicas, frame: frameOf(keyOf(spec.windowMs), spec.name), kill });
  } finally {
    await Promise.all(started.map((t) => t.stop().catch(() => undefined)));
    await redis.stop().catch(() => undefined);
  }
}

/** Every run of leaseRunSpecs(quick), one after the other; a run's progress line goes to stderr. */
export async function runLeaseAccuracy(opts: { readonly quick: boolean }): Promise<LeaseAccuracyResult> {
  const { syncIntervalMs, ttlMs } = loadSettings({}).leases;
  const specs = leaseRunSpecs(opts.quick);
  const runs: LeaseRunResult[] = [];
  await withConfigDir('lease-accuracy', leaseConfigYaml(specs.map((s) => s.windowMs)), async (configDir) => {
    for (const spec of specs) {
      process.stderr.write(`lease ${spec.name}, W = ${spec.windowMs / 1000} s: ${(spec.endMs / 1000).toFixed(0)} s of calls...\n`);
      const { calls, killedAtMs } = await driveLeaseRun(spec, configDir);
      const r = scoreLeaseRun(spec, calls, syncIntervalMs, killedAtMs);
      runs.push(r);
      const recovery = r.recoveryMs === undefined ? '' : `, whole limit after ${r.recoveryMs === null ? 'never' : `${fmt(r.recoveryMs)} ms`}`;
      process.stderr.write(
        `  worst span ${fmt(r.worstSpan)} of L = ${fmt(r.limit)} (bound ${fmt(r.bound, 1)}), admitted ${fmt(100 * r.ofLimit, 1)}% of the limit${recovery}, ${r.errors} errors\n`,
      );
    }
  });
  return { quick: opts.quick, rate: LEASE_RATE, syncIntervalMs, ttlMs, runs };
}

/** Figures side by side, `a : b : ...`. */
export const sideBySide = (p: readonly number[], digits = 0): string => p.map((x) => fmt(x, digits)).join(' : ');

/** The leases' table: one row per run. */
export function leaseAccuracyTable(result: LeaseAccuracyResult): string {
  const rows = result.runs.map((r) => [
    r.name,
    `${r.windowMs / 1000} s`,
    fmt(r.limit),
    r.demand.map((d) => sideBySide(d)).join(' → '),
    r.admittedPerS.map((d) => sideBySide(d)).join(' → '),
    `${fmt(100 * r.ofLimit, 1)}%`,
    `${fmt(r.worstSpan)} (${fmt(r.worstSpan / r.limit, 3)} x L)`,
    `${fmt(r.bound)} (${fmt(r.bound / r.limit, 3)} x L)`,
    r.worstSpan <= r.bound ? 'yes' : '**no**',
    r.recoveryMs === undefined ? '-' : r.recoveryMs === null ? 'not within the run' : `${fmt(r.recoveryMs)} ms`,
    `${fmt(r.latencyP99Ms, 1)} / ${fmt(r.latencyMaxMs, 0)}`,
    fmt(r.errors),
  ]);
  return markdownTable(
    [
      'lease run',
      'W',
      'L',
      'calls/s asked, A : B',
      'admitted/s, A : B',
      'admitted of the limit',
      'most admitted in any W',
      'bound',
      'within',
      'whole limit after',
      'latency p99 / max ms',
      'errors',
    ],
    rows,
    ['l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'l', 'r', 'r', 'r'],
  );
}

/** A paragraph saying what the leases' table shows, and the table. */
export function leaseAccuracyBlock(result: LeaseAccuracyResult): string {
  return (
    `Leases (\`lease: true\`, sliding window): two replicas (separate processes, \`WORKERS=1\`, \`BACKEND_TYPE=redis\`) sharing one redis-server, ` +
    `the limit's rate ${fmt(result.rate)} hits/s, \`LEASE_SYNC_INTERVAL\` ${fmt(result.syncIntervalMs)} ms, \`LEASE_TTL\` ${fmt(result.ttlMs)} ms; ` +
    `*bound*: L x ${1 + LEASE_EPSILON} + one sync interval of the rate (L x ${fmt(result.syncIntervalMs)} ms / W), over spans of W after the warm-up ` +
    `(stated for steady demand; why a shift or a death can go past it: docs/performance.md, Leases across replicas); ` +
    `*admitted/s* before the event, then from one window after it; *whole limit after*: from the event until the replica taking the demand ` +
    `admits at least ${fmt(100 * RECOVERY_SHARE)}% of the limit's rate from then on (when its shortfall against that rate since the event was largest)` +
    `${result.quick ? ' (quick run: 1 s windows, short phases)' : ''}:\n\n` +
    leaseAccuracyTable(result)
  );
}
