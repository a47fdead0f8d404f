import { GLOBAL_FALLBACKS, type GlobalFallback } from '../sharing/regions/region-division';
import { availableParallelism } from 'node:os';
import type { LeaseLimits } from '../sharing/leases/lease';
import { ALGORITHMS, DEFAULT_REQUEST_LIMITS, REQUEST_LIMIT_SETTINGS, type Algorithm, type RequestLimits } from '../limiter/types';
import type { RlqsLimits } from '../sharing/quota/quota-budgets';
import { referenceSettingWarnings } from './reference-settings';

/**
 * Every environment variable the service reads, in one typed table with its default.
 * Names and defaults follow envoyproxy/ratelimit where the meaning is the same.
 * `loadSettings` throws SettingsError naming the variable; main.ts prints it and exits.
 */

export interface ReservationSettings {
  /** RESERVE_ENTRY_KEY / COMMIT_ENTRY_KEY: the last entry's key of a reserve and of a commit descriptor. */
  readonly reserveKey: string;
  readonly commitKey: string;
  /** RESERVATION_TTL: how long a hold lasts at most (a rule's own hold time is capped by it), ms. */
  readonly ttlMs: number;
  /** RESERVATIONS_MAX_PER_KEY: holds of one descriptor's book, in either store. */
  readonly maxPerKey: number;
  /** RESERVATIONS_MAX_KEY_BYTES: bytes of one descriptor's book (64 + the ID's bytes per hold), in either store. */
  readonly maxKeyBytes: number;
  /** RESERVATIONS_MAX_ENTRIES / RESERVATIONS_MAX_BYTES: the memory store's holds and estimated bytes of every book together (the least recently used books make room). */
  readonly maxEntries: number;
  readonly maxBytes: number;
}

export class SettingsError extends Error {
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super(`invalid setting ${variable}: ${message}`);
    this.name = 'SettingsError';
  }
}

type Env = Readonly<Record<string, string | undefined>>;

function str(env: Env, name: string, fallback: string): string {
  const v = env[name];
  return v === undefined || v === '' ? fallback : v;
}

function optional(env: Env, name: string): string | undefined {
  const v = env[name];
  return v === undefined || v === '' ? undefined : v;
}

// Go's strconv.ParseBool spellings, as the reference server accepts them.
const TRUE = new Set(['1', 't', 'T', 'true', 'TRUE', 'True']);
const FALSE = new Set(['0', 'f', 'F', 'false', 'FALSE', 'False']);

function bool(env: Env, name: string, fallback: boolean): boolean {
  const v = optional(env, name);
  if (v === undefined) return fallback;
  if (TRUE.has(v)) return true;
  if (FALSE.has(v)) return false;
  throw new SettingsError(name, `expected true or false, got "${v}"`);
}

function int(env: Env, name: string, fallback: number, min: number, max: number): number {
  const v = optional(env, name);
  if (v === undefined) return fallback;
  if (!/^-?\d+$/.test(v.trim())) throw new SettingsError(name, `expected an integer, got "${v}"`);
  const n = Number(v.trim());
  if (n < min || n > max) throw new SettingsError(name, `expected an integer from ${min} to ${max}, got ${n}`);
  return n;
}

const DURATION_UNIT_MS: Readonly<Record<string, number>> = { ns: 1e-6, us: 1e-3, µs: 1e-3, ms: 1, s: 1e3, m: 60e3, h: 3600e3 };

/** A Go duration (`10s`, `1h30m`, `250ms`, `0`), as the reference's settings take them, in milliseconds. */
function duration(env: Env, name: string, fallbackMs: number): number {
  const v = optional(env, name)?.trim();
  if (v === undefined) return fallbackMs;
  if (v === '0') return 0;
  const part = /(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)/gy;
  let ms = 0;
  let end = 0;
  for (let m = part.exec(v); m !== null; m = part.exec(v)) {
    ms += Number(m[1]) * DURATION_UNIT_MS[m[2]];
    end = part.lastIndex;
  }
  if (end === 0 || end !== v.length) throw new SettingsError(name, `expected a duration such as 10s, 500ms or 1h30m, got "${v}"`);
  return ms;
}

// logrus level names (the reference's LOG_LEVEL) onto the logger's: panic is fatal, warning is warn.
const LOG_LEVELS: Readonly<Record<string, LogLevel>> = {
  panic: 'fatal',
  fatal: 'fatal',
  error: 'error',
  warn: 'warn',
  warning: 'warn',
  info: 'info',
  debug: 'debug',
  trace: 'trace',
};

function logLevel(env: Env): LogLevel {
  const v = optional(env, 'LOG_LEVEL');
  if (v === undefined) return 'warn';
  const level = LOG_LEVELS[v.trim().toLowerCase()];
  if (level === undefined) throw new SettingsError('LOG_LEVEL', `expected one of ${Object.keys(LOG_LEVELS).join(', ')}, got "${v}"`);
  return level;
}

function port(env: Env, name: string, fallback: number): number {
  return int(env, name, fallback, 0, 65535);
}

function ratio(env: Env, name: string, fallback: number): number {
  const v = optional(env, name);
  if (v === undefined) return fallback;
  const n = Number(v);
  if (!Number.isFinite(n) || n < 0 || n > 1) throw new SettingsError(name, `expected a number from 0 to 1, got "${v}"`);
  return n;
}

function oneOf<T extends string>(env: Env, name: string, fallback: T, allowed: readonly T[], fold = true): T {
  const v = optional(env, name);
  if (v === undefined) return fallback;
  const k = (fold ? v.toLowerCase() : v) as T;
  if (!allowed.includes(k)) throw new SettingsError(name, `expected one of ${allowed.join(', ')}, got "${v}"`);
  return k;
}

/**
 * CALENDAR_TIMEZONE: `UTC`, or a fixed offset from it, `+05:30` / `-08:00` (hours 00-23, minutes
 * 00-59), in ms. Named zones would bring daylight-saving days of 23 and 25 hours: not taken.
 */
function calendarOffset(env: Env, name: string): number {
  const v = optional(env, name)?.trim();
  if (v === undefined || v.toUpperCase() === 'UTC') return 0;
  const m = /^([+-])([01]\d|2[0-3]):([0-5]\d)$/.exec(v);
  if (m === null) throw new SettingsError(name, `expected UTC or a fixed offset such as +05:30 or -08:00 (named zones are not supported), got "${v}"`);
  const ms = (Number(m[2]) * 60 + Number(m[3])) * 60_000;
  return m[1] === '-' ? -ms : ms;
}

export type LogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal';
// The values of each choice, one list each: the type is read from it.
/** BACKEND_TYPE: the counter stores (src/store/create-store.ts builds the one named). */
const BACKEND_TYPES = ['memory', 'redis'] as const;
export type BackendType = (typeof BACKEND_TYPES)[number];
const REDIS_TYPES = ['single', 'sentinel', 'cluster'] as const;
export type RedisType = (typeof REDIS_TYPES)[number];
const FAILURE_POLICIES = ['error', 'allow', 'deny', 'local'] as const;
export type FailurePolicy = (typeof FAILURE_POLICIES)[number];
const TRANSPORTS = ['http2', 'grpc-js'] as const;
export type Transport = (typeof TRANSPORTS)[number];
const CONFIG_TYPES = ['FILE', 'GRPC_XDS_SOTW'] as const;
export type ConfigType = (typeof CONFIG_TYPES)[number];

