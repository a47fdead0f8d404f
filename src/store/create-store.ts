import type { Logger } from '../log';
import type { FailurePolicy, Settings } from '../settings/settings';
import { DenialCache } from './denial-cache';
import { FailurePolicyStore } from './failure-policy';
import { MemoryStore, type MemoryStoreOptions } from './memory-store';
import { createRedisClient, describeRedisTarget, parseRedisTarget } from './redis/connection';
import { RedisExchange } from './redis/redis-exchange';
import { RedisStore } from './redis/redis-store';
import { MemoryExchange } from './memory-exchange';
import { MemoryOverrides } from './memory-overrides';
import { RedisOverrides } from './redis/redis-overrides';
import type { OverridesStore } from '../limiter/overrides-store';
import type { ReplicaExchange } from '../limiter/replica-exchange';
import type { Store } from '../limiter/store';

/** Observers of the store's rare events, for metrics; each is called synchronously and must be cheap. */
export interface StoreHooks {
  /** A failed store call (or cluster refund), by kind: 'timeout' | 'disconnected' | 'error' | 'refund'. */
  readonly onStoreError?: (kind: string) => void;
  /** A call answered from the local denial cache without a store round trip. */
  readonly onCacheHit?: () => void;
  /** A call answered by STORE_FAILURE_POLICY instead of the store. */
  readonly onFallback?: (policy: FailurePolicy) => void;
}

/** The counters, what replicas tell each other, and the runtime overrides, on one backend. */
export interface Backend {
  readonly store: Store;
  readonly exchange: ReplicaExchange;
  /** Runtime overrides (Redis: in the store; memory: in the process, and OVERRIDES_FILE when set). Closed with the store. */
  readonly overrides: OverridesStore;
  /** Whether other processes share it (Redis): then the exchange reaches other replicas. */
  readonly shared: boolean;
}

/**
 * Builds the Store and the ReplicaExchange that BACKEND_TYPE selects. The only place that knows
 * every adapter; async so that an adapter may connect or register scripts before the first request.
 */
export async function createStore(settings: Settings, logger: Logger, hooks: StoreHooks = {}): Promise<Backend> {
  switch (settings.backendType) {
    case 'memory':
      logger.debug({ maxKeys: settings.memoryMaxKeys, maxBytes: settings.memoryMaxBytes }, 'using the in-memory store');
      return {
        store: new MemoryStore({ maxKeys: settings.memoryMaxKeys, maxBytes: settings.memoryMaxBytes, reservations: memoryReservations(settings) }),
        exchange: new MemoryExchange(),
        overrides: await MemoryOverrides.open({ file: settings.overrides.file }),
        shared: false,
      };
    case 'redis':
      return createRedisBackedStore(settings, logger, hooks);
    default: {
      // Every BACKEND_TYPE has a case: the compiler points here when one is added.
      const backend: never = settings.backendType;
      throw new Error(`backend "${String(backend)}" is not available in this build`);
    }
  }
}

function memoryReservations(settings: Settings): NonNullable<MemoryStoreOptions['reservations']> {
  const r = settings.reservations;
  return { ttlMs: r.ttlMs, maxPerKey: r.maxPerKey, maxKeyBytes: r.maxKeyBytes, maxEntries: r.maxEntries, maxBytes: r.maxBytes };
}

// How long start-up waits for Redis before serving anyway (NOT_SERVING until it connects).
const REDIS_STARTUP_WAIT_MS = 3_000;

const ROUND_TRIP_SAMPLES = 5;

/** A per-call deadline under twice the measured round trip fails calls that Redis answers: say so at start. */
export function warnIfTimeoutBelowRoundTrip(roundTripMs: number | undefined, storeTimeoutMs: number, logger: Logger): void {
  if (roundTripMs === undefined || storeTimeoutMs >= 2 * roundTripMs) return;
  logger.warn(
    `STORE_TIMEOUT_MS=${storeTimeoutMs} is below twice the measured Redis round trip (${roundTripMs.toFixed(1)} ms, median of ${ROUND_TRIP_SAMPLES} PINGs): many calls will time out; raise STORE_TIMEOUT_MS`,
  );
}

/** Whether the settings keep a local denial cache (both of its bounds above 0). */
export function denialCacheEnabled(settings: Pick<Settings, 'backendType' | 'denialCacheMaxKeys' | 'denialCacheMaxBytes'>): boolean {
  return settings.backendType === 'redis' && settings.denialCacheMaxKeys > 0 && settings.denialCacheMaxBytes > 0;
}

/**
 * Redis, wrapped (inside out) in the denial cache (LOCAL_DENIAL_CACHE_MAX_KEYS and LOCAL_CACHE_SIZE_IN_BYTES, 0 = off) and the
 * failure policy (STORE_FAILURE_POLICY). Cached denials are still answered while Redis is down.
 * clearCache() on the result empties the denial cache (call it after a config reload).
 */
async function createRedisBackedStore(settings: Settings, logger: Logger, hooks: StoreHooks): Promise<Backend> {
  const target = describeRedisTarget(settings.redis);
  // REDIS_TIMEOUT is the reference's dial timeout; each call's deadline is STORE_TIMEOUT_MS.
  const client = createRedisClient(parseRedisTarget(settings.redis), { connectTimeoutMs: settings.redis.timeoutMs });
  const exchange = new RedisExchange({ client, keyPrefix: settings.cacheKeyPrefix, timeoutMs: settings.storeTimeoutMs, onError: hooks.onStoreError });
  const redis = new RedisStore({
    client,
    keyPrefix: settings.cacheKeyPrefix,
    timeoutMs: settings.storeTimeoutMs,
    onError: hooks.onStoreError,
    reservationTtlMs: settings.reservations.ttlMs,
    reservationsPerKey: settings.reservations.maxPerKey,
    reservationKeyBytes: settings.reservations.maxKeyBytes,
    onConnectionChange: (state, err) => {
      if (state === 'ready') logger.info({ redis: target }, 'redis connected');
      else logger.warn({ redis: target, err: err?.message }, 'redis connection lost; reconnecting');
    },
  });
  if (!(await redis.whenReady(REDIS_STARTUP_WAIT_MS))) logger.warn({ redis: target }, 'redis not reachable yet; still trying');
  else warnIfTimeoutBelowRoundTrip(await redis.pingRoundTripMs(ROUND_TRIP_SAMPLES), settings.storeTimeoutMs, logger);
  let store: Store = redis;
  if (denialCacheEnabled(settings)) {
    store = new DenialCache({ store, maxKeys: settings.denialCacheMaxKeys, maxBytes: settings.denialCacheMaxBytes, onHit: hooks.onCacheHit });
  }
  if (settings.storeFailurePolicy !== 'error') {
    const policy = settings.storeFailurePolicy;
    store = new FailurePolicyStore({
      store,
      policy,
      fallback: policy === 'local' ? new MemoryStore({ maxKeys: settings.memoryMaxKeys, maxBytes: settings.memoryMaxBytes }) : undefined,
      onFallback: hooks.onFallback,
    });
  }
  logger.debug(
    { redis: target, policy: settings.storeFailurePolicy, denialCache: { maxKeys: settings.denialCacheMaxKeys, maxBytes: settings.denialCacheMaxBytes } },
    'using the redis store',
  );
  const overrides = new RedisOverrides({ client, keyPrefix: settings.cacheKeyPrefix, timeoutMs: settings.storeTimeoutMs, onError: hooks.onStoreError });
  return { store, exchange, overrides, shared: true };
}
