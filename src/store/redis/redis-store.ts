import type { RedisClient } from './connection';
import { keySlot } from './key-slot';
import {
  ALGORITHM_CODE,
  DECIDE_COMMAND,
  DECIDE_SCRIPT,
  DecideReplyReader,
  REFUND_COMMAND,
  pushCounterArgs,
  REFUND_SCRIPT,
} from './script';
import { StoreUnavailableError, type CounterDecision, type CounterRequest, type DecideOptions, type Store } from '../../limiter/store';

/**
 * The Redis adapter: time from Redis, a hard deadline per call, and decide() calls coalesced into
 * batches: the calls made while the previous batch is on the wire (or, with nothing on the wire,
 * during the current loop turn) go out together as one DECIDE script call (see
 * ./script.ts), which decides each of them all-or-nothing on its own, in arrival
 * order. A lone call is sent at the end of its turn (setImmediate), never held for a timer; a batch
 * is cut into several script calls past MAX_BATCH_REQUESTS requests or MAX_BATCH_KEYS counters, so
 * that one script never blocks Redis for long.
 *
 * Redis Cluster: a batch holds one hash slot's calls (a batch per slot, sent together). A call
 * whose counters all share a slot (the common case, and always for a single descriptor) is atomic.
 * Across slots: one share of the call per slot, each atomic for its own counters; when any slot
 * denies (or fails), the slots that charged are refunded with REFUND_SCRIPT, which removes exactly
 * what DECIDE added. Guarantee across slots:
 * - never more admitted than a single atomic store would admit: a charge is only ever kept when
 *   every slot allowed, so no request is admitted on a quota it did not get;
 * - between a charge and its refund (about one round trip) other requests may see the extra hits
 *   and be denied when an atomic store would have admitted them (conservative, transient);
 * - a share that missed its deadline is refunded when its answer comes in after all; a refund that
 *   cannot be delivered (node down) leaves the charge in place until its window expires:
 *   over-counting, never under-counting.
 */

/** What went wrong, for the store-errors metric. */
export type RedisErrorKind = 'timeout' | 'disconnected' | 'error' | 'refund';

export interface RedisStoreOptions {
  /** An ioredis client; the store defines its scripts on it and sends them outside ioredis's auto-pipeline. */
  readonly client: RedisClient;
  /** CACHE_KEY_PREFIX, prepended to every key. */
  readonly keyPrefix?: string;
  /** Deadline of one decide() call once its batch is on the wire, ms (settings.storeTimeoutMs). */
  readonly timeoutMs?: number;
  /** Consecutive failed health probes (PING) after which isHealthy() turns false until one succeeds. Default 3. */
  readonly probeFailureThreshold?: number;
  /** Deadline of one health probe, ms. Default max(timeoutMs, 250): a slow Redis is still a reachable one. */
  readonly probeTimeoutMs?: number;
  /** Period of the health probe while calls fail or the last probe failed, ms. Default 200. */
  readonly probeIntervalMs?: number;
  /** Called once per failed call (and per failed refund), for metrics. */
  readonly onError?: (kind: RedisErrorKind) => void;
  /** Connection state changes, for logs (never per request). */
  readonly onConnectionChange?: (state: 'ready' | 'lost', error?: Error) => void;
}

/** Requests per DECIDE script call, at most. */
export const MAX_BATCH_REQUESTS = 64;
/** Counters per DECIDE script call, at most (a single larger request still goes alone). */
export const MAX_BATCH_KEYS = 256;

type ScriptCall = (args: (string | number)[]) => Promise<unknown>;

/** A multi-slot call's share in one slot: its decisions, and its charge tokens for a refund. */
interface SlotShare {
  readonly decisions: CounterDecision[];
  readonly tokens: string[];
}

/** One decide() call (on a cluster, one slot's share of it) in a batch. */
interface PendingCall {
  readonly counters: readonly CounterRequest[];
  readonly countDenied: boolean;
  /** Hash slot of its keys on a cluster; 0 elsewhere. */
  readonly slot: number;
  /** A share of a multi-slot call: answered with a SlotShare, and refunded if it answers too late. */
  readonly share: boolean;
  settled: boolean;
  resolve(value: CounterDecision[] | SlotShare): void;
  reject(err: Error): void;
}

/** Calls sent together, sharing one deadline that starts when they are sent. */
class CallBatch {
  readonly calls: PendingCall[] = [];
  /** Calls not settled yet. */
  open = 0;
  timer: NodeJS.Timeout | undefined;
}

