import { startSentinel } from '../helpers/redis';
import { redisFixture } from './redis-fixture';
import { describeStoreContract } from './store-contract';

describeStoreContract(
  'redis (sentinel)',
  redisFixture('sentinel', () => startSentinel()),
);
