import { startTestService, type TestService } from '../../helpers/service';
import { descriptor } from '../../helpers/grpc-client';
import { EnvoyQuotaClient, rawQuotaStream, type RawQuotaStream } from '../../helpers/envoy-quota-client';

/**
 * The quota stream (RLQS) as Envoy's rate_limit_quota filter uses it, against the real service on
 * grpc-js: raw streams for the wire details, the Envoy-like client for its behaviour over time.
 */

const CONFIG = `domain: quota
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: org
    value: acme
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 600}
  - key: free
    rate_limit: {unlimited: true}
  - key: dry
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: shared
    rate_limit: {unit: minute, requests_per_unit: 20}
`;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function usage(bucket: Record<string, string>, allowed = 1, denied = 0, seconds = 0): object {
  return { bucketId: { bucket }, timeElapsed: { seconds }, numRequestsAllowed: allowed, numRequestsDenied: denied };
}

function report(...usages: object[]): object {
  return { domain: 'quota', bucketQuotaUsages: usages };
}

let svc: TestService;
const open: { close(): void }[] = [];
function raw(): RawQuotaStream {
  const s = rawQuotaStream(svc.addr);
  open.push(s);
  return s;
}
function proxy(reportIntervalMs: number): EnvoyQuotaClient {
  const p = new EnvoyQuotaClient({ targets: [svc.addr], domain: 'quota', reportIntervalMs });
  open.push(p);
  return p;
}

beforeAll(async () => {
  svc = await startTestService({
    config: { 'quota.yaml': CONFIG },
    env: { RLQS_MAX_BUCKETS_PER_STREAM: '3', RLQS_MAX_BUCKET_ID_PAIRS: '3', RLQS_MAX_BUCKET_ID_BYTES: '64' },
  });
});
afterEach(() => {
  for (const s of open.splice(0)) s.close();
});
afterAll(() => svc.stop());

describe('assignments', () => {
  test("a bucket's first report (time_elapsed 0) is answered within 100 ms: a token bucket of whole seconds, a whole-second TTL, the id echoed", async () => {
    const s = raw();
    s.write(report(usage({ tenant: 'first' })));
    await s.next(); // the first answer also waits for the connection
    const sentAt = performance.now();
    s.write(report(usage({ tenant: 'second' })));
    const answer = await s.next();
    expect(performance.now() - sentAt).toBeLessThan(100);
    const [action] = answer.bucketAction;
    expect(action.bucketId).toEqual({ bucket: { tenant: 'second' } });
    const assignment = action.quotaAssignmentAction;
    expect(assignment.assignmentTimeToLive.seconds).toBeGreaterThanOrEqual(1);
    expect(assignment.assignmentTimeToLive.nanos ?? 0).toBe(0);
    const strategy = assignment.rateLimitStrategy;
    expect(strategy.strategy).toBe('tokenBucket');
    expect(strategy.tokenBucket.maxTokens).toBeGreaterThanOrEqual(1);
    expect(strategy.tokenBucket.tokensPerFill.value).toBeGreaterThanOrEqual(1);
    expect(strategy.tokenBucket.fillInterval.seconds).toBeGreaterThanOrEqual(1);
    expect(strategy.tokenBucket.fillInterval.nanos ?? 0).toBe(0);
  });

  test('a bucket id matches the rule tree in the order the tree needs: {path, org} is the descriptor (org=acme, path)', async () => {
    const s = raw();
    s.write(report(usage({ path: '/a', org: 'acme' })));
    const tb = (await s.next()).bucketAction[0].quotaAssignmentAction.rateLimitStrategy.tokenBucket;
    // One proxy, 600 per minute: a 60 s fill interval of 600 tokens.
    expect({ tokens: tb.tokensPerFill.value, fill: tb.fillInterval.seconds }).toEqual({ tokens: 600, fill: 60 });
  });

  test('no matching rule and an unlimited rule answer ALLOW_ALL; never requests_per_time_unit', async () => {
    const s = raw();
    s.write(report(usage({ nobody: 'x' }), usage({ free: 'x' })));
    const actions = (await s.next()).bucketAction;
    for (const a of actions) expect(a.quotaAssignmentAction.rateLimitStrategy).toEqual({ blanketRule: 0, strategy: 'blanketRule' });
  });

  test('shadow mode answers ALLOW_ALL while the reported requests are still charged to the counter RLS uses', async () => {
    const s = raw();
    s.write(report(usage({ dry: 'run' }, 50)));
    expect((await s.next()).bucketAction[0].quotaAssignmentAction.rateLimitStrategy.strategy).toBe('blanketRule');
    const rls = await svc.client.shouldRateLimit({ domain: 'quota', descriptors: [descriptor([['dry', 'run']])] });
    // Shadow mode: OK, but the counter holds the 50 reported requests (limit 10).
    expect(rls.overallCode).toBe('OK');
    expect(rls.statuses[0].limitRemaining).toBe(0);
  });

  test('RLS calls and quota proxies share one limit: requests a proxy reports are charged, and a spent limit is DENY_ALL', async () => {
    const s = raw();
    s.write(report(usage({ shared: 'reported' }, 20)));
    await s.next();
    const rls = await svc.client.shouldRateLimit({ domain: 'quota', descriptors: [descriptor([['shared', 'reported']])] });
    expect(rls.overallCode).toBe('OVER_LIMIT');

    for (let i = 0; i < 20; i++) await svc.client.shouldRateLimit({ domain: 'quota', descriptors: [descriptor([['shared', 'spent']])] });
    s.write(report(usage({ shared: 'spent' }, 0)));
    const action = (await s.next()).bucketAction[0];
    expect(action.quotaAssignmentAction.rateLimitStrategy).toEqual({ blanketRule: 1, strategy: 'blanketRule' });
  });

  test('an empty report (Envoy sends one when it has no bucket) is no error and gets no answer', async () => {
    const s = raw();
    s.write({ domain: 'quota', bucketQuotaUsages: [] });
    s.write(report(usage({ tenant: 'after-empty' })));
    expect((await s.next()).bucketAction[0].bucketId.bucket).toEqual({ tenant: 'after-empty' });
  });
});