export interface Settings {
  /** Start-up warnings: reference variables set but not supported here, and choices worth knowing. */
  readonly warnings: readonly string[];
  readonly grpcHost: string;
  /** GRPC_UDS: listen on this Unix socket instead of GRPC_HOST:GRPC_PORT. */
  readonly grpcUds?: string;
  /** Connections get a GOAWAY after this long, ±10% jitter (GRPC_MAX_CONNECTION_AGE); 0: never. */
  readonly grpcMaxConnectionAgeMs: number;
  /** ... and are closed this long after the GOAWAY (GRPC_MAX_CONNECTION_AGE_GRACE). */
  readonly grpcMaxConnectionAgeGraceMs: number;
  readonly grpcPort: number;
  /** Largest accepted gRPC message, bytes. */
  readonly grpcMaxMessageBytes: number;
  /** Which gRPC server implementation serves the RLS and health services. */
  readonly grpcTransport: Transport;
  readonly grpcTls: {
    readonly enabled: boolean;
    readonly certPath?: string;
    readonly keyPath?: string;
    /** When set, clients must present a certificate signed by this CA (mTLS). */
    readonly clientCaPath?: string;
    /** When set, the client certificate must carry this subject alternative name (GRPC_CLIENT_TLS_SAN). */
    readonly clientSan?: string;
  };
  /**
   * Limits of the service's own HTTP/2 layer (GRPC_TRANSPORT=http2): every one bounds what a peer can make it hold.
   * With grpc-js, the streams, idle and handshake times apply as well, and the connection buffer sizes its session memory.
   */
  readonly h2: {
    /** SETTINGS_MAX_CONCURRENT_STREAMS: streams one connection may have open. */
    readonly maxConcurrentStreams: number;
    /** SETTINGS_MAX_HEADER_LIST_SIZE: largest decoded request header list, bytes. */
    readonly maxHeaderListBytes: number;
    /** Request body bytes one stream may have buffered (its receive window); also bounds the request message. */
    readonly streamBufferBytes: number;
    /** Request body bytes all streams of one connection may have buffered (the connection's receive window). */
    readonly connectionBufferBytes: number;
    /**
     * Receive window all connections of the port together may hold beyond the 65,535 bytes each is
     * granted by the protocol; a connection opened while it is spent gets those 65,535 until it has room.
     */
    readonly totalBufferBytes: number;
    /** Streams one connection may have reset or refused at once, and per second beyond that. */
    readonly resetBurst: number;
    readonly resetsPerSecond: number;
    /** A connection without a stream for this long is closed with GOAWAY, ms; 0 never. */
    readonly idleTimeoutMs: number;
    /** Time for the TLS handshake, the preface and first SETTINGS, and for a header block to complete, ms. */
    readonly handshakeTimeoutMs: number;
  };
  /** Connections open at once on the gRPC port, either transport (GRPC_MAX_CONNECTIONS); more are closed as they arrive. */
  readonly grpcMaxConnections: number;
  readonly httpHost: string;
  readonly httpPort: number;
  /** Bounds of every HTTP listener (PORT, DEBUG_PORT, PROMETHEUS_ADDR), each on its own. */
  readonly httpLimits: {
    /** Connections open at once (HTTP_MAX_CONNECTIONS); more are closed as they arrive. */
    readonly maxConnections: number;
    /** Time for a request's header block (HTTP_HEADERS_TIMEOUT_MS), then for the whole request with its body (HTTP_REQUEST_TIMEOUT_MS), ms; 408 past either. */
    readonly headersTimeoutMs: number;
    readonly requestTimeoutMs: number;
    /** Largest POST /json body, bytes (HTTP_JSON_MAX_BODY_BYTES); 413 past it. */
    readonly jsonMaxBodyBytes: number;
    /** /json body bytes held at once over every request still being read (HTTP_JSON_BUFFER_BYTES); 503 past it. */
    readonly jsonBufferBytes: number;
    /** POST /json served although gRPC demands client certificates (HTTP_JSON_ALLOW_WITHOUT_CLIENT_CERT); else 403. */
    readonly jsonWithoutClientCert: boolean;
  };
  readonly debugHost: string;
  readonly debugPort: number;
  readonly logLevel: LogLevel;
  readonly logFormat: 'text' | 'json';

  readonly runtimeRoot: string;
  readonly runtimeSubdirectory: string;
  readonly runtimeAppDirectory: string;
  readonly runtimeIgnoreDotFiles: boolean;
  readonly runtimeWatchRoot: boolean;
  /** Short form: a config file or directory; wins over RUNTIME_*. */
  readonly configPath?: string;
  /** One domain split across several config files is merged (MERGE_DOMAIN_CONFIG). */
  readonly mergeDomainConfig: boolean;
  /** Healthy only while the config holds at least one domain (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED). */
  readonly healthyWithAtLeastOneConfigLoaded: boolean;

  readonly backendType: BackendType;
  /** The counters' Redis (REDIS_*). */
  readonly redis: RedisSettings;
  readonly cacheKeyPrefix: string;
  /** Deadline of one store call, ms. */
  readonly storeTimeoutMs: number;
  readonly storeFailurePolicy: FailurePolicy;
  /** Memory store bounds, in records and estimated bytes (LRU beyond either). */
  readonly memoryMaxKeys: number;
  readonly memoryMaxBytes: number;
  /** Reservations (reserve and commit descriptors): the entry keys, how long a hold lasts, and the bounds of what is held. */
  readonly reservations: ReservationSettings;
  /** Local denial cache bounds, in denials and estimated bytes (LRU beyond either); 0 in either disables it. */
  readonly denialCacheMaxKeys: number;
  readonly denialCacheMaxBytes: number;
  /** Caps on what one request may hold (over one: INVALID_ARGUMENT naming it). */
  readonly requestLimits: RequestLimits;
  /** Bounds of the per-rule metric series (see src/metrics/metrics.ts). */
  readonly metricLimits: MetricLimits;
  /** Quota streams (RLQS): caps and timing (RLQS_*). */
  readonly rlqs: RlqsLimits;
  /** Leases (`lease: true` limits on Redis): timing and caps (LEASE_*). */
  readonly leases: LeaseLimits;
  /** gRPC server reflection (GRPC_REFLECTION, on by default) and its caps (GRPC_REFLECTION_*). */
  readonly grpcReflection: {
    readonly enabled: boolean;
    readonly maxStreams: number;
    readonly maxStreamsPerConnection: number;
    readonly maxRequestBytes: number;
    readonly maxRequestsPerStream: number;
    /** A stream without a request for this long is ended, ms. */
    readonly idleTimeoutMs: number;
  };

