import { DEFAULT_REGION_SYNC_INTERVAL_MS, loadSettings, regionSyncInterval, SettingsError } from '../../../src/settings/settings';

describe('loadSettings defaults', () => {
  const s = loadSettings({});

  it('listens where the reference server listens', () => {
    expect([s.grpcHost, s.grpcPort, s.httpHost, s.httpPort, s.debugHost, s.debugPort]).toEqual(['0.0.0.0', 8081, '0.0.0.0', 8080, '0.0.0.0', 6070]);
  });

  it('uses the memory store when no REDIS_URL is given', () => {
    expect(s.backendType).toBe('memory');
    expect(s.redis.type).toBe('single');
    expect(s.redis.socketType).toBe('tcp');
  });

  it('reads config from the reference runtime layout', () => {
    expect([s.runtimeRoot, s.runtimeSubdirectory, s.runtimeAppDirectory]).toEqual(['/srv/runtime_data/current', '', 'config']);
    expect(s.runtimeIgnoreDotFiles).toBe(false);
    expect(s.runtimeWatchRoot).toBe(true);
    expect(s.configPath).toBeUndefined();
  });

  it('has the documented limiter, header and process defaults', () => {
    expect(s).toMatchObject({
      logLevel: 'warn',
      logFormat: 'text',
      grpcMaxMessageBytes: 4 * 1024 * 1024,
      grpcTransport: 'http2',
      defaultAlgorithm: 'sliding_window',
      countDeniedRequests: false,
      shadowMode: false,
      nearLimitRatio: 0.8,
      cacheKeyPrefix: '',
      storeTimeoutMs: 10,
      storeFailurePolicy: 'error',
      useStatsd: true,
      useDogStatsd: false,
      statsFlushIntervalMs: 10_000,
      disableStats: false,
      usePrometheus: false,
      workers: 1,
      shutdownGraceMs: 5000,
      warmUpCalls: 10000,
    });
    expect(s.responseHeaders).toEqual({
      enabled: false,
      limitHeader: 'RateLimit-Limit',
      remainingHeader: 'RateLimit-Remaining',
      resetHeader: 'RateLimit-Reset',
      draftEnabled: false,
    });
    expect(s.grpcTls.enabled).toBe(false);
  });

  it('is frozen', () => {
    expect(Object.isFrozen(s)).toBe(true);
    expect(Object.isFrozen(s.redis)).toBe(true);
  });
});

