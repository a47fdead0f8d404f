import type { Clock } from '../limiter/types';
import type { Settings } from '../settings';
import { createRedisClient, parseRedisTarget, type RedisClient } from './redis-connection';
import { ALGORITHM_CODE, DECIDE_ARGV_STRIDE, DECIDE_REPLY_STRIDE, DECIDE_SCRIPT, REFUND_SCRIPT } from './redis-script';
import { StoreUnavailableError, type CounterDecision, type CounterRequest, type DecideOptions, type Store } from './store';

/**
 * The Redis adapter: one DECIDE script call per request (see src/store/redis-script.ts), time from
 * Redis, a hard deadline per call.
 *
 * Redis Cluster: counters are grouped by hash slot. All in one slot (the common case, and always for
 * a single descriptor): one script call, atomic. Across slots: one call per slot, in parallel, each
 * atomic for its own counters; when any slot denies (or fails), the slots that charged are refunded
 * with REFUND_SCRIPT, which removes exactly what DECIDE added. Guarantee across slots:
 * - never more admitted than a single atomic store would admit: a charge is only ever kept when
 *   every slot allowed, so no request is admitted on a quota it did not get;
 * - between a charge and its refund (about one round trip) other requests may see the extra hits
 *   and be denied when an atomic store would have admitted them (conservative, transient);
 * - a refund that cannot be delivered (node down) leaves the charge in place until its window
 *   expires: over-counting, never under-counting.
 */

/** What went wrong, for the store-errors metric. */
export type RedisErrorKind = 'timeout' | 'disconnected' | 'error' | 'refund';

export interface RedisStoreOptions {
  readonly client: RedisClient;
  /** CACHE_KEY_PREFIX, prepended to every key. */
  readonly keyPrefix?: string;
  /** Deadline of one decide() call, ms (settings.storeTimeoutMs). */
  readonly timeoutMs?: number;
  /** Consecutive failed health probes (PING) after which isHealthy() turns false until one succeeds. Default 3. */
  readonly probeFailureThreshold?: number;
  /** Deadline of one health probe, ms. Default max(timeoutMs, 250): a slow Redis is still a reachable one. */
  readonly probeTimeoutMs?: number;
  /** Period of the health probe while calls fail or the last probe failed, ms. Default 200. */
  readonly probeIntervalMs?: number;
  /** Local clock: accepted for symmetry with the other stores; decisions always use Redis `TIME`. */
  readonly clock?: Clock;
  /** Called once per failed call (and per failed refund), for metrics. */
  readonly onError?: (kind: RedisErrorKind) => void;
  /** Connection state changes, for logs (never per request). */
  readonly onConnectionChange?: (state: 'ready' | 'lost', error?: Error) => void;
}

type ScriptCall = (...args: (string | number)[]) => Promise<unknown>;

/** One decide() call awaiting its answer or its deadline, whichever comes first. */
interface PendingCall {
  settled: boolean;
  readonly reject: (err: Error) => void;
  readonly batch: CallBatch;
}

/**
 * Calls that ioredis sends together, sharing one deadline. ioredis queues commands into one
 * auto-pipeline and writes it in the check phase or, while its previous pipeline still awaits
 * answers, right before it hands out that pipeline's answers (one pipeline in flight per
 * connection). So a batch is sealed when its turn ends or when an answer arrives (whatever was
 * queued until then has just been written), and its clock starts once it is sealed and the batch
 * before it has settled: when it is on the wire.
 */
class CallBatch {
  readonly calls: PendingCall[] = [];
  open = 0;
  /** Its turn has ended: no call joins any more. */
  closed = false;
  started = false;
  timer: NodeJS.Timeout | undefined;
  prev: CallBatch | undefined;
  next: CallBatch | undefined;
}

const DISCONNECTED = /Stream isn't writeable|Connection is closed|MaxRetriesPerRequest|isn't ready|enableOfflineQueue|ECONNREFUSED|ECONNRESET|EPIPE|CLUSTERDOWN|None of startup nodes/i;

