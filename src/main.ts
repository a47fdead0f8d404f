import cluster from 'node:cluster';
import { randomBytes, randomUUID } from 'node:crypto';
import { availableParallelism, hostname } from 'node:os';
import { configEvents } from './app/config-events';
import { describeConfig, ruleMatch } from './config/describe';
import { ConfigSource, configSourceOptions } from './config/source';
import type { ConfigProvider } from './config/config-provider';
import { cpuQuotaCores } from './settings/cpu-quota';
import { RateLimiter } from './limiter/rate-limiter';
import type { RateLimitDecider } from './limiter/types';
import type { GrpcServerOptions } from './grpc/edge';
import { Replays } from './limiter/replay';
import { createLogger, type Logger } from './log';
import { createMetrics, instrumentDecider, instrumentReplays, type Metrics } from './metrics/metrics';
import { frameResponse } from './wire/rls-codec';
import { createMetricSinks, registryExposition, type MetricSinks } from './metrics/sinks';
import { DebugServer } from './http/debug-server';
import { rlqsReport } from './http/rlqs-report';
import { PrometheusServer } from './http/prometheus-server';
import { Http2GrpcServer } from './grpc/http2-server';
import { quotaStreamingMethod, RlqsService } from './service/rlqs-service';
import { ReflectionService } from './service/reflection-service';
import { HttpServer } from './http/http-server';
import { HealthState, isReady, watchStoreHealth } from './service/health';
import { maskSettings } from './settings/masking';
import { loadSettings, SettingsError, type RegionSettings, type Settings } from './settings/settings';
import { createGlobalStore } from './store/create-global-store';
import { RegionShares } from './sharing/regions/region-shares';
import { RegionalStore } from './sharing/regions/regional-store';
import { regionsReport, REGIONS_SHOWN } from './http/regions-report';
import { createStore, denialCacheEnabled, type Backend } from './store/create-store';
import { LeasedStore } from './sharing/leases/leased-store';
import { monotonicClock } from './limiter/types';
import { warmUp, type LimiterSettings } from './app/warm-up';
import { clusterMetrics, isSupervisor, reportReady, superviseWorkers, workerIndex } from './app/workers';
import type { Store } from './limiter/store';
import type { SharedDocuments } from './limiter/replica-exchange';
import { HeldReservations } from './top/held-reservations';
import { runtimeOverrides, type RuntimeOverrides } from './app/overrides';
import { AdminTokens } from './http/admin-tokens';
import type { OverrideMarks } from './top/top-report';
import { LiveTop } from './top/live-top';
import { TopSketch } from './top/top-sketch';

/** Most requests kept for replay: the requests under attack at one time, not every client (and at most 16 MiB: see Replays). */
const REPLAY_MAX_KEYS = 10_000;
/** The warm-up stops after this long whatever it has done (a store that is down makes every call fail fast anyway). */
const WARM_UP_MAX_MS = 2_000;
/** How long the start waits for the first read of the runtime overrides (a store that is down: the ticks go on trying). */
const OVERRIDES_LOAD_MAX_MS = 30_000;
/** How often ADMIN_TOKENS_FILE is looked at for a change. */
const TOKENS_POLL_MS = 1_000;

/**
 * Composition root: settings -> logger -> config source -> store -> limiter -> servers -> signals.
 * Each edge is built here and nowhere else; `close()` takes them down in reverse order.
 */

export interface Service {
  readonly settings: Settings;
  readonly logger: Logger;
  /** The port the RLS and health services listen on (the bound one when GRPC_PORT is 0). */
  readonly grpcPort: number;
  /** The bound ports of the HTTP (/healthcheck, /json, /metrics) and debug (/rlconfig) servers. */
  readonly httpPort: number;
  readonly debugPort: number;
  /** The bound port of the USE_PROMETHEUS listener (PROMETHEUS_ADDR); undefined without it. */
  readonly prometheusPort?: number;
  readonly metrics: Metrics;
  readonly health: HealthState;
  readonly limiter: RateLimiter;
  /** The config in force: files (ConfigSource) or an xDS control plane (CONFIG_TYPE=GRPC_XDS_SOTW). */
  readonly configSource: ConfigProvider;
  /** The store createStore built (the memory store; Redis with its denial cache and failure policy). */
  readonly store: Store;
  /** The lease layer over it (`lease: true` limits on a shared store), when there is one. */
  readonly leases?: LeasedStore;
  /** The quota stream service (RLQS): its streams and shares (view()). */
  readonly rlqs: RlqsService;
  /** The runtime overrides in force here, their sync with the store and the API's operations. */
  readonly overrides: RuntimeOverrides;
  /** Graceful stop: NOT_SERVING, refuse new calls, finish in-flight ones (up to shutdownGraceMs), release everything. */
  close(): Promise<void>;
}

