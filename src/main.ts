import cluster from 'node:cluster';
import { availableParallelism } from 'node:os';
import { describeConfig } from './config/describe';
import { ConfigSource, configSourceOptions } from './config/source';
import type { ConfigProvider } from './config/config-provider';
import { cpuQuotaCores } from './cpu-quota';
import { matchDescriptor } from './limiter/match';
import { RateLimiter } from './limiter/rate-limiter';
import { Replays } from './limiter/replay';
import type { RateLimitConfig } from './limiter/rules';
import type { Entry } from './limiter/types';
import { createLogger, type Logger } from './log';
import { createMetrics, instrumentDecider, instrumentReplays, type Metrics } from './metrics';
import { frameResponse } from './server/rls-wire-codec';
import { createMetricSinks, registryExposition } from './metric-sinks';
import { DebugServer, type RuleMatch } from './server/debug-server';
import { PrometheusServer } from './server/prometheus-server';
import { Http2GrpcServer } from './server/http2-grpc-server';
import { HttpServer } from './server/http-server';
import { HealthState, watchStoreHealth } from './server/health';
import { loadSettings, SettingsError, type Settings } from './settings';
import { createStore } from './store/create-store';
import { warmUp } from './warm-up';
import { clusterMetrics, isSupervisor, reportReady, superviseWorkers } from './workers';
import type { Store } from './limiter/store';

