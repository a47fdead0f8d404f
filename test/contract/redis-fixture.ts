import type { RedisType } from '../../src/settings/settings';
import type { ReplicaExchange } from '../../src/limiter/replica-exchange';
import type { Store } from '../../src/limiter/store';
import { connectBackend, sleep } from '../helpers/redis';

/**
 * The contract suite's fixture for a Redis deployment: start it, connect a RedisStore (and the
 * RedisExchange on its connection), and let real
 * time pass for `advance` (decisions use Redis `TIME`, which no test can move).
 */
export function redisFixture(
  type: RedisType,
  start: () => Promise<{ readonly url: string; stop(): Promise<void> }>,
): () => Promise<{ store: Store; exchange: ReplicaExchange; advance(ms: number): Promise<void>; close(): Promise<void> }> {
  return async () => {
    const deployment = await start();
    let store: Store;
    let exchange: ReplicaExchange;
    try {
      ({ store, exchange } = await connectBackend({ type, url: deployment.url }));
    } catch (err) {
      await deployment.stop();
      throw err;
    }
    return {
      store,
      exchange,
      advance: (ms: number) => sleep(ms),
      close: async () => {
        await store.close();
        await deployment.stop();
      },
    };
  };
}
