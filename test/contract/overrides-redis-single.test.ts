import { startRedis } from '../helpers/redis';
import { describeOverridesContract } from './overrides-contract';
import { redisOverridesFixture } from './redis-fixture';

describeOverridesContract(
  'redis (single)',
  redisOverridesFixture('single', () => startRedis()),
);