describe('loadSettings with the reference server variable names', () => {
  it('reads the Istio sample environment', () => {
    const s = loadSettings({
      RUNTIME_ROOT: '/data',
      RUNTIME_SUBDIRECTORY: 'ratelimit',
      RUNTIME_IGNOREDOTFILES: 'true',
      REDIS_URL: 'redis:6379',
      REDIS_SOCKET_TYPE: 'tcp',
      USE_STATSD: 'false',
      LOG_LEVEL: 'debug',
    });
    expect(s.backendType).toBe('redis');
    expect(s.redis.url).toBe('redis:6379');
    expect([s.runtimeRoot, s.runtimeSubdirectory, s.runtimeIgnoreDotFiles]).toEqual(['/data', 'ratelimit', true]);
    expect(s.logLevel).toBe('debug');
  });

  it('accepts upper-case levels and Go boolean spellings', () => {
    const s = loadSettings({ LOG_LEVEL: 'INFO', SHADOW_MODE: 'T', USE_PROMETHEUS: '0', LOG_FORMAT: 'JSON' });
    expect([s.logLevel, s.shadowMode, s.usePrometheus, s.logFormat]).toEqual(['info', true, false, 'json']);
  });

  it('reads ports, hosts, redis and header names', () => {
    const s = loadSettings({
      GRPC_HOST: '127.0.0.1',
      GRPC_PORT: '9081',
      HOST: '::',
      PORT: '9080',
      DEBUG_HOST: 'localhost',
      DEBUG_PORT: '9070',
      BACKEND_TYPE: 'redis',
      REDIS_TYPE: 'sentinel',
      REDIS_URL: 'mymaster,10.0.0.1:26379',
      REDIS_AUTH: 'secret',
      REDIS_TLS: 'true',
      CACHE_KEY_PREFIX: 'rl:',
      LIMIT_RESPONSE_HEADERS_ENABLED: 'true',
      LIMIT_LIMIT_HEADER: 'X-RateLimit-Limit',
      LIMIT_REMAINING_HEADER: 'X-RateLimit-Remaining',
      LIMIT_RESET_HEADER: 'X-RateLimit-Reset',
      NEAR_LIMIT_RATIO: '0.9',
      CONFIG_PATH: '/etc/slidegate',
    });
    expect([s.grpcHost, s.grpcPort, s.httpHost, s.httpPort, s.debugHost, s.debugPort]).toEqual(['127.0.0.1', 9081, '::', 9080, 'localhost', 9070]);
    expect(s.redis).toMatchObject({ type: 'sentinel', url: 'mymaster,10.0.0.1:26379', auth: 'secret', tls: true });
    expect(s.cacheKeyPrefix).toBe('rl:');
    expect(s.responseHeaders).toMatchObject({ enabled: true, limitHeader: 'X-RateLimit-Limit', resetHeader: 'X-RateLimit-Reset' });
    expect(s.nearLimitRatio).toBe(0.9);
    expect(s.configPath).toBe('/etc/slidegate');
  });

  it('accepts every logrus level, mapping panic to fatal and warning to warn', () => {
    const levels = ['panic', 'fatal', 'error', 'warn', 'warning', 'info', 'debug', 'trace', 'WARNING', 'Panic'].map(
      (LOG_LEVEL) => loadSettings({ LOG_LEVEL }).logLevel,
    );
    expect(levels).toEqual(['fatal', 'fatal', 'error', 'warn', 'warn', 'info', 'debug', 'trace', 'warn', 'fatal']);
  });

  it('takes any LOG_FORMAT other than json as text', () => {
    expect(['json', 'JSON', 'text', 'xml', 'logfmt'].map((LOG_FORMAT) => loadSettings({ LOG_FORMAT }).logFormat)).toEqual([
      'json',
      'json',
      'text',
      'text',
      'text',
    ]);
  });

  it('reads Go durations for the connection age, its grace and REDIS_TIMEOUT', () => {
    const s = loadSettings({ GRPC_MAX_CONNECTION_AGE: '1h30m', GRPC_MAX_CONNECTION_AGE_GRACE: '250ms', REDIS_TIMEOUT: '1.5s' });
    expect([s.grpcMaxConnectionAgeMs, s.grpcMaxConnectionAgeGraceMs, s.redis.timeoutMs]).toEqual([5_400_000, 250, 1_500]);
    const d = loadSettings({});
    expect([d.grpcMaxConnectionAgeMs, d.grpcMaxConnectionAgeGraceMs, d.redis.timeoutMs]).toEqual([86_400_000, 3_600_000, undefined]);
    expect(loadSettings({ GRPC_MAX_CONNECTION_AGE: '0' }).grpcMaxConnectionAgeMs).toBe(0);
  });

  it('reads GRPC_UDS, GRPC_CLIENT_TLS_SAN and REDIS_SENTINEL_AUTH', () => {
    const s = loadSettings({ GRPC_UDS: '/tmp/rl.sock', GRPC_CLIENT_TLS_SAN: 'envoy.mesh', REDIS_SENTINEL_AUTH: 'sentinel-secret' });
    expect([s.grpcUds, s.grpcTls.clientSan, s.redis.sentinelAuth]).toEqual(['/tmp/rl.sock', 'envoy.mesh', 'sentinel-secret']);
  });

  it('bounds the denial cache in bytes by LOCAL_CACHE_SIZE_IN_BYTES and in denials by LOCAL_DENIAL_CACHE_MAX_KEYS', () => {
    expect(loadSettings({})).toMatchObject({ denialCacheMaxKeys: 100_000, denialCacheMaxBytes: 32 * 1024 * 1024 });
    expect(loadSettings({ LOCAL_CACHE_SIZE_IN_BYTES: '0' }).denialCacheMaxBytes).toBe(0);
    expect(loadSettings({ LOCAL_CACHE_SIZE_IN_BYTES: '1280000' })).toMatchObject({ denialCacheMaxKeys: 100_000, denialCacheMaxBytes: 1_280_000 });
    expect(loadSettings({ LOCAL_CACHE_SIZE_IN_BYTES: '0', LOCAL_DENIAL_CACHE_MAX_KEYS: '7' })).toMatchObject({ denialCacheMaxKeys: 7, denialCacheMaxBytes: 0 });
  });

  it('reads the request caps and the memory and metric bounds, with their defaults', () => {
    expect(loadSettings({})).toMatchObject({
      requestLimits: { maxDescriptors: 4096, maxEntries: 64, maxKeyBytes: 1024, maxValueBytes: 16_384 },
      memoryMaxBytes: 256 * 1024 * 1024,
      metricLimits: { maxSeries: 10_000, maxSeriesBytes: 16 * 1024 * 1024, maxLabelLength: 256 },
    });
    const s = loadSettings({
      REQUEST_MAX_DESCRIPTORS: '10',
      DESCRIPTOR_MAX_ENTRIES: '3',
      DESCRIPTOR_MAX_KEY_BYTES: '64',
      DESCRIPTOR_MAX_VALUE_BYTES: '100000',
      MEMORY_MAX_BYTES: '2097152',
      METRICS_MAX_SERIES: '50',
      METRICS_MAX_SERIES_BYTES: '65536',
      METRICS_MAX_LABEL_LENGTH: '40',
    });
    expect(s.requestLimits).toEqual({ maxDescriptors: 10, maxEntries: 3, maxKeyBytes: 64, maxValueBytes: 100_000 });
    expect([s.memoryMaxBytes, s.metricLimits]).toEqual([2_097_152, { maxSeries: 50, maxSeriesBytes: 65_536, maxLabelLength: 40 }]);
    expect(() => loadSettings({ DESCRIPTOR_MAX_VALUE_BYTES: '0' })).toThrow('DESCRIPTOR_MAX_VALUE_BYTES');
  });

  it('reads the reservation settings, with their defaults, and stops at a bad one naming it', () => {
    expect(loadSettings({}).reservations).toEqual({
      reserveKey: 'reserve',
      commitKey: 'commit',
      ttlMs: 600_000,
      maxPerKey: 10_000,
      maxKeyBytes: 1_048_576,
      maxEntries: 1_000_000,
      maxBytes: 128 * 1024 * 1024,
    });
    expect(
      loadSettings({ RESERVE_ENTRY_KEY: 'hold', COMMIT_ENTRY_KEY: 'settle', RESERVATION_TTL: '90s', RESERVATIONS_MAX_PER_KEY: '50' }).reservations,
    ).toMatchObject({ reserveKey: 'hold', commitKey: 'settle', ttlMs: 90_000, maxPerKey: 50 });
    expect(() => loadSettings({ COMMIT_ENTRY_KEY: 'reserve' })).toThrow('invalid setting COMMIT_ENTRY_KEY: must differ from RESERVE_ENTRY_KEY ("reserve")');
    expect(() => loadSettings({ RESERVATION_TTL: '500ms' })).toThrow('invalid setting RESERVATION_TTL: expected a duration from 1s to 168h');
    expect(() => loadSettings({ RESERVATIONS_MAX_PER_KEY: '0' })).toThrow('RESERVATIONS_MAX_PER_KEY');
    expect(loadSettings({ RESERVATIONS_MAX_KEY_BYTES: '65536' }).reservations.maxKeyBytes).toBe(65_536);
    // Below one hold of the longest ID (64 + 256 bytes) rounded up: refused.
    expect(() => loadSettings({ RESERVATIONS_MAX_KEY_BYTES: '512' })).toThrow('RESERVATIONS_MAX_KEY_BYTES');
  });

  it('reads the lease settings and REPLICA_ID, with their defaults, and stops at a bad one naming it', () => {
    expect(loadSettings({}).leases).toEqual({
      syncIntervalMs: 250,
      ttlMs: 2_000,
      maxLeases: 1_000,
      maxBytes: 16 * 1024 * 1024,
      maxReplicas: 256,
      maxSyncBytesPerSecond: 8 * 1024 * 1024,
    });
    expect(loadSettings({}).replicaId).toBeUndefined();
    const s = loadSettings({ LEASE_MAX_REPLICAS: '3', LEASE_MAX_SYNC_BYTES_PER_SECOND: '100000', REPLICA_ID: 'ratelimit-7.prod_a' });
    expect(s.leases).toMatchObject({ maxReplicas: 3, maxSyncBytesPerSecond: 100_000 });
    expect(s.replicaId).toBe('ratelimit-7.prod_a');
    expect(() => loadSettings({ LEASE_MAX_REPLICAS: '257' })).toThrow('invalid setting LEASE_MAX_REPLICAS: expected an integer from 1 to 256');
    expect(loadSettings({ LEASE_SYNC_INTERVAL: '500ms', LEASE_TTL: '1500ms' }).leases).toMatchObject({ syncIntervalMs: 500, ttlMs: 1_500 });
    expect(() => loadSettings({ LEASE_SYNC_INTERVAL: '500ms', LEASE_TTL: '1s' })).toThrow(
      'invalid setting LEASE_TTL: at least three times LEASE_SYNC_INTERVAL (500 ms), got 1000 ms',
    );
    expect(() => loadSettings({ LEASE_MAX_SYNC_BYTES_PER_SECOND: '1000' })).toThrow('LEASE_MAX_SYNC_BYTES_PER_SECOND');
    expect(() => loadSettings({ REPLICA_ID: 'pod 7' })).toThrow('invalid setting REPLICA_ID: only letters, digits, ".", "_" and "-"');
    expect(() => loadSettings({ REPLICA_ID: 'pod{7}' })).toThrow('REPLICA_ID');
    expect(() => loadSettings({ REPLICA_ID: 'p'.repeat(129) })).toThrow('invalid setting REPLICA_ID: at most 128 bytes, got 129');
    expect(loadSettings({ REPLICA_ID: 'p'.repeat(128) }).replicaId).toHaveLength(128);
  });

  it('reads the runtime override settings, with their defaults', () => {
    expect(loadSettings({}).overrides).toEqual({
      adminTokensFile: undefined,
      file: undefined,
      syncIntervalMs: 1_000,
      maxCount: 100_000,
      maxBytes: 64 * 1024 * 1024,
      maxBodyBytes: 64 * 1024,
      maxRequestsPerSecond: 2_000,
    });
    expect(
      loadSettings({
        ADMIN_TOKENS_FILE: '/etc/slidegate/tokens',
        OVERRIDES_FILE: '/var/lib/slidegate/overrides',
        OVERRIDES_SYNC_INTERVAL: '250ms',
        OVERRIDES_MAX: '500',
        OVERRIDES_MAX_BYTES: '1048576',
        OVERRIDES_MAX_BODY_BYTES: '8192',
        OVERRIDES_MAX_REQUESTS_PER_SECOND: '50',
      }).overrides,
    ).toEqual({
      adminTokensFile: '/etc/slidegate/tokens',
      file: '/var/lib/slidegate/overrides',
      syncIntervalMs: 250,
      maxCount: 500,
      maxBytes: 1_048_576,
      maxBodyBytes: 8_192,
      maxRequestsPerSecond: 50,
    });
  });

  it('warns that counters are per process when neither BACKEND_TYPE nor REDIS_URL is set', () => {
    const perProcess = (env: Record<string, string>) => loadSettings(env).warnings.filter((w) => w.includes('per process'));
    expect(perProcess({})).toHaveLength(1);
    expect(perProcess({})[0]).toMatch(/BACKEND_TYPE.*REDIS_URL/);
    expect(perProcess({ BACKEND_TYPE: 'memory' })).toEqual([]);
    expect(perProcess({ REDIS_URL: 'redis:6379' })).toEqual([]);
  });

  it('rejects BACKEND_TYPE=memcache naming the setting and the supported stores', () => {
    expect(() => loadSettings({ BACKEND_TYPE: 'memcache', MEMCACHE_HOST_PORT: 'm:11211' })).toThrow(
      /BACKEND_TYPE: memcache is not supported; the stores are redis .* and memory/,
    );
  });

  it('reads the statsd and Prometheus settings as the reference', () => {
    const d = loadSettings({});
    expect(d.prometheus).toEqual({ port: 9090, path: '/metrics', responseTimeInMilliseconds: false });
    expect(d.extraTags).toEqual({});
    const s = loadSettings({
      EXTRA_TAGS: 'app:ratelimit, zone:eu-1',
      PROMETHEUS_ADDR: '127.0.0.1:19001',
      PROMETHEUS_PATH: '/stats/prometheus',
      PROMETHEUS_MAPPER_YAML: '/etc/statsd-exporter/conf.yaml',
      PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS: 'true',
      STATS_FLUSH_INTERVAL: '1s',
      USE_DOG_STATSD: 'true',
      DISABLE_STATS: 'true',
    });
    expect(s.extraTags).toEqual({ app: 'ratelimit', zone: 'eu-1' });
    expect(s.prometheus).toEqual({
      host: '127.0.0.1',
      port: 19001,
      path: '/stats/prometheus',
      mapperYamlPath: '/etc/statsd-exporter/conf.yaml',
      responseTimeInMilliseconds: true,
    });
    expect([s.statsFlushIntervalMs, s.useDogStatsd, s.disableStats]).toEqual([1000, true, true]);
    expect(loadSettings({ PROMETHEUS_ADDR: '[::1]:9090' }).prometheus).toMatchObject({ host: '::1', port: 9090 });
  });

  it('reads CALENDAR_TIMEZONE as UTC or a fixed offset, UTC by default', () => {
    expect(loadSettings({}).calendarOffsetMs).toBe(0);
    expect(loadSettings({ CALENDAR_TIMEZONE: 'utc' }).calendarOffsetMs).toBe(0);
    expect(loadSettings({ CALENDAR_TIMEZONE: '+05:30' }).calendarOffsetMs).toBe(19_800_000);
    expect(loadSettings({ CALENDAR_TIMEZONE: '-08:00' }).calendarOffsetMs).toBe(-28_800_000);
    expect(loadSettings({ CALENDAR_TIMEZONE: '+23:59' }).calendarOffsetMs).toBe(86_340_000);
  });

  it('treats an empty variable as unset', () => {
    expect(loadSettings({ GRPC_PORT: '', LOG_LEVEL: '' })).toMatchObject({ grpcPort: 8081, logLevel: 'warn' });
  });

  it('lets BACKEND_TYPE=memory win over a REDIS_URL', () => {
    expect(loadSettings({ REDIS_URL: 'redis:6379', BACKEND_TYPE: 'memory' }).backendType).toBe('memory');
  });
});

