import { randomBytes } from 'node:crypto';
import { classify, GrpcStatus, MalformedMessageError, publicMessage } from '../errors';
import { InvalidRequestError, NotReadyError } from '../limiter/errors';
import { matchBucket, type BucketMatch } from '../limiter/bucket-match';
import { ALLOW_ALL, distinguishable, reportRate, sameStrategy, sharesOf, strategyForShare, ttlSeconds, type QuotaStrategy } from '../limiter/quota-share';
import type { RateLimitConfig } from '../limiter/rules';
import type { CounterRequest, ProxyDemand, Store } from '../limiter/store';
import { monotonicClock, type Clock, type Entry } from '../limiter/types';
import type { Logger } from '../log';
import { decodeUsageReports, frameQuotaResponse, type BucketAction, type BucketUsage } from '../wire/rlqs-codec';
import { MESSAGE_PREFIX_BYTES } from '../wire/grpc-framing';
import { RLQS_PATH } from '../wire/rlqs-codec';
import type { CallFailure } from './rls-service';
import type { StreamingMethod } from './streaming';

/**
 * The quota stream service (RLQS, envoy.service.rate_limit_quota.v3), as every gRPC transport serves
 * it: a transport hands it each received message's bytes and tells it when the client has gone; it
 * answers through the stream's sink with framed messages, and ends the stream with a status.
 *
 * What it does with Envoy's rate_limit_quota filter, whose behaviour it is written to:
 * - a bucket id's pairs match a rule of the stream's domain as a descriptor would (see
 *   src/limiter/bucket-match.ts); no rule or an unlimited one: ALLOW_ALL, nothing counted;
 * - each report's allowed requests are charged to the rule's counter, the one RLS calls on that
 *   descriptor use, so both protocols share one limit;
 * - each proxy's demand (allowed + denied per second, timed by this server's receive times: Envoy's
 *   time_elapsed is whole seconds) is published to the store, which returns every proxy's on every
 *   replica; the rule's budget is divided among them (src/limiter/quota-share.ts) and each proxy
 *   gets a token bucket for its share, DENY_ALL when it has none, ALLOW_ALL in shadow mode;
 * - every report is answered at once with every reported bucket's assignment, whose TTL (whole
 *   seconds) spans several observed report intervals, so a proxy that keeps reporting never lets it
 *   expire; a share changed by another proxy's report is pushed to its stream right away;
 * - a bucket idle for several full reports is abandoned; a stream's state is dropped when it ends,
 *   and state shared by several streams (the match, the budget) lives while one of them uses it;
 * - a different domain later on a stream, a malformed message or a bucket over the caps ends that
 *   stream with INVALID_ARGUMENT; no other stream notices;
 * - on shutdown every stream ends with UNAVAILABLE and its proxies' demand is withdrawn from the
 *   store, so that the proxies reconnect to another replica, which continues the same budget.
 */

/** Caps and timing of the quota streams (settings RLQS_*). */
export interface RlqsLimits {
  /** Streams open at once; one more is refused with RESOURCE_EXHAUSTED. */
  readonly maxStreams: number;
  /** Buckets one stream may report. */
  readonly maxBucketsPerStream: number;
  /** Pairs in one bucket id. */
  readonly maxBucketPairs: number;
  /** Bytes of one bucket id's keys and values together. */
  readonly maxBucketIdBytes: number;
  /** The report interval assumed until a stream's own is observed (Envoy's filter reports every 5 s). */
  readonly reportIntervalMs: number;
  /** Consecutive full reports without a request after which a bucket is abandoned. */
  readonly abandonAfterIdleReports: number;
}

/** Where one stream's messages go: framed RateLimitQuotaResponse messages, and the end (OK when no failure). */
export interface QuotaStreamSink {
  send(frame: Buffer): void;
  end(failure?: CallFailure): void;
}

/** A stream as its transport drives it. */
export interface QuotaStream {
  /** One received RateLimitQuotaUsageReports message (without its 5-byte prefix). */
  message(bytes: Buffer): void;
  /** The client ended the stream or went away. */
  closed(): void;
}

