import { descriptor, grpc, type RlsRequestInput } from '../../helpers/grpc-client';
import { startTestService, type TestService } from '../../helpers/service';

/**
 * The caps on what one request may hold, on the running service: over any of them a call is
 * INVALID_ARGUMENT on both gRPC transports and 400 on /json, the error naming the cap and the
 * setting that raises it; at a cap, the call is decided.
 */

const CONFIG = `domain: edge
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: a
    descriptors:
      - key: b
        descriptors:
          - key: c
            rate_limit: {unit: minute, requests_per_unit: 100}
`;

const CAPS = { REQUEST_MAX_DESCRIPTORS: '4', DESCRIPTOR_MAX_ENTRIES: '3', DESCRIPTOR_MAX_KEY_BYTES: '8', DESCRIPTOR_MAX_VALUE_BYTES: '100' };

const user = (value: string) => descriptor([['user', value]]);

/** Requests each over one cap, with the text its error must carry. */
const OVER: readonly [string, RlsRequestInput, string][] = [
  [
    'descriptors',
    { domain: 'edge', descriptors: [1, 2, 3, 4, 5].map((i) => user(`u${i}`)) },
    'descriptors: 5 descriptors, over the cap of 4 (REQUEST_MAX_DESCRIPTORS)',
  ],
  [
    'entries',
    {
      domain: 'edge',
      descriptors: [
        descriptor([
          ['a', '1'],
          ['b', '2'],
          ['c', '3'],
          ['d', '4'],
        ]),
      ],
    },
    'descriptors[0].entries: 4 entries, over the cap of 3 (DESCRIPTOR_MAX_ENTRIES)',
  ],
  [
    'key bytes',
    {
      domain: 'edge',
      descriptors: [
        user('x'),
        descriptor([
          ['user_key', 'x'],
          ['k'.repeat(9), 'x'],
        ]),
      ],
    },
    'descriptors[1].entries[1].key: 9 bytes, over the cap of 8 (DESCRIPTOR_MAX_KEY_BYTES)',
  ],
  // 34 three-byte characters are 102 bytes: the cap is in UTF-8 bytes, not characters.
  [
    'value bytes',
    { domain: 'edge', descriptors: [user('€'.repeat(34))] },
    'descriptors[0].entries[0].value: 102 bytes, over the cap of 100 (DESCRIPTOR_MAX_VALUE_BYTES)',
  ],
];

/** Requests exactly at every cap. */
const AT_CAPS: RlsRequestInput = {
  domain: 'edge',
  descriptors: [
    user('v'.repeat(100)),
    user('€'.repeat(33)),
    descriptor([
      ['a', '1'],
      ['b', '2'],
      ['c', '3'],
    ]),
    descriptor([
      ['user', 'x'],
      ['k'.repeat(8), 'y'],
    ]),
  ],
};

describe.each(['http2', 'grpc-js'])('request caps on the %s transport and /json', (transport) => {
  let svc: TestService;

  beforeAll(async () => {
    svc = await startTestService({ config: { 'edge.yaml': CONFIG }, env: { ...CAPS, GRPC_TRANSPORT: transport } });
  });
  afterAll(() => svc.stop());

  it.each(OVER)('answers a request over the %s cap INVALID_ARGUMENT, naming the cap', async (_cap, request, message) => {
    const err = await svc.client.shouldRateLimit(request).then(
      () => undefined,
      (e: grpc.ServiceError) => e,
    );
    expect(err?.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(err?.details).toBe(message);
    const reply = await fetch(`http://127.0.0.1:${svc.service.httpPort}/json`, { method: 'POST', body: JSON.stringify(request) });
    expect(reply.status).toBe(400);
    expect(await reply.text()).toContain(message);
  });

  it('decides a request at every cap', async () => {
    const res = await svc.client.shouldRateLimit(AT_CAPS);
    expect(res.overallCode).toBe('OK');
    expect(res.statuses.map((s) => s.limitRemaining)).toEqual([99, 99, 99, 0]);
    const reply = await fetch(`http://127.0.0.1:${svc.service.httpPort}/json`, { method: 'POST', body: JSON.stringify(AT_CAPS) });
    expect(reply.status).toBe(200);
  });
});

describe('request caps by default', () => {
  let svc: TestService;

  beforeAll(async () => {
    svc = await startTestService({ config: { 'edge.yaml': CONFIG } });
  });
  afterAll(() => svc.stop());

  it('refuses a 50 KB value (over 16 KiB) and decides a 16 KiB one', async () => {
    const err = await svc.client.shouldRateLimit({ domain: 'edge', descriptors: [user('x'.repeat(50_000))] }).then(
      () => undefined,
      (e: grpc.ServiceError) => e,
    );
    expect(err?.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(err?.details).toBe('descriptors[0].entries[0].value: 50000 bytes, over the cap of 16384 (DESCRIPTOR_MAX_VALUE_BYTES)');
    expect((await svc.client.shouldRateLimit({ domain: 'edge', descriptors: [user('x'.repeat(16_384))] })).overallCode).toBe('OK');
  });
});
