import { readFileSync } from 'node:fs';
import type { ConnectionOptions } from 'node:tls';
import Redis, { Cluster, type ClusterOptions, type RedisOptions } from 'ioredis';
import type { RedisSettings } from '../../settings/settings';
import { SettingsError } from '../../settings/settings';

/**
 * REDIS_* (or GLOBAL_REDIS_*: errors name the variables of settings.variablePrefix) settings -> ioredis client. Accepted REDIS_URL forms (as the reference server, plus URLs):
 *   single    `host:port`, `[::1]:6379`, `redis://[user:pass@]host:port[/db]`, `rediss://...` (TLS);
 *             with REDIS_SOCKET_TYPE=unix, a socket path (or `unix:///path`).
 *   sentinel  `mastername,host:port,host:port` (each sentinel may also be a redis:// URL).
 *   cluster   `host:port,host:port,...` (seed nodes; each may also be a redis:// URL).
 * REDIS_AUTH is `password` or `user:password` (split at the first ':') and wins over URL credentials.
 */

export type { RedisSettings };

export interface HostPort {
  readonly host: string;
  readonly port: number;
}

/** The parsed connection target; credentials live only in `options`. */
export type RedisTarget =
  | { readonly type: 'single'; readonly options: RedisOptions }
  | { readonly type: 'sentinel'; readonly masterName: string; readonly options: RedisOptions }
  | { readonly type: 'cluster'; readonly nodes: readonly HostPort[]; readonly options: ClusterOptions };

export type RedisClient = Redis | Cluster;

/** Client tuning: fail fast while disconnected, reconnect with capped backoff. */
export interface ClientTuning {
  /** Upper bound of the reconnect backoff, ms. */
  readonly maxReconnectDelayMs?: number;
  /** Connect (and ready check) timeout, ms. */
  readonly connectTimeoutMs?: number;
}

const DEFAULT_PORT = 6379;

interface Endpoint extends HostPort {
  readonly username?: string;
  readonly password?: string;
  readonly db?: number;
  readonly tls: boolean;
}

function parseEndpoint(raw: string, variable: string): Endpoint {
  const s = raw.trim();
  if (/^rediss?:\/\//i.test(s)) {
    let url: URL;
    try {
      url = new URL(s);
    } catch {
      throw new SettingsError(variable, `not a valid URL: "${maskUrl(s)}"`);
    }
    const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
    if (!host) throw new SettingsError(variable, `missing host in "${maskUrl(s)}"`);
    const port = url.port ? Number(url.port) : DEFAULT_PORT;
    const dbPath = url.pathname.replace(/^\//, '');
    if (dbPath && !/^\d+$/.test(dbPath)) throw new SettingsError(variable, `database must be a number, got "${dbPath}"`);
    return {
      host,
      port,
      username: url.username ? decodeURIComponent(url.username) : undefined,
      password: url.password ? decodeURIComponent(url.password) : undefined,
      db: dbPath ? Number(dbPath) : undefined,
      tls: url.protocol.toLowerCase() === 'rediss:',
    };
  }
  const m = /^(?:\[([^\]]+)\]|([^:\s]+)):(\d{1,5})$/.exec(s) ?? /^(?:\[([^\]]+)\]|([^:\s]+))$/.exec(s);
  if (!m) throw new SettingsError(variable, `expected host:port, got "${s}"`);
  const port = m[3] === undefined ? DEFAULT_PORT : Number(m[3]);
  if (port < 1 || port > 65535) throw new SettingsError(variable, `port out of range in "${s}"`);
  return { host: m[1] ?? m[2], port, tls: false };
}

function parseAuth(auth: string | undefined): { username?: string; password?: string } {
  if (auth === undefined) return {};
  const i = auth.indexOf(':');
  return i < 0 ? { password: auth } : { username: auth.slice(0, i) || undefined, password: auth.slice(i + 1) };
}

/** The variable `suffix` of these settings: `REDIS_URL`, or `GLOBAL_REDIS_URL` for the global store's. */
function variable(settings: RedisSettings, suffix: string): string {
  return (settings.variablePrefix ?? 'REDIS_') + suffix;
}

function tlsOptions(settings: RedisSettings, readFile: (path: string) => Buffer): ConnectionOptions {
  const read = (path: string | undefined, variable: string): Buffer | undefined => {
    if (path === undefined) return undefined;
    try {
      return readFile(path);
    } catch (err) {
      throw new SettingsError(variable, `cannot read "${path}": ${(err as Error).message}`);
    }
  };
  const tls: ConnectionOptions = {
    ca: read(settings.tlsCaCertPath, variable(settings, 'TLS_CACERT')),
    cert: read(settings.tlsClientCertPath, variable(settings, 'TLS_CLIENT_CERT')),
    key: read(settings.tlsClientKeyPath, variable(settings, 'TLS_CLIENT_KEY')),
  };
  // The certificate chain is still verified; only the name check is skipped (IP-addressed nodes).
  if (settings.tlsSkipHostnameVerification) tls.checkServerIdentity = () => undefined;
  return tls;
}