/** Reported usage, for the per-rule metrics. */
export interface RlqsObserver {
  onReport(domain: string, statKey: string, allowed: number, denied: number): void;
  /** A store call that failed; the last known shares stay in force. */
  onStoreError?(): void;
}

export interface RlqsServiceOptions {
  readonly store: Store;
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
}

/** A read-only view of the streams and shares (debug port, live view). */
export interface RlqsView {
  readonly replica: string;
  /** Streams open (the list below shows at most VIEW_MAX_STREAMS of them). */
  readonly openStreams: number;
  readonly streams: readonly StreamView[];
  readonly rules: readonly RuleShareView[];
}

export interface StreamView {
  readonly member: string;
  readonly domain: string | undefined;
  readonly buckets: number;
  /** The report interval observed on the stream, ms; undefined before two full reports. */
  readonly reportIntervalMs: number | undefined;
  readonly openedAtMs: number;
}

export interface RuleShareView {
  readonly domain: string;
  readonly statKey: string;
  /** The counter the budget divides (the one RLS calls on the same descriptor use). */
  readonly counter: string;
  readonly limit: number;
  readonly windowMs: number;
  readonly shadow: boolean;
  /** The counter's usage of its window at the last report (limit - remaining). */
  readonly used: number;
  /** Every proxy on the budget, on every replica, as the store last said; `share` (requests/s) and `local` for this replica's. */
  readonly proxies: readonly ProxyShareView[];
  /** Requests per window the proxies' reports say they admitted above the limit (0 when within). */
  readonly overshoot: number;
}

export interface ProxyShareView {
  readonly member: string;
  readonly demand: number | null;
  readonly allowed: number;
  readonly share: number;
  readonly local: boolean;
  /** This replica's proxies only: the stream, the name the proxy sent (PROXY_NAME_HEADER, cut), the bucket, the assignment last sent and how long ago it last reported. */
  readonly stream?: string;
  readonly proxy?: string | null;
  readonly bucket?: readonly Entry[];
  readonly assignment?: QuotaStrategy | null;
  readonly reportAgeMs?: number | null;
}

/** The request header (gRPC metadata) a proxy may name itself with: Envoy sends it from grpc_service.initial_metadata. */
export const PROXY_NAME_HEADER = 'node-id';
/** Characters of a proxy's name kept (the caller's bytes: bounded before they are stored). */
const PROXY_NAME_MAX_CHARS = 128;

/** Views list at most this many streams (the debug page stays small whatever the fleet). */
const VIEW_MAX_STREAMS = 1_000;
/** Reports closer than this to the bucket's previous one are added to the next (too short a span to rate). */
const MIN_RATE_SPAN_MS = 50;
const COUNT_ALWAYS = Object.freeze({ countDenied: true });

interface StreamState {
  readonly member: string;
  /** The name the proxy sent, cut to PROXY_NAME_MAX_CHARS. */
  readonly proxy: string | undefined;
  readonly sink: QuotaStreamSink;
  readonly openedAtMs: number;
  readonly buckets: Map<string, StreamBucket>;
  domain: string | undefined;
  lastFullAtMs: number | undefined;
  intervalMs: number | undefined;
  /** Messages are handled one after another. */
  queue: Promise<void>;
  ended: boolean;
  nextBucket: number;
}

/** One stream's subscription to one bucket. */
interface StreamBucket {
  readonly stream: StreamState;
  /** Its demand's name in the store: the stream and the bucket (two buckets may share a counter). */
  readonly member: string;
  readonly pairs: readonly Entry[];
  readonly shared: SharedBucket;
  budget: Budget | undefined;
  lastReportAtMs: number | undefined;
  /** Requests reported since the rate was last measured. */
  pendingCount: number;
  pendingAllowed: number;
  /** Allowed + denied per second; Infinity until measured. */
  demand: number;
  /** Allowed per second, averaged over about a window. */
  allowed: number;
  /** Whether `allowed` holds a measurement yet. */
  measured: boolean;
  idleReports: number;
  /** The strategy last sent, undefined before the first. */
  sent: QuotaStrategy | undefined;
}

