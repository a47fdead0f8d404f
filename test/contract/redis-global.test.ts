import { silentLogger } from '../../src/log';
import { loadSettings } from '../../src/settings/settings';
import { createGlobalStore, type GlobalStore } from '../../src/store/create-global-store';
import { startRedis, sleep, waitUntil, type RedisServer } from '../helpers/redis';
import { describeSettlementContract } from './settlement-contract';

/**
 * The global store (GLOBAL_REDIS_*, regions) is the Redis adapters on their own connection: the
 * settlement contract run through it, two regions' stores (two connections) on one global Redis.
 * The adapters' other ports are the counters' store's, whose contract runs on redis-single.test.ts.
 */

let redis: RedisServer;
const stores: GlobalStore[] = [];

beforeAll(async () => {
  redis = await startRedis();
  for (const region of ['eu', 'us']) {
    const settings = loadSettings({ REDIS_URL: '127.0.0.1:1', REGION: region, GLOBAL_REDIS_URL: redis.url, GLOBAL_STORE_TIMEOUT: '2s' });
    const global = createGlobalStore({ regions: settings.regions!, logger: silentLogger() });
    stores.push(global);
  }
  await waitUntil('the global stores to connect', async () => stores.every((s) => s.isHealthy()), 10_000, 20);
});

afterAll(async () => {
  await Promise.all(stores.map((s) => s.close()));
  await redis?.stop();
});

describe('the redis (global) store contract', () => {
  describeSettlementContract(() => ({ store: stores[0].store, peer: stores[1].store, advance: (ms) => sleep(ms), nowMs: () => Date.now() }));
});