describe('bad input ends only its own stream, with INVALID_ARGUMENT', () => {
  test('a different domain later on the stream; another stream goes on', async () => {
    const [a, b] = [raw(), raw()];
    a.write(report(usage({ tenant: 'a' })));
    b.write(report(usage({ tenant: 'b' })));
    await Promise.all([a.next(), b.next()]);
    a.write({ domain: 'elsewhere', bucketQuotaUsages: [usage({ tenant: 'a' })] });
    expect((await a.status).code).toBe(3);
    b.write(report(usage({ tenant: 'b' })));
    expect((await b.next()).bucketAction).toHaveLength(1);
  });

  test.each([
    ['no domain on the first message', { bucketQuotaUsages: [usage({ tenant: 'x' })] }],
    ['a bucket id without pairs', report({ bucketId: { bucket: {} }, timeElapsed: { seconds: 0 } })],
    ['a bucket id with an empty value', report(usage({ tenant: '' }))],
    ['more pairs than RLQS_MAX_BUCKET_ID_PAIRS', report(usage({ a: '1', b: '2', c: '3', d: '4' }))],
    ['a bucket id over RLQS_MAX_BUCKET_ID_BYTES', report(usage({ tenant: 'x'.repeat(80) }))],
    ['more buckets than RLQS_MAX_BUCKETS_PER_STREAM', report(usage({ tenant: '1' }), usage({ tenant: '2' }), usage({ tenant: '3' }), usage({ tenant: '4' }))],
  ])('%s', async (_name, message) => {
    const s = raw();
    s.write(message);
    const status = await s.status;
    expect(status.code).toBe(3);
  });

  test('bytes that are not a usage report', async () => {
    const s = raw();
    s.writeBytes(Buffer.from([0x0a, 0xff, 0xff]));
    expect((await s.status).code).toBe(3);
  });
});

