import { availableParallelism } from 'node:os';
import { ALGORITHMS, type Algorithm } from './limiter/types';

/**
 * Every environment variable the service reads, in one typed table with its default.
 * Names and defaults follow envoyproxy/ratelimit where the meaning is the same.
 * `loadSettings` throws SettingsError naming the variable; main.ts prints it and exits.
 */

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

export type LogLevel = 'trace' | 'debug' | 'info' | 'warn' | 'error' | 'fatal';
export type BackendType = 'memory' | 'redis';
export type RedisType = 'single' | 'sentinel' | 'cluster';
export type FailurePolicy = 'error' | 'allow' | 'deny' | 'local';
export type Transport = 'http2' | 'grpc-js';

export interface Settings {
  readonly grpcHost: string;
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
  };
  readonly httpHost: string;
  readonly httpPort: number;
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

  readonly backendType: BackendType;
  readonly redis: {
    readonly type: RedisType;
    readonly socketType: 'tcp' | 'unix';
    readonly url?: string;
    readonly auth?: string;
    readonly tls: boolean;
    readonly tlsCaCertPath?: string;
    readonly tlsClientCertPath?: string;
    readonly tlsClientKeyPath?: string;
    readonly tlsSkipHostnameVerification: boolean;
  };
  readonly cacheKeyPrefix: string;
  /** Deadline of one store call, ms. */
  readonly storeTimeoutMs: number;
  readonly storeFailurePolicy: FailurePolicy;
  /** Memory store bound (LRU beyond it). */
  readonly memoryMaxKeys: number;
  /** Local denial cache bound; 0 disables it. */
  readonly denialCacheMaxKeys: number;

  readonly defaultAlgorithm: Algorithm;
  readonly countDeniedRequests: boolean;
  readonly shadowMode: boolean;
  readonly nearLimitRatio: number;
  readonly responseHeaders: {
    readonly enabled: boolean;
    readonly limitHeader: string;
    readonly remainingHeader: string;
    readonly resetHeader: string;
    /** Also/instead send the IETF draft `RateLimit-Policy` and `RateLimit` fields. */
    readonly draftEnabled: boolean;
  };
  readonly useStatsd: boolean;
  readonly statsdHost: string;
  readonly statsdPort: number;
  readonly usePrometheus: boolean;
  /** Worker processes sharing the gRPC port (redis backend only; default: one per core with redis, 1 with memory). */
  readonly workers: number;
  /** Calls each process makes to itself at start, before it takes traffic (src/warm-up.ts); 0: none. */
  readonly warmUpCalls: number;
  /** Longest wait for in-flight calls after SIGTERM, ms. */
  readonly shutdownGraceMs: number;
}

