import type { Timers } from '../../src/store/redis/timers';

/**
 * Timers that only run when told to: advance() moves time and runs the timers due, in order;
 * runImmediates() runs what setImmediate queued (one loop turn's check phase).
 */
export class FakeTimers implements Timers {
  private now = 0;
  private nextId = 1;
  private readonly timers = new Map<number, { at: number; run: () => void }>();
  private immediates: (() => void)[] = [];

  setTimeout<A>(fn: (arg: A) => void, ms: number, arg: A): unknown {
    const id = this.nextId++;
    this.timers.set(id, { at: this.now + ms, run: () => fn(arg) });
    return id;
  }

  clearTimeout(handle: unknown): void {
    this.timers.delete(handle as number);
  }

  setImmediate<A>(fn: (arg: A) => void, arg: A): void {
    this.immediates.push(() => fn(arg));
  }

  /** Timers not yet run. */
  get pendingTimers(): number {
    return this.timers.size;
  }

  /** Immediates queued and not yet run. */
  get pendingImmediates(): number {
    return this.immediates.length;
  }

  /** Moves time forward by `ms`, running each timer due on the way (immediates stay queued). */
  advance(ms: number): void {
    const end = this.now + ms;
    for (;;) {
      let due: [number, { at: number; run: () => void }] | undefined;
      for (const entry of this.timers) if (entry[1].at <= end && (due === undefined || entry[1].at < due[1].at)) due = entry;
      if (due === undefined) break;
      this.timers.delete(due[0]);
      this.now = due[1].at;
      due[1].run();
    }
    this.now = end;
  }

  /** Runs the immediates queued so far (those they queue wait for the next call). */
  runImmediates(): void {
    const queued = this.immediates;
    this.immediates = [];
    for (const run of queued) run();
  }
}

/** Lets promise callbacks (then/catch) run. */
export async function settlePromises(): Promise<void> {
  for (let i = 0; i < 5; i++) await Promise.resolve();
}
