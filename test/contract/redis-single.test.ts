import type { RedisStore } from '../../src/store/redis-store';
import { connectStore, sleep, startRedis } from '../helpers/redis';
import { describeStoreContract } from './store-contract';

describeStoreContract('redis (single)', async () => {
  const redis = await startRedis();
  let store: RedisStore;
  try {
    store = await connectStore({ type: 'single', url: redis.url });
  } catch (err) {
    await redis.stop();
    throw err;
  }
  return {
    store,
    advance: (ms: number) => sleep(ms),
    close: async () => {
      await store.close();
      await redis.stop();
    },
  };
});
