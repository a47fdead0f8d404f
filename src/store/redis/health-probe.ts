import { nodeTimers, type Timers } from './timers';

/**
 * Health means "Redis is reachable": the connection is ready and the PING probe answers. Failed
 * calls only start the probe; they never flip health on their own, because under load calls miss
 * their few-millisecond deadline while Redis is fine, and reporting NOT_SERVING then would take
 * every replica out of rotation exactly at peak. A probe that misses its (longer) deadline several
 * times running, as with a frozen Redis, does flip it.
 *
 * One probe at a time, each with its own deadline. Probing runs while calls fail or the last probe
 * failed; it stops after a success that no failed call has followed, or when the connection is not
 * ready (health is false then anyway, and a fresh connection resets the count).
 */

export interface HealthProbeOptions {
  /** Sends one probe (PING); resolves when answered. */
  readonly ping: () => Promise<unknown>;
  /** Whether a probe can be sent now (the connection is ready); when not, probing stops. */
  readonly connected: () => boolean;
  /** Consecutive failed probes after which healthy() turns false until one succeeds. */
  readonly failureThreshold: number;
  /** Deadline of one probe, ms. */
  readonly timeoutMs: number;
  /** Period of the probe while calls fail or the last probe failed, ms. */
  readonly intervalMs: number;
  /** Node's timers (unref'd) by default. */
  readonly timers?: Timers;
}

/** The health probe's state machine; see the file comment. */
export class HealthProbe {
  private readonly options: HealthProbeOptions;
  private readonly timers: Timers;
  private failures = 0;
  // A call failed since the last probe was sent: keep probing until one succeeds after it.
  private failedSinceProbe = false;
  private timer: unknown;
  private active = false;
  private stopped = false;

  constructor(options: HealthProbeOptions) {
    this.options = options;
    this.timers = options.timers ?? nodeTimers({ unref: true });
  }

  /** False after `failureThreshold` consecutive failed probes, until one succeeds or reset() runs. */
  healthy(): boolean {
    return this.failures < this.options.failureThreshold;
  }

  /** Consecutive failed probes so far (0 after a successful one or a reset). */
  get consecutiveFailures(): number {
    return this.failures;
  }

  /** A call failed: probe now unless a probe is already running or scheduled. */
  callFailed(): void {
    this.failedSinceProbe = true;
    if (!this.active) this.schedule(0);
  }

  /** A fresh connection has just answered its ready check: forget the failed probes. */
  reset(): void {
    this.failures = 0;
  }

  /** Stops probing for good. */
  stop(): void {
    this.stopped = true;
    if (this.timer !== undefined) this.timers.clearTimeout(this.timer);
  }

  private schedule(delayMs: number): void {
    if (this.stopped) return;
    this.active = true;
    this.timer = this.timers.setTimeout(this.run, delayMs, undefined);
  }

  private readonly run = (): void => {
    this.timer = undefined;
    if (this.stopped || !this.options.connected()) {
      this.active = false;
      return;
    }
    this.failedSinceProbe = false;
    let settled = false;
    const finish = (ok: boolean): void => {
      if (settled) return;
      settled = true;
      this.timers.clearTimeout(timer);
      if (ok) {
        this.failures = 0;
        if (this.failedSinceProbe) this.schedule(this.options.intervalMs);
        else this.active = false;
        return;
      }
      this.failures++;
      // Below the threshold, confirm at once; past it, poll until Redis answers again.
      this.schedule(this.failures < this.options.failureThreshold ? 0 : this.options.intervalMs);
    };
    // The same one-poll grace as calls: a busy loop must not read as an unreachable Redis.
    const timer = this.timers.setTimeout(() => this.timers.setImmediate(finish, false), this.options.timeoutMs, undefined);
    this.options.ping().then(
      () => finish(true),
      () => finish(false),
    );
  };
}
