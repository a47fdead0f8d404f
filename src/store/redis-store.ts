import { systemClock, type Clock } from '../limiter/types';
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
  /** Consecutive failed calls after which isHealthy() turns false until a probe succeeds. Default 3. */
  readonly failureThreshold?: number;
  /** Period of the health probe (PING) while unhealthy, ms. Default 200. */
  readonly probeIntervalMs?: number;
  /** Local clock: only for health bookkeeping; decisions always use Redis `TIME`. */
  readonly clock?: Clock;
  /** Called once per failed call (and per failed refund), for metrics. */
  readonly onError?: (kind: RedisErrorKind) => void;
  /** Connection state changes, for logs (never per request). */
  readonly onConnectionChange?: (state: 'ready' | 'lost', error?: Error) => void;
}

type ScriptCall = (...args: (string | number)[]) => Promise<unknown>;

const DISCONNECTED = /Stream isn't writeable|Connection is closed|MaxRetriesPerRequest|isn't ready|enableOfflineQueue|ECONNREFUSED|ECONNRESET|EPIPE|CLUSTERDOWN|None of startup nodes/i;

// Consecutive failures further apart than this do not add up.
const FAILURE_MEMORY_MS = 10_000;

/** The Redis Store: atomic decide-and-charge in one script call, settling within `timeoutMs`. */
export class RedisStore implements Store {
  readonly name = 'redis';
  private readonly client: RedisClient;
  // Script commands by key count: a command defined with its numberOfKeys lets ioredis route (and
  // auto-pipeline) it by its first key in a cluster, which a leading numkeys argument would hide.
  private readonly decideCalls: ScriptCall[] = [];
  private readonly refundCalls: ScriptCall[] = [];
  private readonly prefix: string;
  private readonly timeoutMs: number;
  private readonly failureThreshold: number;
  private readonly probeIntervalMs: number;
  private readonly clock: Clock;
  private readonly onError: (kind: RedisErrorKind) => void;
  private readonly isCluster: boolean;
  private failures = 0;
  private lastFailureAtMs = 0;
  private probe: NodeJS.Timeout | undefined;
  private probing = false;
  private closed = false;

  constructor(options: RedisStoreOptions) {
    this.client = options.client;
    this.prefix = options.keyPrefix ?? '';
    this.timeoutMs = options.timeoutMs ?? 10;
    this.failureThreshold = options.failureThreshold ?? 3;
    this.probeIntervalMs = options.probeIntervalMs ?? 200;
    this.clock = options.clock ?? systemClock;
    this.onError = options.onError ?? (() => {});
    this.isCluster = this.client.isCluster === true;
    const onChange = options.onConnectionChange;
    let connected = false;
    this.client.on('ready', () => {
      this.failures = 0;
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

  /** False while disconnected, or after `failureThreshold` consecutive failed calls until Redis answers again. */
  isHealthy(): boolean {
    return !this.closed && this.client.status === 'ready' && this.failures < this.failureThreshold;
  }

  /** Closes the connection; pending calls reject. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.stopProbe();
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

  /** Consecutive failed calls so far (0 after a success). */
  get consecutiveFailures(): number {
    return this.failures;
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

  private withDeadline<T>(work: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      let settled = false;
      const timer = setTimeout(() => {
        settled = true;
        this.recordFailure('timeout');
        reject(new StoreUnavailableError(`redis did not answer within ${this.timeoutMs} ms`));
      }, this.timeoutMs);
      work.then(
        (value) => {
          if (settled) return;
          settled = true;
          clearTimeout(timer);
          this.failures = 0;
          resolve(value);
        },
        (err: unknown) => {
          if (settled) return;
          settled = true;
          clearTimeout(timer);
          const kind = this.classify(err);
          this.recordFailure(kind);
          reject(new StoreUnavailableError(`redis ${kind === 'disconnected' ? 'unavailable' : 'error'}: ${messageOf(err)}`, { cause: err }));
        },
      );
    });
  }

  private classify(err: unknown): RedisErrorKind {
    if (this.client.status !== 'ready') return 'disconnected';
    return DISCONNECTED.test(messageOf(err)) ? 'disconnected' : 'error';
  }

  private recordFailure(kind: RedisErrorKind): void {
    const now = this.clock.nowMs();
    // Only recent failures add up: a stray timeout a minute ago says nothing about health now.
    if (now - this.lastFailureAtMs > FAILURE_MEMORY_MS) this.failures = 0;
    this.failures++;
    this.lastFailureAtMs = now;
    this.onError(kind);
    if (this.failures >= this.failureThreshold) this.startProbe();
  }

  /** While unhealthy, PING on a timer so health recovers without waiting for traffic. */
  private startProbe(): void {
    if (this.probe !== undefined || this.closed) return;
    this.probe = setInterval(() => {
      if (this.failures < this.failureThreshold) return this.stopProbe();
      if (this.probing || this.client.status !== 'ready') return;
      this.probing = true;
      const ping = this.client.ping();
      const timeout = new Promise<never>((_, reject) => setTimeout(() => reject(new Error('probe timeout')), this.timeoutMs).unref());
      Promise.race([ping, timeout]).then(
        () => {
          this.probing = false;
          this.failures = 0;
          this.stopProbe();
        },
        () => {
          this.probing = false;
        },
      );
      ping.catch(() => {});
    }, this.probeIntervalMs);
    this.probe.unref();
  }

  private stopProbe(): void {
    if (this.probe !== undefined) clearInterval(this.probe);
    this.probe = undefined;
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