const DISCONNECTED = /Stream isn't writeable|Connection is closed|MaxRetriesPerRequest|isn't ready|enableOfflineQueue|ECONNREFUSED|ECONNRESET|EPIPE|CLUSTERDOWN|None of startup nodes/i;

// A probe slower than this still proves Redis reachable; a frozen Redis misses it several times running.
const MIN_PROBE_TIMEOUT_MS = 250;

/**
 * The Redis Store: atomic decide-and-charge per call, calls batched into shared script calls,
 * each call settling within `timeoutMs` of its batch being sent (plus at most one event-loop turn).
 *
 * One batch is on the wire at a time: calls made meanwhile wait for its answer, then go out
 * together (group commit, as ioredis's auto-pipeline does for single commands). The busier the
 * service, the larger the batches, and the fewer script calls, TIME reads and promises per call.
 *
 * Health means "Redis is reachable": the connection is ready and the PING probe answers. Failed
 * calls only start the probe; they never flip health on their own, because under load calls miss
 * their few-millisecond deadline while Redis is fine, and reporting NOT_SERVING then would take
 * every replica out of rotation exactly at peak. A probe that misses its (longer) deadline several
 * times running, as with a frozen Redis, does flip it.
 */
export class RedisStore implements Store {
  readonly name = 'redis';
  private readonly client: RedisClient;
  private readonly decideCall: ScriptCall;
  private readonly refundCall: ScriptCall;
  // `<prefix>{`: a counter's Redis key is this, its counter key, and `}`.
  private readonly tagOpen: string;
  private readonly timeoutMs: number;
  private readonly timeoutMessage: string;
  private readonly probeFailureThreshold: number;
  private readonly probeTimeoutMs: number;
  private readonly probeIntervalMs: number;
  private readonly onError: (kind: RedisErrorKind) => void;
  private readonly isCluster: boolean;
  private probeFailures = 0;
  // A call failed since the last probe was sent: keep probing until one succeeds after it.
  private failedSinceProbe = false;
  private probeTimer: NodeJS.Timeout | undefined;
  private probeActive = false;
  private closed = false;
  // Calls waiting to be sent, and the batch on the wire.
  private collecting: CallBatch | undefined;
  private inFlight: CallBatch | undefined;

  constructor(options: RedisStoreOptions) {
    this.client = options.client;
    this.tagOpen = `${options.keyPrefix ?? ''}{`;
    this.timeoutMs = options.timeoutMs ?? 10;
    this.timeoutMessage = `redis did not answer within ${this.timeoutMs} ms`;
    this.probeFailureThreshold = options.probeFailureThreshold ?? 3;
    this.probeTimeoutMs = options.probeTimeoutMs ?? Math.max(this.timeoutMs, MIN_PROBE_TIMEOUT_MS);
    this.probeIntervalMs = options.probeIntervalMs ?? 200;
    this.onError = options.onError ?? (() => {});
    this.isCluster = this.client.isCluster === true;

    // The scripts take their key count as an argument (a batch has any number of keys). ioredis's
    // auto-pipeline would route such a command by that count on a cluster, and would only add a
    // turn of latency to batches that are already one command each: they are sent directly, and
    // ioredis still routes them by their first key.
    const clientOptions = this.client.options;
    const ignored = clientOptions.autoPipeliningIgnoredCommands ?? (clientOptions.autoPipeliningIgnoredCommands = []);
    for (const name of [DECIDE_COMMAND, REFUND_COMMAND]) if (!ignored.includes(name)) ignored.push(name);
    // defineCommand gives EVALSHA by hash, and EVAL when the server answers NOSCRIPT (restart, failover, SCRIPT FLUSH).
    this.client.defineCommand(DECIDE_COMMAND, { lua: DECIDE_SCRIPT });
    this.client.defineCommand(REFUND_COMMAND, { lua: REFUND_SCRIPT });
    const commands = this.client as unknown as Record<string, ScriptCall>;
    this.decideCall = (args) => commands[DECIDE_COMMAND](args);
    this.refundCall = (args) => commands[REFUND_COMMAND](args);

    const onChange = options.onConnectionChange;
    let connected = false;
    this.client.on('ready', () => {
      // A fresh connection has just answered its ready check.
      this.probeFailures = 0;
      connected = true;
      onChange?.('ready');
    });
    let lastError: Error | undefined;
    // Without an 'error' listener ioredis prints every reconnect failure; the state change is enough.
    this.client.on('error', (err: Error) => {
      lastError = err;
    });
    // 'close' repeats on every failed reconnect attempt: report the loss once.
    this.client.on('close', () => {
      if (connected && !this.closed) onChange?.('lost', lastError);
      connected = false;
    });
  }

