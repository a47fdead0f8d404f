import * as v8 from 'node:v8';
import * as vm from 'node:vm';
import { descriptor } from '../../helpers/grpc-client';
import { startTestService, type TestService } from '../../helpers/service';

/**
 * GET /top and /top/rules on the debug port of the real service (memory store, ports 0): who is
 * being limited, with exact counts while the sketch holds every descriptor, and a fixed memory
 * bound whatever callers send. Windows are minutes, so no test depends on when it runs.
 */

const EDGE = `
domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: tenant
    value: acme
    descriptors:
      - key: path
        rate_limit: {name: acme_path, unit: second, unit_multiplier: 30, requests_per_unit: 100}
`;

const OTHER = `
domain: other
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
`;

interface TopEntry {
  domain: string;
  rule: string;
  descriptor: [string, string][];
  allowed: number;
  denied: number;
  near_limit: number;
  error: { allowed: number; denied: number };
}

interface TopReply {
  window_s: number;
  replicas: number;
  entries: TopEntry[];
}

async function get(port: number, path: string): Promise<{ status: number; text: string; headers: Headers }> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`);
  return { status: res.status, text: await res.text(), headers: res.headers };
}

async function top(svc: TestService, query = ''): Promise<TopReply> {
  const reply = await get(svc.service.debugPort, `/top${query}`);
  expect(reply.status).toBe(200);
  return JSON.parse(reply.text) as TopReply;
}

/** Makes the call `times` times; resolves with how many of them were answered OVER_LIMIT. */
async function call(svc: TestService, domain: string, pairs: [string, string][], times = 1): Promise<number> {
  let denied = 0;
  for (let i = 0; i < times; i++) {
    const r = await svc.client.shouldRateLimit({ domain, descriptors: [descriptor(pairs)] });
    if (r.overallCode === 'OVER_LIMIT') denied++;
  }
  return denied;
}

describe('GET /top', () => {
  let svc: TestService;

  beforeAll(async () => {
    svc = await startTestService({ config: { 'edge.yaml': EDGE, 'other.yaml': OTHER } });
    await call(svc, 'edge', [['api_key', 'mallory']], 60);
    await call(svc, 'edge', [['api_key', 'alice']], 4);
    await call(
      svc,
      'edge',
      [
        ['tenant', 'acme'],
        ['path', '/reports'],
      ],
      3,
    );
    await call(svc, 'other', [['user', 'bob']], 3);
  });

  afterAll(async () => {
    await svc?.stop();
  });

  it('lists mallory first with 5 allowed, 55 denied and 1 near-limit, then alice, with exact counts', async () => {
    const reply = await top(svc, '?domain=edge');
    expect(reply.window_s).toBe(60);
    expect(reply.replicas).toBe(1);
    expect(reply.entries.slice(0, 2)).toEqual([
      { domain: 'edge', rule: 'api_key', descriptor: [['api_key', 'mallory']], allowed: 5, denied: 55, near_limit: 1, error: { allowed: 0, denied: 0 } },
      { domain: 'edge', rule: 'api_key', descriptor: [['api_key', 'alice']], allowed: 4, denied: 0, near_limit: 0, error: { allowed: 0, denied: 0 } },
    ]);
  });

  it('sorts by denied, then allowed, and names nested rules by their key path', async () => {
    const { entries } = await top(svc);
    expect(entries.map((e) => [e.domain, e.rule, e.descriptor.map((pair) => pair.join('=')).join(','), e.denied, e.allowed])).toEqual([
      ['edge', 'api_key', 'api_key=mallory', 55, 5],
      ['other', 'user', 'user=bob', 1, 2],
      ['edge', 'api_key', 'api_key=alice', 0, 4],
      ['edge', 'tenant_acme.path', 'tenant=acme,path=/reports', 0, 3],
    ]);
  });

  it('filters by domain, sorts by the count asked for and cuts at limit', async () => {
    expect((await top(svc, '?domain=other')).entries.map((e) => e.descriptor)).toEqual([[['user', 'bob']]]);
    expect((await top(svc, '?by=allowed&limit=2')).entries.map((e) => e.descriptor[0][1])).toEqual(['mallory', 'alice']);
    expect((await top(svc, '?by=near_limit&limit=1')).entries.map((e) => [e.descriptor[0][1], e.near_limit])).toEqual([['mallory', 1]]);
    expect((await top(svc, '?domain=nowhere')).entries).toEqual([]);
  });

  it('answers 400 naming the parameter for a bad query', async () => {
    for (const [query, named] of [
      ['?by=hits', 'by:'],
      ['?limit=0', 'limit:'],
      ['?limit=abc', 'limit:'],
      ['?limit=1e3', 'limit:'],
      ['?limit=100000', 'limit:'],
    ]) {
      const reply = await get(svc.service.debugPort, `/top${query}`);
      expect(reply.status).toBe(400);
      expect(reply.text).toContain(named);
    }
  });

  it('reports each rule with its limit, totals and steps on /top/rules', async () => {
    const reply = await get(svc.service.debugPort, '/top/rules');
    expect(reply.status).toBe(200);
    const view = JSON.parse(reply.text) as { rules: Record<string, unknown>[]; window_s: number; replicas: number };
    const acme = view.rules.find((r) => r.rule === 'tenant_acme.path')!;
    expect(acme).toMatchObject({
      domain: 'edge',
      limit: { requests_per_unit: 100, unit: 'second', unit_multiplier: 30, window_s: 30, algorithm: 'sliding_window', name: 'acme_path', shadow_mode: false },
      allowed: 3,
      denied: 0,
      near_limit: 0,
    });
    const apiKey = view.rules.find((r) => r.rule === 'api_key') as {
      allowed: number;
      denied: number;
      steps: { step_s: number; allowed: number[]; denied: number[] };
    };
    expect([apiKey.allowed, apiKey.denied]).toEqual([9, 55]);
    expect(apiKey.steps.step_s).toBe(1);
    expect(apiKey.steps.allowed).toHaveLength(60);
    expect(apiKey.steps.allowed.reduce((a, b) => a + b, 0)).toBe(9);
    expect(apiKey.steps.denied.reduce((a, b) => a + b, 0)).toBe(55);
  });

  it('serves the live page on / with a policy that allows nothing from elsewhere', async () => {
    const reply = await get(svc.service.debugPort, '/');
    expect(reply.status).toBe(200);
    expect(reply.headers.get('content-type')).toBe('text/html; charset=utf-8');
    const csp = reply.headers.get('content-security-policy')!;
    expect(csp).toMatch(/default-src 'none'/);
    expect(csp).toMatch(/script-src 'sha256-[A-Za-z0-9+/=]+'/);
    // Self-contained: nothing is loaded from anywhere but this port.
    expect(reply.text).not.toMatch(/(src|href)="(https?:)?\/\//);
    expect(reply.text).toContain('/rlconfig');
    expect(reply.text).toContain('/metrics');
  });
});

describe('the live view off (TOP_ENABLED=false)', () => {
  it('answers 404 on /top and lists the endpoints on /', async () => {
    const svc = await startTestService({ config: { 'edge.yaml': EDGE }, env: { TOP_ENABLED: 'false' } });
    try {
      await call(svc, 'edge', [['api_key', 'mallory']], 2);
      expect((await get(svc.service.debugPort, '/top')).status).toBe(404);
      expect((await get(svc.service.debugPort, '/top/rules')).status).toBe(404);
      const index = await get(svc.service.debugPort, '/');
      expect(index.headers.get('content-type')).toBe('text/plain; charset=utf-8');
      expect(index.text).toContain('/rlconfig');
    } finally {
      await svc.stop();
    }
  });
});

describe('a flood of one-shot values', () => {
  // The heap after a full collection: what the process keeps, not what it has yet to collect.
  v8.setFlagsFromString('--expose-gc');
  const gc = vm.runInNewContext('gc') as () => void;
  const heapUsed = (): number => {
    gc();
    gc();
    return process.memoryUsage().heapUsed;
  };

  it('keeps mallory on top and the process within a fixed bound after 20,000 values of 200 bytes', async () => {
    // The store keeps at most 100 counters, so whatever grows with the values is the live view's.
    const svc = await startTestService({ config: { 'edge.yaml': EDGE }, env: { MEMORY_MAX_KEYS: '100', TOP_ENTRIES: '64' } });
    // The limiter the edges call, with the same observers: 20,000 calls in well under a second.
    const decide = (value: string) =>
      svc.service.limiter.shouldRateLimit({ domain: 'edge', descriptors: [{ entries: [{ key: 'api_key', value }] }], hitsAddend: 0 });
    try {
      // Mallory's denials as answered: 455 unless the flood crosses a minute, when the sliding window
      // lets a sixth call through.
      let denied = await call(svc, 'edge', [['api_key', 'mallory']], 60);
      const before = heapUsed();
      const pad = 'v'.repeat(200);
      for (let i = 0; i < 20_000; i++) {
        await decide(`${i}-${pad}`);
        // Often enough that the store's LRU keeps mallory's counter (and its denials) among its 100.
        if (i % 50 === 0 && (await decide('mallory')).overallCode === 'OVER_LIMIT') denied++;
      }
      expect(denied).toBeGreaterThanOrEqual(454);
      const grown = heapUsed() - before;
      // 20,000 distinct 200-byte values would take 4 MB and more; the sketch keeps at most
      // 2 summaries x 10 slices x 64 entries of ids cut to 200 characters (about 0.6 MB with their arrays).
      expect(grown).toBeLessThan(2 * 1024 * 1024);
      const { entries } = await top(svc, '?limit=3');
      expect(entries[0].descriptor).toEqual([['api_key', 'mallory']]);
      // Denials are counted apart from the flood: exact. The allowed count is at or above the true one,
      // at most its error above it, and that error within the allowed hits / TOP_ENTRIES.
      expect(entries[0]).toMatchObject({ denied, error: { denied: 0 } });
      const { allowed, error } = entries[0];
      expect(allowed).toBeGreaterThanOrEqual(460 - denied);
      expect(allowed - error.allowed).toBeLessThanOrEqual(460 - denied);
      expect(error.allowed).toBeLessThanOrEqual((20_000 + 5) / 64);
      // Every one-shot is allowed: none outranks a descriptor being denied.
      expect(entries.slice(1).every((e) => e.denied === 0 && e.allowed >= 1)).toBe(true);
      // Values are cut for display; a key cut for its id shows the hash of the whole.
      expect(entries[1].descriptor[0][1]).toMatch(/^[0-9]+-v+…#[0-9a-z]+$/);
      expect(entries[1].descriptor[0][1].length).toBeLessThanOrEqual(64 + 16);
    } finally {
      await svc.stop();
    }
  }, 60_000);
});