// A probe slower than this still proves Redis reachable; a frozen Redis misses it several times running.
const MIN_PROBE_TIMEOUT_MS = 250;

/**
 * The Redis Store: atomic decide-and-charge in one script call, settling within `timeoutMs` (plus
 * at most one event-loop turn).
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
  // Script commands by key count: a command defined with its numberOfKeys lets ioredis route (and
  // auto-pipeline) it by its first key in a cluster, which a leading numkeys argument would hide.
  private readonly decideCalls: ScriptCall[] = [];
  private readonly refundCalls: ScriptCall[] = [];
  private readonly prefix: string;
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
  // The batch of the current loop turn, and the newest batch not yet settled (the chain's tail).
  private collecting: CallBatch | undefined;
  private newest: CallBatch | undefined;

  constructor(options: RedisStoreOptions) {
    this.client = options.client;
    this.prefix = options.keyPrefix ?? '';
    this.timeoutMs = options.timeoutMs ?? 10;
    this.timeoutMessage = `redis did not answer within ${this.timeoutMs} ms`;
    this.probeFailureThreshold = options.probeFailureThreshold ?? 3;
    this.probeTimeoutMs = options.probeTimeoutMs ?? Math.max(this.timeoutMs, MIN_PROBE_TIMEOUT_MS);
    this.probeIntervalMs = options.probeIntervalMs ?? 200;
    this.onError = options.onError ?? (() => {});
    this.isCluster = this.client.isCluster === true;
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
    const work =
      this.isCluster && counters.length > 1 ? this.decideAcrossSlots(counters, countDenied) : this.run(counters, countDenied).then(toDecisions);
    return this.withDeadline(work);
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

  /** Consecutive failed health probes so far (0 after a successful one or a reconnect). */
  get consecutiveProbeFailures(): number {
    return this.probeFailures;
  }

  private keyOf(c: CounterRequest): string {
    return `${this.prefix}{${c.key}}`;
  }

  /**
   * The script command for `keys` keys, defined on first use. defineCommand gives EVALSHA by hash,
   * and EVAL when the server answers NOSCRIPT (restart, failover, SCRIPT FLUSH).
   */
  private scriptCall(kind: 'decide' | 'refund', keys: number): ScriptCall {
    const calls = kind === 'decide' ? this.decideCalls : this.refundCalls;
    let call = calls[keys];
    if (call === undefined) {
      const name = `slidegate_${kind}_${keys}`;
      this.client.defineCommand(name, { lua: kind === 'decide' ? DECIDE_SCRIPT : REFUND_SCRIPT, numberOfKeys: keys });
      const client = this.client as unknown as Record<string, ScriptCall>;
      call = (...args) => client[name](...args);
      calls[keys] = call;
    }
    return call;
  }

  private run(counters: readonly CounterRequest[], countDenied: boolean): Promise<(number | string)[]> {
    const n = counters.length;
    const args: (string | number)[] = new Array(n + 1 + n * DECIDE_ARGV_STRIDE);
    args[n] = countDenied ? '1' : '0';
    for (let i = 0; i < n; i++) {
      const c = counters[i];
      args[i] = this.keyOf(c);
      const o = n + 1 + i * DECIDE_ARGV_STRIDE;
      args[o] = ALGORITHM_CODE[c.algorithm];
      args[o + 1] = c.windowMs;
      args[o + 2] = c.limit;
      args[o + 3] = c.hits;
    }
    return this.scriptCall('decide', n)(...args) as Promise<(number | string)[]>;
  }

  private async decideAcrossSlots(counters: readonly CounterRequest[], countDenied: boolean): Promise<CounterDecision[]> {
    const groups = new Map<number, number[]>();
    for (let i = 0; i < counters.length; i++) {
      const slot = keySlot(this.keyOf(counters[i]));
      const g = groups.get(slot);
      if (g === undefined) groups.set(slot, [i]);
      else g.push(i);
    }
    if (groups.size === 1) return toDecisions(await this.run(counters, countDenied));

    const parts = [...groups.values()];
    const settled = await Promise.allSettled(parts.map((idx) => this.run(idx.map((i) => counters[i]), countDenied)));
    const decisions = new Array<CounterDecision>(counters.length);
    let failure: unknown;
    let anyDenied = false;
    settled.forEach((r, g) => {
      if (r.status === 'rejected') {
        failure ??= r.reason;
        return;
      }
      const part = toDecisions(r.value);
      parts[g].forEach((i, k) => {
        decisions[i] = part[k];
        if (!part[k].allowed) anyDenied = true;
      });
    });
    // A failed slot fails the call; a denial in one slot undoes the others' charges (all-or-nothing).
    if (failure !== undefined || (anyDenied && !countDenied)) {
      settled.forEach((r, g) => {
        if (r.status === 'fulfilled') this.refund(parts[g].map((i) => counters[i]), r.value);
      });
    }
    if (failure !== undefined) throw failure;
    return decisions;
  }

  /** Best effort, not awaited: the answer does not depend on it. */
  private refund(counters: readonly CounterRequest[], reply: readonly (number | string)[]): void {
    const keys: string[] = [];
    const argv: (string | number)[] = [];
    for (let i = 0; i < counters.length; i++) {
      const token = reply[i * DECIDE_REPLY_STRIDE + 3];
      if (token === '' || token === undefined || token === null) continue;
      keys.push(this.keyOf(counters[i]));
      argv.push(ALGORITHM_CODE[counters[i].algorithm], counters[i].hits, String(token));
    }
    if (keys.length === 0) return;
    this.scriptCall('refund', keys.length)(...keys, ...argv).catch(() => this.onError('refund'));
  }

  /**
   * Rejects `work` with StoreUnavailableError unless it settles in time. A busy event loop must not
   * fail calls that Redis answers promptly, hence:
   * - the clock starts when the call's batch is on the wire (see CallBatch), not when decide() ran,
   *   and a whole batch shares one timer (one per pipeline rather than one per call);
   * - timers run before the poll phase that reads sockets, so a timer may fire while the answer sits
   *   unread in the socket buffer: expiry waits one setImmediate, which runs after that poll;
   * - when a batch expires, the batches queued behind it (not yet sent) expire with it: Redis is not
   *   answering, and they could only be answered after it.
   * With Redis silent, a call settles about `timeoutMs` plus one loop turn after its turn ends.
   */
  private withDeadline<T>(work: Promise<T>): Promise<T> {
    let batch = this.collecting;
    if (batch === undefined) {
      batch = this.collecting = new CallBatch();
      const newest = this.newest;
      if (newest !== undefined) {
        batch.prev = newest;
        newest.next = batch;
      }
      this.newest = batch;
      // Queued after ioredis's own flush (the command was issued before this), so it runs after it.
      setImmediate(this.closeBatch, batch);
    }
    const owner = batch;
    return new Promise<T>((resolve, reject) => {
      const call: PendingCall = { settled: false, reject, batch: owner };
      owner.calls.push(call);
      owner.open++;
      work.then(
        (value) => {
          if (call.settled) return;
          if (this.collecting !== undefined) this.closeBatch(this.collecting);
          this.settle(call);
          resolve(value);
        },
        (err: unknown) => {
          if (call.settled) return;
          if (this.collecting !== undefined) this.closeBatch(this.collecting);
          this.settle(call);
          const kind = this.classify(err);
          this.failed(kind);
          reject(new StoreUnavailableError(`redis ${kind === 'disconnected' ? 'unavailable' : 'error'}: ${messageOf(err)}`, { cause: err }));
        },
      );
    });
  }

  private readonly closeBatch = (batch: CallBatch): void => {
    if (batch.closed) return;
    if (this.collecting === batch) this.collecting = undefined;
    batch.closed = true;
    if (batch.open === 0) this.finish(batch);
    else if (batch.prev === undefined) this.start(batch);
  };

  private start(batch: CallBatch): void {
    batch.started = true;
    batch.timer = setTimeout(this.onDeadline, this.timeoutMs, batch);
  }

  private readonly onDeadline = (batch: CallBatch): void => {
    batch.timer = undefined;
    setImmediate(this.expire, batch);
  };

  private settle(call: PendingCall): void {
    call.settled = true;
    const batch = call.batch;
    if (--batch.open === 0 && batch.closed) this.finish(batch);
  }

  /** Every call of `batch` has settled: unlink it, and start the clock of the batch it held back. */
  private finish(batch: CallBatch): void {
    if (batch.timer !== undefined) clearTimeout(batch.timer);
    const { prev, next } = batch;
    batch.prev = batch.next = undefined;
    if (prev !== undefined) prev.next = next;
    if (this.newest === batch) this.newest = prev;
    if (next === undefined) return;
    next.prev = prev;
    if (prev === undefined && next.closed && !next.started) this.start(next);
  }

  private readonly expire = (batch: CallBatch): void => {
    if (batch.open === 0) return;
    const doomed: CallBatch[] = [];
    for (let b: CallBatch | undefined = batch; b !== undefined && b.closed; b = b.next) {
      b.started = true;
      doomed.push(b);
    }
    for (const b of doomed) {
      for (const call of b.calls) {
        if (call.settled) continue;
        this.settle(call);
        this.failed('timeout');
        call.reject(new StoreUnavailableError(this.timeoutMessage));
      }
    }
  };

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

