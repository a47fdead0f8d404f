import { randomBytes } from 'node:crypto';
import { classify, GrpcStatus, publicMessage } from '../errors';
import { InvalidRequestError } from '../limiter/errors';
import {
  QuotaBudgets,
  type BudgetView,
  type ProxyShareView as BudgetProxyView,
  type QuotaAction,
  type QuotaObserver,
  type QuotaRuleTotals,
  type QuotaSubscriber,
  type RlqsLimits,
} from '../sharing/quota/quota-budgets';
import type { ReplicaExchange } from '../limiter/replica-exchange';
import type { RateLimitConfig } from '../limiter/rules';
import type { Store } from '../limiter/store';
import { monotonicClock, type Clock } from '../limiter/types';
import type { Logger } from '../log';
import { decodeUsageReports, encodeQuotaResponse, RLQS_PATH } from '../wire/rlqs-codec';
import type { CallFailure } from './rls-service';
import type { StreamingMethod } from './streaming';

/**
 * The quota stream service (RLQS, envoy.service.rate_limit_quota.v3) as every gRPC transport serves
 * it: the edge of the quota budgets (src/sharing/quota/quota-budgets.ts, where the division, charges and
 * demand live). Here: the streams, their caps and timeouts, and the codec.
 *
 * - a stream's reports are handled one at a time, each before the next is read (the transport's
 *   flow control holds the peer back), and at most `maxReportsPerSecond` a second (a large report
 *   counts once more per REPORT_CREDIT_BYTES): a report past that waits, so a flooding peer costs its
 *   own stream's time, not the process's; every stream together takes at most
 *   `maxProcessReportsPerSecond` of the same credit, so that many peers each within their own cap
 *   cannot hold a core either (a report past it waits its turn);
 * - what the transport holds for a peer that has not read it counts against the byte budget; while
 *   a peer is not keeping up (a write returned false), pushes to it are not written (it is sent its
 *   current assignments once it reads) and its next report waits; one that reads nothing for its
 *   idle timeout, or whose held output would pass the byte budget, is cut with RESOURCE_EXHAUSTED
 *   (what it held is dropped);
 * - a stream over RLQS_MAX_STREAMS (or RLQS_MAX_STREAMS_PER_CONNECTION on its connection), or
 *   whose state would pass the budgets' byte budget (RLQS_MAX_MEMORY_BYTES), is refused
 *   with RESOURCE_EXHAUSTED; one that sends no report within `firstReportTimeoutMs`, or nothing for
 *   `idleTimeoutMs`, is ended with DEADLINE_EXCEEDED (Envoy reports every interval, idle or not);
 * - a different domain later on a stream, a malformed message or a bucket over the caps ends that
 *   stream with INVALID_ARGUMENT (through the error catalogue); no other stream notices;
 * - on shutdown every stream ends with UNAVAILABLE and its proxies' demand is withdrawn, so that the
 *   proxies reconnect to another replica, which continues the same budget.
 */

/** Where one stream's messages go: RateLimitQuotaResponse message bytes, and the end (OK when no failure). */
export interface QuotaStreamSink {
  /** Sends one message; false once the peer is not taking them as fast as they come (QuotaStream.writable follows). */
  send(message: Uint8Array): boolean;
  /** Ends the stream after what is held for the peer. */
  end(failure?: CallFailure): void;
  /** Ends the stream at once, dropping what is held for a peer that does not read. */
  cut(failure: CallFailure): void;
  /** Bytes sent and still held for the peer (flow control). */
  readonly heldBytes: number;
}

/** A stream as its transport drives it. */
export interface QuotaStream {
  /** One received RateLimitQuotaUsageReports message (unframed); the next waits for the returned promise. */
  message(bytes: Buffer): Promise<void>;
  /** The peer takes messages again after send() returned false. */
  writable(): void;
  /** The client ended the stream or went away. */
  closed(): void;
}

/** Reported usage, for the per-rule metrics. */
export type RlqsObserver = QuotaObserver;

export interface RlqsServiceOptions {
  readonly store: Store;
  /** Other replicas' demand; absent: this process divides alone. */
  readonly exchange?: ReplicaExchange;
  readonly config: () => RateLimitConfig | undefined;
  readonly logger: Logger;
  readonly limits: RlqsLimits;
  /** SHADOW_MODE: every assignment ALLOW_ALL, usage still counted. */
  readonly shadowMode?: boolean;
  readonly observer?: RlqsObserver;
  readonly clock?: Clock;
  /** Names this process's streams in the store; random by default. */
  readonly replicaId?: string;
  /** The calendar of `calendar: true` limits, ms ahead of UTC (CALENDAR_TIMEZONE); default 0. */
  readonly calendarOffsetMs?: number;
  /** Runs the budgets' background work and the stream timeouts (default true; tests drive tick()). */
  readonly timers?: boolean;
}