  readonly defaultAlgorithm: Algorithm;
  /** The calendar of `calendar: true` limits, ms ahead of UTC (CALENDAR_TIMEZONE; 0 for UTC). */
  readonly calendarOffsetMs: number;
  readonly countDeniedRequests: boolean;
  readonly shadowMode: boolean;
  /** Every rule in quota mode (QUOTA_MODE). */
  readonly quotaMode: boolean;
  /** Fill the response's dynamic_metadata (RESPONSE_DYNAMIC_METADATA). */
  readonly responseDynamicMetadata: boolean;
  readonly nearLimitRatio: number;
  readonly responseHeaders: {
    readonly enabled: boolean;
    readonly limitHeader: string;
    readonly remainingHeader: string;
    readonly resetHeader: string;
    /** Also/instead send the IETF draft `RateLimit-Policy` and `RateLimit` fields. */
    readonly draftEnabled: boolean;
  };
  /** statsd over TCP to STATSD_HOST:STATSD_PORT, as the reference (USE_STATSD, default true). */
  readonly useStatsd: boolean;
  /** DogStatsD over UDP to the same address, EXTRA_TAGS as tags; replaces plain statsd. */
  readonly useDogStatsd: boolean;
  readonly statsdHost: string;
  readonly statsdPort: number;
  /** statsd bytes waiting for a slow or absent TCP agent before further lines are dropped and counted (STATSD_MAX_QUEUED_BYTES). */
  readonly statsdMaxQueuedBytes: number;
  /** EXTRA_TAGS (`k:v,k2:v2`): on every statsd name, DogStatsD tag and mapped Prometheus series. */
  readonly extraTags: Readonly<Record<string, string>>;
  /** How often summed statsd counters are sent (STATS_FLUSH_INTERVAL). */
  readonly statsFlushIntervalMs: number;
  /** DISABLE_STATS: no statsd, no Prometheus listener, no /metrics. */
  readonly disableStats: boolean;
  /** USE_PROMETHEUS: the reference's names and labels on their own listener (PROMETHEUS_ADDR, PROMETHEUS_PATH). */
  readonly usePrometheus: boolean;
  readonly prometheus: {
    /** Undefined: every interface (PROMETHEUS_ADDR=":9090"). */
    readonly host?: string;
    readonly port: number;
    readonly path: string;
    /** A statsd_exporter mapping file; the built-in reference mapping when absent. */
    readonly mapperYamlPath?: string;
    readonly responseTimeInMilliseconds: boolean;
  };
  /**
   * Worker processes sharing the gRPC port (redis backend only; default with redis: one per CPU the
   * container's cgroup quota allows, else one per core; 1 with memory).
   */
  readonly workers: number;
  /**
   * This replica's name among every process sharing the store (REPLICA_ID; with WORKERS > 1 each
   * worker adds `-<its index>`): a restarted process under the same name takes its own place again in
   * the store's lease ledgers and demand exchanges. Undefined: a random name per process.
   */
  readonly replicaId: string | undefined;
  /** Calls each process makes to itself at start, before it takes traffic (src/app/warm-up.ts); 0: none. */
  readonly warmUpCalls: number;
  /** Longest wait for in-flight calls after SIGTERM, ms. */
  readonly shutdownGraceMs: number;

  /** Where the rules come from: files (FILE) or an xDS control plane (GRPC_XDS_SOTW, see src/xds). */
  readonly configType: ConfigType;
  /** With xDS: open the ports and report healthy before the first config arrives, rather than wait for it. */
  readonly forceStartWithoutInitialConfig: boolean;
  readonly xds: XdsSettings;
  readonly tracing: TracingSettings;
  readonly top: TopSettings;
  /** Runtime overrides (src/limiter/overrides.ts): the API's tokens, the memory store's file, the caps and the sync (ADMIN_TOKENS_FILE, OVERRIDES_*). */
  readonly overrides: OverrideSettings;
  /** Regions (REGION with GLOBAL_REDIS_URL): `scope: global` limits shared with the other regions; undefined without REGION. */
  readonly regions?: RegionSettings;
}

/**
 * The connection settings of one Redis: REDIS_* for the counters, GLOBAL_REDIS_* (the same names
 * after `GLOBAL_`) for the store every region reaches. Read by one function, redisSettings.
 */
export interface RedisSettings {
  /** The variables these came from, `REDIS_` (when absent) or `GLOBAL_REDIS_`: errors name `<prefix>URL` and so on. */
  readonly variablePrefix?: RedisVariablePrefix;
  readonly type: RedisType;
  readonly socketType: 'tcp' | 'unix';
  readonly url?: string;
  readonly auth?: string;
  /** Password of the Sentinel nodes themselves (REDIS_SENTINEL_AUTH); REDIS_AUTH is the master's. */
  readonly sentinelAuth?: string;
  /** Connect timeout and idle-socket timeout, ms (REDIS_TIMEOUT); undefined: the built-in ones. */
  readonly timeoutMs?: number;
  readonly tls: boolean;
  readonly tlsCaCertPath?: string;
  readonly tlsClientCertPath?: string;
  readonly tlsClientKeyPath?: string;
  readonly tlsSkipHostnameVerification: boolean;
}

export type RedisVariablePrefix = 'REDIS_' | 'GLOBAL_REDIS_';

/**
 * Regions: one limit (`scope: global`) shared by every region through a store they all reach,
 * divided by demand off the decision path (README, Regions).
 */
export interface RegionSettings {
  /** REGION: this replica's region, letters, digits, `.`, `_`, `-`, at most MAX_REGION_BYTES. */
  readonly region: string;
  /** REGION_SYNC_INTERVAL: how often a region settles with the global store and the parts are divided again, ms. */
  readonly syncIntervalMs: number;
  /** REGION_TTL: how long a region keeps its last part without the global store (then GLOBAL_FALLBACK), ms; at least 3 sync intervals. */
  readonly ttlMs: number;
  /** GLOBAL_STORE_TIMEOUT: deadline of one call to the global store, ms. */
  readonly timeoutMs: number;
  /** GLOBAL_FALLBACK: `split` (the limit divided by the last known number of regions), `allow` or `deny`. */
  readonly fallback: GlobalFallback;
  /** The global store (GLOBAL_REDIS_*). */
  readonly redis: RedisSettings;
}

/** Runtime overrides: who may change them, where the memory store keeps them, how many, how fast every replica follows. */
export interface OverrideSettings {
  /** ADMIN_TOKENS_FILE: lines `NAME TOKEN`; the override API on PORT is served only with it (re-read when it changes). */
  readonly adminTokensFile?: string;
  /** OVERRIDES_FILE: where the memory store keeps them across restarts (BACKEND_TYPE=memory only); none: lost at restart. */
  readonly file?: string;
  /** OVERRIDES_SYNC_INTERVAL: a change reaches every replica sharing the store within it, ms (at most 1 s). */
  readonly syncIntervalMs: number;
  /** OVERRIDES_MAX: overrides kept at most; OVERRIDES_MAX_BYTES: their bytes (ids and JSON) at most. */
  readonly maxCount: number;
  readonly maxBytes: number;
  /** OVERRIDES_MAX_BODY_BYTES: largest request body of the API; 413 past it. */
  readonly maxBodyBytes: number;
  /** OVERRIDES_MAX_REQUESTS_PER_SECOND: API requests per token and process per second (and as many at once); 429 past it. */
  readonly maxRequestsPerSecond: number;
}

/** The live view of who is being limited (TOP_*; GET /top and the page on the debug port, src/top). */
export interface TopSettings {
  /** Off: no sketch, no timers, /top answers 404. */
  readonly enabled: boolean;
  /** The recent window it covers, ms. */
  readonly windowMs: number;
  /** Descriptors kept per rule and slice of the window (the Space-Saving capacity). */
  readonly entries: number;
  /** Rules tracked at most; hits of further ones are only counted as untracked. */
  readonly rules: number;
}

/** Bounds of the per-rule metric series: what clients sending new values can make the metrics hold. */
export interface MetricLimits {
  /** Distinct (domain, descriptor) label sets kept before folding into "overflow" (METRICS_MAX_SERIES). */
  readonly maxSeries: number;
  /** ... and their estimated bytes (METRICS_MAX_SERIES_BYTES). */
  readonly maxSeriesBytes: number;
  /** A descriptor label longer than this is cut and ends in a hash of the whole (METRICS_MAX_LABEL_LENGTH). */
  readonly maxLabelLength: number;
}

