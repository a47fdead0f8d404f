import * as grpc from '@grpc/grpc-js';
import type * as protobuf from 'protobufjs';
import { loadProtoFiles } from '../../src/wire/proto';
import { RLQS_PATH, RLQS_PROTO } from '../../src/wire/rlqs-codec';

/**
 * A quota client that behaves as Envoy's rate_limit_quota filter does (its global client, bucket
 * cache and token buckets), for driving the RLQS service in tests:
 * - one stream per client (Envoy: per server and domain), opened with the first bucket; the domain
 *   on every message;
 * - a new bucket counts its first request under the no-assignment behaviour and is reported at once
 *   alone (time_elapsed 0); every `reportIntervalMs` (Envoy: 5 s) one message reports every bucket,
 *   idle ones included, with allowed/denied since the last report and time_elapsed in whole seconds;
 * - blanket_rule and token_bucket are applied; requests_per_time_unit is ignored; a token bucket
 *   fills at tokens_per_fill / (whole seconds of fill_interval), starts full, and a changed one
 *   starts at the old one's remaining/max ratio; an equal one (compared without
 *   fill_interval.seconds) is kept and only its TTL extended;
 * - an assignment expires after the whole seconds of its TTL (an unset TTL at once), then the
 *   expired-assignment fallback applies for its timeout, then the no-assignment behaviour;
 * - actions for buckets it has not reported are ignored; abandon forgets a bucket;
 * - when the stream ends, the next tick opens a new one (to the next target) and sends that tick's
 *   report on it; a report written to a stream that then fails is lost, as in Envoy.
 */

export type Strategy =
  | { readonly kind: 'allow_all' }
  | { readonly kind: 'deny_all' }
  | {
      readonly kind: 'token_bucket';
      readonly maxTokens: number;
      readonly tokensPerFill: number;
      readonly fillIntervalSeconds: number;
      readonly fillIntervalNanos: number;
    }
  | { readonly kind: 'requests_per_time_unit' };

export interface QuotaClientOptions {
  /** host:port of the servers, in the order a new stream tries them. */
  readonly targets: readonly string[];
  readonly domain: string;
  /** Envoy's is 5000. */
  readonly reportIntervalMs: number;
  /** no_assignment_behavior.fallback_rate_limit; ALLOW_ALL when absent (Envoy's default). */
  readonly noAssignment?: Strategy;
  /** expired_assignment_behavior: the fallback and how long it lasts (whole seconds). */
  readonly expiredFallback?: { readonly strategy: Strategy; readonly timeoutSeconds: number };
  /** Monotonic time, ms. */
  readonly now?: () => number;
  /** Sent with every stream, as the filter's grpc_service.initial_metadata. */
  readonly initialMetadata?: Readonly<Record<string, string>>;
}

/** The filter's token bucket: a time, tokens = min(max, (now - time) x rate); consuming one moves the time. */
export class EnvoyTokenBucket {
  private readonly rate: number;
  private time: number;
  constructor(
    readonly maxTokens: number,
    fillRate: number,
    nowSeconds: number,
    initialTokens: number = maxTokens,
  ) {
    // The filter's floor: one token a year.
    this.rate = Math.max(Math.abs(fillRate), 1 / (365 * 24 * 60 * 60));
    this.time = nowSeconds - initialTokens / this.rate;
  }

  remaining(nowSeconds: number): number {
    return Math.min(this.maxTokens, (nowSeconds - this.time) * this.rate);
  }

  consume(nowSeconds: number): boolean {
    if (nowSeconds <= this.time) return false;
    const total = this.remaining(nowSeconds);
    if (total < 1) return false;
    this.time = nowSeconds - (total - 1) / this.rate;
    return true;
  }
}

interface Bucket {
  readonly id: Record<string, string>;
  allowed: number;
  denied: number;
  lastReportMs: number;
  /** The assignment in force: the server's, a fallback, or undefined (the no-assignment behaviour). */
  action: Strategy | undefined;
  /** The server's token bucket assignment as last received (for the equality check). */
  received: Strategy | undefined;
  tokens: EnvoyTokenBucket | undefined;
  expiry: NodeJS.Timeout | undefined;
}

