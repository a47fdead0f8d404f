import { startCluster } from '../helpers/redis';
import { redisFixture } from './redis-fixture';
import { describeStoreContract } from './store-contract';

// The suite's multi-counter cases use unrelated keys, which land in different slots: they exercise
// the per-slot decide and the refund of the slots that charged. The cases that wait for real time
// run on redis-single.test.ts: a counter's window is decided on the one node that holds its key, by
// the same script at that server's TIME.
describeStoreContract(
  'redis (cluster)',
  redisFixture('cluster', () => startCluster()),
  { timePassing: false },
);