/** The xDS client's settings (CONFIG_GRPC_XDS_*, XDS_CLIENT_*), as the reference names them. */
export interface XdsSettings {
  /** The node id the control plane serves its snapshot to. */
  readonly nodeId: string;
  /** Node metadata, from `key=value,key=value`. */
  readonly nodeMetadata: Readonly<Record<string, string>>;
  /** host:port of the control plane. */
  readonly serverUrl: string;
  /** How often an unreachable control plane is dialled again, ms. */
  readonly connectRetryIntervalMs: number;
  /** gRPC metadata sent with the stream, from `key:value,key:value`. */
  readonly additionalHeaders: Readonly<Record<string, string>>;
  readonly tls: {
    readonly enabled: boolean;
    readonly clientCertPath?: string;
    readonly clientKeyPath?: string;
    /** Verifies the control plane's certificate (else the system roots). */
    readonly serverCaPath?: string;
    /** The name the control plane's certificate must carry, when not the host of serverUrl. */
    readonly serverSan?: string;
  };
  /** Waits between streams after the control plane went away: initial, doubling up to max, randomised by factor when jitter is on. */
  readonly backoff: {
    readonly initialMs: number;
    readonly maxMs: number;
    readonly randomFactor: number;
    readonly jitter: boolean;
  };
  /** Largest accepted response, bytes; undefined: grpc-js's default (4 MiB). */
  readonly maxMessageBytes?: number;
}

/** OpenTelemetry tracing of ShouldRateLimit (TRACING_*; the exporter also reads the standard OTEL_* variables). */
export interface TracingSettings {
  readonly enabled: boolean;
  readonly serviceName: string;
  readonly serviceNamespace: string;
  /** Empty: a random UUID per process. */
  readonly serviceInstanceId: string;
  /** OTLP over HTTP (`http`) or gRPC (`grpc`). */
  readonly exporterProtocol: 'http' | 'grpc';
  /** Share of new traces sampled; a sampled parent from the caller is always followed. */
  readonly samplingRate: number;
}

/**
 * What the default WORKERS is derived from. main.ts passes the container's cgroup quota
 * (./cpu-quota.ts); without one, only the cores count.
 */
export interface HostCpus {
  /** Cores this process may run on. */
  readonly parallelism: () => number;
  /** CPUs the container's cgroup quota allows; undefined without a quota. */
  readonly quota: () => number | undefined;
}

const CORES_ONLY: HostCpus = { parallelism: availableParallelism, quota: () => undefined };

