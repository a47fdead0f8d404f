import { TestAdsServer, type RateLimitConfigMessage } from '../../helpers/ads-server';
import { descriptor } from '../../helpers/grpc-client';
import { overridesClient, tokensFile, within } from '../../helpers/overrides';
import { startTestService, type TestService } from '../../helpers/service';

/** Runtime overrides outlive the rules an xDS control plane pushes (CONFIG_TYPE=GRPC_XDS_SOTW). */

const NODE = 'envoy-ratelimit';
const DOMAIN = 'default/eg/http';
const ROUTE = 'httproute/default/backend/rule/0';
const TOKEN = 'ops-token-0123456789abcdef';

function routeLimit(perMinute: number): RateLimitConfigMessage {
  return {
    name: DOMAIN,
    domain: DOMAIN,
    descriptors: [{ key: ROUTE, value: ROUTE, descriptors: [{ key: 'user', rateLimit: { unit: 'MINUTE', requestsPerUnit: perMinute } }] }],
  };
}

async function limitOf(svc: TestService, user: string): Promise<number | undefined> {
  const reply = await svc.client.shouldRateLimit({
    domain: DOMAIN,
    descriptors: [
      descriptor(
        [
          [ROUTE, ROUTE],
          ['user', user],
        ],
        { hitsAddend: { value: 0 } },
      ),
    ],
  });
  return reply.statuses[0].currentLimit?.requestsPerUnit;
}

describe('runtime overrides beside xDS', () => {
  let ads: TestAdsServer;
  let svc: TestService;
  let tokens: ReturnType<typeof tokensFile>;

  beforeAll(async () => {
    ads = new TestAdsServer();
    const port = await ads.start();
    ads.setSnapshot(NODE, '1', [routeLimit(3)]);
    tokens = tokensFile({ ops: TOKEN });
    svc = await startTestService({
      env: {
        CONFIG_TYPE: 'GRPC_XDS_SOTW',
        CONFIG_GRPC_XDS_SERVER_URL: `127.0.0.1:${port}`,
        CONFIG_GRPC_XDS_NODE_ID: NODE,
        ADMIN_TOKENS_FILE: tokens.path,
      },
    });
    await within('the first snapshot', 5_000, async () => (await limitOf(svc, 'probe')) === 3);
  });
  afterAll(async () => {
    await svc?.stop();
    await ads?.stop();
    tokens?.remove();
  });

  it('leaves an override in place when the control plane pushes new rules', async () => {
    const api = overridesClient(svc.service.httpPort, TOKEN);
    const put = await api.put({
      domain: DOMAIN,
      descriptor: [
        { key: ROUTE, value: ROUTE },
        { key: 'user', value: 'vip' },
      ],
      rate_limit: { unit: 'minute', requests_per_unit: 500 },
    });
    expect(put.status).toBe(200);
    expect(await limitOf(svc, 'vip')).toBe(500);
    ads.setSnapshot(NODE, '2', [routeLimit(9)]);
    await within('the pushed rules', 5_000, async () => (await limitOf(svc, 'someone')) === 9);
    expect(await limitOf(svc, 'vip')).toBe(500);
    expect((await api.get(`domain=${encodeURIComponent(DOMAIN)}`)).body.overrides).toHaveLength(1);
  });
});
