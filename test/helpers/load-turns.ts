import type { RlsClient, RlsRequestInput } from './grpc-client';
import { sleep } from './redis';

/**
 * What a load costs the RLS calls beside it, measured in turns: the same calls go on throughout while
 * the load runs and pauses in turns, and the calls sent while it ran are compared with those sent
 * while it paused. Other test files' load on the machine then weighs on both halves alike.
 */

/** One legitimate RLS call: when it was sent (ms, performance.now()), how long it took, and its failure if it failed. */
export interface LegitCall {
  readonly sentMs: number;
  readonly ms: number;
  /** An overall code other than OK, or the call's error. */
  readonly error?: string;
  /** Whether the service answered (with any overall code). */
  readonly answered: boolean;
}

/** RLS calls at `perSecond` for `ms` (`request(i)` is the i-th), each recorded. */
export async function legitCalls(client: RlsClient, perSecond: number, ms: number, request: (i: number) => RlsRequestInput): Promise<LegitCall[]> {
  const calls: Promise<LegitCall>[] = [];
  const started = performance.now();
  for (let i = 0; performance.now() - started < ms; i++) {
    const due = started + (i * 1000) / perSecond;
    const wait = due - performance.now();
    if (wait > 0) await sleep(wait);
    const sentMs = performance.now();
    calls.push(
      client.shouldRateLimit(request(i), { deadlineMs: 2_000 }).then(
        (r) => ({ sentMs, ms: performance.now() - sentMs, error: r.overallCode === 'OK' ? undefined : r.overallCode, answered: true }),
        (err: Error) => ({ sentMs, ms: performance.now() - sentMs, error: err.message, answered: false }),
      ),
    );
  }
  return Promise.all(calls);
}

export interface CallSummary {
  readonly calls: number;
  readonly errors: number;
  /** The 99th percentile latency of the answered calls, ms. */
  readonly p99: number;
  /** The first few failures. */
  readonly failures: string[];
}

export function summary(calls: readonly LegitCall[]): CallSummary {
  const latencies = calls
    .filter((c) => c.answered)
    .map((c) => c.ms)
    .sort((a, b) => a - b);
  const failed = calls.filter((c) => c.error !== undefined);
  return {
    calls: calls.length,
    errors: failed.length,
    p99: latencies[Math.floor(0.99 * (latencies.length - 1))] ?? Infinity,
    failures: failed.slice(0, 3).map((c) => c.error!),
  };
}

export interface Switchable {
  pause(): void;
  resume(): void;
}

export interface TurnsOptions {
  /** Turns in all, starting with a pause (so `turns` even gives as many of each). */
  readonly turns: number;
  readonly turnMs: number;
  /** A call sent within this long after a switch counts for neither half (what the server still had of the load). */
  readonly settleMs: number;
  /** Makes the calls for `durationMs` (an RlsCaller's run, ./rls-caller.ts, or legitCalls in this process). */
  readonly calls: (durationMs: number) => Promise<LegitCall[]>;
  /** Read at every switch (a process's CPU time, say). */
  readonly sample?: () => number;
}

/** A switch of the load: when (ms, performance.now()), and whether it ran from then on. */
export interface LoadSwitch {
  readonly atMs: number;
  readonly loaded: boolean;
  /** What `options.sample` read at the switch. */
  readonly sample: number;
}

/**
 * The calls sent while the load ran (`loaded`) and while it paused (`alone`), and the switches (the
 * last one pauses the load at the end).
 */
export async function inTurns(load: Switchable, options: TurnsOptions): Promise<{ loaded: LegitCall[]; alone: LegitCall[]; switches: LoadSwitch[] }> {
  const switches: LoadSwitch[] = [];
  const sample = options.sample ?? ((): number => 0);
  const phases = (async () => {
    for (let i = 0; i <= options.turns; i++) {
      const loaded = i % 2 === 1 && i < options.turns;
      if (loaded) load.resume();
      else load.pause();
      switches.push({ atMs: performance.now(), loaded, sample: sample() });
      if (i < options.turns) await sleep(options.turnMs);
    }
  })();
  const calls = await options.calls(options.turns * options.turnMs);
  await phases;
  const half = (loaded: boolean): LegitCall[] =>
    calls.filter((c) => {
      const last = switches.filter((w) => w.atMs <= c.sentMs).pop();
      return last !== undefined && last.loaded === loaded && c.sentMs - last.atMs >= options.settleMs;
    });
  return { loaded: half(true), alone: half(false), switches };
}