function splitList(url: string): string[] {
  return url
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
}

/** Parses the REDIS_* (or GLOBAL_REDIS_*) settings. Throws SettingsError naming the variable. Reads TLS files (start-up only). */
export function parseRedisTarget(settings: RedisSettings, options: { readFile?: (path: string) => Buffer } = {}): RedisTarget {
  const readFile = options.readFile ?? ((p: string) => readFileSync(p));
  const url = settings.url?.trim();
  const urlVariable = variable(settings, 'URL');
  const typeVariable = variable(settings, 'TYPE');
  if (!url) throw new SettingsError(urlVariable, 'required for the redis backend');
  const auth = parseAuth(settings.auth);

  if (settings.type === 'single') {
    if (settings.socketType === 'unix') {
      const path = url.replace(/^unix:\/\//i, '');
      if (!path.startsWith('/') && !path.startsWith('.')) throw new SettingsError(urlVariable, `expected a socket path, got "${url}"`);
      return { type: 'single', options: { path, ...credentials({}, auth) } };
    }
    const parts = splitList(url);
    if (parts.length !== 1) throw new SettingsError(urlVariable, `${typeVariable}=single takes one address (use sentinel or cluster for lists)`);
    const ep = parseEndpoint(parts[0], urlVariable);
    const useTls = settings.tls || ep.tls;
    return {
      type: 'single',
      options: {
        host: ep.host,
        port: ep.port,
        db: ep.db,
        ...credentials(ep, auth),
        ...(useTls ? { tls: tlsOptions(settings, readFile) } : {}),
      },
    };
  }

  if (settings.type === 'sentinel') {
    const [masterName, ...rest] = splitList(url);
    if (!masterName || rest.length === 0 || masterName.includes(':')) {
      throw new SettingsError(urlVariable, `${typeVariable}=sentinel expects "mastername,host:port[,host:port...]"`);
    }
    const sentinels = rest.map((s) => parseEndpoint(s, urlVariable));
    const useTls = settings.tls || sentinels.some((s) => s.tls);
    const tls = useTls ? tlsOptions(settings, readFile) : undefined;
    return {
      type: 'sentinel',
      masterName,
      options: {
        name: masterName,
        sentinels: sentinels.map(({ host, port }) => ({ host, port })),
        ...credentials({}, auth),
        ...sentinelCredentials(parseAuth(settings.sentinelAuth)),
        // Follow +switch-master announcements instead of waiting for the old master's socket to die.
        failoverDetector: true,
        ...(tls ? { tls, sentinelTLS: tls, enableTLSForSentinelMode: true } : {}),
      },
    };
  }

  const nodes = splitList(url).map((s) => parseEndpoint(s, urlVariable));
  if (nodes.length === 0) throw new SettingsError(urlVariable, `${typeVariable}=cluster expects "host:port[,host:port...]"`);
  const useTls = settings.tls || nodes.some((n) => n.tls);
  return {
    type: 'cluster',
    nodes: nodes.map(({ host, port }) => ({ host, port })),
    options: {
      redisOptions: {
        ...credentials(nodes[0], auth),
        ...(useTls ? { tls: tlsOptions(settings, readFile) } : {}),
      },
      // TLS certificates name the configured hosts; keep them rather than the announced IPs.
      ...(useTls ? { dnsLookup: (address: string, cb: (err: null, address: string) => void) => cb(null, address) } : {}),
    },
  };
}

function credentials(
  ep: { username?: string; password?: string },
  auth: { username?: string; password?: string },
): {
  username?: string;
  password?: string;
} {
  if (auth.password !== undefined) return { username: auth.username, password: auth.password };
  return { username: ep.username, password: ep.password };
}

// REDIS_SENTINEL_AUTH: the Sentinel nodes' own `password` or `user:password`, as REDIS_AUTH is the master's.
function sentinelCredentials(auth: { username?: string; password?: string }): { sentinelUsername?: string; sentinelPassword?: string } {
  return auth.password === undefined ? {} : { sentinelUsername: auth.username, sentinelPassword: auth.password };
}

function maskUrl(s: string): string {
  return s.replace(/^(rediss?:\/\/)[^@/]*@/i, '$1***@');
}

/** A log-safe description of the target: type and addresses, credentials masked as `***`. */
export function describeRedisTarget(settings: RedisSettings): string {
  const url = settings.url ?? '';
  const where = splitList(url).map(maskUrl).join(',');
  const auth = settings.auth === undefined ? '' : ' auth=***';
  const tls = settings.tls || /rediss:\/\//i.test(url) ? ' tls' : '';
  return `redis ${settings.type} ${settings.socketType === 'unix' ? 'unix:' : ''}${where}${auth}${tls}`;
}

/** Reconnect delay: exponential from 50 ms, capped, with jitter so replicas do not reconnect in step. */
export function reconnectDelayMs(attempt: number, capMs: number): number {
  const base = Math.min(capMs, 50 * 2 ** Math.min(attempt - 1, 10));
  return Math.round(base * (0.8 + Math.random() * 0.2));
}

/** What a node connection that closed rejects a written command with: not retried by the cluster, read as disconnected by the store. */
export const CLOSED_AFTER_WRITE = 'Connection is closed after the command was sent (it may have run)';

// ioredis's message for a command whose connection closed (or was never ready).
const CONNECTION_CLOSED = 'Connection is closed.';

const guarded = new WeakSet<Redis>();

/**
 * A node connection of a cluster that closes rejects every command it holds with the same
 * "Connection is closed.", those it had only queued (never sent) and those it had written (Redis
 * may have run them), and the cluster re-sends them all after retryDelayOnFailover. A re-sent
 * script that had run charges its call twice, so the written ones get CLOSED_AFTER_WRITE instead,
 * which the cluster does not retry: the call fails (UNAVAILABLE), charged at most once. The
 * queued ones keep the retry. This relies on ioredis's node connection keeping its written
 * commands in `commandQueue` and failing both queues through `flushQueue(error, options)`;
 * test/integration/store/redis-no-replay.test.ts fails if that changes.
 */
function failWrittenOnClose(node: Redis): void {
  if (guarded.has(node)) return;
  guarded.add(node);
  const internal = node as unknown as { flushQueue(error: Error, options?: { offlineQueue?: boolean; commandQueue?: boolean }): void };
  const flush = internal.flushQueue.bind(node);
  internal.flushQueue = (error, options) => {
    if (error.message !== CONNECTION_CLOSED || options?.commandQueue === false) {
      flush(error, options);
      return;
    }
    if (options?.offlineQueue !== false) flush(error, { offlineQueue: true, commandQueue: false });
    flush(new Error(CLOSED_AFTER_WRITE), { offlineQueue: false, commandQueue: true });
  };
}

/**
 * Builds the ioredis client. Commands fail at once while disconnected (no offline queue), a command
 * interrupted by a disconnect is rejected rather than replayed (replaying a script would charge twice;
 * on a cluster see failWrittenOnClose), and concurrent commands share round trips (auto-pipelining).
 */
export function createRedisClient(target: RedisTarget, tuning: ClientTuning = {}): RedisClient {
  const cap = tuning.maxReconnectDelayMs ?? 1_000;
  const common = {
    enableAutoPipelining: true,
    enableOfflineQueue: false,
    maxRetriesPerRequest: 0,
    autoResendUnfulfilledCommands: false,
    connectTimeout: tuning.connectTimeoutMs ?? 2_000,
    // A closed connection's socket is destroyed after this long if the peer never finishes closing it.
    disconnectTimeout: 200,
    // RESP2 keeps older and managed Redis versions working; the scripts return plain arrays.
    protocol: 2 as const,
    disableClientInfo: true,
    connectionName: 'slidegate',
  };
  if (target.type === 'cluster') {
    const cluster = new Cluster(
      target.nodes.map((n) => ({ host: n.host, port: n.port })),
      {
        ...target.options,
        enableAutoPipelining: true,
        enableOfflineQueue: false,
        clusterRetryStrategy: (times: number) => reconnectDelayMs(times, cap),
        slotsRefreshTimeout: 1_000,
        // Re-sends a command that failed with "Connection is closed." (a node connection not ready,
        // or closed before the command was written); one written before the close is failed
        // instead (failWrittenOnClose). MOVED, ASK, TRYAGAIN and CLUSTERDOWN come from a node that
        // ran nothing: their retries are safe too.
        retryDelayOnFailover: 50,
        retryDelayOnClusterDown: 50,
        retryDelayOnTryAgain: 20,
        redisOptions: {
          ...target.options.redisOptions,
          maxRetriesPerRequest: 0,
          autoResendUnfulfilledCommands: false,
          connectTimeout: common.connectTimeout,
          protocol: 2,
          disableClientInfo: true,
          connectionName: 'slidegate',
        },
      },
    );
    // The seed connections exist already (the constructor connects); later ones are announced.
    for (const node of cluster.nodes('all')) failWrittenOnClose(node);
    cluster.on('+node', failWrittenOnClose);
    return cluster;
  }
  return new Redis({
    ...target.options,
    ...common,
    retryStrategy: (times: number) => reconnectDelayMs(times, cap),
    sentinelRetryStrategy: (times: number) => reconnectDelayMs(times, cap),
  });
}
