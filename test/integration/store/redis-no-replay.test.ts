import { connect, createServer, type Server, type Socket } from 'node:net';
import Redis from 'ioredis';
import type { CounterRequest } from '../../../src/limiter/store';
import { StoreUnavailableError } from '../../../src/limiter/store';
import { createRedisClient, type RedisTarget } from '../../../src/store/redis/connection';
import { RedisStore } from '../../../src/store/redis/redis-store';
import { rawCommand, sleep, startCluster, startRedis, waitUntil, type RedisClusterSetup, type RedisServer } from '../../helpers/redis';

/**
 * A call whose connection drops after Redis ran its script but before the answer came back may or
 * may not have been charged: it must fail (UNAVAILABLE), never be sent again, for a second send
 * charges it twice. A proxy in front of every node cuts the connection at the worst moment (the
 * script's answer in hand) for a deterministic case; then connections killed at random
 * (CLIENT KILL) under load on a 3-master cluster, every charge counted.
 */

const HOST = '127.0.0.1';
const HOUR = 3_600_000;

/** Forwards to a Redis port; when armed, drops the connection on the next script answer instead of passing it on. */
class CuttingProxy {
  cuts = 0;
  private readonly sockets = new Set<Socket>();

  private constructor(
    private readonly server: Server,
    readonly port: number,
  ) {}

  static async start(target: number, shared: { armed: number }): Promise<CuttingProxy> {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, HOST, resolve));
    const proxy = new CuttingProxy(server, (server.address() as { port: number }).port);
    server.on('connection', (client) => proxy.pipe(client, target, shared));
    return proxy;
  }

  private pipe(client: Socket, target: number, shared: { armed: number }): void {
    const upstream = connect(target, HOST);
    this.sockets.add(client).add(upstream);
    let scriptSent = false;
    client.on('data', (chunk) => {
      if (/evalsha|eval/i.test(chunk.toString('latin1'))) scriptSent = true;
      upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      // A DECIDE answer is a bulk string: Redis has run the script and charged the call.
      if (scriptSent && shared.armed > 0 && chunk[0] === 0x24 /* $ */) {
        shared.armed--;
        this.cuts++;
        client.destroy();
        upstream.destroy();
        return;
      }
      client.write(chunk);
    });
    const close = (): void => {
      client.destroy();
      upstream.destroy();
      this.sockets.delete(client);
      this.sockets.delete(upstream);
    };
    client.on('close', close).on('error', close);
    upstream.on('close', close).on('error', close);
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise((resolve) => this.server.close(resolve));
  }
}

const counter = (key: string, hits = 1): CounterRequest => ({ key, limit: 1_000, windowMs: HOUR, algorithm: 'fixed_window', hits });

/** Charges so far on `key`'s counter, read through the store (a check of 0 hits). */
async function charges(store: RedisStore, key: string): Promise<number> {
  const [d] = await store.decide([counter(key, 0)]);
  return 1_000 - d.remaining;
}

async function healthy(store: RedisStore): Promise<RedisStore> {
  await waitUntil('the store to connect', async () => store.isHealthy(), 10_000, 20);
  return store;
}

// One cluster for the file: each case connects its own store, under a key prefix of its own.
let cluster: RedisClusterSetup;
beforeAll(async () => {
  cluster = await startCluster({ masters: 3 });
});
afterAll(async () => {
  await cluster?.stop();
});

