import { descriptor, grpc, grpcCode } from '../../helpers/grpc-client';
import { startSentinel, type SentinelSetup } from '../../helpers/redis';
import { startTestService } from '../../helpers/service';

/**
 * REDIS_SENTINEL_AUTH: Sentinel nodes that require a password of their own (apart from the master's
 * REDIS_AUTH), with a real master, replica and sentinel.
 */

const EDGE = `
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
`;
const request = { domain: 'edge', descriptors: [descriptor([['user', 'sentinel-auth']])] };

let setup: SentinelSetup;

beforeAll(async () => {
  setup = await startSentinel();
  // The sentinel's own password (ACL of its default user); the master keeps none.
  setup.sentinels[0].cli('ACL', 'SETUSER', 'default', 'on', 'resetpass', '>sentinel-secret');
}, 30_000);

afterAll(async () => {
  await setup?.stop();
});

const env = (extra: Record<string, string>) => ({
  BACKEND_TYPE: 'redis',
  REDIS_TYPE: 'sentinel',
  REDIS_URL: setup.url,
  STORE_TIMEOUT_MS: '1000',
  WARM_UP_CALLS: '0',
  ...extra,
});

describe('REDIS_SENTINEL_AUTH', () => {
  it('authenticates to the sentinels and limits through the master they name', async () => {
    const svc = await startTestService({ config: { 'edge.yaml': EDGE }, env: env({ REDIS_SENTINEL_AUTH: 'sentinel-secret' }) });
    try {
      const codes = [];
      for (let i = 0; i < 3; i++) codes.push((await svc.client.shouldRateLimit(request)).overallCode);
      expect(codes).toEqual(['OK', 'OK', 'OVER_LIMIT']);
    } finally {
      await svc.stop();
    }
  }, 20_000);

  it('cannot reach the master without it', async () => {
    const svc = await startTestService({ config: { 'edge.yaml': EDGE }, env: env({}) });
    try {
      expect(await grpcCode(svc.client.shouldRateLimit(request))).toBe(grpc.status.UNAVAILABLE);
    } finally {
      await svc.stop();
    }
  }, 20_000);
});
