import { startCluster } from '../helpers/redis';
import { describeOverridesContract } from './overrides-contract';
import { redisOverridesFixture } from './redis-fixture';

// Every key of the overrides shares one hash tag: on a Cluster each script runs on the one node
// that owns its slot, whichever node the client first asks.
describeOverridesContract(
  'redis (cluster)',
  redisOverridesFixture('cluster', () => startCluster()),
);
