import { CallBatcher, type CallBatch, type PendingCall } from './batcher';
import { cutParts, decideAcrossSlots, decideInParts, refundArgs, splitBySlot, type SlotPart, type PartAnswer } from './cluster-slots';
import type { RedisClient } from './connection';
import { HealthProbe } from './health-probe';
import { keySlot } from './key-slot';
import { BODY_HEADROOM, PreparedScript, respArgument } from './script-command';
import { RedisReservations } from './redis-reservations';
import { RESERVE_COMMAND, RESERVE_SCRIPT } from './reserve-script';
import { RedisSettlements } from './redis-settlements';
import { SETTLE_COMMAND, SETTLE_SCRIPT } from './settle-script';
import { PartGate, type GatedCall } from './part-gate';
import {
  counterProblem,
  counterSpec,
  DECIDE_SCRIPT,
  DecideReplyReader,
  FAILED_UNREADABLE,
  FAILED_WRITE,
  FAILED_WRONG_TYPE,
  REFUND_COMMAND,
  REFUND_SCRIPT,
} from './script';
import {
  isPlannedCounters,
  StoreUnavailableError,
  type CounterDecision,
  type CounterRequest,
  type DecideOptions,
  type PlannedCounters,
  type Store,
} from '../../limiter/store';

/**
 * The Redis adapter, a composition: time from Redis; decide() calls coalesced into batches by a
 * CallBatcher (./batcher.ts: group commit, a hard deadline per call), each batch piece sent as one
 * DECIDE script call (./script.ts), which decides each call all-or-nothing on its own, in arrival
 * order; a batch is cut past MAX_BATCH_REQUESTS requests or MAX_BATCH_KEYS counters, so that one
 * script never blocks Redis for long. A call of more than MAX_ATOMIC_COUNTERS counters is decided
 * in parts that pass a gate (./part-gate.ts), so that it never does either. Redis Cluster: a
 * batch piece holds one hash slot's calls; a call whose counters all share a slot (the common
 * case, and always for a single descriptor) is atomic; one across slots is split with refunds
 * (./cluster-slots.ts). Health: ./health-probe.ts.
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
  /** How long a reservation is held (RESERVATION_TTL), ms; the default of src/limiter/reservations.ts when omitted. */
  readonly reservationTtlMs?: number;
  /** Holds one descriptor's reservations keep at most (RESERVATIONS_MAX_PER_KEY). */
  readonly reservationsPerKey?: number;
  /** Bytes of one descriptor's holds, at most (RESERVATIONS_MAX_KEY_BYTES). */
  readonly reservationKeyBytes?: number;
}

/** Requests per DECIDE script call, at most. */
export const MAX_BATCH_REQUESTS = 64;
/** Counters per DECIDE script call, at most (a call of up to MAX_ATOMIC_COUNTERS still goes alone). */
export const MAX_BATCH_KEYS = 256;
/**
 * Counters of a call decided atomically in one script. A larger call is cut into parts of at most
 * this many, decided as a Cluster call across slots is (./cluster-slots.ts), through the part gate.
 */
export const MAX_ATOMIC_COUNTERS = 64;
/** Counters of large calls' parts on the wire at once, at most: each batch carries at most this much of their work. */
export const LARGE_CALL_COUNTERS_ON_WIRE = 256;
/** Counters of large calls waiting for their turn, at most; a large call that would exceed it fails at once. */
export const LARGE_CALL_MAX_WAITING = 16_384;
/** How long a part of a large call may wait for its turn, in call deadlines (timeoutMs), at least 500 ms; then its call fails. */
export const LARGE_CALL_MAX_WAIT_DEADLINES = 50;

type ScriptCall = (args: (string | number)[]) => Promise<unknown>;

/**
 * A counter's DECIDE arguments that depend only on it: its Redis key and its limit (counterSpec), as
 * text and as RESP (./script-command), or why the script cannot take it.
 */
interface CounterArgs {
  readonly key: string;
  readonly keyArgument: string;
  readonly specArgument: string;
  readonly problem: string | undefined;
}

/**
 * A request's DECIDE arguments: its counters' keys, and its counter count then their specs, as RESP
 * bytes (./script-command); the key that routes it; why the script cannot take one of its counters.
 */
interface RequestArgs {
  readonly keys: Buffer;
  readonly argv: Buffer;
  readonly firstKey: string;
  readonly problem: string | undefined;
}