  /** Decides and charges all counters atomically (see the class comment for Cluster). */
  decide(counters: readonly CounterRequest[], options?: DecideOptions): Promise<CounterDecision[]> {
    if (counters.length === 0) return Promise.resolve([]);
    if (this.closed) return Promise.reject(new StoreUnavailableError('redis store is closed'));
    const countDenied = options?.countDenied === true;
    if (!this.isCluster) return this.enqueue(counters, countDenied, 0, false) as Promise<CounterDecision[]>;
    if (counters.length === 1) return this.enqueue(counters, countDenied, keySlot(this.keyOf(counters[0])), false) as Promise<CounterDecision[]>;
    return this.decideAcrossSlots(counters, countDenied);
  }

  /** False while disconnected, or after `probeFailureThreshold` consecutive failed probes until one succeeds. */
  isHealthy(): boolean {
    return !this.closed && this.client.status === 'ready' && this.probeFailures < this.probeFailureThreshold;
  }

  /** Closes the connection; pending calls reject. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.probeTimer !== undefined) clearTimeout(this.probeTimer);
    const queued = this.collecting;
    this.collecting = undefined;
    if (queued !== undefined) this.rejectAll(queued.calls, new StoreUnavailableError('redis store is closed'), undefined);
    try {
      await Promise.race([this.client.quit(), new Promise((resolve) => setTimeout(resolve, 500).unref())]);
    } catch {
      // Already disconnected: nothing to flush.
    }
    this.client.disconnect();
  }

  /** Resolves true once connected, false if that takes longer than `timeoutMs` (the client keeps trying). */
  whenReady(timeoutMs: number): Promise<boolean> {
    if (this.client.status === 'ready') return Promise.resolve(true);
    return new Promise((resolve) => {
      const done = (ok: boolean): void => {
        clearTimeout(timer);
        this.client.off('ready', onReady);
        resolve(ok);
      };
      const onReady = (): void => done(true);
      const timer = setTimeout(() => done(false), timeoutMs);
      timer.unref();
      this.client.on('ready', onReady);
    });
  }

  /** Median of `samples` sequential PING round trips, ms; undefined when one fails. Start-up only (src/store/create-store.ts). */
  async pingRoundTripMs(samples: number): Promise<number | undefined> {
    const times: number[] = [];
    try {
      for (let i = 0; i < samples; i++) {
        const started = performance.now();
        await this.client.ping();
        times.push(performance.now() - started);
      }
    } catch {
      return undefined;
    }
    times.sort((a, b) => a - b);
    return times[Math.floor(times.length / 2)];
  }

  /** Consecutive failed health probes so far (0 after a successful one or a reconnect). */
  get consecutiveProbeFailures(): number {
    return this.probeFailures;
  }

  private keyOf(c: CounterRequest): string {
    return this.tagOpen + c.key + '}';
  }

  /** Adds a call to the batch being collected; a lone call goes out at the end of this turn. */
  private enqueue(counters: readonly CounterRequest[], countDenied: boolean, slot: number, share: boolean): Promise<CounterDecision[] | SlotShare> {
    return new Promise((resolve, reject) => {
      let batch = this.collecting;
      if (batch === undefined) {
        batch = this.collecting = new CallBatch();
        // With a batch on the wire, its answer sends this one (see finish()).
        if (this.inFlight === undefined) setImmediate(this.flush);
      }
      batch.calls.push({ counters, countDenied, slot, share, settled: false, resolve, reject });
      batch.open++;
    });
  }

  /** Sends the collected batch: one script call per slot and per MAX_BATCH_* calls. */
  private readonly flush = (): void => {
    const batch = this.collecting;
    if (batch === undefined || this.inFlight !== undefined) return;
    this.collecting = undefined;
    if (this.closed) {
      this.rejectAll(batch.calls, new StoreUnavailableError('redis store is closed'), undefined);
      return;
    }
    this.inFlight = batch;
    batch.timer = setTimeout(this.onDeadline, this.timeoutMs, batch);
    const calls = batch.calls;
    if (!this.isCluster) {
      this.sendChunks(batch, calls);
      return;
    }
    const bySlot = new Map<number, PendingCall[]>();
    for (const call of calls) {
      const group = bySlot.get(call.slot);
      if (group === undefined) bySlot.set(call.slot, [call]);
      else group.push(call);
    }
    for (const group of bySlot.values()) this.sendChunks(batch, group);
  };