describe('a call whose connection drops after its script ran is charged once and fails', () => {
  const shared = { armed: 0 };
  let proxies: CuttingProxy[] = [];

  afterEach(async () => {
    shared.armed = 0;
    await Promise.all(proxies.map((p) => p.stop()));
    proxies = [];
  });

  /** Sends one call with the cut armed; expects it to fail, then counts its charges. */
  async function cutOnce(store: RedisStore, key: string): Promise<{ failure: unknown; charged: number }> {
    expect(await store.decide([counter(key)])).toMatchObject([{ allowed: true, remaining: 999 }]);
    shared.armed = 1;
    const failure = await store.decide([counter(key)]).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(shared.armed).toBe(0);
    shared.armed = 0;
    // A re-send would come 50 ms after the cut; give it time to land before counting.
    await sleep(300);
    await waitUntil('the store to answer again', async () => (await charges(store, key)) >= 0, 5_000, 50);
    return { failure, charged: (await charges(store, key)) - 1 };
  }

  describe('on a 3-master cluster', () => {
    let store: RedisStore;

    afterAll(async () => {
      await store?.close();
    });

    it('fails the call with UNAVAILABLE and charges it exactly once (no re-send on a new connection)', async () => {
      proxies = await Promise.all(cluster.nodes.map((n) => CuttingProxy.start(n.port, shared)));
      // The nodes announce their own ports; natMap sends every connection through its node's proxy.
      const natMap = Object.fromEntries(cluster.nodes.map((n, i) => [n.address, { host: HOST, port: proxies[i].port }]));
      const target: RedisTarget = { type: 'cluster', nodes: proxies.map((p) => ({ host: HOST, port: p.port })), options: { natMap, redisOptions: {} } };
      store = await healthy(new RedisStore({ client: createRedisClient(target), timeoutMs: 2_000, keyPrefix: 'cut:' }));
      for (const key of ['cut-a', 'cut-b', 'cut-c']) {
        const { failure, charged } = await cutOnce(store, `${key}|${Date.now()}`);
        expect(failure).toBeInstanceOf(StoreUnavailableError);
        expect(charged).toBe(1);
      }
      expect(proxies.reduce((sum, p) => sum + p.cuts, 0)).toBe(3);
    });
  });

  describe('on a single redis', () => {
    let redis: RedisServer;
    let store: RedisStore;

    beforeAll(async () => {
      redis = await startRedis();
    });

    afterAll(async () => {
      await store?.close();
      await redis?.stop();
    });

    it('fails the call with UNAVAILABLE and charges it exactly once', async () => {
      proxies = [await CuttingProxy.start(redis.port, shared)];
      const target: RedisTarget = { type: 'single', options: { host: HOST, port: proxies[0].port } };
      store = await healthy(new RedisStore({ client: createRedisClient(target), timeoutMs: 2_000, keyPrefix: 'cut:' }));
      const { failure, charged } = await cutOnce(store, `cut-single|${Date.now()}`);
      expect(failure).toBeInstanceOf(StoreUnavailableError);
      expect(charged).toBe(1);
    });
  });
});

describe('a 3-master cluster whose client connections are killed under load', () => {
  let store: RedisStore;

  beforeAll(async () => {
    const target: RedisTarget = { type: 'cluster', nodes: cluster.nodes.map((n) => ({ host: HOST, port: n.port })), options: { redisOptions: {} } };
    store = await healthy(new RedisStore({ client: createRedisClient(target), timeoutMs: 1_000, keyPrefix: 'kill:' }));
  });

  afterAll(async () => {
    await store?.close();
  });

  it('charges no call more than once, and every answered call exactly once', async () => {
    const run = Date.now().toString(36);
    const calls = 1_500;
    const answered = new Set<number>();
    let failed = 0;
    let stop = false;
    let kills = 0;
    // Every 25 ms one node, in turn, drops every client connection (the killer's own excepted).
    const killer = (async () => {
      while (!stop) {
        await rawCommand(cluster.nodes[kills % cluster.nodes.length].port, 'CLIENT KILL TYPE normal', 1_000).catch(() => '');
        kills++;
        await sleep(25);
      }
    })();
    // 30 callers, each sending its calls one after another: ~30 calls on the wire at any time.
    let next = 0;
    await Promise.all(
      Array.from({ length: 30 }, async () => {
        while (next < calls) {
          const i = next++;
          try {
            await store.decide([counter(`${run}|${i}`)]);
            answered.add(i);
          } catch (err) {
            expect(err).toBeInstanceOf(StoreUnavailableError);
            failed++;
            await sleep(2);
          }
        }
      }),
    );
    stop = true;
    await killer;
    expect(kills).toBeGreaterThan(5);
    expect(answered.size).toBeGreaterThan(calls / 10);
    expect(failed).toBeGreaterThan(0);

    // Counted on the nodes themselves: every key this run wrote, and its count.
    const counts = new Map<number, number>();
    for (const node of cluster.nodes) {
      const direct = new Redis({ host: HOST, port: node.port });
      try {
        const keys = await direct.keys(`kill:{${run}|*`);
        // One GET each (the keys lie in many slots), in one round trip.
        const pipeline = direct.pipeline();
        for (const key of keys) pipeline.get(key);
        const values = (await pipeline.exec()) ?? [];
        keys.forEach((key, k) => {
          const i = Number(/\|(\d+)\}/.exec(key)![1]);
          counts.set(i, (counts.get(i) ?? 0) + Number(values[k][1]));
        });
      } finally {
        direct.disconnect();
      }
    }
    const twice = [...counts.values()].filter((c) => c > 1).length;
    const answeredCharged = [...answered].filter((i) => counts.get(i) === 1).length;
    expect({ twice, answeredCharged }).toEqual({ twice: 0, answeredCharged: answered.size });
  });
});