describe('over time, with proxies that behave as Envoy does', () => {
  test('a share changed by another proxy is pushed without waiting for a report, and a closed stream gives its share back', async () => {
    const slow = proxy(3_000);
    slow.request({ tenant: 'push' });
    await sleep(300);
    expect(slow.strategy({ tenant: 'push' })).toMatchObject({ kind: 'token_bucket', tokensPerFill: 100 });
    // A busy proxy joins: both want more than half (the slow one's demand is unknown until it reports).
    const fast = proxy(200);
    const busy = setInterval(() => {
      for (let i = 0; i < 10; i++) fast.request({ tenant: 'push' });
    }, 50);
    try {
      await sleep(500);
      // Long before the slow proxy's first periodic report.
      expect(slow.strategy({ tenant: 'push' })).toMatchObject({ kind: 'token_bucket', tokensPerFill: 50 });
    } finally {
      clearInterval(busy);
    }
    fast.close();
    await sleep(300);
    // Its share comes back to the slow one at once, less what the gone proxy admitted in the current window.
    const after = slow.strategy({ tenant: 'push' });
    expect(after?.kind === 'token_bucket' && after.tokensPerFill).toBeGreaterThan(50);
  });

  test('a bucket idle for three full reports is abandoned; its next request subscribes again', async () => {
    const p = proxy(100);
    p.request({ tenant: 'idle' });
    await sleep(700);
    expect(p.stats.abandoned).toBe(1);
    expect(p.has({ tenant: 'idle' })).toBe(false);
    p.request({ tenant: 'idle' });
    await sleep(200);
    expect(p.strategy({ tenant: 'idle' })).toMatchObject({ kind: 'token_bucket' });
  });

  test('the TTL is refreshed while the proxy reports, and expires (whole seconds) when its reports stop', async () => {
    const p = proxy(200);
    p.request({ tenant: 'ttl' });
    const keepBusy = setInterval(() => p.request({ tenant: 'ttl' }), 50);
    try {
      await sleep(1_500);
      const ttl = p.received.at(-1)!.actions[0].quotaAssignmentAction.assignmentTimeToLive.seconds;
      // Three observed 200 ms intervals, rounded up to whole seconds.
      expect(ttl).toBe(1);
      expect(p.stats.expirations).toBe(0);
      p.pauseReports(true);
      await sleep(1_300);
      expect(p.stats.expirations).toBe(1);
      expect(p.strategy({ tenant: 'ttl' })).toBeUndefined();
      p.pauseReports(false);
      await sleep(400);
      expect(p.strategy({ tenant: 'ttl' })).toMatchObject({ kind: 'token_bucket' });
    } finally {
      clearInterval(keepBusy);
    }
  });

  test('a dropped stream is reopened at the next tick, whose full report subscribes every bucket again', async () => {
    const p = proxy(200);
    p.request({ tenant: 'r1' });
    p.request({ tenant: 'r2' });
    await sleep(300);
    const before = p.stats.responses;
    p.dropStream();
    await sleep(500);
    expect(p.stats.streamsOpened).toBe(2);
    expect(p.stats.responses).toBeGreaterThan(before);
    expect(p.strategy({ tenant: 'r1' })).toMatchObject({ kind: 'token_bucket' });
    expect(p.strategy({ tenant: 'r2' })).toMatchObject({ kind: 'token_bucket' });
    const streams = svc.service.rlqs.view().streams.filter((s) => s.buckets > 0);
    expect(streams).toHaveLength(1);
  });
});

test("on Envoy's own 5 s cycle: the first report answered at once, the periodic one (time_elapsed 5) refreshes it with a TTL of 15 s", async () => {
  const p = proxy(5_000);
  p.request({ tenant: 'envoy-cycle' });
  await sleep(300);
  expect(p.received).toHaveLength(1);
  const first = p.received[0].actions[0].quotaAssignmentAction;
  expect(first.assignmentTimeToLive.seconds).toBe(15);
  await sleep(5_000);
  expect(p.received).toHaveLength(2);
  const refresh = p.received[1].actions[0].quotaAssignmentAction;
  expect(refresh.assignmentTimeToLive.seconds).toBe(15);
  expect(p.stats.expirations).toBe(0);
  expect(p.strategy({ tenant: 'envoy-cycle' })).toMatchObject({ kind: 'token_bucket' });
}, 10_000);

test("the debug port's /rlqs shows streams and shares; /metrics the per-rule quota series", async () => {
  const p = proxy(200);
  const busy = setInterval(() => {
    for (let i = 0; i < 5; i++) p.request({ tenant: 'seen' });
  }, 50);
  try {
    await sleep(700);
    const view = (await (await fetch(`http://127.0.0.1:${svc.service.debugPort}/rlqs`)).json()) as any;
    const rule = view.rules.find((r: any) => r.proxies.some((x: any) => x.local) && r.statKey === 'tenant' && r.used > 0);
    expect(rule).toMatchObject({ domain: 'quota', limit: 100, windowMs: 1000, shadow: false });
    expect(view.streams.length).toBeGreaterThanOrEqual(1);
    expect(view.openStreams).toBe(svc.service.rlqs.view().openStreams);
    const metrics = await (await fetch(`http://127.0.0.1:${svc.service.httpPort}/metrics`)).text();
    expect(metrics).toMatch(/ratelimit_service_rlqs_streams \d+/);
    expect(metrics).toMatch(/ratelimit_service_rlqs_reported_requests_total\{domain="quota",descriptor="tenant",outcome="allowed"\} \d+/);
    expect(metrics).toMatch(/ratelimit_service_rlqs_proxies\{domain="quota",descriptor="tenant"\} \d+/);
    expect(metrics).toMatch(/ratelimit_service_rlqs_assigned\{domain="quota",descriptor="tenant"\} [\d.]+/);
    expect(metrics).toMatch(/ratelimit_service_rlqs_overshoot\{domain="quota",descriptor="tenant"\} \d+/);
  } finally {
    clearInterval(busy);
  }
});