  private sendChunks(batch: CallBatch, calls: readonly PendingCall[]): void {
    let from = 0;
    let keys = 0;
    for (let i = 0; i < calls.length; i++) {
      const n = calls[i].counters.length;
      if (i > from && (i - from === MAX_BATCH_REQUESTS || keys + n > MAX_BATCH_KEYS)) {
        this.send(batch, calls, from, i, keys);
        from = i;
        keys = 0;
      }
      keys += n;
    }
    this.send(batch, calls, from, calls.length, keys);
  }

  /** One DECIDE call for calls[from, to), which hold `keys` counters in all. */
  private send(batch: CallBatch, calls: readonly PendingCall[], from: number, to: number, keys: number): void {
    // Keys first, then ARGV: filled by push, so that the array stays packed (ioredis copies it).
    const args: (string | number)[] = [keys];
    for (let i = from; i < to; i++) {
      const counters = calls[i].counters;
      for (let j = 0; j < counters.length; j++) args.push(this.tagOpen + counters[j].key + '}');
    }
    for (let i = from; i < to; i++) {
      const call = calls[i];
      const counters = call.counters;
      args.push(call.countDenied ? '1' : '0', counters.length);
      for (let j = 0; j < counters.length; j++) pushCounterArgs(args, counters[j]);
    }
    this.decideCall(args).then(
      (reply) => this.answer(batch, calls, from, to, new DecideReplyReader(reply as string)),
      (err: unknown) => {
        const kind = this.classify(err);
        this.rejectAll(calls.slice(from, to), new StoreUnavailableError(`redis ${kind === 'disconnected' ? 'unavailable' : 'error'}: ${messageOf(err)}`, { cause: err }), kind, batch);
      },
    );
  }

  private answer(batch: CallBatch, calls: readonly PendingCall[], from: number, to: number, reply: DecideReplyReader): void {
    for (let i = from; i < to; i++) {
      const call = calls[i];
      const n = call.counters.length;
      if (!call.share) {
        const decisions = readDecisions(reply, n, undefined);
        if (call.settled) continue;
        call.resolve(decisions);
        this.settle(call, batch);
        continue;
      }
      const tokens = new Array<string>(n);
      const decisions = readDecisions(reply, n, tokens);
      if (!call.settled) {
        call.resolve({ decisions, tokens });
        this.settle(call, batch);
      } else {
        // The call already failed (deadline): its slot's charges must not outlive it.
        this.refund(call.counters, tokens);
      }
    }
  }

  /** Rejects every unsettled call with `err`, counting each as a failure of `kind` (none: not counted). */
  private rejectAll(calls: readonly PendingCall[], err: Error, kind: RedisErrorKind | undefined, batch?: CallBatch): void {
    for (const call of calls) {
      if (call.settled) continue;
      call.settled = true;
      if (kind !== undefined) this.failed(kind);
      call.reject(err);
      if (batch !== undefined && --batch.open === 0) this.finish(batch);
    }
  }

  private settle(call: PendingCall, batch: CallBatch): void {
    call.settled = true;
    if (--batch.open === 0) this.finish(batch);
  }

  /** Every call of `batch` has settled: the calls collected meanwhile go out now. */
  private finish(batch: CallBatch): void {
    if (batch.timer !== undefined) clearTimeout(batch.timer);
    batch.timer = undefined;
    if (this.inFlight !== batch) return;
    this.inFlight = undefined;
    if (this.collecting !== undefined) this.flush();
  }

  /**
   * A busy event loop must not fail calls that Redis answers promptly, hence: the clock starts when
   * the batch is sent, not when decide() ran; timers run before the poll phase that reads sockets,
   * so a timer may fire while the answer sits unread in the socket buffer: expiry waits one
   * setImmediate, which runs after that poll. When a batch expires, the calls queued behind it (not
   * yet sent) expire with it: Redis is not answering, and they could only be answered after it.
   * With Redis silent, a call settles about `timeoutMs` plus one loop turn after its batch is sent.
   */
  private readonly onDeadline = (batch: CallBatch): void => {
    batch.timer = undefined;
    setImmediate(this.expire, batch);
  };

  private readonly expire = (batch: CallBatch): void => {
    if (batch.open === 0) return;
    const queued = this.inFlight === batch ? this.collecting : undefined;
    if (queued !== undefined) this.collecting = undefined;
    const err = new StoreUnavailableError(this.timeoutMessage);
    this.rejectAll(batch.calls, err, 'timeout', batch);
    if (queued !== undefined) this.rejectAll(queued.calls, err, 'timeout');
  };