export interface StartOptions {
  /** Defaults to one built from LOG_LEVEL and LOG_FORMAT. */
  readonly logger?: Logger;
}

/** Starts every part of the service; resolves once the gRPC port is bound. */
export async function startService(settings: Settings, opts: StartOptions = {}): Promise<Service> {
  const logger = opts.logger ?? createLogger({ level: settings.logLevel, format: settings.logFormat });
  logger.info({ settings: maskSettings(settings) }, 'starting');
  // Under WORKERS > 1 the supervisor has said them once already.
  if (!cluster.isWorker) logStartupWarnings(settings, logger);
  // The override API's tokens, read before anything starts: a bad file stops the start, naming it and the line.
  const tokens = settings.overrides.adminTokensFile === undefined ? undefined : AdminTokens.load(settings.overrides.adminTokensFile);
  const health = new HealthState();
  const { metrics, sinks } = startMetrics(settings, logger);
  // Everything started is stopped in reverse order, by close() and by a start that fails half-way.
  const teardown = new Teardown();
  teardown.push(() => metrics.close());

  // The store's cache of denials was computed under the limits in force: each applied config empties it.
  const storeCache = new LateCall();
  const rules = await followRules({ settings, logger, health, metrics, onApplied: () => storeCache.call() });
  teardown.push(() => rules.close());

  // The warm-up's calls reach the real store; their cache hits and store errors are not the service's.
  const warmingUp = settings.warmUpCalls > 0 && settings.grpcTransport === 'http2';
  const storeEvents = new Mute(warmingUp);
  const backend = await createStore(
    settings,
    logger,
    metrics.storeHooks(() => storeEvents.muted),
  );
  const { exchange, shared } = backend;
  teardown.push(() => backend.store.close());
  teardown.push(() => backend.overrides.close());
  // Runtime overrides: the replays of denials made under the old ones go when they change (the denial
  // cache needs nothing: a denial holds only for the limit, capacity and strictness it was made under).
  const overridesApplied = new LateCall();
  const overrides = runtimeOverrides({
    settings,
    store: backend.overrides,
    config: () => rules.current(),
    logger,
    metrics,
    onApplied: () => overridesApplied.call(),
  });
  teardown.push(() => overrides.stop());
  // This process among the replicas sharing the store (quota demand, lease parts).
  const replicaId = replicaName(settings.replicaId);
  // Leased limits (`lease: true`) are decided here against this replica's part, on a store shared with other replicas.
  const leases = shared ? startLeases(settings, backend, replicaId, metrics) : undefined;
  if (leases !== undefined) teardown.push(() => leases.stop());
  // Global limits (`scope: global`, REGION set): the region's part of each, kept in step through the global store.
  const regions =
    settings.regions === undefined ? undefined : startRegions(settings, settings.regions, leases?.store ?? backend.store, backend, replicaId, metrics, logger);
  if (regions !== undefined) {
    teardown.push(() => regions.stop());
    await regions.ready;
  }
  const store = regions?.store ?? leases?.store ?? backend.store;
  storeCache.set(() => store.clearCache?.());
  teardown.push(watchStoreHealth({ store, health }));
  metrics.watchStore(() => store.isHealthy());

  // Who is being limited (src/top): fed by the outcomes the metrics count, shared through the store.
  const top = settings.top.enabled ? liveTop(settings, shared ? exchange : undefined, logger) : undefined;
  if (top !== undefined) {
    top.start();
    teardown.push(() => top.stop());
  }
  // What each descriptor's reservations held at its last call here (/rlmatch, /top/rules).
  const held = new HeldReservations({ ttlMs: settings.reservations.ttlMs });
  const observer = held.observing(top?.observing(metrics) ?? metrics);

  // Replays (src/limiter/replay.ts) are built from the denial cache, which only the Redis store has.
  const replayMaxKeys = denialCacheEnabled(settings) ? Math.min(settings.denialCacheMaxKeys, REPLAY_MAX_KEYS) : 0;
  const limiting = limiterOptions(settings);
  const limiter = new RateLimiter({ ...limiting, store, config: () => rules.current(), observer, overrides: overrides.table });
  // Both edges share one timed, error-counting view of the limiter.
  const decider = instrumentDecider(limiter, metrics);
  const replays = replayMaxKeys > 0 ? new Replays({ maxKeys: replayMaxKeys, config: () => rules.current(), encode: frameResponse, observer }) : undefined;
  overridesApplied.set(() => replays?.clear());

  // The OpenTelemetry SDK is loaded only when tracing is on; off, the edges hold no tracer at all.
  const tracer = settings.tracing.enabled ? await (await import('./tracing/otel-tracer')).createOtelTracer(settings.tracing, logger) : undefined;
  if (tracer !== undefined)
    teardown.push(() => tracer.shutdown().catch((err: unknown) => logger.warn({ err: errorText(err) }, 'could not export the last spans')));
  // Quota streams (RLQS) on the same rules and counters; their demand is exchanged with the other replicas.
  const rlqs = new RlqsService({
    store,
    exchange,
    replicaId,
    config: () => rules.current(),
    logger,
    limits: settings.rlqs,
    shadowMode: settings.shadowMode,
    observer: metrics.quotaObserver,
    calendarOffsetMs: settings.calendarOffsetMs,
  });
  metrics.attachQuota(rlqs);
  // Server reflection (GRPC_REFLECTION): what grpcurl and ghz ask for the services' descriptors.
  const reflection = settings.grpcReflection.enabled ? new ReflectionService({ limits: settings.grpcReflection }).methods() : [];
  const grpcOptions = {
    limiter: decider,
    replays: replays === undefined ? undefined : instrumentReplays(replays, metrics),
    health,
    settings,
    logger,
    tracer,
    streamingMethods: [quotaStreamingMethod(rlqs), ...reflection],
  };
  if (tokens !== undefined) {
    tokens.watch(TOKENS_POLL_MS, {
      onReload: (names) => logger.info({ file: settings.overrides.adminTokensFile, names }, 'admin tokens read again'),
      onError: (err) => logger.error({ err: err.message }, 'cannot use the new admin tokens file; the tokens in force stay'),
    });
    teardown.push(() => tokens.close());
    if (!shared && settings.overrides.file === undefined) {
      logger.warn('runtime overrides are kept in this process only: they are lost at restart (set OVERRIDES_FILE to keep them)');
    }
  }
  // The overrides in force before the first call: a restarted replica decides with them from its first answer.
  await overrides.load(OVERRIDES_LOAD_MAX_MS);
  overrides.start();
  const listeners = await buildListeners({
    settings,
    logger,
    health,
    metrics,
    sinks,
    rules,
    decider,
    grpcOptions,
    rlqs,
    top,
    held,
    leases: leases?.store,
    regions: regions?.shares,
    overrides,
    tokens,
  });

  // Before the shared port opens: the first proxy calls then meet compiled code (see warm-up.ts).
  if (warmingUp) {
    const warm = await warmUp({ calls: settings.warmUpCalls, maxMs: WARM_UP_MAX_MS, store, limiter: limiting, transport: settings, replayMaxKeys, logger });
    storeEvents.muted = false;
    logger.info({ answered: warm.answered, failed: warm.failed, ms: Math.round(warm.ms) }, 'warmed up');
  }
  // The listeners stop first, all at once, with the grace period (0 when the start failed).
  teardown.push(() => listeners.stop(teardown.graceMs));
  // First of all (the list runs backwards): quota streams end with UNAVAILABLE, so their proxies
  // reconnect to another replica, and their demand leaves the store while it is still open.
  teardown.push(() => rlqs.shutdown());
  let ports: Ports;
  try {
    ports = await listeners.start();
  } catch (err) {
    await teardown.run(0);
    throw err;
  }
  logListening(settings, logger, ports, store);

  let closing: Promise<void> | undefined;
  const close = (): Promise<void> =>
    (closing ??= (async () => {
      health.beginShutdown();
      await teardown.run(settings.shutdownGraceMs);
      logger.info('stopped');
    })());

  return { settings, logger, ...ports, metrics, health, limiter, configSource: rules, store: backend.store, leases: leases?.store, rlqs, overrides, close };
}

