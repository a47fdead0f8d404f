import { performance } from 'node:perf_hooks';
import { LatencyHistogram } from './latency';
import type { GeneratorName, LoadResult } from './load-result';

/** What the node load generators (http2-load, grpc-js-load) share: the counts of a run and its fixed-rate pacing. */

/** At most this many calls wait for an answer in a fixed-rate run; beyond it, sending pauses. */
export const MAX_BACKLOG = 20_000;
/** How long a fixed-rate run waits for the answers still due once its time is up. */
export const DRAIN_MS = 3000;

/** The counts and latencies of one run, from its start to `endAt`. */
export class LoadRun {
  readonly start = performance.now();
  readonly endAt: number;
  inFlight = 0;
  private requests = 0;
  private ok = 0;
  private overLimit = 0;
  private errors = 0;
  private firstError: string | undefined;
  private readonly hist = new LatencyHistogram();

  constructor(readonly durationS: number) {
    this.endAt = this.start + durationS * 1000;
  }

  /** A call leaves. */
  sent(): void {
    this.inFlight++;
  }

  /** A call sent (or scheduled) at `from` is answered: `error` says why it failed, if it did. */
  answered(from: number, outcome: { readonly overLimit: boolean } | { readonly error: string }): void {
    this.inFlight--;
    this.requests++;
    this.hist.record(performance.now() - from);
    if ('error' in outcome) {
      this.errors++;
      this.firstError ??= outcome.error;
    } else {
      this.ok++;
      if (outcome.overLimit) this.overLimit++;
    }
  }

  /** The run's LoadResult; `durationS` as reported (throughput is always over the planned duration). */
  result(generator: GeneratorName, durationS = this.durationS): LoadResult {
    return {
      generator,
      requests: this.requests,
      ok: this.ok,
      errors: this.errors,
      overLimit: this.overLimit,
      durationS,
      rps: this.ok / this.durationS,
      latencyMs: this.hist.summary(),
      firstError: this.firstError,
    };
  }
}

/**
 * Open loop: calls `send(scheduledAt)` `rps` times a second until the run's end (latency then
 * counts from each call's scheduled time, queueing in the client included), pausing while
 * MAX_BACKLOG calls are unanswered, then waits up to DRAIN_MS for the rest.
 */
export function paceAtRate(run: LoadRun, rps: number, send: (scheduledAt: number) => void): Promise<void> {
  return new Promise<void>((resolve) => {
    const interval = 1000 / rps;
    let scheduled = 0;
    const tick = (): void => {
      const now = performance.now();
      const until = Math.min(now, run.endAt);
      while (run.start + scheduled * interval <= until && run.inFlight < MAX_BACKLOG) {
        send(run.start + scheduled * interval);
        scheduled++;
      }
      if (now < run.endAt) setTimeout(tick, 1);
      else {
        const drain = (): void => (run.inFlight === 0 || performance.now() > run.endAt + DRAIN_MS ? resolve() : void setTimeout(drain, 5));
        drain();
      }
    };
    tick();
  });
}