  private async decideAcrossSlots(counters: readonly CounterRequest[], countDenied: boolean): Promise<CounterDecision[]> {
    const groups = new Map<number, number[]>();
    for (let i = 0; i < counters.length; i++) {
      const slot = keySlot(this.keyOf(counters[i]));
      const g = groups.get(slot);
      if (g === undefined) groups.set(slot, [i]);
      else g.push(i);
    }
    if (groups.size === 1) return (await this.enqueue(counters, countDenied, groups.keys().next().value as number, false)) as CounterDecision[];

    const parts = [...groups.entries()];
    const settled = await Promise.allSettled(
      parts.map(([slot, idx]) => this.enqueue(idx.map((i) => counters[i]), countDenied, slot, true) as Promise<SlotShare>),
    );
    const decisions = new Array<CounterDecision>(counters.length);
    let failure: unknown;
    let anyDenied = false;
    settled.forEach((r, g) => {
      if (r.status === 'rejected') {
        failure ??= r.reason;
        return;
      }
      parts[g][1].forEach((i, k) => {
        decisions[i] = r.value.decisions[k];
        if (!r.value.decisions[k].allowed) anyDenied = true;
      });
    });
    // A failed slot fails the call; a denial in one slot undoes the others' charges (all-or-nothing).
    if (failure !== undefined || (anyDenied && !countDenied)) {
      settled.forEach((r, g) => {
        if (r.status === 'fulfilled') this.refund(parts[g][1].map((i) => counters[i]), r.value.tokens);
      });
    }
    if (failure !== undefined) throw failure;
    return decisions;
  }

  /** Takes back what DECIDE charged for `counters` (`tokens`: its charge tokens). Best effort, not awaited. */
  private refund(counters: readonly CounterRequest[], tokens: readonly string[]): void {
    const keys: string[] = [];
    const argv: (string | number)[] = [];
    for (let i = 0; i < counters.length; i++) {
      if (tokens[i] === '') continue;
      keys.push(this.keyOf(counters[i]));
      argv.push(ALGORITHM_CODE[counters[i].algorithm], counters[i].hits, tokens[i]);
    }
    if (keys.length === 0) return;
    this.refundCall([keys.length, ...keys, ...argv]).catch(() => this.onError('refund'));
  }

  private classify(err: unknown): RedisErrorKind {
    if (this.client.status !== 'ready') return 'disconnected';
    return DISCONNECTED.test(messageOf(err)) ? 'disconnected' : 'error';
  }

  private failed(kind: RedisErrorKind): void {
    this.onError(kind);
    this.failedSinceProbe = true;
    if (!this.probeActive) this.scheduleProbe(0);
  }

  /**
   * The health probe: one PING at a time, with its own deadline. Runs while calls fail or the last
   * probe failed; stops after a success that no failed call has followed, or when the connection is
   * lost (health is false then anyway, and 'ready' resets it).
   */
  private scheduleProbe(delayMs: number): void {
    if (this.closed) return;
    this.probeActive = true;
    this.probeTimer = setTimeout(() => this.runProbe(), delayMs);
    this.probeTimer.unref();
  }

  private runProbe(): void {
    this.probeTimer = undefined;
    if (this.closed || this.client.status !== 'ready') {
      this.probeActive = false;
      return;
    }
    this.failedSinceProbe = false;
    let settled = false;
    const finish = (ok: boolean): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (ok) {
        this.probeFailures = 0;
        if (this.failedSinceProbe) this.scheduleProbe(this.probeIntervalMs);
        else this.probeActive = false;
        return;
      }
      this.probeFailures++;
      // Below the threshold, confirm at once; past it, poll until Redis answers again.
      this.scheduleProbe(this.probeFailures < this.probeFailureThreshold ? 0 : this.probeIntervalMs);
    };
    // The same one-poll grace as calls: a busy loop must not read as an unreachable Redis.
    const timer = setTimeout(() => setImmediate(finish, false), this.probeTimeoutMs);
    timer.unref();
    this.client.ping().then(
      () => finish(true),
      () => finish(false),
    );
  }
}

/** Reads the next `n` counters of a DECIDE reply, and their charge tokens into `tokens` when given. */
function readDecisions(reply: DecideReplyReader, n: number, tokens: string[] | undefined): CounterDecision[] {
  const out = new Array<CounterDecision>(n);
  for (let i = 0; i < n; i++) {
    const remaining = reply.remaining();
    out[i] = remaining < 0 ? { allowed: false, remaining: 0, resetMs: reply.resetMs() } : { allowed: true, remaining, resetMs: reply.resetMs() };
    if (tokens === undefined) reply.skipToken();
    else tokens[i] = reply.token();
  }
  return out;
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
