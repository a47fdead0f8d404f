import type { MemoryStore } from '../../../src/store/memory-store';
import { descriptor, type RlsRequestInput } from '../../helpers/grpc-client';
import { startTestService, type TestService } from '../../helpers/service';

/**
 * What callers picking the size of every value can make the running service hold: 50 KB values
 * (the value cap raised to let them in), each new, over gRPC and /json, against the memory store's
 * byte bound, a `limit` override's metric series, and a detailed rule's labels. And the memory
 * store's time, which a wall-clock step back must not turn back.
 */

const CONFIG = `domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: page
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: pair
    rate_limit: {unit: minute, requests_per_unit: 2}
`;

const MIB = 1024 * 1024;
const VALUE_BYTES = 50_000;
// 80 values of each kind: four times the memory store's bound, twice the series budget's ~40.
const CALLS = 40;

let svc: TestService;
let unique = 0;

const bigValue = (): string => `${++unique}-`.padEnd(VALUE_BYTES, 'x');

const postJson = (request: RlsRequestInput): Promise<Response> =>
  fetch(`http://127.0.0.1:${svc.service.httpPort}/json`, { method: 'POST', body: JSON.stringify(request) });

async function metricsText(): Promise<string> {
  return (await fetch(`http://127.0.0.1:${svc.service.httpPort}/metrics`)).text();
}

/** One call over gRPC and one over /json per value, `CALLS` values. */
async function sendBig(make: (value: string) => RlsRequestInput): Promise<void> {
  for (let i = 0; i < CALLS; i++) {
    expect((await svc.client.shouldRateLimit(make(bigValue()))).overallCode).toBe('OK');
    expect((await postJson(make(bigValue()))).status).toBe(200);
  }
}

beforeAll(async () => {
  svc = await startTestService({
    config: { 'edge.yaml': CONFIG },
    env: {
      DESCRIPTOR_MAX_VALUE_BYTES: String(64 * 1024),
      MEMORY_MAX_BYTES: String(MIB),
      // The smallest budget allowed: about 40 series of 100-character labels (1,632 estimated bytes each).
      METRICS_MAX_SERIES_BYTES: String(64 * 1024),
      METRICS_MAX_LABEL_LENGTH: '100',
    },
  });
});
afterAll(() => svc.stop());

it('keeps the memory store within MEMORY_MAX_BYTES however long the keys', async () => {
  await sendBig((value) => ({ domain: 'edge', descriptors: [descriptor([['api_key', value]])] }));
  const store = svc.service.store as MemoryStore;
  // 80 keys of 50 KB are 4 MB: the least recently used ones went.
  expect(store.bytes).toBeLessThanOrEqual(MIB);
  expect(store.size).toBeLessThan(25);
  expect(store.size).toBeGreaterThan(10);
});

it('reports limit overrides under their keys: one series whatever the values', async () => {
  await sendBig((value) => ({
    domain: 'edge',
    descriptors: [
      descriptor(
        [
          ['tenant', 't'],
          ['user', value],
        ],
        { limit: { requestsPerUnit: 1000, unit: 'MINUTE' } },
      ),
    ],
  }));
  const text = await metricsText();
  const lines = text.split('\n').filter((l) => l.startsWith('ratelimit_service_rate_limit_total_hits{') && l.includes('descriptor="tenant.user"'));
  expect(lines).toEqual([`ratelimit_service_rate_limit_total_hits{domain="edge",descriptor="tenant.user"} ${2 * CALLS}`]);
  expect(text).not.toContain('xxxxxxxxxx');
});

it('cuts detailed labels to METRICS_MAX_LABEL_LENGTH and folds series past METRICS_MAX_SERIES_BYTES into overflow', async () => {
  await sendBig((value) => ({ domain: 'edge', descriptors: [descriptor([['page', value]])] }));
  const text = await metricsText();
  const labels = [...text.matchAll(/^ratelimit_service_rate_limit_total_hits\{domain="edge",descriptor="(page_[^"]*)"\}/gm)].map((m) => m[1]);
  expect(labels.length).toBeGreaterThan(10);
  for (const label of labels) expect(label).toMatch(/^page_\d+-x+~[0-9a-f]{16}$/);
  expect(labels.every((label) => label.length === 100)).toBe(true);
  expect(text).toMatch(/^ratelimit_service_rate_limit_total_hits\{domain="edge",descriptor="overflow"\} \d+$/m);
  // 2 x 40 values of 50 KB each went by: the whole exposition stays small.
  expect(text.length).toBeLessThan(512 * 1024);
});

describe('after the wall clock steps back an hour', () => {
  afterEach(() => jest.restoreAllMocks());

  it('keeps counting in the same window: no counter starts over', async () => {
    const pair = { domain: 'edge', descriptors: [descriptor([['pair', 'p']])] };
    const remaining = async (): Promise<number> =>
      ((await (await postJson(pair)).json()) as { statuses: { limitRemaining?: number }[] }).statuses[0].limitRemaining ?? 0;
    expect(await remaining()).toBe(1);
    const now = Date.now();
    jest.spyOn(Date, 'now').mockImplementation(() => now - 3_600_000);
    expect(await remaining()).toBe(0);
    // 2 per minute, both used: denied, the step back notwithstanding.
    expect((await postJson(pair)).status).toBe(429);
  });
});
