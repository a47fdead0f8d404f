import { InvalidRequestError, NotReadyError } from '../../../src/limiter/errors';
import type { RateLimitRequest, RateLimitResponse } from '../../../src/limiter/types';
import { DebugServer } from '../../../src/http/debug-server';
import { HttpServer, type JsonDecider } from '../../../src/http/http-server';
import { StoreUnavailableError } from '../../../src/limiter/store';
import { startTestService, type TestService } from '../../helpers/service';

/**
 * The HTTP and debug ports of the real service (memory store, ports 0): every endpoint and every
 * status code it can answer. Windows are hours, so no test depends on when it runs.
 */

const EDGE = `
domain: edge
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: hour, requests_per_unit: 2}
  - key: tenant
    value: acme
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 100}
`;

/** Fails to load, so the service starts NOT_SERVING. */
const BROKEN = 'domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n';

interface Reply {
  status: number;
  headers: Headers;
  text: string;
}

async function http(port: number, path: string, init: RequestInit = {}): Promise<Reply> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`, init);
  return { status: res.status, headers: res.headers, text: await res.text() };
}

const postJson = (port: number, body: unknown): Promise<Reply> =>
  http(port, '/json', { method: 'POST', body: typeof body === 'string' ? body : JSON.stringify(body) });

let svc: TestService;
let httpPort: number;
let unique = 0;
const fresh = (label: string): string => `${label}-${++unique}-${Date.now()}`;

beforeAll(async () => {
  svc = await startTestService({ config: { 'edge.yaml': EDGE } });
  httpPort = svc.service.httpPort;
});

afterAll(async () => {
  await svc?.stop();
});

describe('GET /healthcheck', () => {
  it('answers 200 OK while the service serves', async () => {
    const reply = await http(httpPort, '/healthcheck');
    expect(reply.status).toBe(200);
    expect(reply.text.trim()).toBe('OK');
  });

  it('answers 500 while no valid config has loaded', async () => {
    const empty = await startTestService({ config: { 'broken.yaml': BROKEN } });
    try {
      const reply = await http(empty.service.httpPort, '/healthcheck');
      expect(reply.status).toBe(500);
    } finally {
      await empty.stop();
    }
  });
});

describe('GET /livez and GET /readyz', () => {
  it('both answer 200 while the service serves', async () => {
    expect((await http(httpPort, '/livez')).status).toBe(200);
    expect((await http(httpPort, '/readyz')).status).toBe(200);
  });

  it('liveness stays 200 while readiness is 503 without a valid config: a restart would not fix the file', async () => {
    const empty = await startTestService({ config: { 'broken.yaml': BROKEN } });
    try {
      expect((await http(empty.service.httpPort, '/livez')).status).toBe(200);
      const ready = await http(empty.service.httpPort, '/readyz');
      expect(ready.status).toBe(503);
      expect(ready.text.trim()).toBe('NOT_READY');
    } finally {
      await empty.stop();
    }
  });

  it('readiness follows the store only when the failure policy cannot answer without it', async () => {
    const store = { up: false };
    const serverFor = (ready: boolean) =>
      new HttpServer({
        host: '127.0.0.1',
        port: 0,
        isServing: () => store.up,
        isReady: () => ready,
        limiter: { shouldRateLimit: () => Promise.reject(new Error('unused')) },
      });
    const servers = [serverFor(false), serverFor(true)];
    try {
      const [notReady, ready] = await Promise.all(servers.map((s) => s.start()));
      expect([(await http(notReady, '/healthcheck')).status, (await http(notReady, '/readyz')).status, (await http(notReady, '/livez')).status]).toEqual([
        500, 503, 200,
      ]);
      expect([(await http(ready, '/healthcheck')).status, (await http(ready, '/readyz')).status, (await http(ready, '/livez')).status]).toEqual([
        500, 200, 200,
      ]);
      expect((await http(ready, '/livez', { method: 'POST' })).status).toBe(405);
    } finally {
      await Promise.all(servers.map((s) => s.close(0)));
    }
  });
});

describe('POST /json', () => {
  it('answers an allowed request with 200 and the response in proto JSON', async () => {
    const reply = await postJson(httpPort, { domain: 'edge', descriptors: [{ entries: [{ key: 'user', value: fresh('u') }] }] });
    expect(reply.status).toBe(200);
    expect(reply.headers.get('content-type')).toBe('application/json');
    const body = JSON.parse(reply.text);
    expect(body).toEqual({
      overallCode: 'OK',
      statuses: [
        {
          code: 'OK',
          currentLimit: { requestsPerUnit: 2, unit: 'HOUR', name: 'per_user' },
          limitRemaining: 1,
          durationUntilReset: expect.stringMatching(/^\d+(\.\d{3})?s$/),
        },
      ],
    });
  });

  it('accepts snake_case field names, string counts and a descriptor hits_addend', async () => {
    const reply = await postJson(httpPort, {
      domain: 'edge',
      hits_addend: '1',
      descriptors: [{ entries: [{ key: 'user', value: fresh('u') }], hits_addend: 2 }],
    });
    expect(reply.status).toBe(200);
    const body = JSON.parse(reply.text);
    expect(body.statuses[0].code).toBe('OK');
    expect(body.statuses[0].limitRemaining).toBeUndefined(); // 0 remaining, left out as proto JSON does
  });

  it('answers 429 when the request is over the limit', async () => {
    const user = fresh('u');
    const request = { domain: 'edge', descriptors: [{ entries: [{ key: 'user', value: user }] }] };
    expect((await postJson(httpPort, request)).status).toBe(200);
    expect((await postJson(httpPort, request)).status).toBe(200);
    const denied = await postJson(httpPort, request);
    expect(denied.status).toBe(429);
    const body = JSON.parse(denied.text);
    expect(body.overallCode).toBe('OVER_LIMIT');
    expect(body.statuses[0].code).toBe('OVER_LIMIT');
  });

  it('answers a descriptor that matches no rule with OK and no limit', async () => {
    const reply = await postJson(httpPort, { domain: 'edge', descriptors: [{ entries: [{ key: 'nothing', value: 'x' }] }] });
    expect(reply.status).toBe(200);
    expect(JSON.parse(reply.text)).toEqual({ overallCode: 'OK', statuses: [{ code: 'OK' }] });
  });

  it('answers 400 with a message for a body that is not JSON', async () => {
    const reply = await postJson(httpPort, '{"domain": ');
    expect(reply.status).toBe(400);
    expect(reply.text).toMatch(/invalid JSON/);
  });

  it('answers 400 naming the field for a malformed request', async () => {
    const unknownField = await postJson(httpPort, { domain: 'edge', descriptors: [], colour: 'red' });
    expect(unknownField.status).toBe(400);
    expect(unknownField.text).toMatch(/unknown field "colour"/);

    const badEntries = await postJson(httpPort, { domain: 'edge', descriptors: [{ entries: 'user' }] });
    expect(badEntries.status).toBe(400);
    expect(badEntries.text).toMatch(/descriptors\[0\]\.entries: expected an array/);

    const badUnit = await postJson(httpPort, {
      domain: 'edge',
      descriptors: [{ entries: [{ key: 'user', value: 'x' }], limit: { requests_per_unit: 1, unit: 'FORTNIGHT' } }],
    });
    expect(badUnit.status).toBe(400);
    expect(badUnit.text).toMatch(/unit/);
  });

  it('answers 400 for a request the limiter rejects (empty domain, no descriptors, empty key)', async () => {
    expect((await postJson(httpPort, { domain: '', descriptors: [{ entries: [{ key: 'user', value: 'x' }] }] })).status).toBe(400);
    expect((await postJson(httpPort, { domain: 'edge', descriptors: [] })).status).toBe(400);
    const emptyKey = await postJson(httpPort, { domain: 'edge', descriptors: [{ entries: [{ key: '', value: 'x' }] }] });
    expect(emptyKey.status).toBe(400);
    expect(emptyKey.text.length).toBeGreaterThan(1);
  });

  it('answers 503 while no valid config has loaded', async () => {
    const empty = await startTestService({ config: { 'broken.yaml': BROKEN } });
    try {
      const reply = await postJson(empty.service.httpPort, { domain: 'edge', descriptors: [{ entries: [{ key: 'user', value: 'x' }] }] });
      expect(reply.status).toBe(503);
    } finally {
      await empty.stop();
    }
  });

  it('answers 405 to other methods and 413 to an oversized body', async () => {
    const get = await http(httpPort, '/json');
    expect(get.status).toBe(405);
    expect(get.headers.get('allow')).toBe('POST');
    const huge = await postJson(httpPort, 'x'.repeat(1024 * 1024 + 1));
    expect(huge.status).toBe(413);
  });

  it('adds the rate-limit headers to the HTTP reply when they are enabled', async () => {
    const withHeaders = await startTestService({ config: { 'edge.yaml': EDGE }, env: { LIMIT_RESPONSE_HEADERS_ENABLED: 'true' } });
    try {
      const reply = await postJson(withHeaders.service.httpPort, { domain: 'edge', descriptors: [{ entries: [{ key: 'user', value: 'h' }] }] });
      expect(reply.headers.get('ratelimit-limit')).toBe('2');
      expect(reply.headers.get('ratelimit-remaining')).toBe('1');
      expect(JSON.parse(reply.text).responseHeadersToAdd).toEqual([
        { key: 'RateLimit-Limit', value: '2' },
        { key: 'RateLimit-Remaining', value: '1' },
        { key: 'RateLimit-Reset', value: expect.stringMatching(/^\d+$/) },
      ]);
    } finally {
      await withHeaders.stop();
    }
  });
});

describe('GET /metrics', () => {
  it('serves the Prometheus text exposition', async () => {
    const reply = await http(httpPort, '/metrics');
    expect(reply.status).toBe(200);
    expect(reply.headers.get('content-type')).toMatch(/^text\/plain/);
    expect(reply.text).toContain('# TYPE ratelimit_service_rate_limit_total_hits counter');
    expect(reply.text).toContain('process_cpu_user_seconds_total');
  });

  it('is not served when DISABLE_STATS is true', async () => {
    const quiet = await startTestService({ config: { 'edge.yaml': EDGE }, env: { DISABLE_STATS: 'true' } });
    try {
      expect((await http(quiet.service.httpPort, '/metrics')).status).toBe(404);
    } finally {
      await quiet.stop();
    }
  });
});

describe('other paths', () => {
  it('answers 404', async () => {
    expect((await http(httpPort, '/nope')).status).toBe(404);
  });
});

describe('the debug port', () => {
  it('lists the loaded rules on /rlconfig, one line per rule', async () => {
    const reply = await http(svc.service.debugPort, '/rlconfig');
    expect(reply.status).toBe(200);
    const lines = reply.text.trim().split('\n');
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/^edge\.user: unit=HOUR requests_per_unit=2/);
    expect(lines[1]).toMatch(/^edge\.tenant_acme\.path: unit=MINUTE requests_per_unit=100/);
  });

  it('lists its endpoints on /', async () => {
    const reply = await http(svc.service.debugPort, '/');
    expect(reply.status).toBe(200);
    expect(reply.text).toContain('/rlconfig');
    expect(reply.text).toContain('/metrics');
  });

  it('answers an empty /rlconfig before the first config', async () => {
    const debug = new DebugServer({ host: '127.0.0.1', port: 0, rlconfig: () => [] });
    const port = await debug.start();
    try {
      const reply = await http(port, '/rlconfig');
      expect(reply.status).toBe(200);
      expect(reply.text).toBe('');
    } finally {
      await debug.close();
    }
  });
});

describe('HttpServer error classification', () => {
  const failing = (err: Error): JsonDecider => ({
    shouldRateLimit: (_r: RateLimitRequest): Promise<RateLimitResponse> => Promise.reject(err),
  });
  const body = { domain: 'edge', descriptors: [{ entries: [{ key: 'k', value: 'v' }] }] };

  async function statusFor(err: Error): Promise<Reply> {
    const server = new HttpServer({ host: '127.0.0.1', port: 0, isServing: () => true, limiter: failing(err) });
    const port = await server.start();
    try {
      return await postJson(port, body);
    } finally {
      await server.close();
    }
  }

  it('answers 503 when the store is unavailable', async () => {
    const reply = await statusFor(new StoreUnavailableError('redis: connection refused'));
    expect(reply.status).toBe(503);
    expect(reply.text).toMatch(/connection refused/);
  });

  it('answers 503 when the service is not ready', async () => {
    expect((await statusFor(new NotReadyError('no config loaded'))).status).toBe(503);
  });

  it('answers 400 for a request the limiter calls invalid', async () => {
    expect((await statusFor(new InvalidRequestError('descriptors: must not be empty'))).status).toBe(400);
  });

  it('answers 500 without details for anything else', async () => {
    const reply = await statusFor(new Error('secret internals'));
    expect(reply.status).toBe(500);
    expect(reply.text).not.toMatch(/secret/);
  });
});