/**
 * The lease layer over a shared store that settles (src/sharing/leases), its background sync
 * every LEASE_SYNC_INTERVAL, and its stop: what is pending settled and this replica's demand withdrawn.
 */
function startLeases(settings: Settings, backend: Backend, replicaId: string, metrics: Metrics): { store: LeasedStore; stop(): Promise<void> } | undefined {
  const settlements = backend.store.settlements;
  if (settlements === undefined) return undefined;
  const store = new LeasedStore({
    store: backend.store,
    settlements,
    exchange: backend.exchange,
    clock: monotonicClock,
    replicaId,
    limits: settings.leases,
    observer: metrics.leaseObserver,
  });
  metrics.attachLeases(store);
  const timer = setInterval(() => void store.tick(), settings.leases.syncIntervalMs);
  timer.unref();
  return {
    store,
    stop: () => {
      clearInterval(timer);
      return store.shutdown();
    },
  };
}

/**
 * The region layer (src/sharing/regions): the global store, the region parts over the store stack
 * (the leases when there are), their sync every REGION_SYNC_INTERVAL, and its stop: what is pending
 * settled, the global store closed.
 */
function startRegions(
  settings: Settings,
  region: RegionSettings,
  below: Store,
  backend: Backend,
  replicaId: string,
  metrics: Metrics,
  logger: Logger,
): { store: RegionalStore; shares: RegionShares; ready: Promise<void>; stop(): Promise<void> } {
  const global = createGlobalStore({ regions: region, cacheKeyPrefix: settings.cacheKeyPrefix, logger });
  // The gauges read the parts at scrapes only, after they exist.
  const observer = metrics.attachRegions({ region: region.region, view: (max) => shares.view(max) });
  const shares: RegionShares = new RegionShares({
    region: region.region,
    replicaId,
    settlements: global.settlements,
    exchange: global.exchange,
    regional: backend.store,
    clock: monotonicClock,
    limits: {
      syncIntervalMs: region.syncIntervalMs,
      ttlMs: region.ttlMs,
      fallback: region.fallback,
      maxParts: settings.leases.maxLeases,
      maxBytes: settings.leases.maxBytes,
    },
    observer,
  });
  const timer = setInterval(() => void shares.tick(), region.syncIntervalMs);
  timer.unref();
  // The regions' names before the first call (a new counter's first part is an even one among them), within GLOBAL_STORE_TIMEOUT.
  let waited: NodeJS.Timeout | undefined;
  const ready = Promise.race([shares.start(), new Promise<void>((resolve) => (waited = setTimeout(resolve, region.timeoutMs)))]).finally(() =>
    clearTimeout(waited),
  );
  return {
    store: new RegionalStore({ store: below, shares }),
    shares,
    ready,
    stop: async () => {
      clearInterval(timer);
      await shares.shutdown();
      await global.close();
    },
  };
}

