import { startDelayProxy, type DelayProxy } from '../../bench/delay-proxy';
import { worstSpan as worstSpanBetween } from '../../bench/lease-accuracy';
import type { RlsClient } from './grpc-client';
import { startReplica, type Replica } from './lease-replicas';
import { startRedis, type RedisServer } from './redis';

/**
 * Regions on this machine: a global redis-server, and per region its own redis-server, a delay
 * proxy in front of the global one (the distance between the region and the global store, each
 * way) and replicas of the built service (dist/src/main.js, one process each) on the region's Redis
 * with REGION and GLOBAL_REDIS_URL set. The handles cut a region off, freeze the global store, and
 * kill a replica or a region's Redis, as the region tests need.
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

/** One running world. Replicas are numbered from 0 within their region. */
export interface World {
  readonly regions: readonly string[];
  /** The global redis-server (reached by the replicas only through the proxies). */
  readonly global: RedisServer;
  /** A region's own redis-server (REDIS_URL of its replicas). */
  regionRedis(region: string): RedisServer;
  /** The proxy between a region and the global store. */
  proxy(region: string): DelayProxy;
  /** The replica `index` of `region` as it runs now (a restarted one is the new process). */
  replica(region: string, index: number): Replica;
  /** Its RLS client. */
  client(region: string, index: number): RlsClient;
  /** Every replica, region by region, or those of one region. */
  replicas(region?: string): readonly Replica[];
  /** Cuts the region off the global store: its connections stay open, nothing passes either way (see bench/delay-proxy.ts). */
  partition(region: string): void;
  /** Reconnects it: what was held goes through in order. */
  heal(region: string): void;
  /** Freezes the global redis-server (SIGSTOP): every region's calls to it hang. */
  pauseGlobal(): void;
  /** Thaws it (SIGCONT). */
  resumeGlobal(): void;
  /** SIGKILL a replica; its handle answers no more. */
  killReplica(region: string, index: number): Promise<void>;
  /** Starts a killed (or running: it is stopped first) replica again under its REPLICA_ID; resolves once it is SERVING. */
  restartReplica(region: string, index: number): Promise<Replica>;
  /** SIGKILL the region's redis-server (nothing persisted). */
  killRegionRedis(region: string): Promise<void>;
  /** Starts it again, empty, on the same port. */
  restartRegionRedis(region: string): Promise<void>;
  /** Stops every process and proxy the world started. */
  stop(): Promise<void>;
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
  if (new Set(options.regions).size !== options.regions.length || options.regions.length === 0) {
    throw new Error(`regions must be distinct and at least one: ${JSON.stringify(options.regions)}`);
  }
  const stoppers: (() => Promise<void>)[] = [];
  const stopAll = async (): Promise<void> => {
    const all = stoppers.splice(0).reverse();
    for (const stop of all) await stop().catch(() => undefined);
  };
  try {
    const global = await startRedis();
    stoppers.push(async () => {
      global.server.resume();
      await global.stop();
    });
    const redises = new Map<string, RedisServer>();
    const proxies = new Map<string, DelayProxy>();
    for (const region of options.regions) {
      const redis = await startRedis();
      stoppers.push(() => redis.stop());
      redises.set(region, redis);
      const proxy = await startDelayProxy({ targetPort: global.port, delayMs: options.delayMs });
      stoppers.push(() => proxy.close());
      proxies.set(region, proxy);
    }
    const envOf = (region: string, index: number): Record<string, string> => ({
      ...REPLICA_ENV,
      REDIS_URL: redises.get(region)!.url,
      REGION: region,
      GLOBAL_REDIS_URL: proxies.get(region)!.address,
      REPLICA_ID: `${region}-${index}`,
      ...options.env,
    });
    const start = (region: string, index: number): Promise<Replica> =>
      startReplica({ name: `${region}-${index}`, config: { [CONFIG_FILE]: options.config }, env: envOf(region, index) });
    const running = new Map<string, Replica[]>();
    stoppers.push(async () => {
      await Promise.all([...running.values()].flat().map((r) => r.stop()));
    });
    const started = await Promise.allSettled(
      options.regions.flatMap((region) => Array.from({ length: options.replicasPerRegion }, (_, i) => start(region, i).then((r) => ({ region, i, r })))),
    );
    for (const region of options.regions) running.set(region, []);
    for (const s of started) if (s.status === 'fulfilled') running.get(s.value.region)![s.value.i] = s.value.r;
    const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed !== undefined) throw failed.reason;

    const of = <T>(map: ReadonlyMap<string, T>, region: string): T => {
      const v = map.get(region);
      if (v === undefined) throw new Error(`no region ${JSON.stringify(region)} (the world has ${options.regions.join(', ')})`);
      return v;
    };
    const replica = (region: string, index: number): Replica => {
      const r = of(running, region)[index];
      if (r === undefined) throw new Error(`no replica ${index} in ${region} (it has ${options.replicasPerRegion})`);
      return r;
    };
    const kill = async (r: Replica): Promise<void> => {
      const child = r.run.child;
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGKILL');
        await r.run.exited;
      }
    };
    return {
      regions: options.regions,
      global,
      regionRedis: (region) => of(redises, region),
      proxy: (region) => of(proxies, region),
      replica,
      client: (region, index) => replica(region, index).client,
      replicas: (region) => (region === undefined ? options.regions.flatMap((r) => of(running, r)) : of(running, region)),
      partition: (region) => of(proxies, region).partition(),
      heal: (region) => of(proxies, region).heal(),
      pauseGlobal: () => global.server.pause(),
      resumeGlobal: () => global.server.resume(),
      killReplica: (region, index) => kill(replica(region, index)),
      restartReplica: async (region, index) => {
        const old = replica(region, index);
        await kill(old);
        // Closes its client and removes its config directory; the process is gone already.
        await old.stop();
        const fresh = await start(region, index);
        of(running, region)[index] = fresh;
        return fresh;
      },
      killRegionRedis: (region) => of(redises, region).server.kill(),
      restartRegionRedis: (region) => of(redises, region).server.start(),
      stop: stopAll,
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
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
