import type { RedisType } from '../../src/settings/settings';
import type { Store } from '../../src/limiter/store';
import { connectStore, sleep } from '../helpers/redis';

/**
 * The contract suite's fixture for a Redis deployment: start it, connect a RedisStore, and let real
 * time pass for `advance` (decisions use Redis `TIME`, which no test can move).
 */
export function redisFixture(
  type: RedisType,
  start: () => Promise<{ readonly url: string; stop(): Promise<void> }>,
): () => Promise<{ store: Store; advance(ms: number): Promise<void>; close(): Promise<void> }> {
  return async () => {
    const deployment = await start();
    let store: Store;
    try {
      store = await connectStore({ type, url: deployment.url });
    } catch (err) {
      await deployment.stop();
      throw err;
    }
    return {
      store,
      advance: (ms: number) => sleep(ms),
      close: async () => {
        await store.close();
        await deployment.stop();
      },
    };
  };
}