/**
 * This process's name among the replicas: REPLICA_ID (a worker adds `-<its index>`, which a worker
 * started again in its place keeps), or a random one. A name of its own lets a restarted process
 * take its place again in the store's lease ledgers (their highest seq of it kept 10 minutes) and
 * demand exchanges, instead of holding a second one until the first lapses.
 */
function replicaName(configured: string | undefined): string {
  if (configured === undefined) return randomBytes(6).toString('hex');
  const index = workerIndex();
  return index === undefined ? configured : `${configured}-${index}`;
}

/** The limiter's options that come from the settings: the service's limiter and the warm-up's take the same. */
export function limiterOptions(settings: Settings): LimiterSettings {
  return {
    shadowMode: settings.shadowMode,
    quotaMode: settings.quotaMode,
    dynamicMetadata: settings.responseDynamicMetadata,
    countDenied: settings.countDeniedRequests,
    defaultAlgorithm: settings.defaultAlgorithm,
    nearLimitRatio: settings.nearLimitRatio,
    responseHeaders: settings.responseHeaders,
    requestLimits: settings.requestLimits,
    calendarOffsetMs: settings.calendarOffsetMs,
    reservationKeys: { reserve: settings.reservations.reserveKey, commit: settings.reservations.commitKey },
  };
}

