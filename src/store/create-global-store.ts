import type { Logger } from '../log';
import type { RegionSettings } from '../settings/settings';
import type { ReplicaExchange } from '../limiter/replica-exchange';
import type { Settlements, Store } from '../limiter/store';
import { createRedisClient, describeRedisTarget, parseRedisTarget } from './redis/connection';
import { RedisExchange } from './redis/redis-exchange';
import { RedisStore, type RedisErrorKind } from './redis/redis-store';

/**
 * The store every region reaches (GLOBAL_REDIS_*), as the region layer uses it: the same Redis
 * adapters as the counters' store, on their own connection and under their own key prefix. It is
 * never on the decision path: a region syncs with it every REGION_SYNC_INTERVAL, each call within
 * GLOBAL_STORE_TIMEOUT, and reads a failed or late call as a partition.
 */
export interface GlobalStore {
  /** Each region's demand on a global limit, and the documents regions publish to each other (the /regions view). */
  readonly exchange: ReplicaExchange;
  /** What each region admitted, charged to the global counters once per (member, seq) however often it is sent. */
  readonly settlements: Settlements;
  /** The global counters themselves (a check with hits 0 reads one); its deadline is GLOBAL_STORE_TIMEOUT. */
  readonly store: Store;
  /** The global store's address for logs and pages, credentials masked. */
  readonly target: string;
  /** True while the global store answers (connected, and its health probe passing). */
  isHealthy(): boolean;
  /** Closes the connection; every call after it rejects with StoreUnavailableError. */
  close(): Promise<void>;
}

export interface GlobalStoreOptions {
  /** REGION_*, GLOBAL_STORE_TIMEOUT and GLOBAL_REDIS_* (Settings.regions). */
  readonly regions: RegionSettings;
  /** CACHE_KEY_PREFIX: the global store's keys start with it, then GLOBAL_KEY_PREFIX. */
  readonly cacheKeyPrefix?: string;
  readonly logger: Logger;
  /** A failed call to the global store, by kind ('timeout' | 'disconnected' | 'error' | 'refund'), for metrics. */
  readonly onError?: (kind: RedisErrorKind) => void;
}

/**
 * What the global store's keys start with after CACHE_KEY_PREFIX: a global counter is never the
 * same key as a regional one, even when both stores are one Redis (a test, a single-region start).
 */
export const GLOBAL_KEY_PREFIX = 'global:';

/** How long after start a global store that never answered is reported in the log, ms. */
const GLOBAL_STARTUP_WAIT_MS = 3_000;

/**
 * Builds the global store from the region settings, without waiting for it: a global store that is
 * down at start (or later) is logged, never thrown, and the region layer runs as partitioned until
 * it answers. Settings that cannot be used (a bad GLOBAL_REDIS_URL, an unreadable
 * GLOBAL_REDIS_TLS_* file) throw SettingsError naming the variable, at once.
 */
export function createGlobalStore(options: GlobalStoreOptions): GlobalStore {
  const { regions, logger, onError } = options;
  const target = describeRedisTarget(regions.redis);
  const keyPrefix = (options.cacheKeyPrefix ?? '') + GLOBAL_KEY_PREFIX;
  const client = createRedisClient(parseRedisTarget(regions.redis), { connectTimeoutMs: regions.redis.timeoutMs });
  const store = new RedisStore({
    client,
    keyPrefix,
    timeoutMs: regions.timeoutMs,
    onError,
    onConnectionChange: (state, err) => {
      if (state === 'ready') logger.info({ redis: target, region: regions.region }, 'global redis connected');
      else logger.warn({ redis: target, region: regions.region, err: err?.message }, 'global redis connection lost; regions keep their parts until REGION_TTL');
    },
  });
  const exchange = new RedisExchange({ client, keyPrefix, timeoutMs: regions.timeoutMs, onError });
  let closed = false;
  void store.whenReady(GLOBAL_STARTUP_WAIT_MS).then((ready) => {
    if (!ready && !closed)
      logger.warn({ redis: target, region: regions.region }, 'global redis not reachable yet; still trying (the regions run as partitioned)');
  });
  return {
    exchange,
    settlements: store.settlements,
    store,
    target,
    isHealthy: () => store.isHealthy(),
    close: () => {
      closed = true;
      return store.close();
    },
  };
}
