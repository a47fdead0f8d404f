import type { RedisStore } from '../../src/store/redis-store';
import { connectStore, sleep, startCluster } from '../helpers/redis';
import { describeStoreContract } from './store-contract';

// The suite's multi-counter cases use unrelated keys, which land in different slots: they exercise
// the per-slot decide and the refund of the slots that charged.
describeStoreContract('redis (cluster)', async () => {
  const cluster = await startCluster();
  let store: RedisStore;
  try {
    store = await connectStore({ type: 'cluster', url: cluster.url });
  } catch (err) {
    await cluster.stop();
    throw err;
  }
  return {
    store,
    advance: (ms: number) => sleep(ms),
    close: async () => {
      await store.close();
      await cluster.stop();
    },
  };
});