/** Leases /leases lists at most (with the total). */
const LEASES_SHOWN = 1_000;

/** What close() and a failed start take down, in the reverse order of push(). */
class Teardown {
  private readonly steps: (() => Promise<unknown> | void)[] = [];
  /** The listeners' grace period of the run under way: 0 when a start failed. */
  graceMs = 0;

  push(step: () => Promise<unknown> | void): void {
    this.steps.push(step);
  }

  async run(graceMs: number): Promise<void> {
    this.graceMs = graceMs;
    for (const stop of this.steps.reverse()) await stop();
  }
}

/** A call whose target is known only later (a no-op until set). */
class LateCall {
  private target: () => void = () => undefined;
  set(target: () => void): void {
    this.target = target;
  }
  call(): void {
    this.target();
  }
}

/** Whether some events go unreported for now. */
class Mute {
  constructor(public muted: boolean) {}
}

/** The metrics, and the outlets besides /metrics that the settings ask for (statsd, USE_PROMETHEUS). */
function startMetrics(settings: Settings, logger: Logger): { metrics: Metrics; sinks: MetricSinks } {
  // statsd send errors repeat on every flush while the agent is down: one warning is enough.
  let statsdWarned = false;
  const sinks = createMetricSinks(settings, (err) => {
    if (!statsdWarned) logger.warn({ err: errorText(err) }, 'statsd send failed; metrics keep being dropped while it fails');
    statsdWarned = true;
  });
  return { metrics: createMetrics(settings, { statsd: sinks.statsd, statsdDrops: sinks.statsdDrops }), sinks };
}

/**
 * The config in force, followed: the files (loaded once now, then watched), or with
 * CONFIG_TYPE=GRPC_XDS_SOTW an xDS control plane (src/xds, loaded only then: it brings grpc-js).
 */
async function followRules(options: {
  readonly settings: Settings;
  readonly logger: Logger;
  readonly health: HealthState;
  readonly metrics: Metrics;
  readonly onApplied: () => void;
}): Promise<ConfigProvider> {
  const { settings, logger, health, metrics, onApplied } = options;
  const events = (where: Record<string, unknown>) => configEvents({ settings, logger, health, metrics, where, onApplied });
  if (settings.configType === 'GRPC_XDS_SOTW') {
    return (await import('./xds/start')).startXdsConfig({ settings, logger, health, events: events({ server: settings.xds.serverUrl }) });
  }
  const sourceOptions = configSourceOptions(settings);
  const fileEvents = events({ path: sourceOptions.path });
  const configSource = new ConfigSource({
    ...sourceOptions,
    onLoad: (config, files) => fileEvents.applied(config, { files }),
    onError: (err) => fileEvents.rejected(err),
  });
  try {
    await configSource.load();
  } catch (err) {
    metrics.recordConfigLoad(false);
    // Stay up and NOT_SERVING: the watcher picks up a fixed config without a restart.
    logger.error({ path: sourceOptions.path, err: errorText(err) }, 'initial config load failed; not serving until a valid config appears');
  }
  configSource.start();
  return configSource;
}

interface Ports {
  readonly grpcPort: number;
  readonly httpPort: number;
  readonly debugPort: number;
  readonly prometheusPort: number | undefined;
}