/** A request's counter count as DECIDE reads it (RESP), made once for the counts of at most MAX_BATCH_KEYS. */
const COUNT_ARGUMENTS: readonly string[] = Array.from({ length: MAX_BATCH_KEYS + 1 }, (_, n) => respArgument(String(n)));
/** A request's charge flag, the ARGV before its counter count. */
const CHARGE_DENIED_ARGUMENT = Buffer.from(respArgument('1'));
const CHARGE_ADMITTED_ARGUMENT = Buffer.from(respArgument('0'));

/** One decide() call (on a cluster, one slot's part of it) as the batcher carries it. */
interface RedisCall {
  readonly counters: readonly CounterRequest[];
  readonly args: RequestArgs;
  readonly countDenied: boolean;
  /** A part of a multi-slot call: answered with a PartAnswer, and refunded if it answers too late. */
  readonly part: boolean;
}

type Batch = CallBatch<RedisCall, CounterDecision[] | PartAnswer>;
type Pending = PendingCall<RedisCall, CounterDecision[] | PartAnswer>;

const DISCONNECTED =
  /Stream isn't writeable|Connection is closed|MaxRetriesPerRequest|isn't ready|enableOfflineQueue|ECONNREFUSED|ECONNRESET|EPIPE|CLUSTERDOWN|None of startup nodes/i;

// A probe slower than this still proves Redis reachable; a frozen Redis misses it several times running.
const MIN_PROBE_TIMEOUT_MS = 250;

/**
 * The Redis Store: atomic decide-and-charge per call, calls batched into shared script calls,
 * each call settling within `timeoutMs` of its batch being sent (plus at most one event-loop turn).
 * Healthy while connected and the health probe has not failed `probeFailureThreshold` times running.
 */
/** The shortest deadline of a settlement (leases, written in the background), ms. */
const SETTLE_MIN_TIMEOUT_MS = 250;

export class RedisStore implements Store {
  readonly name = 'redis';
  /** Reservations of descriptors, each book in its counters' slot (./reserve-script.ts). */
  readonly reservations: RedisReservations;
  /** Settlements of leased counters, each ledger in its counters' slot (./settle-script.ts). */
  readonly settlements: RedisSettlements;
  private readonly client: RedisClient;
  private readonly decideScript: PreparedScript;
  private readonly refundCall: ScriptCall;
  // `<prefix>{`: a counter's Redis key is this, its counter key (or its tag), and `}` (and then its counter key).
  private readonly tagOpen: string;
  private readonly onError: (kind: RedisErrorKind) => void;
  private readonly isCluster: boolean;
  private readonly batcher: CallBatcher<RedisCall, CounterDecision[] | PartAnswer>;
  private readonly probe: HealthProbe;
  // The limiter hands out one CounterRequest per distinct descriptor (src/limiter/plan.ts): its
  // arguments are encoded once, and joined into the blocks of each request it is part of.
  private readonly counterArgs = new WeakMap<CounterRequest, CounterArgs>();
  // PlannedCounters are the same array on every call of one request (Store.decide): their blocks
  // are made once; other arrays (unkept requests, parts) are encoded per call.
  private readonly requestArgs = new WeakMap<PlannedCounters, RequestArgs>();
  private readonly gate: PartGate;
  private closed = false;

