import type { RedisType } from '../../src/settings/settings';
import type { ReplicaExchange } from '../../src/limiter/replica-exchange';
import type { Store } from '../../src/limiter/store';
import { connectBackend, connectedClient, sleep } from '../helpers/redis';
import { RedisOverrides } from '../../src/store/redis/redis-overrides';
import type { OverridesFixture } from './overrides-contract';
import { CONTRACT_RESERVATION_KEY_BYTES, CONTRACT_RESERVATION_TTL_MS, CONTRACT_RESERVATIONS_PER_KEY } from './reservation-contract';

/**
 * The contract suite's fixture for a Redis deployment: start it, connect a RedisStore (and the
 * RedisExchange on its connection), and let real
 * time pass for `advance` (decisions use Redis `TIME`, which no test can move).
 */
export function redisFixture(
  type: RedisType,
  start: () => Promise<{ readonly url: string; stop(): Promise<void> }>,
): () => Promise<{ store: Store; peer: Store; exchange: ReplicaExchange; advance(ms: number): Promise<void>; close(): Promise<void> }> {
  return async () => {
    const deployment = await start();
    const stores: Store[] = [];
    let exchange: ReplicaExchange | undefined;
    try {
      // Two replicas of the service: each its own client on the same deployment.
      for (let i = 0; i < 2; i++) {
        const backend = await connectBackend({
          type,
          url: deployment.url,
          reservationTtlMs: CONTRACT_RESERVATION_TTL_MS,
          reservationsPerKey: CONTRACT_RESERVATIONS_PER_KEY,
          reservationKeyBytes: CONTRACT_RESERVATION_KEY_BYTES,
        });
        stores.push(backend.store);
        exchange ??= backend.exchange;
      }
    } catch (err) {
      await Promise.all(stores.map((s) => s.close()));
      await deployment.stop();
      throw err;
    }
    return {
      store: stores[0],
      peer: stores[1],
      exchange: exchange!,
      advance: (ms: number) => sleep(ms),
      close: async () => {
        await Promise.all(stores.map((s) => s.close()));
        await deployment.stop();
      },
    };
  };
}

/**
 * The overrides contract's fixture for a Redis deployment: two clients (two replicas), and per case
 * a key prefix of its own, so that each case starts from an empty store on the same deployment.
 */
export function redisOverridesFixture(type: RedisType, start: () => Promise<{ readonly url: string; stop(): Promise<void> }>): () => Promise<OverridesFixture> {
  return async () => {
    const deployment = await start();
    const clients = [await connectedClient(type, deployment.url), await connectedClient(type, deployment.url)];
    let n = 0;
    return {
      fresh: async ({ rememberedRemovals }) => {
        const keyPrefix = `contract-${process.pid}-${n++}:`;
        const [store, peer] = clients.map((client) => new RedisOverrides({ client, keyPrefix, timeoutMs: 2_000, rememberedRemovals }));
        return { store, peer };
      },
      close: async () => {
        for (const client of clients) client.disconnect();
        await deployment.stop();
      },
    };
  };
}