describe('loadSettings rejects invalid values, naming the variable', () => {
  const invalid: [string, Record<string, string>][] = [
    ['GRPC_PORT', { GRPC_PORT: 'abc' }],
    ['GRPC_PORT', { GRPC_PORT: '70000' }],
    ['GRPC_PORT', { GRPC_PORT: '-1' }],
    ['PORT', { PORT: '8080x' }],
    ['DEBUG_PORT', { DEBUG_PORT: '1.5' }],
    ['STATSD_PORT', { STATSD_PORT: '65536' }],
    ['GRPC_MAX_MESSAGE_BYTES', { GRPC_MAX_MESSAGE_BYTES: '10' }],
    ['GRPC_TRANSPORT', { GRPC_TRANSPORT: 'quic' }],
    ['GRPC_REFLECTION', { GRPC_REFLECTION: 'off' }],
    ['GRPC_REFLECTION_MAX_STREAMS', { GRPC_REFLECTION_MAX_STREAMS: '0' }],
    ['GRPC_REFLECTION_MAX_STREAMS_PER_CONNECTION', { GRPC_REFLECTION_MAX_STREAMS_PER_CONNECTION: 'many' }],
    ['GRPC_REFLECTION_MAX_REQUEST_BYTES', { GRPC_REFLECTION_MAX_REQUEST_BYTES: '4k' }],
    ['GRPC_REFLECTION_MAX_REQUESTS_PER_STREAM', { GRPC_REFLECTION_MAX_REQUESTS_PER_STREAM: '-5' }],
    ['GRPC_REFLECTION_IDLE_TIMEOUT', { GRPC_REFLECTION_IDLE_TIMEOUT: '30' }],
    ['GRPC_REFLECTION_IDLE_TIMEOUT', { GRPC_REFLECTION_IDLE_TIMEOUT: '0' }],
    ['GRPC_SERVER_USE_TLS', { GRPC_SERVER_USE_TLS: 'maybe' }],
    ['GRPC_SERVER_TLS_CERT', { GRPC_SERVER_USE_TLS: 'true' }],
    ['GRPC_SERVER_TLS_KEY', { GRPC_SERVER_USE_TLS: 'true', GRPC_SERVER_TLS_CERT: '/c.pem' }],
    ['LOG_LEVEL', { LOG_LEVEL: 'verbose' }],
    ['GRPC_MAX_CONNECTION_AGE', { GRPC_MAX_CONNECTION_AGE: '24' }],
    ['GRPC_MAX_CONNECTION_AGE_GRACE', { GRPC_MAX_CONNECTION_AGE_GRACE: '1 hour' }],
    ['REDIS_TIMEOUT', { REDIS_TIMEOUT: '10s5' }],
    ['EXTRA_TAGS', { EXTRA_TAGS: 'novalue' }],
    ['EXTRA_TAGS', { EXTRA_TAGS: 'bad-name:x' }],
    ['PROMETHEUS_ADDR', { PROMETHEUS_ADDR: '9090' }],
    ['PROMETHEUS_ADDR', { PROMETHEUS_ADDR: ':99999' }],
    ['STATS_FLUSH_INTERVAL', { STATS_FLUSH_INTERVAL: 'often' }],
    ['STATS_FLUSH_INTERVAL', { STATS_FLUSH_INTERVAL: '0' }],
    ['USE_DOG_STATSD', { USE_DOG_STATSD: 'yes' }],
    ['DISABLE_STATS', { DISABLE_STATS: 'yes' }],
    ['GRPC_CLIENT_TLS_SAN', { GRPC_TRANSPORT: 'grpc-js', GRPC_CLIENT_TLS_SAN: 'envoy.mesh' }],
    ['LOCAL_CACHE_SIZE_IN_BYTES', { LOCAL_CACHE_SIZE_IN_BYTES: 'big' }],
    ['RUNTIME_IGNOREDOTFILES', { RUNTIME_IGNOREDOTFILES: 'yes' }],
    ['RUNTIME_WATCH_ROOT', { RUNTIME_WATCH_ROOT: 'no' }],
    ['BACKEND_TYPE', { BACKEND_TYPE: 'memcache' }],
    ['REDIS_URL', { BACKEND_TYPE: 'redis' }],
    ['REDIS_TYPE', { REDIS_URL: 'r:6379', REDIS_TYPE: 'ring' }],
    ['REDIS_SOCKET_TYPE', { REDIS_URL: 'r:6379', REDIS_SOCKET_TYPE: 'udp' }],
    ['REDIS_TLS', { REDIS_URL: 'r:6379', REDIS_TLS: 'on' }],
    ['REDIS_TLS_SKIP_HOSTNAME_VERIFICATION', { REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: 'sure' }],
    ['STORE_TIMEOUT_MS', { STORE_TIMEOUT_MS: '0' }],
    ['STORE_FAILURE_POLICY', { STORE_FAILURE_POLICY: 'ignore' }],
    ['MEMORY_MAX_KEYS', { MEMORY_MAX_KEYS: '0' }],
    ['LOCAL_DENIAL_CACHE_MAX_KEYS', { LOCAL_DENIAL_CACHE_MAX_KEYS: '-1' }],
    ['DEFAULT_ALGORITHM', { DEFAULT_ALGORITHM: 'gcra' }],
    ['COUNT_DENIED_REQUESTS', { COUNT_DENIED_REQUESTS: 'y' }],
    ['SHADOW_MODE', { SHADOW_MODE: 'enabled' }],
    ['NEAR_LIMIT_RATIO', { NEAR_LIMIT_RATIO: '1.5' }],
    ['NEAR_LIMIT_RATIO', { NEAR_LIMIT_RATIO: 'high' }],
    ['LIMIT_RESPONSE_HEADERS_ENABLED', { LIMIT_RESPONSE_HEADERS_ENABLED: 'yes' }],
    ['LIMIT_LIMIT_HEADER', { LIMIT_LIMIT_HEADER: 'Rate Limit' }],
    ['LIMIT_REMAINING_HEADER', { LIMIT_REMAINING_HEADER: 'Remaining:' }],
    ['LIMIT_RESET_HEADER', { LIMIT_RESET_HEADER: 'Reset\n' }],
    ['LIMIT_DRAFT_HEADERS_ENABLED', { LIMIT_DRAFT_HEADERS_ENABLED: '2' }],
    ['USE_STATSD', { USE_STATSD: 'nope' }],
    ['USE_PROMETHEUS', { USE_PROMETHEUS: 'nope' }],
    ['WORKERS', { WORKERS: '0' }],
    ['WORKERS', { WORKERS: 'many' }],
    ['WORKERS', { WORKERS: '2' }],
    ['SHUTDOWN_GRACE_MS', { SHUTDOWN_GRACE_MS: '-5' }],
    ['WARM_UP_CALLS', { WARM_UP_CALLS: '-1' }],
    ['WARM_UP_CALLS', { WARM_UP_CALLS: 'lots' }],
    ['CALENDAR_TIMEZONE', { CALENDAR_TIMEZONE: 'Europe/Paris' }],
    ['CALENDAR_TIMEZONE', { CALENDAR_TIMEZONE: '+5:30' }],
    ['CALENDAR_TIMEZONE', { CALENDAR_TIMEZONE: '+24:00' }],
    ['CALENDAR_TIMEZONE', { CALENDAR_TIMEZONE: '-08:60' }],
    ['OVERRIDES_FILE', { REDIS_URL: 'r:6379', OVERRIDES_FILE: '/var/lib/overrides' }],
    ['OVERRIDES_SYNC_INTERVAL', { OVERRIDES_SYNC_INTERVAL: '2s' }],
    ['OVERRIDES_SYNC_INTERVAL', { OVERRIDES_SYNC_INTERVAL: '5ms' }],
    ['OVERRIDES_SYNC_INTERVAL', { OVERRIDES_SYNC_INTERVAL: 'soon' }],
    ['OVERRIDES_MAX', { OVERRIDES_MAX: '0' }],
    ['OVERRIDES_MAX_BYTES', { OVERRIDES_MAX_BYTES: '1000' }],
    ['OVERRIDES_MAX_BODY_BYTES', { OVERRIDES_MAX_BODY_BYTES: '100' }],
    ['OVERRIDES_MAX_BODY_BYTES', { OVERRIDES_MAX_BODY_BYTES: '4096', HTTP_JSON_BUFFER_BYTES: '2048', HTTP_JSON_MAX_BODY_BYTES: '1024' }],
    ['OVERRIDES_MAX_REQUESTS_PER_SECOND', { OVERRIDES_MAX_REQUESTS_PER_SECOND: '0' }],
  ];

  it.each(invalid)('%s rejects %j', (variable, env) => {
    let caught: unknown;
    try {
      loadSettings(env);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(SettingsError);
    expect((caught as SettingsError).variable).toBe(variable);
    expect((caught as SettingsError).message).toContain(variable);
  });
});

describe('limits of the listeners and the statsd queue', () => {
  it('has bounded defaults for every listener', () => {
    const s = loadSettings({});
    expect(s.grpcMaxConnections).toBe(10_000);
    expect(s.httpLimits).toEqual({
      maxConnections: 1_000,
      headersTimeoutMs: 10_000,
      requestTimeoutMs: 10_000,
      jsonMaxBodyBytes: 1024 * 1024,
      jsonBufferBytes: 16 * 1024 * 1024,
      jsonWithoutClientCert: false,
    });
    expect(s.statsdMaxQueuedBytes).toBe(1024 * 1024);
  });

  it('reads the HTTP_*, GRPC_MAX_CONNECTIONS and STATSD_MAX_QUEUED_BYTES settings', () => {
    const s = loadSettings({
      GRPC_MAX_CONNECTIONS: '50',
      HTTP_MAX_CONNECTIONS: '20',
      HTTP_HEADERS_TIMEOUT_MS: '2000',
      HTTP_REQUEST_TIMEOUT_MS: '3000',
      HTTP_JSON_MAX_BODY_BYTES: '4096',
      HTTP_JSON_BUFFER_BYTES: '65536',
      HTTP_JSON_ALLOW_WITHOUT_CLIENT_CERT: 'true',
      STATSD_MAX_QUEUED_BYTES: '8192',
    });
    expect([s.grpcMaxConnections, s.statsdMaxQueuedBytes]).toEqual([50, 8192]);
    expect(s.httpLimits).toEqual({
      maxConnections: 20,
      headersTimeoutMs: 2000,
      requestTimeoutMs: 3000,
      jsonMaxBodyBytes: 4096,
      jsonBufferBytes: 65536,
      jsonWithoutClientCert: true,
    });
  });

  it('refuses a request deadline shorter than the header deadline, and a /json budget smaller than one body', () => {
    expect(() => loadSettings({ HTTP_HEADERS_TIMEOUT_MS: '5000', HTTP_REQUEST_TIMEOUT_MS: '1000' })).toThrow(/HTTP_REQUEST_TIMEOUT_MS: must be at least/);
    expect(() => loadSettings({ HTTP_JSON_MAX_BODY_BYTES: '65536', HTTP_JSON_BUFFER_BYTES: '4096' })).toThrow(/HTTP_JSON_BUFFER_BYTES: must be at least/);
    expect(() => loadSettings({ GRPC_MAX_CONNECTIONS: '0' })).toThrow(/GRPC_MAX_CONNECTIONS/);
  });

  it('refuses GRPC_CLIENT_TLS_CACERT without GRPC_SERVER_USE_TLS=true: client certificates need TLS', () => {
    expect(() => loadSettings({ GRPC_CLIENT_TLS_CACERT: '/certs/ca.pem' })).toThrow(SettingsError);
    expect(() => loadSettings({ GRPC_CLIENT_TLS_CACERT: '/certs/ca.pem' })).toThrow(/GRPC_CLIENT_TLS_CACERT: requires GRPC_SERVER_USE_TLS=true/);
    const tls = { GRPC_SERVER_USE_TLS: 'true', GRPC_SERVER_TLS_CERT: '/c.pem', GRPC_SERVER_TLS_KEY: '/k.pem', GRPC_CLIENT_TLS_CACERT: '/ca.pem' };
    expect(loadSettings(tls).grpcTls.clientCaPath).toBe('/ca.pem');
  });
});

test('gRPC server reflection is on by default, with its caps; GRPC_REFLECTION=false turns it off', () => {
  expect(loadSettings({}).grpcReflection).toEqual({
    enabled: true,
    maxStreams: 100,
    maxStreamsPerConnection: 4,
    maxRequestBytes: 4096,
    maxRequestsPerStream: 1000,
    idleTimeoutMs: 30_000,
  });
  expect(
    loadSettings({
      GRPC_REFLECTION: 'false',
      GRPC_REFLECTION_MAX_STREAMS: '3',
      GRPC_REFLECTION_MAX_STREAMS_PER_CONNECTION: '2',
      GRPC_REFLECTION_MAX_REQUEST_BYTES: '512',
      GRPC_REFLECTION_MAX_REQUESTS_PER_STREAM: '7',
      GRPC_REFLECTION_IDLE_TIMEOUT: '1m',
    }).grpcReflection,
  ).toEqual({ enabled: false, maxStreams: 3, maxStreamsPerConnection: 2, maxRequestBytes: 512, maxRequestsPerStream: 7, idleTimeoutMs: 60_000 });
});

describe('regions (REGION, GLOBAL_REDIS_*, REGION_*, GLOBAL_*)', () => {
  const REGION_ENV = { REDIS_URL: 'redis-eu:6379', REGION: 'eu-west.1_a', GLOBAL_REDIS_URL: 'global:6379' };

  it('has no region group without REGION', () => {
    expect(loadSettings({}).regions).toBeUndefined();
    expect(loadSettings({ REDIS_URL: 'r:6379' }).regions).toBeUndefined();
  });

  it('reads the region with its defaults, frozen, the global store as REDIS_* would be read', () => {
    const s = loadSettings(REGION_ENV);
    expect(s.regions).toEqual({
      region: 'eu-west.1_a',
      syncIntervalMs: 1_000,
      ttlMs: 5_000,
      timeoutMs: 2_000,
      fallback: 'split',
      redis: {
        variablePrefix: 'GLOBAL_REDIS_',
        type: 'single',
        socketType: 'tcp',
        url: 'global:6379',
        auth: undefined,
        sentinelAuth: undefined,
        timeoutMs: undefined,
        tls: false,
        tlsCaCertPath: undefined,
        tlsClientCertPath: undefined,
        tlsClientKeyPath: undefined,
        tlsSkipHostnameVerification: false,
      },
    });
    expect(Object.isFrozen(s.regions)).toBe(true);
    expect(Object.isFrozen(s.regions?.redis)).toBe(true);
    // The counters' Redis is untouched by the global one's variables.
    expect(s.redis).toMatchObject({ variablePrefix: 'REDIS_', url: 'redis-eu:6379', type: 'single', tls: false });
  });

  it('reads every GLOBAL_REDIS_* connection setting and the region timing', () => {
    const s = loadSettings({
      ...REGION_ENV,
      GLOBAL_REDIS_TYPE: 'sentinel',
      GLOBAL_REDIS_URL: 'mymaster,10.0.0.1:26379',
      GLOBAL_REDIS_AUTH: 'app:secret',
      GLOBAL_REDIS_SENTINEL_AUTH: 'sentinel-secret',
      GLOBAL_REDIS_TIMEOUT: '750ms',
      GLOBAL_REDIS_TLS: 'true',
      GLOBAL_REDIS_TLS_CACERT: '/ca.pem',
      GLOBAL_REDIS_TLS_CLIENT_CERT: '/c.pem',
      GLOBAL_REDIS_TLS_CLIENT_KEY: '/c.key',
      GLOBAL_REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: 'true',
      GLOBAL_REDIS_SOCKET_TYPE: 'tcp',
      REGION_SYNC_INTERVAL: '500ms',
      REGION_TTL: '1500ms',
      GLOBAL_STORE_TIMEOUT: '300ms',
      GLOBAL_FALLBACK: 'DENY',
    });
    expect(s.regions).toMatchObject({ syncIntervalMs: 500, ttlMs: 1_500, timeoutMs: 300, fallback: 'deny' });
    expect(s.regions?.redis).toEqual({
      variablePrefix: 'GLOBAL_REDIS_',
      type: 'sentinel',
      socketType: 'tcp',
      url: 'mymaster,10.0.0.1:26379',
      auth: 'app:secret',
      sentinelAuth: 'sentinel-secret',
      timeoutMs: 750,
      tls: true,
      tlsCaCertPath: '/ca.pem',
      tlsClientCertPath: '/c.pem',
      tlsClientKeyPath: '/c.key',
      tlsSkipHostnameVerification: true,
    });
    expect(s.redis).toMatchObject({ type: 'single', auth: undefined, tls: false, timeoutMs: undefined });
  });

  it('accepts the bounds of REGION, REGION_SYNC_INTERVAL and REGION_TTL', () => {
    expect(loadSettings({ ...REGION_ENV, REGION: 'r'.repeat(64) }).regions?.region).toHaveLength(64);
    expect(loadSettings({ ...REGION_ENV, REGION_SYNC_INTERVAL: '100ms', REGION_TTL: '300ms' }).regions).toMatchObject({ syncIntervalMs: 100, ttlMs: 300 });
    expect(loadSettings({ ...REGION_ENV, REGION_SYNC_INTERVAL: '1m', REGION_TTL: '3m' }).regions).toMatchObject({ syncIntervalMs: 60_000, ttlMs: 180_000 });
  });

  const invalid: [string, Record<string, string>, string][] = [
    ['GLOBAL_REDIS_URL', { REDIS_URL: 'r:6379', REGION: 'eu' }, 'required with REGION'],
    ['REGION', { REDIS_URL: 'r:6379', GLOBAL_REDIS_URL: 'g:6379' }, 'required with GLOBAL_REDIS_URL'],
    ['REGION', { ...REGION_ENV, REGION: 'eu west' }, 'only letters, digits'],
    ['REGION', { ...REGION_ENV, REGION: 'eu{1}' }, 'only letters, digits'],
    ['REGION', { ...REGION_ENV, REGION: 'é' }, 'only letters, digits'],
    ['REGION', { ...REGION_ENV, REGION: 'r'.repeat(65) }, 'at most 64 bytes, got 65'],
    ['REGION', { REGION: 'eu', GLOBAL_REDIS_URL: 'g:6379' }, 'requires BACKEND_TYPE=redis'],
    ['REGION_SYNC_INTERVAL', { ...REGION_ENV, REGION_SYNC_INTERVAL: '99ms' }, 'from 100ms to 60s'],
    ['REGION_SYNC_INTERVAL', { ...REGION_ENV, REGION_SYNC_INTERVAL: '61s' }, 'from 100ms to 60s'],
    ['REGION_SYNC_INTERVAL', { ...REGION_ENV, REGION_SYNC_INTERVAL: 'often' }, 'expected a duration'],
    ['REGION_TTL', { ...REGION_ENV, REGION_SYNC_INTERVAL: '2s' }, 'at least three times REGION_SYNC_INTERVAL (2000 ms), got 5000 ms'],
    ['REGION_TTL', { ...REGION_ENV, REGION_TTL: '2999ms' }, 'at least three times REGION_SYNC_INTERVAL (1000 ms), got 2999 ms'],
    ['REGION_TTL', { ...REGION_ENV, REGION_TTL: '2h' }, 'at most 1h'],
    ['GLOBAL_STORE_TIMEOUT', { ...REGION_ENV, GLOBAL_STORE_TIMEOUT: '5ms' }, 'from 10ms to 60s'],
    ['GLOBAL_STORE_TIMEOUT', { ...REGION_ENV, GLOBAL_STORE_TIMEOUT: 'soon' }, 'expected a duration'],
    ['GLOBAL_FALLBACK', { ...REGION_ENV, GLOBAL_FALLBACK: 'local' }, 'expected one of split, allow, deny'],
    ['GLOBAL_REDIS_TYPE', { ...REGION_ENV, GLOBAL_REDIS_TYPE: 'ring' }, 'expected one of single, sentinel, cluster'],
    ['GLOBAL_REDIS_TLS', { ...REGION_ENV, GLOBAL_REDIS_TLS: 'on' }, 'expected true or false'],
    ['GLOBAL_REDIS_TIMEOUT', { ...REGION_ENV, GLOBAL_REDIS_TIMEOUT: '10s5' }, 'expected a duration'],
    ['GLOBAL_REDIS_SOCKET_TYPE', { ...REGION_ENV, GLOBAL_REDIS_SOCKET_TYPE: 'udp' }, 'expected one of tcp, unix'],
    // Without REGION, the variables that mean something only with it stop the start rather than do nothing.
    ['REGION_SYNC_INTERVAL', { REGION_SYNC_INTERVAL: '2s' }, 'only with REGION and GLOBAL_REDIS_URL'],
    ['GLOBAL_FALLBACK', { GLOBAL_FALLBACK: 'deny' }, 'only with REGION and GLOBAL_REDIS_URL'],
    ['GLOBAL_REDIS_AUTH', { GLOBAL_REDIS_AUTH: 'secret' }, 'only with REGION and GLOBAL_REDIS_URL'],
  ];

  it.each(invalid)('%s rejects %j', (variable, env, detail) => {
    let caught: unknown;
    try {
      loadSettings(env);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(SettingsError);
    expect((caught as SettingsError).variable).toBe(variable);
    expect((caught as SettingsError).message).toContain(`invalid setting ${variable}: `);
    expect((caught as SettingsError).message).toContain(detail);
  });

  it('reads REGION_SYNC_INTERVAL on its own, as `slidegate validate` does', () => {
    expect(regionSyncInterval({})).toBe(DEFAULT_REGION_SYNC_INTERVAL_MS);
    expect(regionSyncInterval({ REGION_SYNC_INTERVAL: '2s' })).toBe(2_000);
    expect(() => regionSyncInterval({ REGION_SYNC_INTERVAL: '50ms' })).toThrow('invalid setting REGION_SYNC_INTERVAL');
  });
});