/** Reads and validates the environment. Throws SettingsError naming the first bad variable. */
export function loadSettings(env: Env = process.env, cpus: HostCpus = CORES_ONLY): Settings {
  const warnings = referenceSettingWarnings(env);
  const redisUrl = optional(env, 'REDIS_URL');
  if (optional(env, 'BACKEND_TYPE')?.trim().toLowerCase() === 'memcache') {
    throw new SettingsError('BACKEND_TYPE', 'memcache is not supported; the stores are redis (shared counters) and memory (one process)');
  }
  const backendType = oneOf<BackendType>(env, 'BACKEND_TYPE', redisUrl ? 'redis' : 'memory', BACKEND_TYPES);
  if (optional(env, 'BACKEND_TYPE') === undefined && !redisUrl) {
    warnings.push(
      'neither BACKEND_TYPE nor REDIS_URL is set: using the embedded memory store, whose counters are per process (set REDIS_URL to share limits between replicas)',
    );
  }
  if (backendType === 'redis' && !redisUrl) throw new SettingsError('REDIS_URL', 'required when BACKEND_TYPE=redis');
  const grpcTlsEnabled = bool(env, 'GRPC_SERVER_USE_TLS', false);
  const certPath = optional(env, 'GRPC_SERVER_TLS_CERT');
  const keyPath = optional(env, 'GRPC_SERVER_TLS_KEY');
  if (grpcTlsEnabled && !certPath) throw new SettingsError('GRPC_SERVER_TLS_CERT', 'required when GRPC_SERVER_USE_TLS=true');
  if (grpcTlsEnabled && !keyPath) throw new SettingsError('GRPC_SERVER_TLS_KEY', 'required when GRPC_SERVER_USE_TLS=true');
  const clientCaPath = optional(env, 'GRPC_CLIENT_TLS_CACERT');
  // Without TLS no client certificate can be asked for: the port would serve plaintext to anyone.
  if (clientCaPath !== undefined && !grpcTlsEnabled) {
    throw new SettingsError('GRPC_CLIENT_TLS_CACERT', 'requires GRPC_SERVER_USE_TLS=true (client certificates are checked in the TLS handshake)');
  }
  const transport = oneOf<Transport>(env, 'GRPC_TRANSPORT', 'http2', TRANSPORTS);
  const clientSan = optional(env, 'GRPC_CLIENT_TLS_SAN');
  if (clientSan !== undefined && transport === 'grpc-js') throw new SettingsError('GRPC_CLIENT_TLS_SAN', 'requires GRPC_TRANSPORT=http2 (the default)');
  if (clientSan !== undefined && clientCaPath === undefined) {
    warnings.push('GRPC_CLIENT_TLS_SAN has no effect without GRPC_CLIENT_TLS_CACERT (no client certificate is asked for), as in the reference');
  }
  if (grpcTlsEnabled && transport === 'grpc-js') {
    warnings.push('GRPC_TRANSPORT=grpc-js reads GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY once at start; the default transport picks up rotated files');
  }
  // Redis holds the counters, so workers on every core agree on every limit; memory counters live in one process.
  // A CPU limit caps the default: the pod's memory limit is sized for that many workers, not the node's cores.
  const defaultWorkers = () => Math.min(64, cpus.parallelism(), cpus.quota() ?? Infinity);
  const workers = int(env, 'WORKERS', backendType === 'redis' ? defaultWorkers() : 1, 1, 64);
  if (workers > 1 && backendType === 'memory') {
    throw new SettingsError('WORKERS', 'must be 1 with the memory backend (its counters live in one process)');
  }
  const h2StreamBufferBytes = int(env, 'H2_STREAM_BUFFER_BYTES', 64 * 1024, 1024, 0x7fffffff);
  const h2ConnectionBufferBytes = int(env, 'H2_CONNECTION_BUFFER_BYTES', 1024 * 1024, 65_535, 0x7fffffff);
  if (h2ConnectionBufferBytes < h2StreamBufferBytes) {
    throw new SettingsError('H2_CONNECTION_BUFFER_BYTES', `must be at least H2_STREAM_BUFFER_BYTES (${h2StreamBufferBytes})`);
  }
  const httpLimitsRead = httpLimits(env);
  const header = (name: string, fallback: string): string => {
    const v = str(env, name, fallback);
    if (!/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/.test(v)) throw new SettingsError(name, `not a valid header name: "${v}"`);
    return v;
  };

  return Object.freeze({
    warnings: Object.freeze(warnings),
    grpcHost: str(env, 'GRPC_HOST', '0.0.0.0'),
    grpcUds: optional(env, 'GRPC_UDS'),
    grpcMaxConnectionAgeMs: duration(env, 'GRPC_MAX_CONNECTION_AGE', 24 * 3600e3),
    grpcMaxConnectionAgeGraceMs: duration(env, 'GRPC_MAX_CONNECTION_AGE_GRACE', 3600e3),
    grpcPort: port(env, 'GRPC_PORT', 8081),
    grpcMaxMessageBytes: int(env, 'GRPC_MAX_MESSAGE_BYTES', 4 * 1024 * 1024, 1024, 1 << 30),
    grpcTransport: transport,
    grpcTls: Object.freeze({
      enabled: grpcTlsEnabled,
      certPath,
      keyPath,
      clientCaPath,
      clientSan,
    }),
    h2: Object.freeze({
      maxConcurrentStreams: int(env, 'H2_MAX_CONCURRENT_STREAMS', 1_000, 1, 1_000_000),
      maxHeaderListBytes: int(env, 'H2_MAX_HEADER_LIST_BYTES', 16 * 1024, 1024, 1024 * 1024),
      streamBufferBytes: h2StreamBufferBytes,
      connectionBufferBytes: h2ConnectionBufferBytes,
      totalBufferBytes: int(env, 'H2_TOTAL_BUFFER_BYTES', 64 * 1024 * 1024, 0, 2 ** 40),
      resetBurst: int(env, 'H2_RESET_BURST', 1_000, 1, 1_000_000_000),
      resetsPerSecond: int(env, 'H2_RESETS_PER_SECOND', 33, 0, 1_000_000_000),
      idleTimeoutMs: int(env, 'H2_IDLE_TIMEOUT_MS', 300_000, 0, 86_400_000),
      handshakeTimeoutMs: int(env, 'H2_HANDSHAKE_TIMEOUT_MS', 5_000, 100, 600_000),
    }),
    grpcMaxConnections: int(env, 'GRPC_MAX_CONNECTIONS', 10_000, 1, 10_000_000),
    httpHost: str(env, 'HOST', '0.0.0.0'),
    httpPort: port(env, 'PORT', 8080),
    httpLimits: httpLimitsRead,
    debugHost: str(env, 'DEBUG_HOST', '0.0.0.0'),
    debugPort: port(env, 'DEBUG_PORT', 6070),
    logLevel: logLevel(env),
    // As the reference: json is json, any other value is text.
    logFormat: optional(env, 'LOG_FORMAT')?.trim().toLowerCase() === 'json' ? 'json' : 'text',

    runtimeRoot: str(env, 'RUNTIME_ROOT', '/srv/runtime_data/current'),
    runtimeSubdirectory: str(env, 'RUNTIME_SUBDIRECTORY', ''),
    runtimeAppDirectory: str(env, 'RUNTIME_APPDIRECTORY', 'config'),
    runtimeIgnoreDotFiles: bool(env, 'RUNTIME_IGNOREDOTFILES', false),
    runtimeWatchRoot: bool(env, 'RUNTIME_WATCH_ROOT', true),
    configPath: optional(env, 'CONFIG_PATH'),
    mergeDomainConfig: bool(env, 'MERGE_DOMAIN_CONFIG', false),
    healthyWithAtLeastOneConfigLoaded: bool(env, 'HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED', false),

    backendType,
    redis: redisSettings(env, 'REDIS_'),
    cacheKeyPrefix: str(env, 'CACHE_KEY_PREFIX', ''),
    storeTimeoutMs: int(env, 'STORE_TIMEOUT_MS', 10, 1, 60_000),
    storeFailurePolicy: oneOf<FailurePolicy>(env, 'STORE_FAILURE_POLICY', 'error', FAILURE_POLICIES),
    memoryMaxKeys: int(env, 'MEMORY_MAX_KEYS', 1_000_000, 1, 1e9),
    memoryMaxBytes: int(env, 'MEMORY_MAX_BYTES', 256 * MIB, MIB, 2 ** 40),
    reservations: reservationSettings(env),
    // The reference's LOCAL_CACHE_SIZE_IN_BYTES, in bytes as there (0 turns the cache off, as there);
    // on by default here: unlike the reference's cache, this one never denies what the store allows.
    denialCacheMaxKeys: int(env, 'LOCAL_DENIAL_CACHE_MAX_KEYS', 100_000, 0, 1e9),
    denialCacheMaxBytes: int(env, 'LOCAL_CACHE_SIZE_IN_BYTES', 32 * MIB, 0, 2 ** 40),
    requestLimits: requestLimits(env),
    metricLimits: Object.freeze({
      maxSeries: int(env, 'METRICS_MAX_SERIES', 10_000, 1, 1e7),
      maxSeriesBytes: int(env, 'METRICS_MAX_SERIES_BYTES', 16 * MIB, 64 * 1024, 2 ** 34),
      maxLabelLength: int(env, 'METRICS_MAX_LABEL_LENGTH', 256, 32, 65_536),
    }),
    leases: leaseSettings(env),
    rlqs: Object.freeze({
      maxStreams: int(env, 'RLQS_MAX_STREAMS', 10_000, 1, 1_000_000),
      maxStreamsPerConnection: int(env, 'RLQS_MAX_STREAMS_PER_CONNECTION', 16, 1, 1_000_000),
      maxBucketsPerStream: int(env, 'RLQS_MAX_BUCKETS_PER_STREAM', 1_000, 1, 1_000_000),
      maxBucketPairs: int(env, 'RLQS_MAX_BUCKET_ID_PAIRS', 8, 1, 16),
      maxBucketIdBytes: int(env, 'RLQS_MAX_BUCKET_ID_BYTES', 1_024, 16, 65_536),
      reportIntervalMs: positive('RLQS_REPORT_INTERVAL', duration(env, 'RLQS_REPORT_INTERVAL', 5_000)),
      abandonAfterIdleReports: int(env, 'RLQS_ABANDON_AFTER_IDLE_REPORTS', 3, 1, 1_000),
      maxBytes: int(env, 'RLQS_MAX_MEMORY_BYTES', 64 * MIB, MIB, 2 ** 40),
      syncIntervalMs: positive('RLQS_SYNC_INTERVAL', duration(env, 'RLQS_SYNC_INTERVAL', 250)),
      firstReportTimeoutMs: positive('RLQS_FIRST_REPORT_TIMEOUT', duration(env, 'RLQS_FIRST_REPORT_TIMEOUT', 10_000)),
      idleTimeoutMs: positive('RLQS_IDLE_TIMEOUT', duration(env, 'RLQS_IDLE_TIMEOUT', 30_000)),
      maxReportsPerSecond: int(env, 'RLQS_MAX_REPORTS_PER_SECOND', 20, 1, 100_000),
      maxProcessReportsPerSecond: int(env, 'RLQS_MAX_PROCESS_REPORTS_PER_SECOND', 2_000, 1, 1_000_000),
      maxProxiesPerBudget: int(env, 'RLQS_MAX_PROXIES_PER_BUDGET', 1_000, 1, 1_000_000),
    }),
    grpcReflection: Object.freeze({
      enabled: bool(env, 'GRPC_REFLECTION', true),
      maxStreams: int(env, 'GRPC_REFLECTION_MAX_STREAMS', 100, 1, 100_000),
      maxStreamsPerConnection: int(env, 'GRPC_REFLECTION_MAX_STREAMS_PER_CONNECTION', 4, 1, 100_000),
      maxRequestBytes: int(env, 'GRPC_REFLECTION_MAX_REQUEST_BYTES', 4_096, 256, 1 << 20),
      maxRequestsPerStream: int(env, 'GRPC_REFLECTION_MAX_REQUESTS_PER_STREAM', 1_000, 1, 1_000_000),
      idleTimeoutMs: positive('GRPC_REFLECTION_IDLE_TIMEOUT', duration(env, 'GRPC_REFLECTION_IDLE_TIMEOUT', 30_000)),
    }),

    defaultAlgorithm: oneOf<Algorithm>(env, 'DEFAULT_ALGORITHM', 'sliding_window', ALGORITHMS),
    calendarOffsetMs: calendarOffset(env, 'CALENDAR_TIMEZONE'),
    countDeniedRequests: bool(env, 'COUNT_DENIED_REQUESTS', false),
    shadowMode: bool(env, 'SHADOW_MODE', false),
    quotaMode: bool(env, 'QUOTA_MODE', false),
    responseDynamicMetadata: bool(env, 'RESPONSE_DYNAMIC_METADATA', false),
    nearLimitRatio: ratio(env, 'NEAR_LIMIT_RATIO', 0.8),
    responseHeaders: Object.freeze({
      enabled: bool(env, 'LIMIT_RESPONSE_HEADERS_ENABLED', false),
      limitHeader: header('LIMIT_LIMIT_HEADER', 'RateLimit-Limit'),
      remainingHeader: header('LIMIT_REMAINING_HEADER', 'RateLimit-Remaining'),
      resetHeader: header('LIMIT_RESET_HEADER', 'RateLimit-Reset'),
      draftEnabled: bool(env, 'LIMIT_DRAFT_HEADERS_ENABLED', false),
    }),
    useStatsd: bool(env, 'USE_STATSD', true),
    useDogStatsd: bool(env, 'USE_DOG_STATSD', false),
    statsdHost: str(env, 'STATSD_HOST', 'localhost'),
    statsdPort: port(env, 'STATSD_PORT', 8125),
    statsdMaxQueuedBytes: int(env, 'STATSD_MAX_QUEUED_BYTES', 1024 * 1024, 1024, 1 << 30),
    extraTags: extraTags(env),
    statsFlushIntervalMs: positive('STATS_FLUSH_INTERVAL', duration(env, 'STATS_FLUSH_INTERVAL', 10_000)),
    disableStats: bool(env, 'DISABLE_STATS', false),
    usePrometheus: bool(env, 'USE_PROMETHEUS', false),
    prometheus: Object.freeze({
      ...listenAddress(env, 'PROMETHEUS_ADDR', ':9090'),
      path: str(env, 'PROMETHEUS_PATH', '/metrics'),
      mapperYamlPath: optional(env, 'PROMETHEUS_MAPPER_YAML'),
      responseTimeInMilliseconds: bool(env, 'PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS', false),
    }),
    workers,
    replicaId: replicaId(env),
    warmUpCalls: int(env, 'WARM_UP_CALLS', 10_000, 0, 10_000_000),
    shutdownGraceMs: int(env, 'SHUTDOWN_GRACE_MS', 5_000, 0, 600_000),
    configType: oneOf<ConfigType>(env, 'CONFIG_TYPE', 'FILE', CONFIG_TYPES, false),
    forceStartWithoutInitialConfig: bool(env, 'FORCE_START_WITHOUT_INITIAL_CONFIG', false),
    xds: xdsSettings(env),
    tracing: tracingSettings(env),
    top: topSettings(env),
    overrides: overrideSettings(env, backendType, httpLimitsRead.jsonBufferBytes),
    regions: regionSettings(env, backendType),
  });
}