/** Reads and validates the environment. Throws SettingsError naming the first bad variable. */
export function loadSettings(env: Env = process.env): Settings {
  const redisUrl = optional(env, 'REDIS_URL');
  const backendType = oneOf<BackendType>(env, 'BACKEND_TYPE', redisUrl ? 'redis' : 'memory', ['memory', 'redis']);
  if (backendType === 'redis' && !redisUrl) throw new SettingsError('REDIS_URL', 'required when BACKEND_TYPE=redis');
  const grpcTlsEnabled = bool(env, 'GRPC_SERVER_USE_TLS', false);
  const certPath = optional(env, 'GRPC_SERVER_TLS_CERT');
  const keyPath = optional(env, 'GRPC_SERVER_TLS_KEY');
  if (grpcTlsEnabled && !certPath) throw new SettingsError('GRPC_SERVER_TLS_CERT', 'required when GRPC_SERVER_USE_TLS=true');
  if (grpcTlsEnabled && !keyPath) throw new SettingsError('GRPC_SERVER_TLS_KEY', 'required when GRPC_SERVER_USE_TLS=true');
  // Redis holds the counters, so workers on every core agree on every limit; memory counters live in one process.
  const workers = int(env, 'WORKERS', backendType === 'redis' ? Math.min(64, availableParallelism()) : 1, 1, 64);
  if (workers > 1 && backendType === 'memory') {
    throw new SettingsError('WORKERS', 'must be 1 with the memory backend (its counters live in one process)');
  }
  const header = (name: string, fallback: string): string => {
    const v = str(env, name, fallback);
    if (!/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/.test(v)) throw new SettingsError(name, `not a valid header name: "${v}"`);
    return v;
  };

  return Object.freeze({
    grpcHost: str(env, 'GRPC_HOST', '0.0.0.0'),
    grpcPort: port(env, 'GRPC_PORT', 8081),
    grpcMaxMessageBytes: int(env, 'GRPC_MAX_MESSAGE_BYTES', 4 * 1024 * 1024, 1024, 1 << 30),
    grpcTransport: oneOf<Transport>(env, 'GRPC_TRANSPORT', 'http2', ['http2', 'grpc-js']),
    grpcTls: Object.freeze({
      enabled: grpcTlsEnabled,
      certPath,
      keyPath,
      clientCaPath: optional(env, 'GRPC_CLIENT_TLS_CACERT'),
    }),
    httpHost: str(env, 'HOST', '0.0.0.0'),
    httpPort: port(env, 'PORT', 8080),
    debugHost: str(env, 'DEBUG_HOST', '0.0.0.0'),
    debugPort: port(env, 'DEBUG_PORT', 6070),
    logLevel: oneOf<LogLevel>(env, 'LOG_LEVEL', 'warn', ['trace', 'debug', 'info', 'warn', 'error', 'fatal']),
    logFormat: oneOf(env, 'LOG_FORMAT', 'text', ['text', 'json'] as const),

    runtimeRoot: str(env, 'RUNTIME_ROOT', '/srv/runtime_data/current'),
    runtimeSubdirectory: str(env, 'RUNTIME_SUBDIRECTORY', ''),
    runtimeAppDirectory: str(env, 'RUNTIME_APPDIRECTORY', 'config'),
    runtimeIgnoreDotFiles: bool(env, 'RUNTIME_IGNOREDOTFILES', false),
    runtimeWatchRoot: bool(env, 'RUNTIME_WATCH_ROOT', true),
    configPath: optional(env, 'CONFIG_PATH'),

    backendType,
    redis: Object.freeze({
      type: oneOf<RedisType>(env, 'REDIS_TYPE', 'single', ['single', 'sentinel', 'cluster']),
      socketType: oneOf(env, 'REDIS_SOCKET_TYPE', 'tcp', ['tcp', 'unix'] as const),
      url: redisUrl,
      auth: optional(env, 'REDIS_AUTH'),
      tls: bool(env, 'REDIS_TLS', false),
      tlsCaCertPath: optional(env, 'REDIS_TLS_CACERT'),
      tlsClientCertPath: optional(env, 'REDIS_TLS_CLIENT_CERT'),
      tlsClientKeyPath: optional(env, 'REDIS_TLS_CLIENT_KEY'),
      tlsSkipHostnameVerification: bool(env, 'REDIS_TLS_SKIP_HOSTNAME_VERIFICATION', false),
    }),
    cacheKeyPrefix: str(env, 'CACHE_KEY_PREFIX', ''),
    storeTimeoutMs: int(env, 'STORE_TIMEOUT_MS', 10, 1, 60_000),
    storeFailurePolicy: oneOf<FailurePolicy>(env, 'STORE_FAILURE_POLICY', 'error', ['error', 'allow', 'deny', 'local']),
    memoryMaxKeys: int(env, 'MEMORY_MAX_KEYS', 1_000_000, 1, 1e9),
    denialCacheMaxKeys: int(env, 'LOCAL_DENIAL_CACHE_MAX_KEYS', 100_000, 0, 1e9),

    defaultAlgorithm: oneOf<Algorithm>(env, 'DEFAULT_ALGORITHM', 'sliding_window', ALGORITHMS),
    countDeniedRequests: bool(env, 'COUNT_DENIED_REQUESTS', false),
    shadowMode: bool(env, 'SHADOW_MODE', false),
    nearLimitRatio: ratio(env, 'NEAR_LIMIT_RATIO', 0.8),
    responseHeaders: Object.freeze({
      enabled: bool(env, 'LIMIT_RESPONSE_HEADERS_ENABLED', false),
      limitHeader: header('LIMIT_LIMIT_HEADER', 'RateLimit-Limit'),
      remainingHeader: header('LIMIT_REMAINING_HEADER', 'RateLimit-Remaining'),
      resetHeader: header('LIMIT_RESET_HEADER', 'RateLimit-Reset'),
      draftEnabled: bool(env, 'LIMIT_DRAFT_HEADERS_ENABLED', false),
    }),
    useStatsd: bool(env, 'USE_STATSD', false),
    statsdHost: str(env, 'STATSD_HOST', 'localhost'),
    statsdPort: port(env, 'STATSD_PORT', 8125),
    usePrometheus: bool(env, 'USE_PROMETHEUS', true),
    workers,
    warmUpCalls: int(env, 'WARM_UP_CALLS', 10_000, 0, 10_000_000),
    shutdownGraceMs: int(env, 'SHUTDOWN_GRACE_MS', 5_000, 0, 600_000),
  });
}
