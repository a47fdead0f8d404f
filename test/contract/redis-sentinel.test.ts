import { startSentinel } from '../helpers/redis';
import { redisFixture } from './redis-fixture';
import { describeStoreContract } from './store-contract';

// The master behind the sentinels is a single Redis: the cases that wait for real time run on
// redis-single.test.ts (the same script at that server's TIME), every other case here.
describeStoreContract(
  'redis (sentinel)',
  redisFixture('sentinel', () => startSentinel()),
  { timePassing: false },
);
