import { configFromTexts } from '../src/config/files';
import type { DemandExchange, ReplicaDemand, ReplicaExchange } from '../src/limiter/replica-exchange';
import type { CounterDecision, CounterRequest, DecideOptions, Store } from '../src/limiter/store';
import { silentLogger } from '../src/log';
import { RlqsService, type QuotaStreamSink } from '../src/service/rlqs-service';
import { loadSettings } from '../src/settings/settings';
import { MemoryExchange } from '../src/store/memory-exchange';
import { MemoryStore } from '../src/store/memory-store';
import { createRedisClient, parseRedisTarget } from '../src/store/redis/connection';
import { RedisExchange } from '../src/store/redis/redis-exchange';
import { RedisStore } from '../src/store/redis/redis-store';
import { loadProtoFiles } from '../src/wire/proto';
import { RLQS_PROTO } from '../src/wire/rlqs-codec';

/**
 * Quota streaming (RLQS) capacity: P proxies x B buckets reporting as fast as the service answers,
 * through the stream service and a real store (memory, or Redis with REDIS_URL), without a transport
 * (the per-stream report rate cap lifted). Store operations are the budgets' background syncs.
 * Prints the bucket reports answered per second (what P x B buckets at Envoy's 5 s cycle need is
 * P x B / 5), the store operations per report, and the store operations per admitted request when
 * each bucket admits its share of a 1000/s limit, against RLS's one call (one store operation) per
 * request.
 *
 *   node dist/bench/rlqs.js [--proxies 20] [--buckets 50] [--seconds 5]      (REDIS_URL=host:port for Redis)
 */

const LIMIT_PER_SECOND = 1000;
const ENVOY_REPORT_SECONDS = 5;

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
}

/** Counts the store and exchange calls the quota service makes. */
class CountingStore implements Store, ReplicaExchange {
  readonly name: string;
  operations = 0;
  constructor(
    private readonly inner: Store,
    private readonly exchange: ReplicaExchange,
  ) {
    this.name = inner.name;
  }
  decide(counters: readonly CounterRequest[], options?: DecideOptions): Promise<CounterDecision[]> {
    this.operations++;
    return this.inner.decide(counters, options);
  }
  exchangeDemand(exchange: DemandExchange): Promise<ReplicaDemand[]> {
    this.operations++;
    return this.exchange.exchangeDemand(exchange);
  }
  put(kind: string, name: string, document: string, ttlMs: number): Promise<void> {
    return this.exchange.put(kind, name, document, ttlMs);
  }
  all(kind: string, max: number): Promise<string[]> {
    return this.exchange.all(kind, max);
  }
  isHealthy(): boolean {
    return this.inner.isHealthy();
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

async function main(): Promise<void> {
  const proxies = arg('proxies', 20);
  const buckets = arg('buckets', 50);
  const seconds = arg('seconds', 5);
  const redisUrl = process.env.REDIS_URL;
  const client = redisUrl ? createRedisClient(parseRedisTarget(loadSettings({ BACKEND_TYPE: 'redis', REDIS_URL: redisUrl }).redis)) : undefined;
  const inner: Store = client !== undefined ? new RedisStore({ client, timeoutMs: 1_000 }) : new MemoryStore({ maxKeys: 1_000_000 });
  const exchange: ReplicaExchange = client !== undefined ? new RedisExchange({ client, timeoutMs: 1_000 }) : new MemoryExchange();
  const store = new CountingStore(inner, exchange);
  const config = configFromTexts(
    [{ file: 'bench.yaml', text: `domain: bench\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: ${LIMIT_PER_SECOND}}\n` }],
    { defaultAlgorithm: 'sliding_window' },
  );
  const settings = loadSettings({});
  const service = new RlqsService({
    store,
    exchange: store,
    config: () => config,
    logger: silentLogger(),
    limits: { ...settings.rlqs, maxStreams: proxies, maxBucketsPerStream: buckets, maxReportsPerSecond: 1e6, maxProcessReportsPerSecond: 1e6 },
  });
  const Reports = loadProtoFiles([RLQS_PROTO]).lookupType('envoy.service.rate_limit_quota.v3.RateLimitQuotaUsageReports');
  // What each proxy admits per bucket in one 5 s report: its share of the limit.
  const allowedPerReport = Math.max(1, Math.floor((LIMIT_PER_SECOND * ENVOY_REPORT_SECONDS) / proxies));
  const message = Buffer.from(
    Reports.encode(
      Reports.fromObject({
        domain: 'bench',
        bucketQuotaUsages: Array.from({ length: buckets }, (_, b) => ({
          bucketId: { bucket: { tenant: `t${b}` } },
          timeElapsed: { seconds: ENVOY_REPORT_SECONDS },
          numRequestsAllowed: allowedPerReport,
          numRequestsDenied: 0,
        })),
      }),
    ).finish(),
  );
  let sent = 0;
  let running = true;
  const streams = Array.from({ length: proxies }, () => {
    let next: () => void = () => undefined;
    const sink: QuotaStreamSink = {
      send: () => {
        next();
        return true;
      },
      end: () => undefined,
      cut: () => undefined,
      heldBytes: 0,
    };
    const stream = service.open(sink);
    return { stream, setNext: (f: () => void) => (next = f) };
  });
  const started = performance.now();
  const opsAtStart = store.operations;
  await Promise.all(
    streams.map(
      ({ stream, setNext }) =>
        new Promise<void>((resolve) => {
          let waiting = false;
          const send = (): void => {
            if (!running) return resolve();
            waiting = true;
            sent++;
            stream.message(message);
          };
          // The first frame after a report (its answer, or a push just before it) lets the next go.
          setNext(() => {
            if (!waiting) return;
            waiting = false;
            setImmediate(send);
          });
          send();
          setTimeout(() => {
            running = false;
            resolve();
          }, seconds * 1000);
        }),
    ),
  );
  const elapsed = (performance.now() - started) / 1000;
  const ops = store.operations - opsAtStart;
  const bucketReports = (sent * buckets) / elapsed;
  await service.shutdown();
  await store.close();
  const opsPerBucketReport = ops / (sent * buckets);
  const result = {
    store: inner.name,
    proxies,
    buckets,
    bucketReportsPerSecond: Math.round(bucketReports),
    sustainableBucketsAtEnvoyCycle: Math.round(bucketReports * ENVOY_REPORT_SECONDS),
    storeOperationsPerBucketReport: Number(opsPerBucketReport.toFixed(2)),
    storeOperationsPerAdmittedRequest: Number((opsPerBucketReport / allowedPerReport).toExponential(2)),
    rlsStoreOperationsPerRequest: 1,
  };
  process.stdout.write(JSON.stringify(result, null, 2) + '\n');
}

void main();
