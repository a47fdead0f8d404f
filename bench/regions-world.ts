import { startDelayProxy, type DelayProxy } from './delay-proxy';

/**
 * Regions on this machine: a global redis-server, and per region its own redis-server, a delay
 * proxy in front of the global one (the distance between the region and the global store, each
 * way) and replicas on the region's Redis with REGION and GLOBAL_REDIS_URL (the proxy) set. How a
 * Redis and a replica are started is the caller's (`WorldParts`): the accuracy runs
 * (bench/region-accuracy.ts) start the built service as the benchmarks do, the region tests
 * (test/helpers/regions.ts) with their own handles on each process.
 */

/** A redis-server the world started: where it listens, and how it is stopped. */
export interface WorldRedis {
  readonly port: number;
  stop(): Promise<void>;
}

/** A replica the world started. */
export interface WorldReplica {
  stop(): Promise<void>;
}

export interface WorldParts<R extends WorldRedis, P extends WorldReplica> {
  /** Starts a redis-server on a free port (the global one, and one per region). */
  startRedis(): Promise<R>;
  /**
   * Starts replica `index` of `region` on `redis` (its region's) with `env`: REDIS_URL, REGION,
   * GLOBAL_REDIS_URL, REPLICA_ID and the options' env, which the replica's own settings go under.
   * Resolves once it serves.
   */
  startReplica(region: string, index: number, env: Readonly<Record<string, string>>, redis: R): Promise<P>;
}

export interface RegionsWorldOptions {
  /** The regions' names (REGION), e.g. ['eu', 'us', 'ap']. */
  readonly regions: readonly string[];
  readonly replicasPerRegion: number;
  /** One-way delay between each region and the global store, ms, each direction. */
  readonly delayMs: number;
  /** More environment for every replica; it wins over the world's own (REDIS_URL, REGION, GLOBAL_REDIS_URL, REPLICA_ID). */
  readonly env?: Readonly<Record<string, string>>;
}

/** One running world. Replicas are numbered from 0 within their region. */
export interface RegionsWorld<R extends WorldRedis, P extends WorldReplica> {
  readonly regions: readonly string[];
  /** The global redis-server (reached by the replicas only through the proxies). */
  readonly global: R;
  /** A region's own redis-server (REDIS_URL of its replicas). */
  regionRedis(region: string): R;
  /** The proxy between a region and the global store. */
  proxy(region: string): DelayProxy;
  /** The replica `index` of `region` as it runs now (a restarted one is the new process). */
  replica(region: string, index: number): P;
  /** Every replica, region by region, or those of one region. */
  replicas(region?: string): readonly P[];
  /** Cuts the region off the global store: its connections stay open, nothing passes either way (see ./delay-proxy.ts). */
  partition(region: string): void;
  /** Reconnects it: what was held goes through in order. */
  heal(region: string): void;
  /** Stops a replica (WorldReplica.stop) and starts it again under its REPLICA_ID; resolves once it serves. */
  restartReplica(region: string, index: number): Promise<P>;
  /** Stops every process and proxy the world started, the last started first. */
  stop(): Promise<void>;
}

/** Replicas per region at most: each is a process of the service. */
const MAX_REPLICAS_PER_REGION = 16;

/** Starts a world; resolves once every replica serves. On a failure, whatever was started is stopped. */
export async function startRegionsWorld<R extends WorldRedis, P extends WorldReplica>(
  options: RegionsWorldOptions,
  parts: WorldParts<R, P>,
): Promise<RegionsWorld<R, P>> {
  if (new Set(options.regions).size !== options.regions.length || options.regions.length === 0) {
    throw new Error(`regions must be distinct and at least one: ${JSON.stringify(options.regions)}`);
  }
  if (!Number.isInteger(options.replicasPerRegion) || options.replicasPerRegion < 1 || options.replicasPerRegion > MAX_REPLICAS_PER_REGION) {
    throw new Error(`replicasPerRegion must be 1..${MAX_REPLICAS_PER_REGION}, got ${options.replicasPerRegion}`);
  }
  const stoppers: (() => Promise<void>)[] = [];
  const stopAll = async (): Promise<void> => {
    const all = stoppers.splice(0).reverse();
    for (const stop of all) await stop().catch(() => undefined);
  };
  try {
    const global = await parts.startRedis();
    stoppers.push(() => global.stop());
    const redises = new Map<string, R>();
    const proxies = new Map<string, DelayProxy>();
    for (const region of options.regions) {
      const redis = await parts.startRedis();
      stoppers.push(() => redis.stop());
      redises.set(region, redis);
      const proxy = await startDelayProxy({ targetPort: global.port, delayMs: options.delayMs });
      stoppers.push(() => proxy.close());
      proxies.set(region, proxy);
    }
    const of = <T>(map: ReadonlyMap<string, T>, region: string): T => {
      const v = map.get(region);
      if (v === undefined) throw new Error(`no region ${JSON.stringify(region)} (the world has ${options.regions.join(', ')})`);
      return v;
    };
    const start = (region: string, index: number): Promise<P> =>
      parts.startReplica(
        region,
        index,
        {
          REDIS_URL: `127.0.0.1:${of(redises, region).port}`,
          REGION: region,
          GLOBAL_REDIS_URL: of(proxies, region).address,
          REPLICA_ID: `${region}-${index}`,
          ...options.env,
        },
        of(redises, region),
      );
    const running = new Map<string, P[]>();
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

    const replica = (region: string, index: number): P => {
      const r = of(running, region)[index];
      if (r === undefined) throw new Error(`no replica ${index} in ${region} (it has ${options.replicasPerRegion})`);
      return r;
    };
    return {
      regions: options.regions,
      global,
      regionRedis: (region) => of(redises, region),
      proxy: (region) => of(proxies, region),
      replica,
      replicas: (region) => (region === undefined ? options.regions.flatMap((r) => of(running, r)) : of(running, region)),
      partition: (region) => of(proxies, region).partition(),
      heal: (region) => of(proxies, region).heal(),
      restartReplica: async (region, index) => {
        await replica(region, index).stop();
        const fresh = await start(region, index);
        of(running, region)[index] = fresh;
        return fresh;
      },
      stop: stopAll,
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
}
