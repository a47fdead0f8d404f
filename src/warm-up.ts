import { createRlsClient, type RlsClient, type RlsRequestInput } from './cli/rls-client';
import { buildConfig, parseConfigText } from './config/load';
import type { Logger } from './log';
import { RateLimiter } from './limiter/rate-limiter';
import { HealthState } from './server/health';
import { Http2GrpcServer } from './server/http2-grpc-server';
import type { Settings } from './settings';
import type { Store } from './limiter/store';

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
 * a built-in config (domain WARM_UP_DOMAIN). The client is the one `slidegate client` and the tests
 * use (src/cli/rls-client.ts). The calls reach the real store, so its client is warm too:
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

/** Calls the warm-up keeps in flight. */
const CONCURRENT_CALLS = 32;
/** How long past `maxMs` calls still in flight may take to end. */
const CLOSE_MARGIN_MS = 500;

export interface WarmUpOptions {
  /** Calls to make; the warm-up also stops at `maxMs`. */
  readonly calls: number;
  readonly maxMs: number;
  /** The service's store (so its client is warmed too). */
  readonly store: Store;
  readonly settings: Pick<Settings, 'grpcMaxMessageBytes' | 'defaultAlgorithm' | 'countDeniedRequests' | 'nearLimitRatio'>;
  /** As the service's limiter: replays are only built over a store with a denial cache. */
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
  const config = buildConfig([parseConfigText('warm-up', WARM_UP_CONFIG, { defaultAlgorithm: options.settings.defaultAlgorithm })]);
  const limiter = new RateLimiter({
    store: options.store,
    config: () => config,
    shadowMode: false,
    countDenied: options.settings.countDeniedRequests,
    defaultAlgorithm: options.settings.defaultAlgorithm,
    nearLimitRatio: options.settings.nearLimitRatio,
    // The metrics observer's shape, reporting nowhere: the per-rule reporting code runs too.
    observer: { onDescriptor: () => undefined, onReplay: () => undefined },
    replayMaxKeys: options.replayMaxKeys,
  });
  const server = new Http2GrpcServer({
    limiter,
    health: new HealthState(),
    settings: { grpcHost: '127.0.0.1', grpcPort: 0, grpcMaxMessageBytes: options.settings.grpcMaxMessageBytes, grpcTls: { enabled: false } },
    logger: options.logger,
    exclusive: true,
  });
  let answered = 0;
  let failed = 0;
  let client: RlsClient | undefined;
  try {
    const port = await server.start();
    const c = createRlsClient({ address: `127.0.0.1:${port}` });
    client = c;
    const requests = warmUpRequests();
    const deadline = started + options.maxMs;
    let sent = 0;
    // Each loop keeps one call in flight; a call still open when the time is up (a store that never
    // answers) ends at its own deadline, the margin past maxMs.
    const loop = async (): Promise<void> => {
      while (sent < options.calls && performance.now() < deadline) {
        const request = requests[sent++ % requests.length];
        try {
          await c.shouldRateLimit(request, { deadlineMs: deadline - performance.now() + CLOSE_MARGIN_MS });
          answered++;
        } catch {
          failed++;
        }
      }
    };
    await Promise.all(Array.from({ length: CONCURRENT_CALLS }, loop));
  } catch (err) {
    options.logger.warn({ err: err instanceof Error ? err.message : String(err) }, 'warm-up failed; serving cold');
  } finally {
    client?.close();
    await server.stop(0);
  }
  return { answered, failed, ms: performance.now() - started };
}

/**
 * Requests in the shapes proxies send: admitted descriptors (several values, so both the store and
 * the key cache see new keys), a nested two-entry descriptor, several descriptors in one call, and a
 * key over its limit (denials, the denial cache and replays).
 */
function warmUpRequests(): RlsRequestInput[] {
  const request = (descriptors: [string, string][][]): RlsRequestInput => ({
    domain: WARM_UP_DOMAIN,
    descriptors: descriptors.map((entries) => ({ entries: entries.map(([key, value]) => ({ key, value })) })),
  });
  const requests: RlsRequestInput[] = [];
  for (let i = 0; i < 16; i++) {
    requests.push(request([[['admitted', `v${i}`]]]));
    requests.push(request([[['tenant', `t${i % 4}`], ['path', `/p${i}`]]]));
    requests.push(request([[['admitted', `a${i}`]], [['tenant', 't'], ['path', `/m${i}`]], [['admitted', `b${i}`]]]));
    requests.push(request([[['denied', 'd']]]));
  }
  return requests;
}