/** Every listener of the service, built; start() binds them, stop() stops them all at once. */
async function buildListeners(options: {
  readonly settings: Settings;
  readonly logger: Logger;
  readonly health: HealthState;
  readonly metrics: Metrics;
  readonly sinks: MetricSinks;
  readonly rules: ConfigProvider;
  readonly decider: RateLimitDecider;
  readonly grpcOptions: GrpcServerOptions;
  readonly rlqs: RlqsService;
  readonly top: LiveTop | undefined;
  readonly held: HeldReservations;
  readonly leases: LeasedStore | undefined;
  readonly regions: RegionShares | undefined;
  readonly overrides: RuntimeOverrides;
  /** ADMIN_TOKENS_FILE's tokens: the override API is served only with them. */
  readonly tokens: AdminTokens | undefined;
}): Promise<{ start(): Promise<Ports>; stop(graceMs: number): Promise<unknown> }> {
  const { settings, logger, health, metrics, sinks, rules, decider, grpcOptions, rlqs, top, held, leases, regions, overrides, tokens } = options;
  // Under WORKERS > 1 every scrape answers for all workers (see workers.ts).
  const exposition = settings.disableStats ? undefined : (clusterMetrics(metrics.registry) ?? metrics);
  const prometheusServer =
    sinks.prometheus === undefined
      ? undefined
      : new PrometheusServer({
          ...settings.prometheus,
          metrics: clusterMetrics(sinks.prometheus.registry, 'prometheus') ?? registryExposition(sinks.prometheus.registry),
          limits: settings.httpLimits,
          logger,
        });
  // grpc-js is loaded only when it serves: the default transport does without it (less heap to mark).
  const grpcServer =
    settings.grpcTransport === 'http2' ? new Http2GrpcServer(grpcOptions) : new (await import('./grpc/grpc-js-server')).GrpcServer(grpcOptions);
  const httpServer = new HttpServer({
    host: settings.httpHost,
    port: settings.httpPort,
    limits: settings.httpLimits,
    isServing: () => health.serving(),
    isReady: () => isReady(health, settings),
    limiter: decider,
    metrics: exposition,
    maxBodyBytes: settings.httpLimits.jsonMaxBodyBytes,
    jsonBufferBytes: settings.httpLimits.jsonBufferBytes,
    jsonRefusal: jsonRefusal(settings, logger),
    overrides:
      tokens === undefined
        ? undefined
        : {
            admin: overrides.admin,
            tokens,
            maxBodyBytes: settings.overrides.maxBodyBytes,
            maxRequestsPerSecond: settings.overrides.maxRequestsPerSecond,
          },
    logger,
  });
  const debugServer = new DebugServer({
    host: settings.debugHost,
    port: settings.debugPort,
    limits: settings.httpLimits,
    rlconfig: () => {
      const config = rules.current();
      return config === undefined ? [] : describeConfig(config);
    },
    match: (domain, entries) => ruleMatch(rules.current(), domain, entries, held.heldOf(domain, entries), overrides.table.find(domain, entries)),
    quota: () => rlqs.view(),
    leases: leases === undefined ? undefined : () => leases.view(LEASES_SHOWN),
    regions: regions === undefined ? undefined : () => ({ region: regions.region, ...regions.view(LEASES_SHOWN) }),
    metrics: exposition,
    top: top === undefined ? undefined : () => top.merged(),
    overrideMarks: overrideMarks(overrides),
    // The page shows this replica's quota streams beside the heavy hitters (their shares cover every replica's proxies).
    topExtras: () => ({
      rlqs: rlqsReport(rlqs.view()),
      reservations: held.byRule(),
      ...(regions === undefined ? {} : { regions: regionsReport(regions.region, regions.view(REGIONS_SHOWN).parts) }),
    }),
    logger,
  });
  return {
    // Prometheus before the gRPC port: the worker reports ready once everything listens, and proxies arrive as soon as gRPC does.
    start: async () => ({
      prometheusPort: await prometheusServer?.start(),
      grpcPort: await grpcServer.start(),
      httpPort: await httpServer.start(),
      debugPort: await debugServer.start(),
    }),
    stop: (graceMs) => Promise.all([grpcServer.stop(graceMs), httpServer.close(graceMs), debugServer.close(graceMs), prometheusServer?.close(graceMs)]),
  };
}

/** What /top says of a descriptor a runtime override decides (its counter key is the id of its row). */
function overrideMarks(overrides: RuntimeOverrides): OverrideMarks {
  return (id) => {
    const o = overrides.table.byCounterKey(id);
    if (o === undefined) return undefined;
    const { requestsPerUnit, unit, unitMultiplier, algorithm, unlimited } = o.limit;
    return { requests_per_unit: requestsPerUnit, unit, unit_multiplier: unitMultiplier, algorithm, unlimited, version: o.version };
  };
}