/** What every stream of this process reporting the same bucket shares: its match under the config in force. */
interface SharedBucket {
  readonly key: string;
  readonly domain: string;
  readonly pairs: readonly Entry[];
  refs: number;
  config: RateLimitConfig | undefined;
  match: BucketMatch | undefined;
}

/** One counter's budget and the local subscriptions dividing it with every other replica's. */
interface Budget {
  readonly key: string;
  domain: string;
  statKey: string;
  counter: CounterRequest;
  shadow: boolean;
  readonly members: Set<StreamBucket>;
  /** Every proxy's demand, as the store last returned it. */
  proxies: readonly ProxyDemand[];
  used: number;
  /** Reported hits a failed store call could not charge yet. */
  uncharged: number;
  shares: Map<string, number>;
}

function contentKey(domain: string, pairs: readonly Entry[]): string {
  return JSON.stringify([domain, pairs.map((e) => [e.key, e.value])]);
}

export class RlqsService {
  private readonly store: Store;
  private readonly config: () => RateLimitConfig | undefined;
  private readonly logger: Logger;
  private readonly limits: RlqsLimits;
  private readonly shadowMode: boolean;
  private readonly observer: RlqsObserver | undefined;
  private readonly clock: Clock;
  readonly replicaId: string;
  private readonly streams = new Set<StreamState>();
  private readonly buckets = new Map<string, SharedBucket>();
  private readonly budgets = new Map<string, Budget>();
  private nextStream = 0;
  private stopping: Promise<void> | undefined;
  private storeErrorLogged = false;

  private readonly calendarOffsetMs: number;

  constructor(options: RlqsServiceOptions) {
    this.store = options.store;
    this.config = options.config;
    this.logger = options.logger;
    this.limits = options.limits;
    this.shadowMode = options.shadowMode === true;
    this.observer = options.observer;
    this.clock = options.clock ?? monotonicClock;
    this.replicaId = options.replicaId ?? randomBytes(6).toString('hex');
    this.calendarOffsetMs = options.calendarOffsetMs ?? 0;
  }

  /** Open streams. */
  get streamCount(): number {
    return this.streams.size;
  }

  /** A new stream, of the proxy `proxy` names if any; refused (ended at once) while shutting down or at RLQS_MAX_STREAMS. */
  open(sink: QuotaStreamSink, proxy?: string): QuotaStream {
    if (this.stopping !== undefined) {
      sink.end({ code: GrpcStatus.UNAVAILABLE, details: 'server shutting down' });
      return { message: () => undefined, closed: () => undefined };
    }
    if (this.streams.size >= this.limits.maxStreams) {
      sink.end({ code: GrpcStatus.RESOURCE_EXHAUSTED, details: `more than ${this.limits.maxStreams} quota streams` });
      return { message: () => undefined, closed: () => undefined };
    }
    const stream: StreamState = {
      member: `${this.replicaId}.${this.nextStream++}`,
      proxy: proxy?.slice(0, PROXY_NAME_MAX_CHARS),
      sink,
      openedAtMs: this.clock.nowMs(),
      buckets: new Map(),
      domain: undefined,
      lastFullAtMs: undefined,
      intervalMs: undefined,
      queue: Promise.resolve(),
      ended: false,
      nextBucket: 0,
    };
    this.streams.add(stream);
    return {
      message: (bytes) => {
        stream.queue = stream.queue.then(() => this.handle(stream, bytes)).catch((err: unknown) => this.fail(stream, err));
      },
      closed: () => {
        if (!stream.ended) void this.finish(stream, undefined, false);
      },
    };
  }

