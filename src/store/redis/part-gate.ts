import { nodeTimers, type Timers } from './timers';

/**
 * The gate in front of the parts of large calls. A call of thousands of counters sent as one
 * script holds Redis for tens of milliseconds, and every call behind it on the connection misses
 * its deadline. The Redis store cuts such a call into parts and lets them on the wire only
 * through this gate: together the parts of every large call hold at most `capacity` counters on
 * the wire at a time, so each batch carries at most that much of their work beside the small calls
 * (which never wait here). Parts pass in arrival order; one that waits too long, or would overfill
 * the waiting room, fails (its call fails with it), so a flood of large calls costs bounded memory
 * and slows only itself.
 */

export interface PartGateOptions {
  /** Counters of parts on the wire at once, at most (a heavier part still passes alone). */
  readonly capacity: number;
  /** Counters waiting at the gate, at most. */
  readonly maxWaiting: number;
  /** How long a part may wait at the gate, ms. */
  readonly maxWaitMs: number;
  /** The error of a part turned away (waiting room full, or waited too long). */
  readonly busyError: (why: string) => Error;
  /** Node's timers by default. */
  readonly timers?: Timers;
}

/** A large call, as the gate knows it: once one of its parts fails, its other waiting parts are turned away. */
export interface GatedCall {
  failed: boolean;
}

interface Waiter {
  readonly weight: number;
  readonly call: GatedCall;
  readonly resolve: () => void;
  readonly reject: (err: Error) => void;
  timer: unknown;
}

/** A FIFO counting semaphore over counters, with a bounded, deadlined waiting room; see the file comment. */
export class PartGate {
  private readonly options: PartGateOptions;
  private readonly timers: Timers;
  private onWire = 0;
  private waitingWeight = 0;
  private readonly queue: Waiter[] = [];
  private head = 0;

  constructor(options: PartGateOptions) {
    this.options = options;
    this.timers = options.timers ?? nodeTimers({ unref: false });
  }

  /** Counters of parts on the wire now. */
  get inFlight(): number {
    return this.onWire;
  }

  /** Counters waiting now. */
  get waiting(): number {
    return this.waitingWeight;
  }

  /** Whether a call of `total` counters fits in the waiting room now (else it should fail at once). */
  admits(total: number): boolean {
    return this.waitingWeight + total <= this.options.maxWaiting;
  }

  /** Runs `send` once `weight` counters may go on the wire (in arrival order), and frees them when it settles. */
  async pass<T>(weight: number, call: GatedCall, send: () => Promise<T>): Promise<T> {
    if (call.failed) throw this.options.busyError('another part of this call failed');
    if (this.onWire > 0 && (this.head < this.queue.length || this.onWire + weight > this.options.capacity)) await this.wait(weight, call);
    else this.onWire += weight;
    try {
      return await send();
    } catch (err) {
      this.abandon(call);
      throw err;
    } finally {
      this.onWire -= weight;
      this.admit();
    }
  }

  private wait(weight: number, call: GatedCall): Promise<void> {
    return new Promise((resolve, reject) => {
      const waiter: Waiter = { weight, call, resolve, reject, timer: undefined };
      waiter.timer = this.timers.setTimeout(this.expire, this.options.maxWaitMs, waiter);
      this.queue.push(waiter);
      this.waitingWeight += weight;
    });
  }

  /** Lets waiting parts on while they fit, in order. */
  private admit(): void {
    while (this.head < this.queue.length) {
      const w = this.queue[this.head];
      if (this.onWire > 0 && this.onWire + w.weight > this.options.capacity) break;
      this.head++;
      this.waitingWeight -= w.weight;
      this.timers.clearTimeout(w.timer);
      this.onWire += w.weight;
      w.resolve();
    }
    this.compact();
  }

  private readonly expire = (w: Waiter): void => {
    const i = this.queue.indexOf(w, this.head);
    if (i < 0) return;
    this.queue.splice(i, 1);
    this.waitingWeight -= w.weight;
    w.reject(this.options.busyError(`a part waited ${this.options.maxWaitMs} ms for its turn`));
    this.abandon(w.call);
  };

  /** `call` has failed: its waiting parts leave the line at once, and those behind them may fit now. */
  private abandon(call: GatedCall): void {
    call.failed = true;
    let kept = this.head;
    for (let i = this.head; i < this.queue.length; i++) {
      const w = this.queue[i];
      if (w.call !== call) {
        this.queue[kept++] = w;
        continue;
      }
      this.waitingWeight -= w.weight;
      this.timers.clearTimeout(w.timer);
      w.reject(this.options.busyError('another part of this call failed'));
    }
    this.queue.length = kept;
    this.admit();
  }

  private compact(): void {
    if (this.head > 64 && this.head * 2 > this.queue.length) {
      this.queue.splice(0, this.head);
      this.head = 0;
    }
  }
}