/** The Redis connection settings read from the variables starting with `prefix` (REDIS_URL, REDIS_TYPE, ...). */
function redisSettings(env: Env, prefix: RedisVariablePrefix): RedisSettings {
  const name = (suffix: string): string => prefix + suffix;
  return Object.freeze({
    variablePrefix: prefix,
    type: oneOf<RedisType>(env, name('TYPE'), 'single', REDIS_TYPES),
    socketType: oneOf(env, name('SOCKET_TYPE'), 'tcp', ['tcp', 'unix'] as const),
    url: optional(env, name('URL')),
    auth: optional(env, name('AUTH')),
    sentinelAuth: optional(env, name('SENTINEL_AUTH')),
    timeoutMs: optional(env, name('TIMEOUT')) === undefined ? undefined : duration(env, name('TIMEOUT'), 10_000),
    tls: bool(env, name('TLS'), false),
    tlsCaCertPath: optional(env, name('TLS_CACERT')),
    tlsClientCertPath: optional(env, name('TLS_CLIENT_CERT')),
    tlsClientKeyPath: optional(env, name('TLS_CLIENT_KEY')),
    tlsSkipHostnameVerification: bool(env, name('TLS_SKIP_HOSTNAME_VERIFICATION'), false),
  });
}

/** Longest REGION, bytes (it names the region in the global store's ledgers and demand, and in metric labels). */
export const MAX_REGION_BYTES = 64;
/** REGION_SYNC_INTERVAL when unset, ms. */
export const DEFAULT_REGION_SYNC_INTERVAL_MS = 1_000;

/**
 * REGION_SYNC_INTERVAL, ms: from 100ms to 60s. Read on its own as well, by `slidegate validate`
 * (a `scope: global` limit's window must hold ten of them).
 */
export function regionSyncInterval(env: Env): number {
  const ms = duration(env, 'REGION_SYNC_INTERVAL', DEFAULT_REGION_SYNC_INTERVAL_MS);
  if (!(ms >= 100 && ms <= 60_000)) throw new SettingsError('REGION_SYNC_INTERVAL', `expected a duration from 100ms to 60s, got "${env.REGION_SYNC_INTERVAL}"`);
  return ms;
}

/** The variables that mean something only with REGION (besides GLOBAL_REDIS_URL, which goes with it). */
const REGION_ONLY = ['REGION_SYNC_INTERVAL', 'REGION_TTL', 'GLOBAL_STORE_TIMEOUT', 'GLOBAL_FALLBACK'];
const GLOBAL_REDIS_SUFFIXES = [
  'TYPE',
  'SOCKET_TYPE',
  'AUTH',
  'SENTINEL_AUTH',
  'TIMEOUT',
  'TLS',
  'TLS_CACERT',
  'TLS_CLIENT_CERT',
  'TLS_CLIENT_KEY',
  'TLS_SKIP_HOSTNAME_VERIFICATION',
];

/**
 * REGION with GLOBAL_REDIS_URL (one without the other stops the start, naming the missing one),
 * REGION_*, GLOBAL_STORE_TIMEOUT, GLOBAL_FALLBACK and GLOBAL_REDIS_*. A region shares its part
 * among its replicas through leases, on its own Redis: BACKEND_TYPE=redis.
 */
function regionSettings(env: Env, backendType: BackendType): RegionSettings | undefined {
  const region = optional(env, 'REGION');
  const globalUrl = optional(env, 'GLOBAL_REDIS_URL');
  if (region === undefined) {
    if (globalUrl !== undefined) throw new SettingsError('REGION', 'required with GLOBAL_REDIS_URL (the region this replica is in)');
    const stray = [...REGION_ONLY, ...GLOBAL_REDIS_SUFFIXES.map((s) => `GLOBAL_REDIS_${s}`)].find((name) => optional(env, name) !== undefined);
    if (stray !== undefined) throw new SettingsError(stray, 'only with REGION and GLOBAL_REDIS_URL');
    return undefined;
  }
  if (!/^[A-Za-z0-9._-]+$/.test(region))
    throw new SettingsError('REGION', `only letters, digits, ".", "_" and "-", got ${JSON.stringify(region.slice(0, 200))}`);
  // ASCII only: one byte per character.
  if (region.length > MAX_REGION_BYTES) throw new SettingsError('REGION', `at most ${MAX_REGION_BYTES} bytes, got ${region.length}`);
  if (globalUrl === undefined) throw new SettingsError('GLOBAL_REDIS_URL', 'required with REGION (the store every region reaches)');
  if (backendType !== 'redis') throw new SettingsError('REGION', "requires BACKEND_TYPE=redis (a region's replicas share its part through its Redis)");
  const syncIntervalMs = regionSyncInterval(env);
  const ttlMs = duration(env, 'REGION_TTL', 5_000);
  if (ttlMs > 3_600_000) throw new SettingsError('REGION_TTL', `at most 1h, got ${ttlMs} ms`);
  if (ttlMs < 3 * syncIntervalMs) throw new SettingsError('REGION_TTL', `at least three times REGION_SYNC_INTERVAL (${syncIntervalMs} ms), got ${ttlMs} ms`);
  const timeoutMs = duration(env, 'GLOBAL_STORE_TIMEOUT', 2_000);
  if (!(timeoutMs >= 10 && timeoutMs <= 60_000))
    throw new SettingsError('GLOBAL_STORE_TIMEOUT', `expected a duration from 10ms to 60s, got "${env.GLOBAL_STORE_TIMEOUT}"`);
  return Object.freeze({
    region,
    syncIntervalMs,
    ttlMs,
    timeoutMs,
    fallback: oneOf<GlobalFallback>(env, 'GLOBAL_FALLBACK', 'split', GLOBAL_FALLBACKS),
    redis: redisSettings(env, 'GLOBAL_REDIS_'),
  });
}

