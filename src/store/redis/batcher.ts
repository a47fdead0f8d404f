import { nodeTimers, type Timers } from './timers';

/**
 * Group commit with a deadline, knowing nothing of Redis: calls made while the previous batch is on
 * the wire (or, with nothing on the wire, during the current loop turn) go out together. A lone call
 * is sent at the end of its turn (setImmediate), never held for a timer. One batch is on the wire at
 * a time; the busier the caller, the larger the batches, and the fewer sends per call.
 *
 * A batch is handed to `send` in pieces: calls of different groups (Redis Cluster hash slots) never
 * share a piece, and a piece holds at most `maxCallsPerSend` calls and `maxWeightPerSend` weight (a
 * single heavier call still goes alone). The sender answers each call with resolve() or reject().
 *
 * Every call settles within `timeoutMs` of its batch being sent, plus at most one loop turn.
 */

/** One call waiting in a batch. */
export interface PendingCall<Req, Res> {
  readonly request: Req;
  /** Calls of different groups are never sent together (a cluster's hash slot; 0 when there is one group). */
  readonly group: number;
  /** Answered or failed: a late answer finds this true. */
  settled: boolean;
  resolve(value: Res): void;
  reject(err: Error): void;
}

/** Calls sent together, sharing one deadline that starts when they are sent. */
export class CallBatch<Req, Res> {
  readonly calls: PendingCall<Req, Res>[] = [];
  /** Calls not settled yet. */
  open = 0;
  timer: unknown;
}

/** Sends calls[from, to) of `batch` (their weights sum to `weight`) and later answers each through the batcher. */
export type BatchSend<Req, Res> = (batch: CallBatch<Req, Res>, calls: readonly PendingCall<Req, Res>[], from: number, to: number, weight: number) => void;

export interface CallBatcherOptions<Req, Res> {
  /** Deadline of a call once its batch is sent, ms. */
  readonly timeoutMs: number;
  /** Calls per send, at most. */
  readonly maxCallsPerSend: number;
  /** Weight per send, at most (a single heavier call still goes alone). */
  readonly maxWeightPerSend: number;
  /** A call's weight (the Redis store: its number of counters). */
  readonly weightOf: (request: Req) => number;
  /** Sends one piece of a batch. */
  readonly send: BatchSend<Req, Res>;
  /** Calls may belong to several groups (see PendingCall.group); otherwise every call is in group 0. */
  readonly grouped: boolean;
  /** The error of a call that missed its deadline. */
  readonly timeoutError: () => Error;
  /** Called once per call that missed its deadline, before it rejects. */
  readonly onExpired?: () => void;
  /** Node's timers by default. */
  readonly timers?: Timers;
}

/** Batches calls for a sender; see the file comment. */
export class CallBatcher<Req, Res> {
  private readonly options: CallBatcherOptions<Req, Res>;
  private readonly timers: Timers;
  // Calls waiting to be sent, and the batch on the wire.
  private collecting: CallBatch<Req, Res> | undefined;
  private inFlight: CallBatch<Req, Res> | undefined;
  private closedError: Error | undefined;

  constructor(options: CallBatcherOptions<Req, Res>) {
    this.options = options;
    this.timers = options.timers ?? nodeTimers({ unref: false });
  }

  /** Adds a call to the batch being collected; a lone call goes out at the end of this turn. */
  enqueue(request: Req, group: number): Promise<Res> {
    return new Promise((resolve, reject) => {
      let batch = this.collecting;
      if (batch === undefined) {
        batch = this.collecting = new CallBatch();
        // With a batch on the wire, its answer sends this one (see finish()).
        if (this.inFlight === undefined) this.timers.setImmediate(this.flush, undefined);
      }
      batch.calls.push({ request, group, settled: false, resolve, reject });
      batch.open++;
    });
  }

  /** Answers `call` of `batch` with `value`, unless it has already settled (then the caller owns the late answer). */
  resolve(batch: CallBatch<Req, Res>, call: PendingCall<Req, Res>, value: Res): void {
    if (call.settled) return;
    call.resolve(value);
    this.settle(call, batch);
  }

  /** Rejects the unsettled calls among calls[from, to) of `batch` with `err`, calling `onEach` before each rejection. */
  reject(batch: CallBatch<Req, Res>, calls: readonly PendingCall<Req, Res>[], from: number, to: number, err: Error, onEach?: () => void): void {
    for (let i = from; i < to; i++) if (rejectCall(calls[i], err, onEach) && --batch.open === 0) this.finish(batch);
  }