  /** Ends every stream with UNAVAILABLE and withdraws their demand from the store; new streams are refused. Idempotent. */
  shutdown(): Promise<void> {
    this.stopping ??= Promise.allSettled(
      [...this.streams].map((s) => this.finish(s, { code: GrpcStatus.UNAVAILABLE, details: 'server shutting down; reconnect' }, true)),
    ).then(() => undefined);
    return this.stopping;
  }

  /** The streams and the shares of every budget in use, for the debug port and the live view. */
  view(): RlqsView {
    const streams: StreamView[] = [];
    for (const s of this.streams) {
      if (streams.length >= VIEW_MAX_STREAMS) break;
      streams.push({ member: s.member, domain: s.domain, buckets: s.buckets.size, reportIntervalMs: s.intervalMs, openedAtMs: s.openedAtMs });
    }
    const rules: RuleShareView[] = [];
    const now = this.clock.nowMs();
    for (const b of this.budgets.values()) {
      const local = new Map([...b.members].map((m) => [m.member, m]));
      const windowSeconds = b.counter.windowMs / 1000;
      let admitted = 0;
      for (const p of b.proxies) admitted += p.allowed * windowSeconds;
      // As divide() does: a local proxy the store has not returned yet is on the budget too.
      const listed = new Set(b.proxies.map((p) => p.member));
      const proxies = [...b.proxies];
      for (const m of b.members) if (!listed.has(m.member)) proxies.push({ member: m.member, demand: m.demand, allowed: m.allowed });
      rules.push({
        domain: b.domain,
        statKey: b.statKey,
        counter: b.key,
        limit: b.counter.limit,
        windowMs: b.counter.windowMs,
        shadow: b.shadow,
        used: b.used,
        proxies: proxies.map((p) => {
          const sb = local.get(p.member);
          const shared = { member: p.member, demand: Number.isFinite(p.demand) ? p.demand : null, allowed: p.allowed, share: b.shares.get(p.member) ?? 0 };
          if (sb === undefined) return { ...shared, local: false };
          return {
            ...shared,
            local: true,
            stream: sb.stream.member,
            proxy: sb.stream.proxy ?? null,
            bucket: sb.pairs,
            assignment: sb.sent ?? null,
            reportAgeMs: sb.lastReportAtMs === undefined ? null : now - sb.lastReportAtMs,
          };
        }),
        overshoot: Math.max(0, Math.round(admitted - b.counter.limit)),
      });
    }
    return { replica: this.replicaId, openStreams: this.streams.size, streams, rules };
  }

  /* ---------- one message ---------- */

  private async handle(stream: StreamState, bytes: Buffer): Promise<void> {
    if (stream.ended) return;
    const now = this.clock.nowMs();
    const report = decodeUsageReports(bytes);
    if (stream.domain === undefined) {
      if (report.domain === '') throw new InvalidRequestError('domain must not be empty on the first message');
      stream.domain = report.domain;
    } else if (report.domain !== '' && report.domain !== stream.domain) {
      throw new InvalidRequestError(`domain "${report.domain}" differs from the stream's "${stream.domain}"; open a new stream`);
    }
    // Envoy's filter sends a report with no bucket on every tick once it has none: nothing to answer.
    if (report.usages.length === 0) return;
    const domain = stream.domain;
    const keys = report.usages.map((u, i) => {
      this.checkBucket(u, i);
      return contentKey(domain, u.bucket);
    });
    const distinct = new Set(keys);
    let fresh = 0;
    for (const k of distinct) if (!stream.buckets.has(k)) fresh++;
    if (stream.buckets.size + fresh > this.limits.maxBucketsPerStream) {
      throw new InvalidRequestError(`more than ${this.limits.maxBucketsPerStream} buckets on one stream`);
    }
    if (this.config() === undefined) throw new NotReadyError('no rate limit configuration loaded');
    // A full report names every bucket of the stream and no new one: Envoy's periodic report.
    const full = fresh === 0 && distinct.size === stream.buckets.size;
    if (full) {
      if (stream.lastFullAtMs !== undefined) stream.intervalMs = now - stream.lastFullAtMs;
      stream.lastFullAtMs = now;
    }
    const ttl = ttlSeconds(stream.intervalMs ?? this.limits.reportIntervalMs);

    const pending: Promise<BucketAction>[] = [];
    report.usages.forEach((usage, i) => {
      const sb = stream.buckets.get(keys[i]) ?? this.subscribe(stream, keys[i], domain, usage.bucket);
      this.record(sb, usage, now, full);
      if (full && sb.idleReports >= this.limits.abandonAfterIdleReports) {
        this.unsubscribe(sb, true);
        pending.push(Promise.resolve({ bucket: sb.pairs, abandon: true }));
        return;
      }
      pending.push(this.assign(sb, usage.allowed, ttl).then((strategy) => ({ bucket: sb.pairs, strategy: this.sendable(sb, strategy), ttlSeconds: ttl })));
    });
    const actions = await Promise.all(pending);
    if (!stream.ended) stream.sink.send(frameQuotaResponse(actions));
  }

