/**
 * Every environment variable of envoyproxy/ratelimit's settings, and what this service does with it.
 *
 * `honoured`: loadSettings (src/settings/settings.ts) reads it with the reference's meaning.
 * `warned`: the service does not support it (or supports only some values); when it is set, start-up
 * logs one warning line that names it and says what happens instead. No reference variable is ignored
 * without a word. test/unit/settings/reference-settings.test.ts walks the reference's full list against this table.
 */

export type ReferenceHandling =
  | { readonly kind: 'honoured' }
  | {
      readonly kind: 'warned';
      /** What the service does instead, completing "NAME=value is not supported: ...". */
      readonly instead: string;
      /** Values that do mean the same here (no warning for them); every value warns when absent. */
      readonly honouredWhen?: (value: string) => boolean;
    };

const HONOURED: ReferenceHandling = Object.freeze({ kind: 'honoured' });

// Go's strconv.ParseBool spellings.
const GO_TRUE = new Set(['1', 't', 'T', 'true', 'TRUE', 'True']);
const GO_FALSE = new Set(['0', 'f', 'F', 'false', 'FALSE', 'False']);
const isTrue = (v: string): boolean => GO_TRUE.has(v.trim());
const isFalse = (v: string): boolean => GO_FALSE.has(v.trim());

function warned(instead: string, honouredWhen?: (value: string) => boolean): ReferenceHandling {
  return Object.freeze({ kind: 'warned', instead, honouredWhen });
}

const PER_SECOND = warned('per-second limits are counted in the one store that REDIS_URL names, like every other limit');
const MEMCACHE = warned('there is no memcache store; the store is BACKEND_TYPE=redis or memory');
const REDIS_STARTUP = warned(
  'the service starts without waiting for Redis, reports NOT_SERVING until it connects and keeps reconnecting (backoff from 50 ms to 1 s)',
);
const PIPELINE = warned('concurrent calls share Redis round trips automatically (auto-pipelining); there is nothing to tune');

