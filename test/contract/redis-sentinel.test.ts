import type { RedisStore } from '../../src/store/redis-store';
import { connectStore, sleep, startSentinel } from '../helpers/redis';
import { describeStoreContract } from './store-contract';

describeStoreContract('redis (sentinel)', async () => {
  const setup = await startSentinel();
  let store: RedisStore;
  try {
    store = await connectStore({ type: 'sentinel', url: setup.url });
  } catch (err) {
    await setup.stop();
    throw err;
  }
  return {
    store,
    advance: (ms: number) => sleep(ms),
    close: async () => {
      await store.close();
      await setup.stop();
    },
  };
});
