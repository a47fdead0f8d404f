import { startRedis } from '../helpers/redis';
import { redisFixture } from './redis-fixture';
import { describeStoreContract } from './store-contract';

describeStoreContract(
  'redis (single)',
  redisFixture('single', () => startRedis()),
);