/** What the client has seen, for assertions. */
export interface QuotaClientStats {
  responses: number;
  /** Actions for buckets the client does not have. */
  ignored: number;
  /** requests_per_time_unit strategies received (ignored, as Envoy does). */
  unsupported: number;
  streamsOpened: number;
  /** Reports written to a stream that then failed before answering, or dropped with no stream. */
  reportsSent: number;
  expirations: number;
  abandoned: number;
}

function bucketKey(id: Record<string, string>): string {
  return JSON.stringify(Object.entries(id).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

function strategyOf(message: any): Strategy | undefined {
  const s = message?.rateLimitStrategy;
  if (s === undefined || s === null) return undefined;
  switch (s.strategy) {
    case 'blanketRule':
      return { kind: s.blanketRule === 1 || s.blanketRule === 'DENY_ALL' ? 'deny_all' : 'allow_all' };
    case 'tokenBucket': {
      const tb = s.tokenBucket;
      return {
        kind: 'token_bucket',
        maxTokens: Number(tb.maxTokens ?? 0),
        tokensPerFill: Number(tb.tokensPerFill?.value ?? 0),
        fillIntervalSeconds: Number(tb.fillInterval?.seconds ?? 0),
        fillIntervalNanos: Number(tb.fillInterval?.nanos ?? 0),
      };
    }
    case 'requestsPerTimeUnit':
      return { kind: 'requests_per_time_unit' };
    default:
      return undefined;
  }
}

/** The filter's equality of token buckets: max_tokens, tokens_per_fill and fill_interval.nanos (not .seconds). */
function sameBucket(a: Strategy | undefined, b: Strategy): boolean {
  return (
    a?.kind === 'token_bucket' &&
    b.kind === 'token_bucket' &&
    a.maxTokens === b.maxTokens &&
    a.tokensPerFill === b.tokensPerFill &&
    a.fillIntervalNanos === b.fillIntervalNanos
  );
}

let types: { reports: protobuf.Type; response: protobuf.Type } | undefined;
function rlqsTypes(): { reports: protobuf.Type; response: protobuf.Type } {
  if (types === undefined) {
    const root = loadProtoFiles([RLQS_PROTO]);
    types = {
      reports: root.lookupType('envoy.service.rate_limit_quota.v3.RateLimitQuotaUsageReports'),
      response: root.lookupType('envoy.service.rate_limit_quota.v3.RateLimitQuotaResponse'),
    };
  }
  return types;
}

export class EnvoyQuotaClient {
  readonly stats: QuotaClientStats = { responses: 0, ignored: 0, unsupported: 0, streamsOpened: 0, reportsSent: 0, expirations: 0, abandoned: 0 };
  /** Every response as decoded, newest last (tests read assignments off it). */
  readonly received: { atMs: number; actions: any[] }[] = [];
  private readonly buckets = new Map<string, Bucket>();
  private readonly clients: grpc.Client[];
  private readonly now: () => number;
  private stream: grpc.ClientDuplexStream<Uint8Array, any> | undefined;
  private target = 0;
  private timer: NodeJS.Timeout | undefined;
  private paused = false;
  private closed = false;

  constructor(private readonly options: QuotaClientOptions) {
    this.now = options.now ?? (() => performance.now());
    this.clients = options.targets.map((t) => new grpc.Client(t, grpc.credentials.createInsecure()));
  }

  /** One request matched into `id`: true when the filter lets it through. */
  request(id: Record<string, string>): boolean {
    const key = bucketKey(id);
    const bucket = this.buckets.get(key);
    if (bucket === undefined) return this.createBucket(key, id);
    const allowed = this.allows(bucket);
    if (allowed) bucket.allowed++;
    else bucket.denied++;
    return allowed;
  }

  /** The strategy a bucket is under now (undefined: none, the no-assignment behaviour). */
  strategy(id: Record<string, string>): Strategy | undefined {
    return this.buckets.get(bucketKey(id))?.action;
  }

  has(id: Record<string, string>): boolean {
    return this.buckets.has(bucketKey(id));
  }

  /** Stops (true) or resumes the periodic reports, as a proxy whose reports never arrive. */
  pauseReports(paused: boolean): void {
    this.paused = paused;
  }

  /** Cancels the stream from the client's side (the next tick opens another). */
  dropStream(): void {
    this.stream?.cancel();
    this.stream = undefined;
  }

  close(): void {
    this.closed = true;
    if (this.timer !== undefined) clearInterval(this.timer);
    for (const b of this.buckets.values()) if (b.expiry !== undefined) clearTimeout(b.expiry);
    this.stream?.cancel();
    this.stream = undefined;
    for (const c of this.clients) c.close();
  }

  private createBucket(key: string, id: Record<string, string>): boolean {
    if (this.timer === undefined) {
      this.timer = setInterval(() => this.tick(), this.options.reportIntervalMs);
      this.openStream();
    }
    const noAssignment = this.options.noAssignment;
    const allowed = noAssignment?.kind !== 'deny_all';
    const bucket: Bucket = {
      id,
      allowed: allowed ? 1 : 0,
      denied: allowed ? 0 : 1,
      lastReportMs: this.now(),
      action: undefined,
      received: undefined,
      tokens: undefined,
      expiry: undefined,
    };
    this.buckets.set(key, bucket);
    this.send([bucket]);
    return allowed;
  }

  private allows(bucket: Bucket): boolean {
    const action = bucket.action ?? this.options.noAssignment;
    if (action === undefined) return true;
    switch (action.kind) {
      case 'allow_all':
      case 'requests_per_time_unit':
        return true;
      case 'deny_all':
        return false;
      case 'token_bucket':
        return bucket.tokens!.consume(this.now() / 1000);
    }
  }

  private tick(): void {
    if (this.paused || this.closed) return;
    const all = [...this.buckets.values()];
    // The usage is taken (and the counters reset) before the stream is looked at: a report that
    // finds no stream, or goes down with it, is lost.
    const message = this.report(all);
    if (this.stream === undefined) this.openStream();
    this.write(message);
  }

  private report(buckets: readonly Bucket[]): Uint8Array {
    const now = this.now();
    const usages = buckets.map((b) => {
      const usage = {
        bucketId: { bucket: b.id },
        timeElapsed: { seconds: Math.floor((now - b.lastReportMs) / 1000), nanos: 0 },
        numRequestsAllowed: b.allowed,
        numRequestsDenied: b.denied,
      };
      b.allowed = 0;
      b.denied = 0;
      b.lastReportMs = now;
      return usage;
    });
    const type = rlqsTypes().reports;
    return type.encode(type.fromObject({ domain: this.options.domain, bucketQuotaUsages: usages })).finish();
  }

  private send(buckets: readonly Bucket[]): void {
    const message = this.report(buckets);
    this.write(message);
  }

  private write(message: Uint8Array): void {
    if (this.stream === undefined) return;
    this.stats.reportsSent++;
    this.stream.write(message);
  }

  private openStream(): void {
    if (this.closed) return;
    const client = this.clients[this.target % this.clients.length];
    const response = rlqsTypes().response;
    const metadata = new grpc.Metadata();
    for (const [k, v] of Object.entries(this.options.initialMetadata ?? {})) metadata.set(k, v);
    const stream = client.makeBidiStreamRequest(
      RLQS_PATH,
      (m: Uint8Array) => Buffer.from(m),
      (bytes: Buffer) => response.toObject(response.decode(bytes), { longs: Number, enums: Number, oneofs: true, defaults: false }),
      metadata,
    );
    this.stats.streamsOpened++;
    this.stream = stream;
    const gone = (): void => {
      if (this.stream === stream) {
        this.stream = undefined;
        // The next stream goes to the next server (as a cluster with the failed host ejected would).
        this.target++;
      }
    };
    stream.on('data', (message: any) => this.onResponse(message));
    stream.on('error', gone);
    stream.on('end', gone);
    stream.on('status', gone);
  }

  private onResponse(message: any): void {
    this.stats.responses++;
    const actions: any[] = message.bucketAction ?? [];
    this.received.push({ atMs: this.now(), actions });
    for (const action of actions) {
      const id = action.bucketId?.bucket;
      const bucket = id === undefined ? undefined : this.buckets.get(bucketKey(id));
      if (bucket === undefined) {
        this.stats.ignored++;
        continue;
      }
      if (action.abandonAction !== undefined && action.abandonAction !== null) {
        if (bucket.expiry !== undefined) clearTimeout(bucket.expiry);
        this.buckets.delete(bucketKey(id));
        this.stats.abandoned++;
        continue;
      }
      const assignment = action.quotaAssignmentAction;
      const strategy = strategyOf(assignment);
      if (strategy === undefined) continue;
      if (strategy.kind === 'requests_per_time_unit') {
        this.stats.unsupported++;
        continue;
      }
      this.apply(bucket, strategy);
      this.startExpiry(bucket, Number(assignment.assignmentTimeToLive?.seconds ?? 0));
    }
  }

  private apply(bucket: Bucket, strategy: Strategy): void {
    if (strategy.kind === 'token_bucket' && !sameBucket(bucket.received, strategy)) {
      const fillSeconds = Math.trunc(strategy.fillIntervalSeconds + strategy.fillIntervalNanos / 1e9);
      const rate = strategy.tokensPerFill / fillSeconds;
      const nowSeconds = this.now() / 1000;
      const old = bucket.tokens;
      const initial = old === undefined ? strategy.maxTokens : Math.trunc(strategy.maxTokens * (old.remaining(nowSeconds) / old.maxTokens));
      bucket.tokens = new EnvoyTokenBucket(strategy.maxTokens, rate, nowSeconds, initial);
    } else if (strategy.kind !== 'token_bucket') {
      bucket.tokens = undefined;
    }
    bucket.received = strategy;
    bucket.action = strategy;
  }

  private startExpiry(bucket: Bucket, ttlSeconds: number): void {
    if (bucket.expiry !== undefined) clearTimeout(bucket.expiry);
    bucket.expiry = setTimeout(() => this.expire(bucket), Math.trunc(ttlSeconds) * 1000);
  }

  private expire(bucket: Bucket): void {
    this.stats.expirations++;
    bucket.expiry = undefined;
    const fallback = this.options.expiredFallback;
    if (fallback === undefined) {
      bucket.action = undefined;
      bucket.received = undefined;
      bucket.tokens = undefined;
      return;
    }
    this.apply(bucket, fallback.strategy);
    bucket.expiry = setTimeout(() => {
      bucket.expiry = undefined;
      bucket.action = undefined;
      bucket.received = undefined;
      bucket.tokens = undefined;
    }, fallback.timeoutSeconds * 1000);
  }
}

/** A bare quota stream: messages written as plain objects, responses collected decoded; for protocol tests. */
export interface RawQuotaStream {
  write(message: object): void;
  /** Raw bytes, for malformed messages. */
  writeBytes(bytes: Uint8Array): void;
  readonly responses: any[];
  /** The next response not yet taken, waiting up to `timeoutMs`. */
  next(timeoutMs?: number): Promise<any>;
  /** The status the stream ended with (resolves when it ends). */
  readonly status: Promise<grpc.StatusObject>;
  end(): void;
  close(): void;
}

/** A stream on a connection of its own to `target`, or on `target`'s connection when it is a client (closing the stream then leaves it open). */
export function rawQuotaStream(target: string | grpc.Client, metadata?: grpc.Metadata): RawQuotaStream {
  const own = typeof target === 'string';
  const client = typeof target === 'string' ? new grpc.Client(target, grpc.credentials.createInsecure()) : target;
  const { reports, response } = rlqsTypes();
  const call = client.makeBidiStreamRequest(
    RLQS_PATH,
    (m: Uint8Array) => Buffer.from(m),
    (bytes: Buffer) => response.toObject(response.decode(bytes), { longs: Number, enums: Number, oneofs: true, defaults: false }),
    metadata ?? new grpc.Metadata(),
  );
  const responses: any[] = [];
  let taken = 0;
  const waiters: (() => void)[] = [];
  call.on('data', (m: any) => {
    responses.push(m);
    waiters.splice(0).forEach((w) => w());
  });
  call.on('error', () => undefined);
  const status = new Promise<grpc.StatusObject>((resolve) => call.on('status', resolve));
  return {
    write: (message) => call.write(reports.encode(reports.fromObject(message)).finish()),
    writeBytes: (bytes) => call.write(bytes),
    responses,
    next: (timeoutMs = 2_000) =>
      new Promise((resolve, reject) => {
        const take = (): boolean => {
          if (taken < responses.length) {
            resolve(responses[taken++]);
            return true;
          }
          return false;
        };
        if (take()) return;
        const timer = setTimeout(() => reject(new Error(`no response within ${timeoutMs} ms`)), timeoutMs);
        const waiter = (): void => {
          if (take()) clearTimeout(timer);
          else waiters.push(waiter);
        };
        waiters.push(waiter);
      }),
    status,
    end: () => call.end(),
    close: () => {
      call.cancel();
      if (own) client.close();
    },
  };
}
