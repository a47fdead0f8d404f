import { buildConfig } from '../config/rule-tree';
import { parseConfigText } from '../config/rule-reader';
import type { Logger } from '../log';
import { RateLimiter, type RateLimiterOptions } from '../limiter/rate-limiter';
import { Replays } from '../limiter/replay';
import { frameMessage } from '../wire/grpc-framing';
import { HealthState } from '../service/health';
import { Http2GrpcServer } from '../grpc/http2-server';
import { protoRoot, RLS_SERVICE } from '../wire/proto';
import type { Settings } from '../settings/settings';
import type { Store } from '../limiter/store';
import { CALL_LOST, Http2GrpcClient } from '../grpc/http2-client';
import type { LimiterObserver } from '../limiter/types';
import { frameResponse } from '../wire/rls-codec';

/**
 * Start-up warm-up: before a process takes traffic, it answers a few thousand ShouldRateLimit calls
 * of its own over loopback, so that V8 has compiled the hot path (HTTP/2 frames and HPACK, decoding,
 * matching, counter keys, the store, the denial cache and replays, encoding) before the first proxy
 * call arrives. Without it, a process that starts under load answers its first seconds slowly: at
 * 8,000 calls/s over 40 connections, tens of calls took more than Envoy's 20 ms timeout
 * (docs/performance.md, "Cold start and the start-up warm-up").
 *
 * The calls go to a private, exclusive loopback port (never the shared gRPC port, never TLS),
 * through a second server object of the same class, and are decided by a limiter of their own with
 * a built-in config (domain WARM_UP_DOMAIN). The client is Http2GrpcClient, the one the tests make
 * their calls with: it writes HTTP/2 frames on a plain socket and keeps no object per call, where
 * node:http2's and grpc-js's client objects would outlive young-generation collections and leave a
 * full collection due just as traffic starts. The calls reach the real store, so its client is warm too:
 * with Redis that writes a few counters under that domain, on 1-second windows (their TTLs end
 * within seconds). Nothing is reported: the service's metrics and health never see these calls.
 */

/** The domain of the warm-up's own counters; reserved (a config domain of that name would share them). */
export const WARM_UP_DOMAIN = 'slidegate_warm_up';

const WARM_UP_CONFIG = `domain: ${WARM_UP_DOMAIN}
descriptors:
  - key: admitted
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: denied
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: tenant
    descriptors:
      - key: path
        rate_limit: {unit: second, requests_per_unit: 1000000000}
`;

const NO_REPORTS: LimiterObserver = { onDescriptor: () => undefined, onReplay: () => undefined };

/** Connections and streams the warm-up client keeps busy. */
const CONNECTIONS = 2;
const STREAMS_PER_CONNECTION = 16;
const RLS_PATH = `/${RLS_SERVICE}/ShouldRateLimit`;
/** How long past `maxMs` calls still in flight may take to end. */
const CLOSE_MARGIN_MS = 500;

/** A limiter's options besides its store, its rules and its observer: what the settings decide (src/main.ts limiterOptions). */
export type LimiterSettings = Omit<RateLimiterOptions, 'store' | 'config' | 'observer'>;

export interface WarmUpOptions {
  /** Calls to make; the warm-up also stops at `maxMs`. */
  readonly calls: number;
  readonly maxMs: number;
  /** The service's store (so its client is warmed too). */
  readonly store: Store;
  /** The service's limiter options: the warm-up's limiter decides as the service's does (global shadow mode aside). */
  readonly limiter: LimiterSettings;
  /** The service's transport settings: the warm-up's calls cross the same HTTP/2 layer. */
  readonly transport: Pick<Settings, 'grpcMaxMessageBytes' | 'grpcMaxConnections' | 'h2'>;
  /** As the service's: replays are only built over a store with a denial cache. */
  readonly replayMaxKeys: number;
  readonly logger: Logger;
}

/** What the warm-up did: calls answered (OK or OVER_LIMIT), calls that failed, and how long it took. */
export interface WarmUpResult {
  readonly answered: number;
  readonly failed: number;
  readonly ms: number;
}