  private checkBucket(usage: BucketUsage, i: number): void {
    const { maxBucketPairs, maxBucketIdBytes } = this.limits;
    if (usage.bucket.length > maxBucketPairs) throw new InvalidRequestError(`bucket_quota_usages[${i}].bucket_id: more than ${maxBucketPairs} pairs`);
    let bytes = 0;
    for (const e of usage.bucket) bytes += Buffer.byteLength(e.key) + Buffer.byteLength(e.value);
    if (bytes > maxBucketIdBytes) throw new InvalidRequestError(`bucket_quota_usages[${i}].bucket_id: over ${maxBucketIdBytes} bytes`);
  }

  /** Usage into the subscription's demand: requests per second since its previous report. */
  private record(sb: StreamBucket, usage: BucketUsage, now: number, full: boolean): void {
    const count = usage.allowed + usage.denied;
    sb.pendingCount += count;
    sb.pendingAllowed += usage.allowed;
    const span = sb.lastReportAtMs === undefined ? undefined : now - sb.lastReportAtMs;
    if (span === undefined || span >= MIN_RATE_SPAN_MS) {
      const demand = reportRate(sb.pendingCount, span, usage.timeElapsedSeconds);
      if (demand !== undefined) {
        sb.demand = demand;
        const allowed = reportRate(sb.pendingAllowed, span, usage.timeElapsedSeconds)!;
        // Averaged over about a window: what the counter holds of these proxies is a window's worth,
        // and a short report's count is too coarse to compare with it (see proxiesCapacity).
        const windowMs = sb.budget?.counter.windowMs ?? 1_000;
        sb.allowed = sb.measured && span !== undefined ? sb.allowed + (allowed - sb.allowed) * (1 - Math.exp(-span / windowMs)) : allowed;
        sb.measured = true;
      }
      sb.pendingCount = 0;
      sb.pendingAllowed = 0;
      sb.lastReportAtMs = now;
    }
    if (full) sb.idleReports = count === 0 ? sb.idleReports + 1 : 0;
    const match = sb.shared.match;
    if (match !== undefined) this.observer?.onReport(sb.shared.domain, match.statKey, usage.allowed, usage.denied);
  }

  /** The strategy to send, recorded as sent (changed if need be so that Envoy notices the change). */
  private sendable(sb: StreamBucket, strategy: QuotaStrategy): QuotaStrategy {
    const next = sb.sent !== undefined && sameStrategy(sb.sent, strategy) ? sb.sent : distinguishable(sb.sent, strategy);
    sb.sent = next;
    return next;
  }

  /* ---------- subscriptions ---------- */

  private subscribe(stream: StreamState, key: string, domain: string, pairs: readonly Entry[]): StreamBucket {
    let shared = this.buckets.get(key);
    if (shared === undefined) {
      shared = { key, domain, pairs, refs: 0, config: undefined, match: undefined };
      this.buckets.set(key, shared);
    }
    shared.refs++;
    const sb: StreamBucket = {
      stream,
      member: `${stream.member}.${stream.nextBucket++}`,
      pairs,
      shared,
      budget: undefined,
      lastReportAtMs: undefined,
      pendingCount: 0,
      pendingAllowed: 0,
      demand: Infinity,
      allowed: 0,
      measured: false,
      idleReports: 0,
      sent: undefined,
    };
    stream.buckets.set(key, sb);
    return sb;
  }