  constructor(options: RedisStoreOptions) {
    this.client = options.client;
    this.tagOpen = `${options.keyPrefix ?? ''}{`;
    const timeoutMs = options.timeoutMs ?? 10;
    const timeoutMessage = `redis did not answer within ${timeoutMs} ms`;
    this.onError = options.onError ?? (() => {});
    this.isCluster = this.client.isCluster === true;
    this.batcher = new CallBatcher({
      timeoutMs,
      maxCallsPerSend: MAX_BATCH_REQUESTS,
      maxWeightPerSend: MAX_BATCH_KEYS,
      weightOf: (call) => call.counters.length,
      send: this.send,
      grouped: this.isCluster,
      timeoutError: () => new StoreUnavailableError(timeoutMessage),
      onExpired: () => this.failed('timeout'),
    });
    this.gate = new PartGate({
      capacity: LARGE_CALL_COUNTERS_ON_WIRE,
      maxWaiting: LARGE_CALL_MAX_WAITING,
      maxWaitMs: Math.max(LARGE_CALL_MAX_WAIT_DEADLINES * timeoutMs, 500),
      busyError: (why) => new StoreUnavailableError(`redis store busy with large calls: ${why}`),
    });
    this.probe = new HealthProbe({
      ping: () => this.client.ping(),
      connected: () => this.client.status === 'ready',
      failureThreshold: options.probeFailureThreshold ?? 3,
      timeoutMs: options.probeTimeoutMs ?? Math.max(timeoutMs, MIN_PROBE_TIMEOUT_MS),
      intervalMs: options.probeIntervalMs ?? 200,
    });

    // The scripts take their key count as an argument (a batch has any number of keys). ioredis's
    // auto-pipeline would route such a command by that count on a cluster, and would only add a
    // turn of latency to batches that are already one command each: they are sent directly, and
    // ioredis still routes them by their first key. (DECIDE is sent as a Command, which ioredis
    // never auto-pipelines.)
    const clientOptions = this.client.options;
    const ignored = clientOptions.autoPipeliningIgnoredCommands ?? (clientOptions.autoPipeliningIgnoredCommands = []);
    if (!ignored.includes(REFUND_COMMAND)) ignored.push(REFUND_COMMAND);
    if (!ignored.includes(RESERVE_COMMAND)) ignored.push(RESERVE_COMMAND);
    if (!ignored.includes(SETTLE_COMMAND)) ignored.push(SETTLE_COMMAND);
    // EVALSHA by hash, and EVAL when the server answers NOSCRIPT (restart, failover, SCRIPT FLUSH):
    // defineCommand's for the rare calls, ./script-command's for DECIDE.
    this.decideScript = new PreparedScript(this.client, DECIDE_SCRIPT);
    this.client.defineCommand(REFUND_COMMAND, { lua: REFUND_SCRIPT });
    const commands = this.client as unknown as Record<string, ScriptCall>;
    this.refundCall = (args) => commands[REFUND_COMMAND](args);
    // The scripts of single calls (reservations, settlements): sent while open, their failures
    // counted as DECIDE's are (an error reply alone does not start the health probe).
    const single = (command: string, lua: string): ScriptCall => {
      this.client.defineCommand(command, { lua });
      return (args) => (this.closed ? Promise.reject(new StoreUnavailableError('redis store is closed')) : commands[command](args));
    };
    const failed = (err: unknown): Error => {
      if (err instanceof StoreUnavailableError && this.closed) return err;
      const kind = err instanceof StoreUnavailableError ? 'timeout' : this.classify(err);
      if (kind === 'error') this.onError(kind);
      else this.failed(kind);
      return err instanceof StoreUnavailableError ? err : unavailable(kind, err);
    };
    this.reservations = new RedisReservations({
      call: single(RESERVE_COMMAND, RESERVE_SCRIPT),
      keyOf: this.keyOf,
      tagOpen: this.tagOpen,
      timeoutMs,
      ttlMs: options.reservationTtlMs,
      maxPerKey: options.reservationsPerKey,
      maxKeyBytes: options.reservationKeyBytes,
      failed,
    });
    // Settlements are written in the background, off every decision's path: a busy Redis gets longer to take them.
    this.settlements = new RedisSettlements({
      call: single(SETTLE_COMMAND, SETTLE_SCRIPT),
      keyOf: this.keyOf,
      tagOpen: this.tagOpen,
      timeoutMs: Math.max(timeoutMs, SETTLE_MIN_TIMEOUT_MS),
      failed,
    });

    const onChange = options.onConnectionChange;
    let connected = false;
    this.client.on('ready', () => {
      // A fresh connection has just answered its ready check.
      this.probe.reset();
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

  /** Decides and charges all counters atomically (see ./cluster-slots.ts for counters across Cluster slots, and decideLarge). */
  decide(counters: readonly CounterRequest[], options?: DecideOptions): Promise<CounterDecision[]> {
    if (counters.length === 0) return Promise.resolve([]);
    if (this.closed) return Promise.reject(new StoreUnavailableError('redis store is closed'));
    const countDenied = options?.countDenied === true;
    // A counter the script cannot take fails its own call here, before it can share a batch.
    if (counters.length <= MAX_ATOMIC_COUNTERS && (!this.isCluster || counters.length === 1)) {
      const args = this.argsOfRequest(counters);
      if (args.problem !== undefined) return Promise.reject(new Error(args.problem));
      return this.batcher.enqueue({ counters, args, countDenied, part: false }, this.isCluster ? keySlot(args.firstKey) : 0) as Promise<CounterDecision[]>;
    }
    // Cut into parts (or one slot's part), each encoded as it is sent: nothing encoded for the whole.
    const problem = this.problemOf(counters);
    if (problem !== undefined) return Promise.reject(new Error(problem));
    if (counters.length > MAX_ATOMIC_COUNTERS) return this.decideLarge(counters, countDenied);
    return decideAcrossSlots({
      counters,
      countDenied,
      keyOf: this.keyOf,
      decideInSlot: (inSlot, slot) => this.enqueue(inSlot, countDenied, false, slot) as Promise<CounterDecision[]>,
      decidePart: (part, slot) => this.enqueue(part, countDenied, true, slot) as Promise<PartAnswer>,
      refund: this.refund,
    });
  }

  /**
   * A call of more than MAX_ATOMIC_COUNTERS counters, in parts (per slot on a cluster) that pass
   * the part gate: however large, it holds Redis no longer than a part at a time, and the small
   * calls beside it keep their deadlines. All-or-nothing through refunds, as across slots.
   */
  private decideLarge(counters: readonly CounterRequest[], countDenied: boolean): Promise<CounterDecision[]> {
    if (!this.gate.admits(counters.length)) {
      return Promise.reject(new StoreUnavailableError(`redis store busy with large calls: ${this.gate.waiting} of their counters already waiting`));
    }
    const whole: SlotPart[] = this.isCluster ? splitBySlot(counters, this.keyOf) : [[0, counters.map((_, i) => i)]];
    const call: GatedCall = { failed: false };
    return decideInParts({
      counters,
      countDenied,
      parts: cutParts(whole, MAX_ATOMIC_COUNTERS),
      decidePart: (part, slot) => this.gate.pass(part.length, call, () => this.enqueue(part, countDenied, true, slot) as Promise<PartAnswer>),
      refund: this.refund,
    });
  }

  /** False while disconnected, or after `probeFailureThreshold` consecutive failed probes until one succeeds. */
  isHealthy(): boolean {
    return !this.closed && this.client.status === 'ready' && this.probe.healthy();
  }

  /** Closes the connection; pending calls reject. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.probe.stop();
    this.batcher.close(new StoreUnavailableError('redis store is closed'));
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

  // A tagged counter (the limits of one descriptor) lives in its tag's slot; its key still names it in full.
  private readonly keyOf = (c: CounterRequest): string =>
    c.tag === undefined || c.tag === c.key ? this.tagOpen + c.key + '}' : this.tagOpen + c.tag + '}' + c.key;

  private argsOf(c: CounterRequest): CounterArgs {
    let a = this.counterArgs.get(c);
    if (a === undefined) {
      const key = this.keyOf(c);
      a = { key, keyArgument: respArgument(key), specArgument: respArgument(counterSpec(c)), problem: counterProblem(c) };
      this.counterArgs.set(c, a);
    }
    return a;
  }

  /** Part of a call (a part, or one slot's counters) into the batch of its slot. */
  private enqueue(counters: readonly CounterRequest[], countDenied: boolean, part: boolean, slot: number): Promise<CounterDecision[] | PartAnswer> {
    return this.batcher.enqueue({ counters, args: this.argsOfRequest(counters), countDenied, part }, slot);
  }

  /** The RESP of a request's arguments, made once per PlannedCounters (else per call). */
  private argsOfRequest(counters: readonly CounterRequest[]): RequestArgs {
    const planned = isPlannedCounters(counters);
    let a = planned ? this.requestArgs.get(counters) : undefined;
    if (a !== undefined) return a;
    let keys = '';
    let argv = countArgument(counters.length);
    for (let i = 0; i < counters.length; i++) {
      const c = this.argsOf(counters[i]);
      keys += c.keyArgument;
      argv += c.specArgument;
    }
    a = { keys: Buffer.from(keys), argv: Buffer.from(argv), firstKey: this.argsOf(counters[0]).key, problem: this.problemOf(counters) };
    if (planned) this.requestArgs.set(counters, a);
    return a;
  }

  /** Why the script cannot take one of `counters` (the first such), or undefined. */
  private problemOf(counters: readonly CounterRequest[]): string | undefined {
    for (let i = 0; i < counters.length; i++) {
      const problem = this.argsOf(counters[i]).problem;
      if (problem !== undefined) return `counter ${JSON.stringify(counters[i].key)}: ${problem}`;
    }
    return undefined;
  }

  /** One DECIDE call for calls[from, to) of a batch, which hold `keys` counters in all. */
  private readonly send = (batch: Batch, calls: readonly Pending[], from: number, to: number, keys: number): void => {
    // KEYS, then per request ARGV's charge flag, counter count and specs (see DECIDE_SCRIPT): one
    // buffer of each request's blocks, made once per request (./script-command).
    let length = BODY_HEADROOM;
    for (let i = from; i < to; i++) {
      const a = calls[i].request.args;
      length += a.keys.length + CHARGE_ADMITTED_ARGUMENT.length + a.argv.length;
    }
    const body = Buffer.allocUnsafe(length);
    let pos = BODY_HEADROOM;
    for (let i = from; i < to; i++) pos += calls[i].request.args.keys.copy(body, pos);
    for (let i = from; i < to; i++) {
      const call = calls[i].request;
      pos += (call.countDenied ? CHARGE_DENIED_ARGUMENT : CHARGE_ADMITTED_ARGUMENT).copy(body, pos);
      pos += call.args.argv.copy(body, pos);
    }
    this.decideScript.call(keys, 2 * (to - from) + keys, calls[from].request.args.firstKey, body).then(
      (reply) => this.answer(batch, calls, from, to, reply as string),
      (err: unknown) => {
        const kind = this.classify(err);
        const error = unavailable(kind, err);
        this.batcher.reject(batch, calls, from, to, error, () => this.failed(kind));
      },
    );
  };

  private answer(batch: Batch, calls: readonly Pending[], from: number, to: number, text: string): void {
    const reply = new DecideReplyReader(text);
    let i = from;
    try {
      for (; i < to; i++) {
        const call = calls[i];
        const counters = call.request.counters;
        const n = counters.length;
        const failure = reply.failure(n);
        if (failure !== undefined) {
          // This call alone: Redis is fine, so the health probe is not started.
          this.batcher.reject(batch, calls, i, i + 1, new StoreUnavailableError(`redis error: ${FAILURE_TEXT[failure] ?? `failure ${failure}`}`), () =>
            this.onError('error'),
          );
          continue;
        }
        if (!call.request.part) {
          const decisions = readDecisions(reply, n, undefined);
          this.batcher.resolve(batch, call, decisions);
          continue;
        }
        const tokens = new Array<string>(n);
        const decisions = readDecisions(reply, n, tokens);
        // A part that already failed (deadline): its slot's charges must not outlive it.
        if (call.settled) this.refund(counters, tokens);
        else this.batcher.resolve(batch, call, { decisions, tokens });
      }
    } catch (err) {
      // The calls read before the fault have their answers; what follows cannot be trusted.
      this.batcher.reject(batch, calls, i, to, new StoreUnavailableError(`redis error: ${messageOf(err)}`, { cause: err }), () => this.failed('error'));
    }
  }

  /** Takes back what DECIDE charged for `counters` (`tokens`: its charge tokens). Best effort, not awaited. */
  private readonly refund = (counters: readonly CounterRequest[], tokens: readonly string[]): void => {
    const args = refundArgs(counters, tokens, this.keyOf);
    if (args === undefined) return;
    this.refundCall(args).catch(() => this.onError('refund'));
  };

  private classify(err: unknown): RedisErrorKind {
    return redisErrorKind(this.client, err);
  }

  private failed(kind: RedisErrorKind): void {
    this.onError(kind);
    this.probe.callFailed();
  }
}

const FAILURE_TEXT: Readonly<Record<number, string>> = {
  [FAILED_WRONG_TYPE]: 'a counter key of this call holds another type',
  [FAILED_UNREADABLE]: 'a bucket key of this call holds a value that is not a bucket state',
  [FAILED_WRITE]: 'a counter key of this call refused the increment (another type, or not an integer)',
};

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

function countArgument(n: number): string {
  return n < COUNT_ARGUMENTS.length ? COUNT_ARGUMENTS[n] : respArgument(String(n));
}

/** Whether a failed call met a lost connection or an error of Redis's. */
export function redisErrorKind(client: RedisClient, err: unknown): RedisErrorKind {
  if (client.status !== 'ready') return 'disconnected';
  return DISCONNECTED.test(messageOf(err)) ? 'disconnected' : 'error';
}

/** A failed call as the store reports it. */
export function unavailable(kind: RedisErrorKind, err: unknown): StoreUnavailableError {
  return new StoreUnavailableError(`redis ${kind === 'disconnected' ? 'unavailable' : 'error'}: ${messageOf(err)}`, { cause: err });
}

export function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