  /** Rejects the calls not sent yet with `err`, and every later one; calls on the wire still settle. */
  close(err: Error): void {
    this.closedError = err;
    const queued = this.collecting;
    this.collecting = undefined;
    if (queued !== undefined) rejectQueued(queued, err, undefined);
  }

  /** Sends the collected batch: one piece per group and per maxCallsPerSend calls or maxWeightPerSend weight. */
  private readonly flush = (): void => {
    const batch = this.collecting;
    if (batch === undefined || this.inFlight !== undefined) return;
    this.collecting = undefined;
    if (this.closedError !== undefined) {
      rejectQueued(batch, this.closedError, undefined);
      return;
    }
    this.inFlight = batch;
    batch.timer = this.timers.setTimeout(this.onDeadline, this.options.timeoutMs, batch);
    const calls = batch.calls;
    if (!this.options.grouped) {
      this.sendPieces(batch, calls);
      return;
    }
    const byGroup = new Map<number, PendingCall<Req, Res>[]>();
    for (const call of calls) {
      const group = byGroup.get(call.group);
      if (group === undefined) byGroup.set(call.group, [call]);
      else group.push(call);
    }
    for (const group of byGroup.values()) this.sendPieces(batch, group);
  };

  private sendPieces(batch: CallBatch<Req, Res>, calls: readonly PendingCall<Req, Res>[]): void {
    const { maxCallsPerSend, maxWeightPerSend, weightOf, send } = this.options;
    let from = 0;
    let weight = 0;
    for (let i = 0; i < calls.length; i++) {
      const n = weightOf(calls[i].request);
      if (i > from && (i - from === maxCallsPerSend || weight + n > maxWeightPerSend)) {
        send(batch, calls, from, i, weight);
        from = i;
        weight = 0;
      }
      weight += n;
    }
    send(batch, calls, from, calls.length, weight);
  }

  private settle(call: PendingCall<Req, Res>, batch: CallBatch<Req, Res>): void {
    call.settled = true;
    if (--batch.open === 0) this.finish(batch);
  }

  /** Every call of `batch` has settled: the calls collected meanwhile go out now. */
  private finish(batch: CallBatch<Req, Res>): void {
    if (batch.timer !== undefined) this.timers.clearTimeout(batch.timer);
    batch.timer = undefined;
    if (this.inFlight !== batch) return;
    this.inFlight = undefined;
    if (this.collecting !== undefined) this.flush();
  }

  /**
   * A busy event loop must not fail calls that the other side answers promptly, hence: the clock
   * starts when the batch is sent, not when the call was made; timers run before the poll phase
   * that reads sockets, so a timer may fire while the answer sits unread in the socket buffer:
   * expiry waits one setImmediate, which runs after that poll. When a batch expires, the calls
   * queued behind it (not yet sent) expire with it: the other side is not answering, and they could
   * only be answered after it. With it silent, a call settles about `timeoutMs` plus one loop turn
   * after its batch is sent.
   */
  private readonly onDeadline = (batch: CallBatch<Req, Res>): void => {
    batch.timer = undefined;
    this.timers.setImmediate(this.expire, batch);
  };

  private readonly expire = (batch: CallBatch<Req, Res>): void => {
    if (batch.open === 0) return;
    const queued = this.inFlight === batch ? this.collecting : undefined;
    if (queued !== undefined) this.collecting = undefined;
    const err = this.options.timeoutError();
    const onExpired = this.options.onExpired;
    this.reject(batch, batch.calls, 0, batch.calls.length, err, onExpired);
    if (queued !== undefined) rejectQueued(queued, err, onExpired);
  };
}

/** Rejects every call of a batch that was never sent (it has no deadline and is on no wire). */
function rejectQueued<Req, Res>(batch: CallBatch<Req, Res>, err: Error, onEach: (() => void) | undefined): void {
  for (const call of batch.calls) rejectCall(call, err, onEach);
}

/** Rejects `call` with `err` unless it has settled, calling `onEach` first; whether it did. */
function rejectCall<Req, Res>(call: PendingCall<Req, Res>, err: Error, onEach: (() => void) | undefined): boolean {
  if (call.settled) return false;
  call.settled = true;
  onEach?.();
  call.reject(err);
  return true;
}