/** Most requests kept for replay: the requests under attack at one time, not every client. */
const REPLAY_MAX_KEYS = 10_000;
/** The warm-up stops after this long whatever it has done (a store that is down makes every call fail fast anyway). */
const WARM_UP_MAX_MS = 2_000;

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
  readonly store: Store;
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
  const health = new HealthState();
  // statsd send errors repeat on every flush while the agent is down: one warning is enough.
  let statsdWarned = false;
  const sinks = createMetricSinks(settings, (err) => {
    if (!statsdWarned) logger.warn({ err: errorText(err) }, 'statsd send failed; metrics keep being dropped while it fails');
    statsdWarned = true;
  });
  const metrics = createMetrics(settings, { statsd: sinks.statsd });

  const sourceOptions = configSourceOptions(settings);
  const configPath = sourceOptions.path;
  // Set once the store exists: cached denials were computed under the old limits.
  let clearStoreCache: () => void = () => undefined;
  const configSource = new ConfigSource({
    ...sourceOptions,
    onLoad: (config, files) => {
      clearStoreCache();
      metrics.recordConfigLoad(true);
      // HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: a config without a domain serves nothing, so it is not healthy.
      health.set('config', !settings.healthyWithAtLeastOneConfigLoaded || config.domains.size > 0);
      logger.info({ path: configPath, files, domains: [...config.domains.keys()] }, 'config loaded');
      for (const warning of config.warnings) logger.warn({ path: configPath }, `config: ${warning}`);
    },
    onError: (err) => {
      metrics.recordConfigLoad(false);
      logger.error({ path: configPath, err: errorText(err) }, 'config load failed; keeping the previous config');
    },
  });
  // CONFIG_TYPE=GRPC_XDS_SOTW: the rules come from a control plane instead (src/xds, loaded only then: it
  // brings grpc-js); the file source stays idle.
  const xdsSource =
    settings.configType === 'GRPC_XDS_SOTW'
      ? await (await import('./xds/start')).startXdsConfig({ settings, logger, health, metrics, onLoad: () => clearStoreCache() })
      : undefined;
  const rules: ConfigProvider = xdsSource ?? configSource;
  if (xdsSource === undefined) {
    try {
      await configSource.load();
    } catch (err) {
      metrics.recordConfigLoad(false);
      // Stay up and NOT_SERVING: the watcher picks up a fixed config without a restart.
      logger.error({ path: configPath, err: errorText(err) }, 'initial config load failed; not serving until a valid config appears');
    }
    configSource.start();
  }

  // The Redis store comes wrapped in the local denial cache (see create-store); a reload must empty it.
  // The warm-up's calls reach the real store; their cache hits and store errors are not the service's.
  const warmingUp = settings.warmUpCalls > 0 && settings.grpcTransport === 'http2';
  let muted = warmingUp;
  const store = await createStore(
    settings,
    logger,
    metrics.storeHooks(() => muted),
  );
  clearStoreCache = () => store.clearCache?.();
  const stopStoreWatch = watchStoreHealth({ store, health });

  // Replays (src/limiter/replay.ts) are built from the denial cache, which only the Redis store has.
  const replayMaxKeys = settings.backendType === 'redis' ? Math.min(settings.denialCacheMaxKeys, REPLAY_MAX_KEYS) : 0;
  const limiter = new RateLimiter({
    store,
    config: () => rules.current(),
    shadowMode: settings.shadowMode,
    quotaMode: settings.quotaMode,
    dynamicMetadata: settings.responseDynamicMetadata,
    countDenied: settings.countDeniedRequests,
    defaultAlgorithm: settings.defaultAlgorithm,
    nearLimitRatio: settings.nearLimitRatio,
    responseHeaders: settings.responseHeaders,
    observer: metrics,
  });
  // Both edges share one timed, error-counting view of the limiter.
  const decider = instrumentDecider(limiter, metrics);
  const replays =
    replayMaxKeys > 0
      ? instrumentReplays(new Replays({ maxKeys: replayMaxKeys, config: () => rules.current(), encode: frameResponse, observer: metrics }), metrics)
      : undefined;
  // Under WORKERS > 1 every scrape answers for all workers (see workers.ts).
  const exposition = settings.disableStats ? undefined : (clusterMetrics(metrics.registry) ?? metrics);
  const prometheusServer =
    sinks.prometheus === undefined
      ? undefined
      : new PrometheusServer({
          ...settings.prometheus,
          metrics: clusterMetrics(sinks.prometheus.registry, 'prometheus') ?? registryExposition(sinks.prometheus.registry),
          logger,
        });

  // The OpenTelemetry SDK is loaded only when tracing is on; off, the edges hold no tracer at all.
  const tracer = settings.tracing.enabled ? await (await import('./tracing/otel-tracer')).createOtelTracer(settings.tracing, logger) : undefined;
  const grpcOptions = { limiter: decider, replays, health, settings, logger, tracer };
  // grpc-js is loaded only when it serves: the default transport does without it (less heap to mark).
  const grpcServer = settings.grpcTransport === 'http2' ? new Http2GrpcServer(grpcOptions) : new (await import('./server/grpc-server')).GrpcServer(grpcOptions);
  const httpServer = new HttpServer({
    host: settings.httpHost,
    port: settings.httpPort,
    isServing: () => health.serving(),
    isReady: () => isReady(health, settings),
    limiter: decider,
    metrics: exposition,
    logger,
  });
  const debugServer = new DebugServer({
    host: settings.debugHost,
    port: settings.debugPort,
    rlconfig: () => {
      const config = rules.current();
      return config === undefined ? [] : describeConfig(config);
    },
    match: (domain, entries) => ruleMatch(rules.current(), domain, entries),
    metrics: exposition,
    logger,
  });
  // Before the shared port opens: the first proxy calls then meet compiled code (see warm-up.ts).
  if (warmingUp) {
    const warm = await warmUp({ calls: settings.warmUpCalls, maxMs: WARM_UP_MAX_MS, store, settings, replayMaxKeys, logger });
    muted = false;
    logger.info({ answered: warm.answered, failed: warm.failed, ms: Math.round(warm.ms) }, 'warmed up');
  }
  let grpcPort: number;
  let httpPort: number;
  let debugPort: number;
  let prometheusPort: number | undefined;
  try {
    // Before the gRPC port: the worker reports ready once everything listens, and proxies arrive as soon as gRPC does.
    prometheusPort = await prometheusServer?.start();
    grpcPort = await grpcServer.start();
    httpPort = await httpServer.start();
    debugPort = await debugServer.start();
  } catch (err) {
    await Promise.all([grpcServer.stop(0), httpServer.close(0), debugServer.close(0), prometheusServer?.close(0)]);
    stopStoreWatch();
    rules.close();
    await store.close();
    await metrics.close();
    throw err;
  }
  const grpcWhere = settings.grpcUds !== undefined ? { socket: settings.grpcUds } : { host: settings.grpcHost, port: grpcPort };
  logger.info({ ...grpcWhere, store: store.name }, 'gRPC listening');
  const prometheusWhere = prometheusPort === undefined ? {} : { prometheus: `${settings.prometheus.host ?? ''}:${prometheusPort}${settings.prometheus.path}` };
  logger.info({ http: `${settings.httpHost}:${httpPort}`, debug: `${settings.debugHost}:${debugPort}`, ...prometheusWhere }, 'HTTP listening');

  let closing: Promise<void> | undefined;
  const close = (): Promise<void> =>
    (closing ??= (async () => {
      health.beginShutdown();
      const grace = settings.shutdownGraceMs;
      await Promise.all([grpcServer.stop(grace), httpServer.close(grace), debugServer.close(grace), prometheusServer?.close(grace)]);
      stopStoreWatch();
      rules.close();
      await store.close();
      await metrics.close();
      await tracer?.shutdown().catch((err: unknown) => logger.warn({ err: errorText(err) }, 'could not export the last spans'));
      logger.info('stopped');
    })());

  return { settings, logger, grpcPort, httpPort, debugPort, prometheusPort, metrics, health, limiter, configSource: rules, store, close };
}