/** A read-only view of the streams and shares (debug port, live view). */
export interface RlqsView {
  readonly replica: string;
  /** Streams open (the list below shows at most VIEW_MAX_STREAMS of them). */
  readonly openStreams: number;
  readonly streams: readonly StreamView[];
  /** Budgets in use (the list shows at most VIEW_MAX_BUDGETS of them). */
  readonly budgets: number;
  readonly rules: readonly RuleShareView[];
  /** Estimated bytes the streams hold (what the transports hold for peers included), and their budget (RLQS_MAX_MEMORY_BYTES). */
  readonly bytes: number;
  readonly maxBytes: number;
  /** Bytes the transports hold for the streams' peers (sent, not yet read), part of `bytes`. */
  readonly heldBytes: number;
}

export interface StreamView {
  readonly member: string;
  readonly domain: string | undefined;
  readonly buckets: number;
  /** The report interval observed on the stream, ms; undefined before two full reports. */
  readonly reportIntervalMs: number | undefined;
  readonly openedAtMs: number;
  /** Bytes the transport holds for the peer (sent, not yet read). */
  readonly heldBytes: number;
}

/** One budget, its proxies named as they named themselves. */
export interface RuleShareView extends Omit<BudgetView, 'proxies'> {
  readonly proxies: readonly ProxyShareView[];
}

export interface ProxyShareView extends BudgetProxyView {
  /** This replica's proxies: the name the proxy sent (PROXY_NAME_HEADER, cut), or null. */
  readonly proxy?: string | null;
}

/** The request header (gRPC metadata) a proxy may name itself with: Envoy sends it from grpc_service.initial_metadata. */
export const PROXY_NAME_HEADER = 'node-id';
/** Characters of a proxy's name kept (the caller's bytes: bounded before they are stored). */
const PROXY_NAME_MAX_CHARS = 128;
/** Views list at most this many streams, budgets and proxies per budget (the debug page stays small whatever the fleet). */
const VIEW_MAX_STREAMS = 1_000;
export const VIEW_MAX_BUDGETS = 100;
export const VIEW_MAX_PROXIES = 50;
/** A report costs one credit of RLQS_MAX_REPORTS_PER_SECOND, and one more per this many bytes (decoding is per byte). */
const REPORT_CREDIT_BYTES = 1_024;
/** Stream timeouts are checked this often, ms. */
const TIMEOUT_CHECK_MS = 1_000;

/** Report credit: a token bucket of `rate` a second, holding at most `rate`. */
class ReportCredit {
  private credit: number;
  private atMs: number;

  constructor(
    private readonly rate: number,
    nowMs: number,
  ) {
    this.credit = rate;
    this.atMs = nowMs;
  }

  /** Takes `cost`; how long to wait first when there was not enough (ms). Credit taken ahead waits its turn after what was taken before it. */
  take(cost: number, nowMs: number): number {
    this.credit = Math.min(this.rate, this.credit + ((nowMs - this.atMs) * this.rate) / 1000);
    this.atMs = Math.max(this.atMs, nowMs);
    this.credit -= cost;
    return this.credit >= 0 ? 0 : Math.ceil((-this.credit * 1000) / this.rate);
  }

  /** Returns credit taken for a report that was not handled. */
  giveBack(cost: number): void {
    this.credit = Math.min(this.rate, this.credit + cost);
  }
}

