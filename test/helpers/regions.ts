import { worstSpan as worstSpanBetween } from '../../bench/lease-accuracy';
import { startRegionsWorld, type RegionsWorld } from '../../bench/regions-world';
import type { RlsClient } from './grpc-client';
import { startReplica, type Replica } from './lease-replicas';
import { startRedis, type RedisServer } from './redis';

/**
 * Regions on this machine for the region tests: bench/regions-world.ts's world (a global
 * redis-server, per region its own, a delay proxy in front of the global one and replicas of the
 * built service, dist/src/main.js, one process each), its replicas started with this harness's
 * RLS clients and log lines (./lease-replicas.ts), its redis-servers with their process handles
 * (./redis.ts). The handles cut a region off, freeze the global store, and kill a replica or a
 * region's Redis, as the region tests need.
 */

export interface WorldOptions {
  /** The regions' names (REGION), e.g. ['eu', 'us', 'ap']. */
  readonly regions: readonly string[];
  readonly replicasPerRegion: number;
  /** One-way delay between each region and the global store, ms, each direction. */
  readonly delayMs: number;
  /** The config file (YAML), the same on every replica. */
  readonly config: string;
  /** More environment for every replica; it wins over the harness's own (REGION_SYNC_INTERVAL, LEASE_*, GLOBAL_FALLBACK...). */
  readonly env?: Readonly<Record<string, string>>;
}

/** One running world (bench/regions-world.ts's, on this harness's Redis and replicas) and the handles the region tests use. */
export interface World extends RegionsWorld<RedisServer, Replica> {
  /** The RLS client of a replica. */
  client(region: string, index: number): RlsClient;
  /** Freezes the global redis-server (SIGSTOP): every region's calls to it hang. */
  pauseGlobal(): void;
  /** Thaws it (SIGCONT). */
  resumeGlobal(): void;
  /** SIGKILL a replica; its handle answers no more. */
  killReplica(region: string, index: number): Promise<void>;
  /** Starts a killed (or running: it is killed first) replica again under its REPLICA_ID; resolves once it is SERVING. */
  restartReplica(region: string, index: number): Promise<Replica>;
  /** SIGKILL the region's redis-server (nothing persisted). */
  killRegionRedis(region: string): Promise<void>;
  /** Starts it again, empty, on the same port. */
  restartRegionRedis(region: string): Promise<void>;
}

/**
 * The harness's environment of every replica: one process each (WORKERS=1: a worker would be a
 * replica of its own), quick leases as the lease tests run them, JSON logs (./lease-replicas.ts).
 */
const REPLICA_ENV: Readonly<Record<string, string>> = Object.freeze({
  BACKEND_TYPE: 'redis',
  WORKERS: '1',
  STORE_TIMEOUT_MS: '250',
  LEASE_SYNC_INTERVAL: '100ms',
  LEASE_TTL: '1s',
});

/** The config file's name in every replica's config directory. */
const CONFIG_FILE = 'regions.yaml';

/** Starts a world; resolves once every replica is SERVING. On a failure, whatever was started is stopped. */
export async function startWorld(options: WorldOptions): Promise<World> {
  const world = await startRegionsWorld<RedisServer, Replica>(
    { regions: options.regions, replicasPerRegion: options.replicasPerRegion, delayMs: options.delayMs, env: { ...REPLICA_ENV, ...options.env } },
    {
      startRedis: () => startRedis(),
      startReplica: (region, index, env) => startReplica({ name: `${region}-${index}`, config: { [CONFIG_FILE]: options.config }, env }),
    },
  );
  const kill = async (r: Replica): Promise<void> => {
    const child = r.run.child;
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await r.run.exited;
    }
  };
  return {
    ...world,
    client: (region, index) => world.replica(region, index).client,
    pauseGlobal: () => world.global.server.pause(),
    resumeGlobal: () => world.global.server.resume(),
    killReplica: (region, index) => kill(world.replica(region, index)),
    restartReplica: async (region, index) => {
      await kill(world.replica(region, index));
      // Its stop() then closes its client and removes its config directory; the process is gone already.
      return world.restartReplica(region, index);
    },
    killRegionRedis: (region) => world.regionRedis(region).server.kill(),
    restartRegionRedis: (region) => world.regionRedis(region).server.start(),
    stop: world.stop,
  };
}

/**
 * The most of `timestampsMs` (any order) in any span of `windowMs` (t - windowMs, t]: what was
 * admitted in the worst window, against a limit's bound.
 */
export function worstSpan(timestampsMs: readonly number[], windowMs: number): number {
  if (!(windowMs > 0)) throw new Error(`windowMs must be above 0, got ${windowMs}`);
  const sorted = [...timestampsMs].sort((a, b) => a - b);
  return worstSpanBetween(sorted, windowMs, -Infinity, Infinity).count;
}