function overrideSettings(env: Env, backendType: BackendType, jsonBufferBytes: number): OverrideSettings {
  const file = optional(env, 'OVERRIDES_FILE');
  if (file !== undefined && backendType !== 'memory') {
    throw new SettingsError('OVERRIDES_FILE', 'only with BACKEND_TYPE=memory (with Redis the overrides are kept in the store)');
  }
  const syncIntervalMs = positive('OVERRIDES_SYNC_INTERVAL', duration(env, 'OVERRIDES_SYNC_INTERVAL', 1_000));
  if (syncIntervalMs > 1_000)
    throw new SettingsError('OVERRIDES_SYNC_INTERVAL', `at most 1s (every replica applies a change within it), got ${syncIntervalMs} ms`);
  if (syncIntervalMs < 10) throw new SettingsError('OVERRIDES_SYNC_INTERVAL', `at least 10ms, got ${syncIntervalMs} ms`);
  const maxBodyBytes = int(env, 'OVERRIDES_MAX_BODY_BYTES', 64 * 1024, 1024, 16 * MIB);
  if (maxBodyBytes > jsonBufferBytes) throw new SettingsError('OVERRIDES_MAX_BODY_BYTES', `must be at most HTTP_JSON_BUFFER_BYTES (${jsonBufferBytes})`);
  return Object.freeze({
    adminTokensFile: optional(env, 'ADMIN_TOKENS_FILE'),
    file,
    syncIntervalMs,
    maxCount: int(env, 'OVERRIDES_MAX', 100_000, 1, 10_000_000),
    maxBytes: int(env, 'OVERRIDES_MAX_BYTES', 64 * MIB, 64 * 1024, 2 ** 36),
    maxBodyBytes,
    maxRequestsPerSecond: int(env, 'OVERRIDES_MAX_REQUESTS_PER_SECOND', 2_000, 1, 1_000_000),
  });
}

function topSettings(env: Env): TopSettings {
  const windowMs = duration(env, 'TOP_WINDOW', 60_000);
  // 60 steps of at least 100 ms (the chart), at most a day.
  if (!(windowMs >= 6_000 && windowMs <= 86_400_000)) throw new SettingsError('TOP_WINDOW', `expected a duration from 6s to 24h, got "${env.TOP_WINDOW}"`);
  return Object.freeze({
    enabled: bool(env, 'TOP_ENABLED', true),
    windowMs,
    entries: int(env, 'TOP_ENTRIES', 64, 1, 1_000),
    rules: int(env, 'TOP_RULES', 100, 1, 10_000),
  });
}

/** `k1<sep>v1,k2<sep>v2`; `strict`: an item without the separator is an error (else skipped, as the reference does for node metadata). */
function pairs(env: Env, name: string, separator: string, strict: boolean): Readonly<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const item of (optional(env, name) ?? '').split(',')) {
    if (item === '') continue;
    const at = item.indexOf(separator);
    if (at < 0) {
      if (strict) throw new SettingsError(name, `expected key${separator}value items separated by commas, got "${item}"`);
      continue;
    }
    out[item.slice(0, at)] = item.slice(at + 1);
  }
  return Object.freeze(out);
}

function xdsSettings(env: Env): XdsSettings {
  const tlsEnabled = bool(env, 'CONFIG_GRPC_XDS_SERVER_USE_TLS', false);
  const clientCertPath = optional(env, 'CONFIG_GRPC_XDS_CLIENT_TLS_CERT');
  const clientKeyPath = optional(env, 'CONFIG_GRPC_XDS_CLIENT_TLS_KEY');
  if (tlsEnabled && (clientCertPath === undefined) !== (clientKeyPath === undefined)) {
    throw new SettingsError(
      clientCertPath === undefined ? 'CONFIG_GRPC_XDS_CLIENT_TLS_CERT' : 'CONFIG_GRPC_XDS_CLIENT_TLS_KEY',
      'the client certificate and key go together',
    );
  }
  const maxMessageBytes = int(env, 'XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES', 0, 0, 1 << 30);
  const initialMs = duration(env, 'XDS_CLIENT_BACKOFF_INITIAL_INTERVAL', 10_000);
  return Object.freeze({
    nodeId: str(env, 'CONFIG_GRPC_XDS_NODE_ID', 'default'),
    nodeMetadata: pairs(env, 'CONFIG_GRPC_XDS_NODE_METADATA', '=', false),
    serverUrl: str(env, 'CONFIG_GRPC_XDS_SERVER_URL', 'localhost:18000'),
    connectRetryIntervalMs: duration(env, 'CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL', 3_000),
    additionalHeaders: pairs(env, 'CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS', ':', true),
    tls: Object.freeze({
      enabled: tlsEnabled,
      clientCertPath,
      clientKeyPath,
      serverCaPath: optional(env, 'CONFIG_GRPC_XDS_SERVER_TLS_CACERT'),
      serverSan: optional(env, 'CONFIG_GRPC_XDS_SERVER_TLS_SAN'),
    }),
    backoff: Object.freeze({
      initialMs,
      maxMs: Math.max(initialMs, duration(env, 'XDS_CLIENT_BACKOFF_MAX_INTERVAL', 60_000)),
      randomFactor: ratio(env, 'XDS_CLIENT_BACKOFF_RANDOM_FACTOR', 0.5),
      jitter: bool(env, 'XDS_CLIENT_BACKOFF_JITTER', true),
    }),
    maxMessageBytes: maxMessageBytes === 0 ? undefined : maxMessageBytes,
  });
}

function httpLimits(env: Env): Settings['httpLimits'] {
  const headersTimeoutMs = int(env, 'HTTP_HEADERS_TIMEOUT_MS', 10_000, 100, 600_000);
  const requestTimeoutMs = int(env, 'HTTP_REQUEST_TIMEOUT_MS', 10_000, 100, 600_000);
  // node:http refuses a header deadline past the request's (the request includes its headers).
  if (requestTimeoutMs < headersTimeoutMs) throw new SettingsError('HTTP_REQUEST_TIMEOUT_MS', `must be at least HTTP_HEADERS_TIMEOUT_MS (${headersTimeoutMs})`);
  const jsonMaxBodyBytes = int(env, 'HTTP_JSON_MAX_BODY_BYTES', 1024 * 1024, 1024, 1 << 30);
  const jsonBufferBytes = int(env, 'HTTP_JSON_BUFFER_BYTES', 16 * 1024 * 1024, 1024, 2 ** 40);
  if (jsonBufferBytes < jsonMaxBodyBytes) throw new SettingsError('HTTP_JSON_BUFFER_BYTES', `must be at least HTTP_JSON_MAX_BODY_BYTES (${jsonMaxBodyBytes})`);
  return Object.freeze({
    maxConnections: int(env, 'HTTP_MAX_CONNECTIONS', 1_000, 1, 10_000_000),
    headersTimeoutMs,
    requestTimeoutMs,
    jsonMaxBodyBytes,
    jsonBufferBytes,
    jsonWithoutClientCert: bool(env, 'HTTP_JSON_ALLOW_WITHOUT_CLIENT_CERT', false),
  });
}