/** Runs the warm-up; never rejects (a failed warm-up only leaves the process cold). */
export async function warmUp(options: WarmUpOptions): Promise<WarmUpResult> {
  const started = performance.now();
  const config = buildConfig([parseConfigText('warm-up', WARM_UP_CONFIG, { defaultAlgorithm: options.limiter.defaultAlgorithm })]);
  const limiter = new RateLimiter({
    ...options.limiter,
    store: options.store,
    config: () => config,
    // Its denials must be denials: the denial cache and replays are part of the hot path.
    shadowMode: false,
    // The metrics observer's shape, reporting nowhere: the per-rule reporting code runs too.
    observer: NO_REPORTS,
  });
  const replays =
    options.replayMaxKeys > 0 ? new Replays({ maxKeys: options.replayMaxKeys, config: () => config, encode: frameResponse, observer: NO_REPORTS }) : undefined;
  const server = new Http2GrpcServer({
    limiter,
    replays,
    health: new HealthState(),
    settings: { ...pickTransport(options.transport), grpcHost: '127.0.0.1', grpcPort: 0, grpcTls: { enabled: false } },
    logger: options.logger,
    exclusive: true,
  });
  // What the client reads off each call's end: gRPC status 0, or anything else (a status, a reset).
  let answered = 0;
  let failed = 0;
  const onEnd = (_call: number, status: number): void => {
    if (status === 0) answered++;
    else if (status !== CALL_LOST) failed++;
  };
  try {
    const port = await server.start();
    const calls = callFrames();
    const deadline = started + options.maxMs;
    let sent = 0;
    const next = (): Buffer | undefined => (sent < options.calls && performance.now() < deadline ? calls[sent++ % calls.length] : undefined);
    const clients = Array.from({ length: CONNECTIONS }, () =>
      Http2GrpcClient.connect(port, { path: RLS_PATH, maxInFlight: STREAMS_PER_CONNECTION, next, onEnd }),
    );
    // A call still open when the time is up (a store that never answers) is abandoned with its connection.
    const timer = setTimeout(() => clients.forEach((c) => c.close()), options.maxMs + CLOSE_MARGIN_MS);
    try {
      await Promise.all(clients.map((c) => c.done));
    } finally {
      clearTimeout(timer);
      clients.forEach((c) => c.close());
    }
  } catch (err) {
    options.logger.warn({ err: err instanceof Error ? err.message : String(err) }, 'warm-up failed; serving cold');
  } finally {
    await server.stop(0);
  }
  return { answered, failed, ms: performance.now() - started };
}

/** Only the transport settings: the warm-up's server listens on its own loopback port, without TLS. */
function pickTransport(t: WarmUpOptions['transport']): WarmUpOptions['transport'] {
  return { grpcMaxMessageBytes: t.grpcMaxMessageBytes, grpcMaxConnections: t.grpcMaxConnections, h2: t.h2 };
}

/**
 * Framed requests in the shapes proxies send: admitted descriptors (several values, so both the
 * store and the key cache see new keys), a nested two-entry descriptor, several descriptors in one
 * call, and a key over its limit (denials, the denial cache and replays).
 */
function callFrames(): Buffer[] {
  const type = protoRoot().lookupType('envoy.service.ratelimit.v3.RateLimitRequest');
  const encode = (descriptors: [string, string][][]): Buffer =>
    frameMessage(
      type
        .encode(
          type.fromObject({
            domain: WARM_UP_DOMAIN,
            descriptors: descriptors.map((entries) => ({ entries: entries.map(([key, value]) => ({ key, value })) })),
          }),
        )
        .finish(),
    );
  const bodies: Buffer[] = [];
  for (let i = 0; i < 16; i++) {
    bodies.push(encode([[['admitted', `v${i}`]]]));
    bodies.push(
      encode([
        [
          ['tenant', `t${i % 4}`],
          ['path', `/p${i}`],
        ],
      ]),
    );
    bodies.push(
      encode([
        [['admitted', `a${i}`]],
        [
          ['tenant', 't'],
          ['path', `/m${i}`],
        ],
        [['admitted', `b${i}`]],
      ]),
    );
    bodies.push(encode([[['denied', 'd']]]));
  }
  return bodies;
}
