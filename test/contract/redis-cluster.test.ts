import { startCluster } from '../helpers/redis';
import { redisFixture } from './redis-fixture';
import { describeStoreContract } from './store-contract';

// The suite's multi-counter cases use unrelated keys, which land in different slots: they exercise
// the per-slot decide and the refund of the slots that charged.
describeStoreContract(
  'redis (cluster)',
  redisFixture('cluster', () => startCluster()),
);