/** The reference's 114 variables, by name. */
export const REFERENCE_SETTINGS: Readonly<Record<string, ReferenceHandling>> = Object.freeze({
  HOST: HONOURED,
  PORT: HONOURED,
  DEBUG_HOST: HONOURED,
  DEBUG_PORT: HONOURED,
  GRPC_UDS: HONOURED,
  GRPC_HOST: HONOURED,
  GRPC_PORT: HONOURED,
  GRPC_MAX_CONNECTION_AGE: HONOURED,
  GRPC_MAX_CONNECTION_AGE_GRACE: HONOURED,
  GRPC_SERVER_USE_TLS: HONOURED,
  GRPC_SERVER_TLS_CERT: HONOURED,
  GRPC_SERVER_TLS_KEY: HONOURED,
  GRPC_CLIENT_TLS_CACERT: HONOURED,
  GRPC_CLIENT_TLS_SAN: HONOURED,
  LOG_LEVEL: HONOURED,
  LOG_FORMAT: HONOURED,

  CONFIG_TYPE: HONOURED,
  FORCE_START_WITHOUT_INITIAL_CONFIG: HONOURED,
  CONFIG_GRPC_XDS_NODE_ID: HONOURED,
  CONFIG_GRPC_XDS_NODE_METADATA: HONOURED,
  CONFIG_GRPC_XDS_SERVER_URL: HONOURED,
  CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL: HONOURED,
  CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: HONOURED,
  CONFIG_GRPC_XDS_SERVER_USE_TLS: HONOURED,
  CONFIG_GRPC_XDS_CLIENT_TLS_CERT: HONOURED,
  CONFIG_GRPC_XDS_CLIENT_TLS_KEY: HONOURED,
  CONFIG_GRPC_XDS_SERVER_TLS_CACERT: HONOURED,
  CONFIG_GRPC_XDS_SERVER_TLS_SAN: HONOURED,
  XDS_CLIENT_BACKOFF_INITIAL_INTERVAL: HONOURED,
  XDS_CLIENT_BACKOFF_MAX_INTERVAL: HONOURED,
  XDS_CLIENT_BACKOFF_RANDOM_FACTOR: HONOURED,
  XDS_CLIENT_BACKOFF_JITTER: HONOURED,
  XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES: HONOURED,

  USE_DOG_STATSD: HONOURED,
  USE_DOG_STATSD_MOGRIFIERS: warned('metric names are sent unchanged (no mogrifiers)'),
  USE_STATSD: HONOURED,
  STATSD_HOST: HONOURED,
  STATSD_PORT: HONOURED,
  EXTRA_TAGS: HONOURED,
  STATS_FLUSH_INTERVAL: HONOURED,
  DISABLE_STATS: HONOURED,
  USE_PROMETHEUS: HONOURED,
  PROMETHEUS_ADDR: HONOURED,
  PROMETHEUS_PATH: HONOURED,
  PROMETHEUS_MAPPER_YAML: HONOURED,
  PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS: HONOURED,

  RUNTIME_ROOT: HONOURED,
  RUNTIME_SUBDIRECTORY: HONOURED,
  RUNTIME_APPDIRECTORY: HONOURED,
  RUNTIME_IGNOREDOTFILES: HONOURED,
  RUNTIME_WATCH_ROOT: HONOURED,

  EXPIRATION_JITTER_MAX_SECONDS: warned(
    'every counter key expires when its windows have passed, without random jitter (sliding-window keys are written in every window, so expiries do not come in waves)',
  ),
  LOCAL_CACHE_SIZE_IN_BYTES: HONOURED,
  NEAR_LIMIT_RATIO: HONOURED,
  CACHE_KEY_PREFIX: HONOURED,
  BACKEND_TYPE: HONOURED,
  STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: warned(
    'a request is all-or-nothing here: when any of its limits is over, no counter is charged; COUNT_DENIED_REQUESTS=true charges denied hits as the reference does by default',
    isTrue,
  ),

  LIMIT_RESPONSE_HEADERS_ENABLED: HONOURED,
  LIMIT_LIMIT_HEADER: HONOURED,
  LIMIT_REMAINING_HEADER: HONOURED,
  LIMIT_RESET_HEADER: HONOURED,

  HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: HONOURED,

  REDIS_SOCKET_TYPE: HONOURED,
  REDIS_TYPE: HONOURED,
  REDIS_URL: HONOURED,
  REDIS_POOL_SIZE: warned('each process keeps one pipelined connection per Redis node (ioredis); WORKERS sets the number of processes'),
  REDIS_AUTH: HONOURED,
  REDIS_TLS: HONOURED,
  REDIS_TLS_CLIENT_CERT: HONOURED,
  REDIS_TLS_CLIENT_KEY: HONOURED,
  REDIS_TLS_CACERT: HONOURED,
  REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: HONOURED,
  REDIS_PIPELINE_WINDOW: PIPELINE,
  REDIS_PIPELINE_LIMIT: PIPELINE,
  REDIS_CLUSTER_PIPELINE_PARALLELISM: warned('calls to different cluster nodes always run in parallel'),
  REDIS_PERSECOND: warned('per-second limits are counted in the one store that REDIS_URL names, like every other limit', isFalse),
  REDIS_PERSECOND_SOCKET_TYPE: PER_SECOND,
  REDIS_PERSECOND_TYPE: PER_SECOND,
  REDIS_PERSECOND_URL: PER_SECOND,
  REDIS_PERSECOND_POOL_SIZE: PER_SECOND,
  REDIS_PERSECOND_AUTH: PER_SECOND,
  REDIS_PERSECOND_TLS: PER_SECOND,
  REDIS_SENTINEL_AUTH: HONOURED,
  REDIS_PERSECOND_SENTINEL_AUTH: PER_SECOND,
  REDIS_PERSECOND_PIPELINE_WINDOW: PER_SECOND,
  REDIS_PERSECOND_PIPELINE_LIMIT: PER_SECOND,
  REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM: PER_SECOND,
  REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: warned('health always follows the Redis connection: NOT_SERVING while it is down', isTrue),
  REDIS_TIMEOUT: HONOURED,
  REDIS_PERSECOND_TIMEOUT: PER_SECOND,
  REDIS_POOL_ON_EMPTY_BEHAVIOR: warned(
    'calls never wait for a free connection; STORE_TIMEOUT_MS bounds every store call',
    (v) => v.trim().toUpperCase() === 'WAIT',
  ),
  REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR: PER_SECOND,
  REDIS_STARTUP_INITIAL_INTERVAL: REDIS_STARTUP,
  REDIS_STARTUP_MAX_INTERVAL: REDIS_STARTUP,
  REDIS_STARTUP_MAX_ELAPSED_TIME: REDIS_STARTUP,

  MEMCACHE_HOST_PORT: MEMCACHE,
  MEMCACHE_MAX_IDLE_CONNS: MEMCACHE,
  MEMCACHE_SRV: MEMCACHE,
  MEMCACHE_SRV_REFRESH: MEMCACHE,
  MEMCACHE_TLS: MEMCACHE,
  MEMCACHE_TLS_CLIENT_CERT: MEMCACHE,
  MEMCACHE_TLS_CLIENT_KEY: MEMCACHE,
  MEMCACHE_TLS_CACERT: MEMCACHE,
  MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION: MEMCACHE,

  SHADOW_MODE: HONOURED,
  QUOTA_MODE: HONOURED,
  RESPONSE_DYNAMIC_METADATA: HONOURED,
  MERGE_DOMAIN_CONFIG: HONOURED,

  TRACING_ENABLED: HONOURED,
  TRACING_SERVICE_NAME: HONOURED,
  TRACING_SERVICE_NAMESPACE: HONOURED,
  TRACING_SERVICE_INSTANCE_ID: HONOURED,
  TRACING_EXPORTER_PROTOCOL: HONOURED,
  TRACING_SAMPLING_RATE: HONOURED,
});

type Env = Readonly<Record<string, string | undefined>>;

/**
 * One line for every reference variable that is set (non-empty) and not honoured here, in table order.
 * Each names the variable and its value and says what happens instead.
 */
export function referenceSettingWarnings(env: Env): string[] {
  const lines: string[] = [];
  for (const [name, handling] of Object.entries(REFERENCE_SETTINGS)) {
    if (handling.kind !== 'warned') continue;
    const value = env[name];
    if (value === undefined || value === '') continue;
    if (handling.honouredWhen?.(value)) continue;
    lines.push(`${name}=${shown(name, value)} is not supported: ${handling.instead}`);
  }
  return lines;
}

// Values of secret-bearing variables are not logged.
function shown(name: string, value: string): string {
  const v = /AUTH|KEY$|HEADERS/.test(name) ? '***' : value;
  return JSON.stringify(v).slice(1, -1);
}