function toDecisions(reply: readonly (number | string)[]): CounterDecision[] {
  const n = reply.length / DECIDE_REPLY_STRIDE;
  const out = new Array<CounterDecision>(n);
  for (let i = 0; i < n; i++) {
    const o = i * DECIDE_REPLY_STRIDE;
    out[i] = { allowed: Number(reply[o]) === 1, remaining: Number(reply[o + 1]), resetMs: Number(reply[o + 2]) };
  }
  return out;
}

function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

// CRC16-XMODEM table, as Redis Cluster hashes keys.
const CRC16 = (() => {
  const table = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i << 8;
    for (let j = 0; j < 8; j++) c = c & 0x8000 ? (c << 1) ^ 0x1021 : c << 1;
    table[i] = c & 0xffff;
  }
  return table;
})();

/** Redis Cluster hash slot of a key (hash tag rules included), over its UTF-8 bytes. */
export function keySlot(key: string): number {
  const bytes = Buffer.from(key, 'utf8');
  let start = 0;
  let end = bytes.length;
  const open = bytes.indexOf(0x7b); // '{'
  if (open >= 0) {
    const close = bytes.indexOf(0x7d, open + 1); // '}'
    if (close > open + 1) {
      start = open + 1;
      end = close;
    }
  }
  let crc = 0;
  for (let i = start; i < end; i++) crc = ((crc << 8) & 0xffff) ^ CRC16[((crc >> 8) ^ bytes[i]) & 0xff];
  return crc & 16383;
}

/** Hooks main.ts passes to the Redis store. */
export interface RedisStoreHooks {
  readonly onError?: (kind: RedisErrorKind) => void;
  readonly onConnectionChange?: (state: 'ready' | 'lost', error?: Error) => void;
}

/** Builds a RedisStore from the settings (REDIS_*, CACHE_KEY_PREFIX, STORE_TIMEOUT_MS). Throws SettingsError on bad REDIS_* values. */
export function createRedisStore(settings: Settings, hooks: RedisStoreHooks = {}): RedisStore {
  const client = createRedisClient(parseRedisTarget(settings.redis));
  return new RedisStore({
    client,
    keyPrefix: settings.cacheKeyPrefix,
    timeoutMs: settings.storeTimeoutMs,
    onError: hooks.onError,
    onConnectionChange: hooks.onConnectionChange,
  });
}