/** Where the service listens, in two log lines. */
function logListening(settings: Settings, logger: Logger, ports: Ports, store: Store): void {
  const grpcWhere = settings.grpcUds !== undefined ? { socket: settings.grpcUds } : { host: settings.grpcHost, port: ports.grpcPort };
  logger.info({ ...grpcWhere, store: store.name }, 'gRPC listening');
  const prometheusWhere =
    ports.prometheusPort === undefined ? {} : { prometheus: `${settings.prometheus.host ?? ''}:${ports.prometheusPort}${settings.prometheus.path}` };
  logger.info({ http: `${settings.httpHost}:${ports.httpPort}`, debug: `${settings.debugHost}:${ports.debugPort}`, ...prometheusWhere }, 'HTTP listening');
}

/**
 * Why POST /json is refused, or undefined when it is served: while the gRPC port demands client
 * certificates, /json (plaintext, anyone who reaches PORT) would decide and charge without one.
 * Either way the start says so, once.
 */
function jsonRefusal(settings: Settings, logger: Logger): string | undefined {
  const { grpcTls, httpLimits } = settings;
  if (!grpcTls.enabled || grpcTls.clientCaPath === undefined) return undefined;
  if (httpLimits.jsonWithoutClientCert) {
    logger.warn('gRPC demands client certificates, and POST /json serves without one (HTTP_JSON_ALLOW_WITHOUT_CLIENT_CERT=true)');
    return undefined;
  }
  logger.info('gRPC demands client certificates: POST /json answers 403 (HTTP_JSON_ALLOW_WITHOUT_CLIENT_CERT=true serves it)');
  return 'POST /json is off while gRPC demands client certificates (HTTP_JSON_ALLOW_WITHOUT_CLIENT_CERT=true turns it on)';
}

/** One warning line each for the settings' start-up warnings (unsupported reference variables and the like). */
export function logStartupWarnings(settings: Settings, logger: Logger): void {
  for (const warning of settings.warnings) logger.warn(warning);
}

/**
 * The live view of this process. Its name is unique among every process sharing the store; its
 * replica's name is shared by the workers of one replica (the supervisor's pid), so /top counts replicas.
 */
function liveTop(settings: Settings, documents: SharedDocuments | undefined, logger: Logger): LiveTop {
  const { windowMs, entries, rules } = settings.top;
  const replica = `${hostname()}/${cluster.isWorker ? process.ppid : process.pid}`;
  return new LiveTop({
    sketch: new TopSketch({ windowMs, entries, maxRules: rules, nowMs: Date.now() }),
    keep: entries,
    documents,
    replica,
    process: `${replica}/${cluster.worker?.id ?? 0}/${randomUUID()}`,
    onError: (err) => logger.warn({ err: err.message }, 'cannot share the live view through the store; /top shows this process alone until it can'),
  });
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Process entry: read settings, start, stop gracefully on SIGTERM/SIGINT. */
export async function main(env: NodeJS.ProcessEnv = process.env): Promise<void> {
  let settings: Settings;
  try {
    // The container's CPU limit, not the node's cores, bounds the default WORKERS.
    settings = loadSettings(env, { parallelism: availableParallelism, quota: () => cpuQuotaCores() });
  } catch (err) {
    if (err instanceof SettingsError) {
      // One line whatever the offending value contains.
      process.stderr.write(`${err.message.replace(/[\r\n]+/g, '\\n')}\n`);
      process.exit(1);
    }
    throw err;
  }
  const logger = createLogger({ level: settings.logLevel, format: settings.logFormat });
  if (isSupervisor(settings.workers)) {
    logStartupWarnings(settings, logger);
    superviseWorkers({ workers: settings.workers, logger, shutdownGraceMs: settings.shutdownGraceMs });
    return;
  }
  let service: Service;
  try {
    service = await startService(settings, { logger });
  } catch (err) {
    logger.fatal({ err: errorText(err) }, 'cannot start');
    process.exit(1);
  }
  reportReady();

  const shutdown = (signal: NodeJS.Signals): void => {
    logger.info({ signal }, 'shutting down');
    // Last resort if a part refuses to stop: the grace period plus a margin, then leave anyway.
    setTimeout(() => {
      logger.warn('shutdown took too long; exiting');
      process.exit(0);
    }, settings.shutdownGraceMs + 1_000).unref();
    service.close().then(
      () => process.exit(0),
      (err: unknown) => {
        logger.error({ err: errorText(err) }, 'error while shutting down');
        process.exit(0);
      },
    );
  };
  process.once('SIGTERM', shutdown);
  process.once('SIGINT', shutdown);
}

if (require.main === module) {
  void main();
}