/** The credit a report of `bytes` costs: one, and one more per REPORT_CREDIT_BYTES (decoding is per byte). */
function reportCost(bytes: number): number {
  return 1 + Math.floor(bytes / REPORT_CREDIT_BYTES);
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Reports handled in one turn of the event loop, at most, ms: the rest wait for the next turn, and the RLS calls that came meanwhile go first. */
const REPORT_SLICE_MS = 1;

/**
 * Work that can wait a turn of the event loop (quota reports: nothing waits on their answers but the
 * proxy's next report), run in arrival order, at most `sliceMs` of it per turn: a burst of reports
 * read from the sockets at once would otherwise hold every RLS call read with it for all of them.
 */
class TurnQueue {
  private readonly queue: { readonly task: () => Promise<void>; readonly done: () => void }[] = [];
  private scheduled = false;

  constructor(private readonly sliceMs: number) {}

  /** Runs `task` in a later turn; resolves once it has (a rejection is its own to handle). */
  run(task: () => Promise<void>): Promise<void> {
    return new Promise((done) => {
      this.queue.push({ task, done });
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled || this.queue.length === 0) return;
    this.scheduled = true;
    setImmediate(this.slice);
  }

  private readonly slice = (): void => {
    const until = performance.now() + this.sliceMs;
    // At least one task, then as many as fit (a task may queue more: they wait their turn here).
    for (let first = true; this.queue.length > 0 && (first || performance.now() < until); first = false) {
      const { task, done } = this.queue.shift()!;
      void task().then(done, done);
    }
    // An immediate set from one runs at the next turn, after the sockets have been read.
    this.scheduled = false;
    this.schedule();
  };
}

interface StreamState {
  readonly subscriber: QuotaSubscriber;
  readonly connection: unknown;
  /** The name the proxy sent, cut to PROXY_NAME_MAX_CHARS. */
  readonly proxy: string | undefined;
  readonly sink: QuotaStreamSink;
  readonly openedAtMs: number;
  domain: string | undefined;
  lastMessageAtMs: number | undefined;
  /** Report credit of this stream (maxReportsPerSecond). */
  readonly credit: ReportCredit;
  /** Bytes the transport holds for the peer, as counted in the byte budget. */
  held: number;
  /** Since when the peer has not kept up (a write returned false), ms; undefined while it does. */
  blockedAtMs: number | undefined;
  /** Assignments changed while it was not keeping up: its current ones are sent once it reads. */
  behind: boolean;
  /** The report whose answer waits for the peer to read (the next one is held back meanwhile). */
  drained: (() => void) | undefined;
  ended: boolean;
}

const REFUSED: QuotaStream = { message: () => Promise.resolve(), writable: () => undefined, closed: () => undefined };

export class RlqsService {
  private readonly logger: Logger;
  private readonly limits: RlqsLimits;
  private readonly observer: RlqsObserver | undefined;
  private readonly clock: Clock;
  private readonly budgets: QuotaBudgets;
  readonly replicaId: string;
  private readonly streams = new Map<string, StreamState>();
  /** Open streams per connection (only connections with one). */
  private readonly perConnection = new Map<unknown, number>();
  private readonly timers: NodeJS.Timeout[] = [];
  /** Bytes the transports hold for every stream's peer (the streams' `held` together). */
  private heldBytes = 0;
  /** Report credit of every stream together (maxProcessReportsPerSecond). */
  private readonly processCredit: ReportCredit;
  /** Where reports wait for their turn of the event loop. */
  private readonly turns = new TurnQueue(REPORT_SLICE_MS);
  private stopping: Promise<void> | undefined;
  private storeErrorLogged = false;

  constructor(options: RlqsServiceOptions) {
    this.logger = options.logger;
    this.limits = options.limits;
    this.observer = options.observer;
    this.clock = options.clock ?? monotonicClock;
    this.replicaId = options.replicaId ?? randomBytes(6).toString('hex');
    this.budgets = new QuotaBudgets({
      store: options.store,
      exchange: options.exchange,
      config: options.config,
      limits: options.limits,
      clock: this.clock,
      replicaId: this.replicaId,
      shadowMode: options.shadowMode,
      calendarOffsetMs: options.calendarOffsetMs,
      // Written in the reports' turns too: a sync's division may change every share of a budget that
      // hundreds of streams report, and its pushes go out between the RLS calls, not all at once.
      onPush: (subscriber, actions) => void this.turns.run(async () => this.push(subscriber, actions)),
      observer: {
        onReport: (...args) => this.observer?.onReport?.(...args),
        onStoreError: (err) => this.storeFailed(err),
      },
    });
    this.processCredit = new ReportCredit(options.limits.maxProcessReportsPerSecond, this.clock.nowMs());
    if (options.timers !== false) {
      this.timers.push(setInterval(() => void this.tick(), options.limits.syncIntervalMs).unref());
      this.timers.push(setInterval(() => this.endTimedOut(), TIMEOUT_CHECK_MS).unref());
    }
  }

  /** Open streams. */
  get streamCount(): number {
    return this.streams.size;
  }

  /** Estimated bytes the streams hold (RLQS_MAX_MEMORY_BYTES bounds it). */
  get bytes(): number {
    return this.budgets.bytes;
  }

  /**
   * The budgets' background work (see QuotaBudgets.tick); the service's timer calls it every
   * RLQS_SYNC_INTERVAL. Resolves once the pushes it made are written (they wait for the reports' turns).
   */
  tick(): Promise<void> {
    return this.budgets.tick().then(() => this.turns.run(async () => undefined));
  }

  /**
   * A new stream on `connection` (any value equal for the streams of one connection), of the proxy
   * `proxy` names if any; refused (ended at once) while shutting down or past a cap.
   */
  open(sink: QuotaStreamSink, proxy?: string, connection: unknown = sink): QuotaStream {
    if (this.stopping !== undefined) {
      sink.end({ code: GrpcStatus.UNAVAILABLE, details: 'server shutting down' });
      return REFUSED;
    }
    if (this.streams.size >= this.limits.maxStreams) {
      sink.end({ code: GrpcStatus.RESOURCE_EXHAUSTED, details: `more than ${this.limits.maxStreams} quota streams` });
      return REFUSED;
    }
    const onConnection = this.perConnection.get(connection) ?? 0;
    if (onConnection >= this.limits.maxStreamsPerConnection) {
      sink.end({ code: GrpcStatus.RESOURCE_EXHAUSTED, details: `more than ${this.limits.maxStreamsPerConnection} quota streams on one connection` });
      return REFUSED;
    }
    let subscriber: QuotaSubscriber;
    try {
      subscriber = this.budgets.open();
    } catch (err) {
      sink.end(this.failureOf(err));
      return REFUSED;
    }
    const now = this.clock.nowMs();
    this.perConnection.set(connection, onConnection + 1);
    const stream: StreamState = {
      subscriber,
      connection,
      proxy: proxy?.slice(0, PROXY_NAME_MAX_CHARS),
      sink,
      openedAtMs: now,
      domain: undefined,
      lastMessageAtMs: undefined,
      credit: new ReportCredit(this.limits.maxReportsPerSecond, now),
      held: 0,
      blockedAtMs: undefined,
      behind: false,
      drained: undefined,
      ended: false,
    };
    this.streams.set(subscriber.id, stream);
    return {
      message: (bytes) => this.message(stream, bytes),
      writable: () => this.writable(stream),
      closed: () => this.finish(stream, undefined),
    };
  }

  /** Ends every stream with UNAVAILABLE and withdraws their demand; new streams are refused. Idempotent. */
  shutdown(): Promise<void> {
    if (this.stopping === undefined) {
      for (const t of this.timers.splice(0)) clearInterval(t);
      for (const s of [...this.streams.values()]) this.finish(s, { code: GrpcStatus.UNAVAILABLE, details: 'server shutting down; reconnect' });
      this.stopping = this.budgets.shutdown();
    }
    return this.stopping;
  }

  /** The streams and the shares of the budgets in use (bounded lists), for the debug port and the live view. */
  view(): RlqsView {
    const streams: StreamView[] = [];
    for (const s of this.streams.values()) {
      if (streams.length >= VIEW_MAX_STREAMS) break;
      const member = s.subscriber.id;
      streams.push({
        member,
        domain: s.domain,
        buckets: this.budgets.bucketsOf(s.subscriber),
        reportIntervalMs: this.budgets.intervalOf(s.subscriber),
        openedAtMs: s.openedAtMs,
        heldBytes: s.held,
      });
    }
    const { budgets, total } = this.budgets.view(VIEW_MAX_BUDGETS, VIEW_MAX_PROXIES);
    const rules = budgets.map((b) => ({
      ...b,
      proxies: b.proxies.map((p) => (p.local ? { ...p, proxy: (p.stream === undefined ? undefined : this.streams.get(p.stream)?.proxy) ?? null } : p)),
    }));
    return {
      replica: this.replicaId,
      openStreams: this.streams.size,
      streams,
      budgets: total,
      rules,
      bytes: this.budgets.bytes,
      maxBytes: this.limits.maxBytes,
      heldBytes: this.heldBytes,
    };
  }

  /** Per-rule totals over every budget, for the metrics (O(budgets)). */
  ruleTotals(): QuotaRuleTotals[] {
    return this.budgets.ruleTotals();
  }

  /* ---------- one stream ---------- */

  /**
   * One report, after the stream's report credit and then the process's allow it; never rejects (a
   * failure ends the stream). Resolves once the peer has taken the answer: until then the transport
   * reads no further report.
   */
  private async message(stream: StreamState, bytes: Buffer): Promise<void> {
    if (stream.ended) return;
    stream.lastMessageAtMs = this.clock.nowMs();
    const cost = reportCost(bytes.length);
    const waitMs = stream.credit.take(cost, this.clock.nowMs());
    if (waitMs > 0) {
      await sleep(waitMs);
      if (stream.ended) return;
    }
    // The process's credit is taken once the stream's allows the report: a stream waits for it with
    // one report at a time, so a stream's turn comes after at most one report of every other.
    const processWaitMs = this.processCredit.take(cost, this.clock.nowMs());
    if (processWaitMs > 0) {
      await sleep(processWaitMs);
      if (stream.ended) {
        this.processCredit.giveBack(cost);
        return;
      }
    }
    await this.turns.run(async () => {
      if (stream.ended) return;
      try {
        await this.handle(stream, bytes);
      } catch (err) {
        this.fail(stream, err);
      }
    });
    if (stream.blockedAtMs !== undefined && !stream.ended) await new Promise<void>((resolve) => (stream.drained = resolve));
  }

  private async handle(stream: StreamState, bytes: Buffer): Promise<void> {
    const report = decodeUsageReports(bytes);
    // A large report is decoded in one go: RLS calls waiting on the loop go first before it is handled.
    if (bytes.length > REPORT_CREDIT_BYTES) {
      await new Promise<void>((resolve) => setImmediate(resolve));
      if (stream.ended) return;
    }
    if (stream.domain === undefined) {
      if (report.domain === '') throw new InvalidRequestError('domain must not be empty on the first message');
      stream.domain = report.domain;
    } else if (report.domain !== '' && report.domain !== stream.domain) {
      throw new InvalidRequestError(`domain "${report.domain}" differs from the stream's "${stream.domain}"; open a new stream`);
    }
    // Envoy's filter sends a report with no bucket on every tick once it has none: nothing to answer.
    if (report.usages.length === 0) return;
    const actions: QuotaAction[] = await this.budgets.report(stream.subscriber, stream.domain, report.usages);
    if (actions.length > 0) this.write(stream, encodeQuotaResponse(actions));
  }

  /** Assignments changed outside a report's answer: written unless the peer is not keeping up (then sent once it reads). */
  private push(subscriber: QuotaSubscriber, actions: readonly QuotaAction[]): void {
    const stream = this.streams.get(subscriber.id);
    if (stream === undefined || stream.ended) return;
    if (stream.blockedAtMs !== undefined) stream.behind = true;
    else this.write(stream, encodeQuotaResponse(actions));
  }

  /** Sends one message and counts what the transport then holds for the peer. */
  private write(stream: StreamState, message: Uint8Array): void {
    if (stream.ended) return;
    if (!stream.sink.send(message) && stream.blockedAtMs === undefined) stream.blockedAtMs = this.clock.nowMs();
    this.countHeld(stream);
  }

  /** The peer reads again: what it fell behind on goes out, and its next report is taken. */
  private writable(stream: StreamState): void {
    if (stream.ended) return;
    stream.blockedAtMs = undefined;
    this.countHeld(stream);
    if (stream.behind) {
      stream.behind = false;
      const actions = this.budgets.assignments(stream.subscriber);
      if (actions.length > 0) this.write(stream, encodeQuotaResponse(actions));
    }
    if (stream.blockedAtMs === undefined && stream.drained !== undefined) {
      const resume = stream.drained;
      stream.drained = undefined;
      resume();
    }
  }

  /** Counts the output the transport holds for the peer against the byte budget; a stream whose output would pass it is cut. */
  private countHeld(stream: StreamState): void {
    if (stream.ended) return;
    const held = stream.sink.heldBytes;
    const more = held - stream.held;
    if (more > 0 && this.budgets.bytes + more > this.limits.maxBytes) {
      this.finish(
        stream,
        {
          code: GrpcStatus.RESOURCE_EXHAUSTED,
          details: `the proxy is not reading its quota assignments: the ${held} bytes held for it would pass the quota streams' memory budget (RLQS_MAX_MEMORY_BYTES, ${this.limits.maxBytes} bytes)`,
        },
        true,
      );
      return;
    }
    stream.held = held;
    this.heldBytes += more;
    this.budgets.holdBytes(more);
  }

  /** How long a stream may send nothing, or read nothing: RLQS_IDLE_TIMEOUT, or three of its observed report intervals, at most ten times that, ms. */
  private idleLimitOf(stream: StreamState): number {
    const { idleTimeoutMs } = this.limits;
    const interval = this.budgets.intervalOf(stream.subscriber) ?? 0;
    return Math.min(10 * idleTimeoutMs, Math.max(idleTimeoutMs, 3 * interval));
  }

  /**
   * Ends the streams past their first-report or idle timeout, and cuts those that have read nothing
   * for as long; counts again what the transports hold (the service's timer calls it every second).
   */
  endTimedOut(): void {
    const now = this.clock.nowMs();
    const { firstReportTimeoutMs } = this.limits;
    for (const s of [...this.streams.values()]) {
      this.countHeld(s);
      if (s.ended) continue;
      if (s.blockedAtMs !== undefined) {
        // Its next report waits for it to read: it is not idle, it does not read.
        const limit = this.idleLimitOf(s);
        if (now - s.blockedAtMs > limit) {
          const details = `the proxy has not read its quota assignments for ${limit} ms (${s.held} bytes held for it)`;
          this.finish(s, { code: GrpcStatus.RESOURCE_EXHAUSTED, details }, true);
        }
      } else if (s.lastMessageAtMs === undefined && now - s.openedAtMs > firstReportTimeoutMs) {
        this.finish(s, { code: GrpcStatus.DEADLINE_EXCEEDED, details: `no usage report within ${firstReportTimeoutMs} ms of opening the stream` });
      } else if (s.lastMessageAtMs !== undefined) {
        // A stream whose own report interval is long (Envoy's reporting_interval) gets three of them, up to ten timeouts.
        const limit = this.idleLimitOf(s);
        if (now - s.lastMessageAtMs > limit) this.finish(s, { code: GrpcStatus.DEADLINE_EXCEEDED, details: `no usage report for ${limit} ms` });
      }
    }
  }

  private failureOf(err: unknown): CallFailure {
    const kind = classify(err);
    if (kind.logLevel !== 'silent') this.logger[kind.logLevel]({ err, code: kind.code }, 'quota stream failed');
    return { code: kind.grpcStatus, details: publicMessage(kind, err) };
  }

  private fail(stream: StreamState, err: unknown): void {
    if (!stream.ended) this.finish(stream, this.failureOf(err));
  }

  /**
   * Ends a stream (with `failure`, or OK when the client went away: then nothing is sent; `cut`: at
   * once, dropping what is held for the peer) and drops its subscriptions and held output.
   */
  private finish(stream: StreamState, failure: CallFailure | undefined, cut = false): void {
    if (stream.ended) return;
    stream.ended = true;
    this.streams.delete(stream.subscriber.id);
    const left = (this.perConnection.get(stream.connection) ?? 1) - 1;
    if (left > 0) this.perConnection.set(stream.connection, left);
    else this.perConnection.delete(stream.connection);
    if (failure !== undefined) {
      if (cut) stream.sink.cut(failure);
      else stream.sink.end(failure);
    }
    this.budgets.holdBytes(-stream.held);
    this.heldBytes -= stream.held;
    stream.held = 0;
    this.budgets.close(stream.subscriber);
    const resume = stream.drained;
    stream.drained = undefined;
    resume?.();
  }

  private storeFailed(err: unknown): void {
    this.observer?.onStoreError?.(err);
    if (this.storeErrorLogged) return;
    this.storeErrorLogged = true;
    this.logger.warn({ err: err instanceof Error ? err.message : String(err) }, 'quota shares: store call failed; the last shares stay in force');
  }
}

/** The quota service as a bidirectional streaming method, for whichever gRPC transport serves it (./streaming.ts). */
export function quotaStreamingMethod(service: RlqsService): StreamingMethod {
  return {
    path: RLQS_PATH,
    open: (call) => {
      const stream = service.open(
        {
          send: (message) => !call.closed && call.write(message),
          end: (failure) => {
            if (!call.closed) call.end(failure?.code ?? 0, failure?.details);
          },
          cut: (failure) => call.cut(failure.code, failure.details),
          get heldBytes() {
            return call.pendingBytes;
          },
        },
        call.header(PROXY_NAME_HEADER),
        call.connection,
      );
      return {
        onMessage: (bytes) => stream.message(bytes),
        onWritable: () => stream.writable(),
        // Envoy never half-closes a live stream: the client is done with it.
        onHalfClose: () => call.end(0),
        onClose: () => stream.closed(),
      };
    },
  };
}
