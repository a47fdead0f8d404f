import { descriptor, type RlsRequestInput } from '../../helpers/grpc-client';
import { startTestService, type TestService } from '../../helpers/service';

/**
 * RateLimit-* response headers as Envoy receives them: `response_headers_to_add` of a real gRPC
 * ShouldRateLimit reply, with LIMIT_RESPONSE_HEADERS_ENABLED (and the draft fields) switched on.
 * Windows are hours, so reset values are large and never zero; each test uses its own values.
 */

const EDGE = `
domain: edge
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: hour, requests_per_unit: 3}
  - key: team
    rate_limit: {unit: hour, unit_multiplier: 2, requests_per_unit: 100}
`;

let unique = 0;
const fresh = (label: string): string => `${label}-${++unique}-${Date.now()}`;
const req = (...descriptors: RlsRequestInput['descriptors']): RlsRequestInput => ({ domain: 'edge', descriptors });
const asMap = (headers: { key: string; value: string }[]): Record<string, string> => Object.fromEntries(headers.map((h) => [h.key, h.value]));

describe('with LIMIT_RESPONSE_HEADERS_ENABLED', () => {
  let svc: TestService;

  beforeAll(async () => {
    svc = await startTestService({ config: { 'edge.yaml': EDGE }, env: { LIMIT_RESPONSE_HEADERS_ENABLED: 'true' } });
  });

  afterAll(async () => {
    await svc?.stop();
  });

  it('adds the limit, the remaining quota and the reset to an OK reply', async () => {
    const response = await svc.client.shouldRateLimit(req(descriptor([['user', fresh('u')]])));
    expect(response.overallCode).toBe('OK');
    const headers = asMap(response.responseHeadersToAdd);
    expect(Object.keys(headers)).toEqual(['RateLimit-Limit', 'RateLimit-Remaining', 'RateLimit-Reset']);
    expect(headers['RateLimit-Limit']).toBe('3');
    expect(headers['RateLimit-Remaining']).toBe('2');
    const reset = Number(headers['RateLimit-Reset']);
    const status = response.statuses[0]!;
    const resetMs = Number(status.durationUntilReset!.seconds) * 1000 + status.durationUntilReset!.nanos / 1e6;
    expect(reset).toBe(Math.ceil(resetMs / 1000));
    expect(reset).toBeGreaterThan(3600);
  });

  it('adds the headers of the denied descriptor to an OVER_LIMIT reply', async () => {
    const user = fresh('u');
    for (let i = 0; i < 3; i++) await svc.client.shouldRateLimit(req(descriptor([['user', user]])));
    const response = await svc.client.shouldRateLimit(req(descriptor([['team', fresh('t')]]), descriptor([['user', user]])));
    expect(response.overallCode).toBe('OVER_LIMIT');
    const headers = asMap(response.responseHeadersToAdd);
    expect(headers['RateLimit-Limit']).toBe('3');
    expect(headers['RateLimit-Remaining']).toBe('0');
    expect(Number(headers['RateLimit-Reset'])).toBeGreaterThan(0);
  });

  it('speaks for the descriptor closest to its limit', async () => {
    const response = await svc.client.shouldRateLimit(req(descriptor([['team', fresh('t')]]), descriptor([['user', fresh('u')]])));
    expect(asMap(response.responseHeadersToAdd)).toMatchObject({ 'RateLimit-Limit': '3', 'RateLimit-Remaining': '2' });
  });

  it('adds nothing when no descriptor matched a limit', async () => {
    const response = await svc.client.shouldRateLimit(req(descriptor([['unknown', 'x']])));
    expect(response.responseHeadersToAdd).toEqual([]);
  });
});

describe('with renamed headers and the draft fields', () => {
  let svc: TestService;

  beforeAll(async () => {
    svc = await startTestService({
      config: { 'edge.yaml': EDGE },
      env: {
        LIMIT_RESPONSE_HEADERS_ENABLED: 'true',
        LIMIT_LIMIT_HEADER: 'X-RateLimit-Limit',
        LIMIT_REMAINING_HEADER: 'X-RateLimit-Remaining',
        LIMIT_RESET_HEADER: 'X-RateLimit-Reset',
        LIMIT_DRAFT_HEADERS_ENABLED: 'true',
      },
    });
  });

  afterAll(async () => {
    await svc?.stop();
  });

  it('uses the configured names and adds RateLimit-Policy and RateLimit with the whole window', async () => {
    const response = await svc.client.shouldRateLimit(req(descriptor([['team', fresh('t')]])));
    const headers = asMap(response.responseHeadersToAdd);
    expect(Object.keys(headers)).toEqual(['X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset', 'RateLimit-Policy', 'RateLimit']);
    expect(headers['RateLimit-Policy']).toBe('"default";q=100;w=7200');
    expect(headers['RateLimit']).toBe(`"default";r=99;t=${headers['X-RateLimit-Reset']}`);
  });

  it('names the draft policy after the rule name', async () => {
    const response = await svc.client.shouldRateLimit(req(descriptor([['user', fresh('u')]])));
    expect(asMap(response.responseHeadersToAdd)['RateLimit-Policy']).toBe('"per_user";q=3;w=3600');
  });
});

describe('by default', () => {
  it('adds no headers', async () => {
    const svc = await startTestService({ config: { 'edge.yaml': EDGE } });
    try {
      const response = await svc.client.shouldRateLimit(req(descriptor([['user', fresh('u')]])));
      expect(response.responseHeadersToAdd).toEqual([]);
    } finally {
      await svc.stop();
    }
  });
});