/** The debug port's /rlmatch answer: the rule `entries` match in `domain` under `config`. */
export function ruleMatch(config: RateLimitConfig | undefined, domain: string, entries: readonly Entry[]): RuleMatch {
  const domains = config === undefined ? [] : [...config.domains.keys()];
  const matched = config === undefined ? undefined : matchDescriptor(config, domain, entries);
  if (matched === undefined) return { domains, rule: null };
  const { limit } = matched;
  return {
    domains,
    rule: {
      requestsPerUnit: limit.requestsPerUnit,
      unit: limit.unit,
      unitMultiplier: limit.unitMultiplier,
      windowMs: limit.windowMs,
      algorithm: limit.algorithm,
      name: limit.name ?? null,
      unlimited: limit.unlimited,
      shadowMode: matched.shadowMode,
    },
  };
}

/**
 * Readiness (GET /readyz): a config has loaded and shutdown has not begun, and the store answers
 * unless STORE_FAILURE_POLICY answers without it (allow, deny, local). A readiness that followed the
 * store under those policies would take every pod out of the Service during a store outage, and the
 * policy could never answer; under `error` it does follow the store, so calls go to the pods that
 * can reach it.
 */
export function isReady(health: HealthState, settings: Pick<Settings, 'storeFailurePolicy'>): boolean {
  const storeNeeded = settings.storeFailurePolicy === 'error';
  return health.holds('config') && health.holds('running') && (!storeNeeded || health.holds('store'));
}

/** Settings as logged: secrets (REDIS_AUTH, a password inside REDIS_URL) replaced by "***". */
export function maskSettings(settings: Settings): Settings {
  const { redis } = settings;
  return {
    ...settings,
    redis: {
      ...redis,
      auth: redis.auth === undefined ? undefined : '***',
      sentinelAuth: redis.sentinelAuth === undefined ? undefined : '***',
      url: redis.url === undefined ? undefined : maskUrlPasswords(redis.url),
    },
  };
}

/** One warning line each for the settings' start-up warnings (unsupported reference variables and the like). */
export function logStartupWarnings(settings: Settings, logger: Logger): void {
  for (const warning of settings.warnings) logger.warn(warning);
}

/** Hides the password of every `scheme://user:password@host` (and `:password@host`) in a REDIS_URL list. */
export function maskUrlPasswords(url: string): string {
  return url.replace(/(\/\/[^:/@,]*:)[^@,]*@/g, '$1***@');
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