  /** Drops a subscription; its demand leaves the store (`withdraw`) and the others' shares are recomputed. */
  private unsubscribe(sb: StreamBucket, withdraw: boolean): Promise<void> {
    sb.stream.buckets.delete(sb.shared.key);
    if (--sb.shared.refs === 0) this.buckets.delete(sb.shared.key);
    return this.leave(sb, withdraw);
  }

  private leave(sb: StreamBucket, withdraw: boolean): Promise<void> {
    const budget = sb.budget;
    if (budget === undefined) return Promise.resolve();
    sb.budget = undefined;
    budget.members.delete(sb);
    budget.proxies = budget.proxies.filter((p) => p.member !== sb.member);
    if (budget.members.size === 0) this.budgets.delete(budget.key);
    else this.divide(budget, undefined);
    if (!withdraw || this.store.exchangeDemand === undefined) return Promise.resolve();
    return this.store.exchangeDemand({ key: budget.key, publish: [], remove: [sb.member], ttlMs: 0 }).then(
      () => undefined,
      (err: unknown) => this.storeFailed(err),
    );
  }

  /* ---------- shares ---------- */

  /** The match of a bucket under the config in force (matched again after a reload). */
  private matchOf(shared: SharedBucket): BucketMatch | undefined {
    const config = this.config();
    if (config !== shared.config) {
      shared.config = config;
      shared.match = config === undefined ? undefined : matchBucket(config, shared.domain, shared.pairs, this.calendarOffsetMs);
    }
    return shared.match;
  }

  /** The subscription's assignment after its report: charge, publish, divide. */
  private async assign(sb: StreamBucket, allowed: number, ttl: number): Promise<QuotaStrategy> {
    const match = this.matchOf(sb.shared);
    if (match === undefined || match.rule.limit.unlimited) {
      await this.leave(sb, true);
      return ALLOW_ALL;
    }
    const budget = this.join(sb, match);
    const ttlMs = ttl * 1000;
    const own: ProxyDemand = { member: sb.member, demand: sb.demand, allowed: sb.allowed };
    // A store without the exchange leaves each process to divide alone (divide() adds the local proxies).
    const exchange = this.store.exchangeDemand?.({ key: budget.key, publish: [own], remove: [], ttlMs }) ?? Promise.resolve([own]);
    // Hits a failed charge could not write are added to the next one: reported usage is never dropped.
    const hits = allowed + budget.uncharged;
    budget.uncharged = 0;
    const [charged, exchanged] = await Promise.allSettled([this.store.decide([{ ...budget.counter, hits }], COUNT_ALWAYS), exchange]);
    if (charged.status === 'fulfilled') {
      const d = charged.value[0];
      budget.used = d.allowed ? budget.counter.limit - d.remaining : budget.counter.limit;
    } else {
      budget.uncharged += hits;
      this.storeFailed(charged.reason);
    }
    if (exchanged.status === 'fulfilled') {
      budget.proxies = exchanged.value;
    } else {
      // Keep the last view of the other proxies, this one's demand updated, and the shares from it.
      this.storeFailed(exchanged.reason);
      budget.proxies = [...budget.proxies.filter((p) => p.member !== sb.member), own];
    }
    if (charged.status === 'fulfilled' && exchanged.status === 'fulfilled') this.storeErrorLogged = false;
    if (sb.budget !== budget) return this.strategyOf(budget, sb);
    this.divide(budget, sb);
    return this.strategyOf(budget, sb);
  }