function tracingSettings(env: Env): TracingSettings {
  return Object.freeze({
    enabled: bool(env, 'TRACING_ENABLED', false),
    serviceName: str(env, 'TRACING_SERVICE_NAME', 'RateLimit'),
    serviceNamespace: str(env, 'TRACING_SERVICE_NAMESPACE', ''),
    serviceInstanceId: str(env, 'TRACING_SERVICE_INSTANCE_ID', ''),
    exporterProtocol: oneOf(env, 'TRACING_EXPORTER_PROTOCOL', 'http', ['http', 'grpc'] as const),
    samplingRate: ratio(env, 'TRACING_SAMPLING_RATE', 1),
  });
}

const MIB = 1024 * 1024;

/** The request caps, each from the setting the limiter names in its errors. */
function requestLimits(env: Env): RequestLimits {
  const cap = (field: keyof RequestLimits, max: number): number => int(env, REQUEST_LIMIT_SETTINGS[field], DEFAULT_REQUEST_LIMITS[field], 1, max);
  return Object.freeze({
    maxDescriptors: cap('maxDescriptors', 1_000_000),
    maxEntries: cap('maxEntries', 1_000_000),
    maxKeyBytes: cap('maxKeyBytes', 1 << 30),
    maxValueBytes: cap('maxValueBytes', 1 << 30),
  });
}

/** EXTRA_TAGS as the reference reads it: `key:value` pairs separated by commas. */
function extraTags(env: Env): Record<string, string> {
  const tags: Record<string, string> = {};
  const v = optional(env, 'EXTRA_TAGS');
  if (v === undefined) return Object.freeze(tags);
  for (const pair of v.split(',')) {
    const i = pair.indexOf(':');
    const key = pair.slice(0, i).trim();
    if (i <= 0 || !/^[a-zA-Z_][a-zA-Z0-9_]*$/.test(key)) throw new SettingsError('EXTRA_TAGS', `expected name:value pairs separated by commas, got "${pair}"`);
    tags[key] = pair.slice(i + 1).trim();
  }
  return Object.freeze(tags);
}

/** A Go listen address: `host:port`, `[v6]:port` or `:port` (every interface). */
function listenAddress(env: Env, name: string, fallback: string): { host?: string; port: number } {
  const v = str(env, name, fallback).trim();
  const m = /^(?:\[([^\]]*)\]|([^:]*)):(\d{1,5})$/.exec(v);
  const portNumber = m === null ? NaN : Number(m[3]);
  if (m === null || portNumber > 65535) throw new SettingsError(name, `expected host:port or :port, got "${v}"`);
  const host = m[1] ?? m[2];
  return host === '' ? { port: portNumber } : { host, port: portNumber };
}

function reservationSettings(env: Env): ReservationSettings {
  const key = (name: string, fallback: string): string => {
    const v = str(env, name, fallback);
    if (Buffer.byteLength(v) > DEFAULT_REQUEST_LIMITS.maxKeyBytes) throw new SettingsError(name, `longer than ${DEFAULT_REQUEST_LIMITS.maxKeyBytes} bytes`);
    return v;
  };
  const reserveKey = key('RESERVE_ENTRY_KEY', 'reserve');
  const commitKey = key('COMMIT_ENTRY_KEY', 'commit');
  if (reserveKey === commitKey) throw new SettingsError('COMMIT_ENTRY_KEY', `must differ from RESERVE_ENTRY_KEY ("${reserveKey}")`);
  const ttlMs = duration(env, 'RESERVATION_TTL', 600_000);
  if (!(ttlMs >= 1_000 && ttlMs <= 7 * 86_400_000))
    throw new SettingsError('RESERVATION_TTL', `expected a duration from 1s to 168h, got "${env.RESERVATION_TTL}"`);
  return Object.freeze({
    reserveKey,
    commitKey,
    ttlMs: Math.round(ttlMs),
    maxPerKey: int(env, 'RESERVATIONS_MAX_PER_KEY', 10_000, 1, 1_000_000),
    // At least one hold of the longest ID (64 + 256 bytes).
    maxKeyBytes: int(env, 'RESERVATIONS_MAX_KEY_BYTES', MIB, 1024, 1024 * MIB),
    maxEntries: int(env, 'RESERVATIONS_MAX_ENTRIES', 1_000_000, 1, 1e9),
    maxBytes: int(env, 'RESERVATIONS_MAX_BYTES', 128 * MIB, MIB, 2 ** 40),
  });
}

/**
 * LEASE_*: a part lives at least one second without news from the store. It decides until one sync
 * interval before its demand entry can lapse (LEASE_TTL after the exchange was sent), so LEASE_TTL is
 * at least three intervals: one sync late or failed does not stop it.
 */
function leaseSettings(env: Env): LeaseLimits {
  const syncIntervalMs = positive('LEASE_SYNC_INTERVAL', duration(env, 'LEASE_SYNC_INTERVAL', 250));
  if (syncIntervalMs > 10_000) throw new SettingsError('LEASE_SYNC_INTERVAL', `at most 10s, got ${syncIntervalMs} ms`);
  const ttlMs = duration(env, 'LEASE_TTL', 2_000);
  if (ttlMs < 1_000) throw new SettingsError('LEASE_TTL', `at least 1s, got ${ttlMs} ms`);
  if (ttlMs < 3 * syncIntervalMs) throw new SettingsError('LEASE_TTL', `at least three times LEASE_SYNC_INTERVAL (${syncIntervalMs} ms), got ${ttlMs} ms`);
  return Object.freeze({
    syncIntervalMs,
    ttlMs,
    maxLeases: int(env, 'LEASE_MAX_KEYS', 1_000, 1, 1_000_000),
    maxBytes: int(env, 'LEASE_MAX_BYTES', 16 * MIB, 64 * 1024, 2 ** 34),
    // The store's ledgers and demand hashes keep at most 256 members each (MAX_SETTLE_MEMBERS, MAX_REPLICAS_PER_BUDGET).
    maxReplicas: int(env, 'LEASE_MAX_REPLICAS', 256, 1, 256),
    maxSyncBytesPerSecond: int(env, 'LEASE_MAX_SYNC_BYTES_PER_SECOND', 8 * MIB, 64 * 1024, 2 ** 34),
  });
}

/** Longest REPLICA_ID, bytes (it names this process in every lease sync, and a worker adds `-<index>`). */
export const MAX_REPLICA_ID_BYTES = 128;

/** REPLICA_ID: letters, digits, `.`, `_` and `-` (a pod's or a host's name), at most MAX_REPLICA_ID_BYTES. */
function replicaId(env: Env): string | undefined {
  const id = optional(env, 'REPLICA_ID');
  if (id === undefined) return undefined;
  if (!/^[A-Za-z0-9._-]+$/.test(id)) throw new SettingsError('REPLICA_ID', `only letters, digits, ".", "_" and "-", got ${JSON.stringify(id.slice(0, 200))}`);
  // ASCII only: one byte per character.
  if (id.length > MAX_REPLICA_ID_BYTES) throw new SettingsError('REPLICA_ID', `at most ${MAX_REPLICA_ID_BYTES} bytes, got ${id.length}`);
  return id;
}

function positive(name: string, ms: number): number {
  if (ms <= 0) throw new SettingsError(name, 'must be above 0');
  return ms;
}