  /** The budget of the subscription's counter, joined (and a previous one left) when they differ. */
  private join(sb: StreamBucket, match: BucketMatch): Budget {
    const key = match.counter.key;
    if (sb.budget !== undefined && sb.budget.key !== key) void this.leave(sb, true);
    let budget = this.budgets.get(key);
    if (budget === undefined) {
      budget = {
        key,
        domain: sb.shared.domain,
        statKey: match.statKey,
        counter: match.counter,
        shadow: false,
        members: new Set(),
        proxies: [],
        used: 0,
        uncharged: 0,
        shares: new Map(),
      };
      this.budgets.set(key, budget);
    }
    // A reload may change the limit of the same counter.
    budget.counter = match.counter;
    budget.statKey = match.statKey;
    budget.shadow = this.shadowMode || match.rule.shadowMode;
    budget.members.add(sb);
    sb.budget = budget;
    return budget;
  }

  /**
   * Divides the budget among every proxy the store knows and every local one it does not (yet),
   * and pushes a changed strategy to every local subscription but `reporting` (answered by the caller).
   */
  private divide(budget: Budget, reporting: StreamBucket | undefined): void {
    const known = new Set(budget.proxies.map((p) => p.member));
    const proxies = [...budget.proxies];
    for (const m of budget.members) if (!known.has(m.member)) proxies.push({ member: m.member, demand: m.demand, allowed: m.allowed });
    budget.shares = sharesOf({ limit: budget.counter.limit, windowMs: budget.counter.windowMs, used: budget.used, proxies });
    const pushes = new Map<StreamState, BucketAction[]>();
    for (const m of budget.members) {
      if (m === reporting || m.sent === undefined || m.stream.ended) continue;
      const strategy = this.strategyOf(budget, m);
      if (sameStrategy(m.sent, strategy)) continue;
      const ttl = ttlSeconds(m.stream.intervalMs ?? this.limits.reportIntervalMs);
      const list = pushes.get(m.stream) ?? [];
      list.push({ bucket: m.pairs, strategy: this.sendable(m, strategy), ttlSeconds: ttl });
      pushes.set(m.stream, list);
    }
    for (const [stream, actions] of pushes) stream.sink.send(frameQuotaResponse(actions));
  }

  private strategyOf(budget: Budget, sb: StreamBucket): QuotaStrategy {
    if (budget.shadow) return ALLOW_ALL;
    return strategyForShare(budget.shares.get(sb.member) ?? 0, budget.counter.windowMs);
  }

  /* ---------- ends ---------- */

  private fail(stream: StreamState, err: unknown): void {
    if (stream.ended) return;
    const kind = classify(err);
    if (kind.logLevel !== 'silent') this.logger[kind.logLevel]({ err, code: kind.code, stream: stream.member }, 'quota stream failed');
    const details = err instanceof MalformedMessageError ? err.message : publicMessage(kind, err);
    const code = err instanceof MalformedMessageError ? GrpcStatus.INVALID_ARGUMENT : kind.grpcStatus;
    void this.finish(stream, { code, details }, true);
  }

  /** Ends a stream (when `end`) and drops its subscriptions, withdrawing their demand. */
  private async finish(stream: StreamState, failure: CallFailure | undefined, end: boolean): Promise<void> {
    if (stream.ended) return;
    stream.ended = true;
    this.streams.delete(stream);
    if (end) stream.sink.end(failure);
    await Promise.all([...stream.buckets.values()].map((sb) => this.unsubscribe(sb, true)));
  }

  private storeFailed(err: unknown): void {
    this.observer?.onStoreError?.();
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
          send: (frame) => {
            if (!call.closed) call.write(frame.subarray(MESSAGE_PREFIX_BYTES));
          },
          end: (failure) => {
            if (!call.closed) call.end(failure?.code ?? 0, failure?.details);
          },
        },
        call.header(PROXY_NAME_HEADER),
      );
      return {
        onMessage: (bytes) => stream.message(bytes),
        // Envoy never half-closes a live stream: the client is done with it.
        onHalfClose: () => call.end(0),
        onClose: () => stream.closed(),
      };
    },
  };
}
