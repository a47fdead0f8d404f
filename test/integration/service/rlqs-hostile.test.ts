import * as grpc from '@grpc/grpc-js';
import { spawn } from 'node:child_process';
import { loadProtoFiles } from '../../../src/wire/proto';
import { RLQS_PATH, RLQS_PROTO } from '../../../src/wire/rlqs-codec';
import { EnvoyQuotaClient, rawQuotaStream, type RawQuotaStream } from '../../helpers/envoy-quota-client';
import { rlsClient, type RlsRequestInput } from '../../helpers/grpc-client';
import { inTurns, legitCalls, summary } from '../../helpers/load-turns';
import { request } from '../../helpers/http-request';
import { admittedBetween, driveLoad } from '../../helpers/quota-load';
import { sleep, startRedis, waitUntil, type RedisServer } from '../../helpers/redis';
import { startTestService, type TestService } from '../../helpers/service';
import { spawnService, type SpawnedService } from '../../helpers/spawned-service';

/**
 * Quota streams (RLQS) against a hostile caller, each beside a legitimate one, on the real service
 * (real redis-server where Redis is involved): floods, many streams and buckets, silent streams,
 * huge counts, request overrides in the live view, scrapes over many buckets, and a demand shift.
 */

const CONFIG = `domain: quota
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: tb
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket}
  - key: daily
    rate_limits:
      - {unit: second, requests_per_unit: 1000}
      - {unit: day, requests_per_unit: 150}
  - key: api
    rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: user
    value: mallory
    rate_limit: {unit: minute, requests_per_unit: 5}
`;

const types = loadProtoFiles([RLQS_PROTO]);
const Reports = types.lookupType('envoy.service.rate_limit_quota.v3.RateLimitQuotaUsageReports');

function reportBytes(usages: { bucket: Record<string, string>; allowed: number | string; denied?: number }[], domain = 'quota'): Uint8Array {
  return Reports.encode(
    Reports.fromObject({
      domain,
      bucketQuotaUsages: usages.map((u) => ({
        bucketId: { bucket: u.bucket },
        timeElapsed: { seconds: 1 },
        numRequestsAllowed: u.allowed,
        numRequestsDenied: u.denied ?? 0,
      })),
    }),
  ).finish();
}

/**
 * A stream that writes `message` again as soon as the previous one is flushed, until stopped: in a
 * process of its own, so that its writes cost the legitimate client beside it nothing. `pause` freezes
 * the process (SIGSTOP: its stream stays open and sends nothing) until `resume`.
 */
function flood(target: string, message: Uint8Array): { pause(): void; resume(): void; stop(): Promise<number> } {
  const script = `
    const grpc = require(${JSON.stringify(require.resolve('@grpc/grpc-js'))});
    const message = Buffer.from(process.argv[1], 'base64');
    const client = new grpc.Client(${JSON.stringify(target)}, grpc.credentials.createInsecure());
    const call = client.makeBidiStreamRequest(${JSON.stringify(RLQS_PATH)}, (m) => m, (b) => b);
    call.on('data', () => undefined);
    call.on('error', () => undefined);
    let sent = 0;
    // As fast as the server takes them: past what its flow control lets through, wait for it.
    const next = () => { while (call.write(message)) sent++; sent++; call.once('drain', next); };
    next();
    process.on('SIGTERM', () => { process.stdout.write(String(sent)); process.exit(0); });
  `;
  const child = spawn(process.execPath, ['-e', script, Buffer.from(message).toString('base64')], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return {
    pause: () => child.kill('SIGSTOP'),
    resume: () => child.kill('SIGCONT'),
    stop: async () => {
      child.kill('SIGCONT');
      child.kill('SIGTERM');
      await exited;
      return Number(out);
    },
  };
}

const API_CALL = (i: number): RlsRequestInput => ({ domain: 'quota', descriptors: [{ entries: [{ key: 'api', value: `a${i % 10}` }] }] });

function metricValue(text: string, name: string, labels: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(labels));
  return line === undefined ? NaN : Number(line.slice(line.lastIndexOf(' ') + 1));
}

describe('on Redis', () => {
  let redis: RedisServer;
  beforeAll(async () => {
    redis = await startRedis();
  }, 60_000);
  afterAll(() => redis.stop());

  test('a report flood on one stream costs the RLS calls beside it nothing: no errors, p99 under 50 ms, RSS within 64 MB', async () => {
    // Redis gets 100 ms per call (the default, 10 ms, is one stall of a loaded machine's event loop):
    // an error then means calls starved, and the p99 below bounds what the flood adds to each.
    const env = { BACKEND_TYPE: 'redis', REDIS_URL: redis.url, STORE_TIMEOUT_MS: '100' };
    const svc = await spawnService({ config: { 'quota.yaml': CONFIG }, env });
    const client = rlsClient(`127.0.0.1:${svc.grpcPort}`);
    // 28 KB: one bucket named 1,000 times.
    const message = reportBytes(Array.from({ length: 1_000 }, () => ({ bucket: { tenant: 'flood' }, allowed: 1 })));
    const hostile = flood(`127.0.0.1:${svc.grpcPort}`, message);
    hostile.pause();
    try {
      await legitCalls(client, 200, 500, API_CALL);
      const rssBefore = svc.rssBytes();
      let rssMax = rssBefore;
      // The same calls go on throughout while the flood runs and pauses in turns, 1 s each: other test
      // files' load on the machine moves the latency of both halves alike (the target, 50 ms, is a quiet
      // machine's). A call counts for the half it was sent in, unless sent in the first 300 ms after a
      // switch (what the server had already taken of the flood, at most its flow-control window).
      const sampler = setInterval(() => (rssMax = Math.max(rssMax, svc.rssBytes())), 100);
      const { loaded, alone: aloneCalls } = await inTurns(hostile, {
        turns: 8,
        turnMs: 1_000,
        settleMs: 300,
        calls: (ms) => legitCalls(client, 200, ms, API_CALL),
      });
      clearInterval(sampler);
      const reportsSent = await hostile.stop();
      const legit = summary(loaded);
      const alone = summary(aloneCalls);
      const growthMb = (rssMax - rssBefore) / 2 ** 20;
      console.log('report flood beside RLS on Redis', { legit, alone, reportsSent, growthMb: growthMb.toFixed(1) });
      expect(Math.min(legit.calls, alone.calls)).toBeGreaterThan(400);
      expect(legit.errors).toBeLessThan(Math.max(0.005, (2 * alone.errors) / alone.calls) * legit.calls);
      // 50 ms on a quiet machine (27 to 31 ms measured); beside other test files, within 4 times the
      // calls alone (116 ms seen against 34 alone). The flood's cost on a2f60ed was seconds and errors.
      expect(legit.p99).toBeLessThan(Math.max(200, 4 * alone.p99));
      expect(growthMb).toBeLessThan(64);
    } finally {
      client.close();
      await hostile.stop();
      await svc.stop();
    }
  }, 60_000);

  describe('counts', () => {
    let svc: TestService;
    beforeAll(async () => {
      svc = await startTestService({ config: { 'quota.yaml': CONFIG }, env: { BACKEND_TYPE: 'redis', REDIS_URL: redis.url, RLQS_SYNC_INTERVAL: '100ms' } });
    }, 30_000);
    afterAll(() => svc.stop());

    const check = (entries: [string, string][]) =>
      svc.client.shouldRateLimit({ domain: 'quota', descriptors: [{ entries: entries.map(([key, value]) => ({ key, value })), hitsAddend: { value: 0 } }] });

    test('a report of 2^53 - 1 requests charges what the limit could admit: the descriptor answers OK again within two windows', async () => {
      const stream = rawQuotaStream(svc.addr);
      try {
        stream.writeBytes(reportBytes([{ bucket: { tb: 'huge' }, allowed: '9007199254740991' }]));
        await stream.next();
        // Charged at the next sync (100 ms here; later on a loaded machine).
        await waitUntil('the charge to reach the counter', async () => (await check([['tb', 'huge']])).overallCode === 'OVER_LIMIT', 2_000, 50);
        stream.close();
        // Two windows, and a second for a loaded machine's late syncs and calls.
        await waitUntil('the descriptor to answer OK again, within two windows', async () => (await check([['tb', 'huge']])).overallCode === 'OK', 3_000, 50);
      } finally {
        stream.close();
      }
    });

    test('a report above 2^53 poisons nothing: later reports reach the counter', async () => {
      const stream = rawQuotaStream(svc.addr);
      try {
        stream.writeBytes(reportBytes([{ bucket: { tenant: 'poison' }, allowed: '18446744073709551615' }]));
        await stream.next();
        await sleep(2_200);
        expect((await check([['tenant', 'poison']])).statuses[0].limitRemaining).toBe(100);
        stream.writeBytes(reportBytes([{ bucket: { tenant: 'poison' }, allowed: 30 }]));
        await stream.next();
        await sleep(300);
        // 30 charged (less what the sliding window has let go if a window began since).
        expect((await check([['tenant', 'poison']])).statuses[0].limitRemaining).toBeLessThanOrEqual(85);
      } finally {
        stream.close();
      }
    });

    test('quota traffic charges every limit of a rate_limits rule, the daily one too', async () => {
      const stream = rawQuotaStream(svc.addr);
      try {
        stream.writeBytes(reportBytes([{ bucket: { daily: 'd' }, allowed: 50 }]));
        await stream.next();
        await sleep(300);
        const statuses = (await check([['daily', 'd']])).statuses;
        expect(statuses.map((s) => s.limitRemaining)).toContain(100);
      } finally {
        stream.close();
      }
    });
  });
});

describe('on the memory store', () => {
  test('however many streams and buckets peers open, RSS grows less than 128 MB and the rest is refused with RESOURCE_EXHAUSTED', async () => {
    // Reports as fast as the peer sends them: the byte budget, not the report credit, is what holds here.
    const svc: SpawnedService = await spawnService({ config: { 'quota.yaml': CONFIG }, env: { RLQS_MAX_REPORTS_PER_SECOND: '100000' } });
    const target = `127.0.0.1:${svc.grpcPort}`;
    const clients = Array.from({ length: 6 }, () => new grpc.Client(target, grpc.credentials.createInsecure()));
    const streams: RawQuotaStream[] = [];
    try {
      const rssBefore = svc.rssBytes();
      const longId = 'x'.repeat(1_000);
      // 6 connections x 17 streams (one past the per-connection cap) x 1,000 buckets of 1 KB ids.
      for (const client of clients) for (let s = 0; s < 17; s++) streams.push(rawQuotaStream(client));
      for (let batch = 0; batch < 10; batch++) {
        streams.forEach((stream, i) =>
          stream.writeBytes(
            reportBytes(Array.from({ length: 100 }, (_, b) => ({ bucket: { tenant: `${i}-${batch}-${b}-${longId}`.slice(0, 1_000) }, allowed: 1 }))),
          ),
        );
        await sleep(200);
      }
      await sleep(1_000);
      const codes = await Promise.all(streams.map((s) => Promise.race([s.status.then((st) => st.code), sleep(2_000).then(() => 'open')])));
      const growthMb = (svc.rssBytes() - rssBefore) / 2 ** 20;
      const exhausted = codes.filter((c) => c === grpc.status.RESOURCE_EXHAUSTED).length;
      console.log('many streams x buckets', {
        streams: streams.length,
        exhausted,
        open: codes.filter((c) => c === 'open').length,
        growthMb: growthMb.toFixed(1),
      });
      expect(growthMb).toBeLessThan(128);
      // At least the six streams past the per-connection cap, and those past the byte budget.
      expect(exhausted).toBeGreaterThan(6);
      expect(codes.every((c) => c === 'open' || c === grpc.status.RESOURCE_EXHAUSTED)).toBe(true);
    } finally {
      for (const s of streams) s.close();
      for (const c of clients) c.close();
      await svc.stop();
    }
  }, 90_000);

  test('streams that send nothing are ended at the first-report timeout, and a real proxy gets in and reaches 70% of its ask', async () => {
    const svc = await startTestService({
      config: { 'quota.yaml': CONFIG },
      env: { RLQS_MAX_STREAMS: '20', RLQS_FIRST_REPORT_TIMEOUT: '1500ms', RLQS_REPORT_INTERVAL: '500ms' },
    });
    const clients = Array.from({ length: 2 }, () => new grpc.Client(svc.addr, grpc.credentials.createInsecure()));
    const silent = Array.from({ length: 20 }, (_, i) => rawQuotaStream(clients[i % 2]));
    const proxy = new EnvoyQuotaClient({ targets: [svc.addr], domain: 'quota', reportIntervalMs: 500 });
    try {
      await sleep(200);
      const log = await driveLoad([{ proxy, bucket: { tenant: 'real' }, rate: 50 }], 6_000);
      const codes = await Promise.all(silent.map((s) => s.status.then((st) => st.code)));
      const late = admittedBetween(log, 3_500, 6_000);
      console.log('silent streams', { late, ask: 50 * 2.5, streamsOpened: proxy.stats.streamsOpened, codes });
      // Each ended at its deadline (one opened after the proxy's stream took a place is refused instead).
      expect(codes.every((c) => c === grpc.status.DEADLINE_EXCEEDED || c === grpc.status.RESOURCE_EXHAUSTED)).toBe(true);
      expect(codes.filter((c) => c === grpc.status.DEADLINE_EXCEEDED).length).toBeGreaterThanOrEqual(15);
      expect(late).toBeGreaterThanOrEqual(0.7 * 50 * 2.5);
    } finally {
      proxy.close();
      for (const s of silent) s.close();
      for (const c of clients) c.close();
      await svc.stop();
    }
  }, 30_000);

  test('proxies that reported once and went quiet stop counting within two intervals: the real proxy reaches 70% of its ask', async () => {
    const svc = await startTestService({ config: { 'quota.yaml': CONFIG }, env: { RLQS_REPORT_INTERVAL: '500ms', RLQS_MAX_STREAMS_PER_CONNECTION: '1000' } });
    const client = new grpc.Client(svc.addr, grpc.credentials.createInsecure());
    const once = Array.from({ length: 200 }, () => rawQuotaStream(client));
    const proxy = new EnvoyQuotaClient({ targets: [svc.addr], domain: 'quota', reportIntervalMs: 500 });
    try {
      for (const s of once) s.writeBytes(reportBytes([{ bucket: { tenant: 'crowd' }, allowed: 1 }]));
      await Promise.all(once.map((s) => s.next(5_000)));
      const log = await driveLoad([{ proxy, bucket: { tenant: 'crowd' }, rate: 50 }], 5_000);
      const late = admittedBetween(log, 2_000, 5_000);
      console.log('once-only streams', { late, ask: 150 });
      expect(late).toBeGreaterThanOrEqual(0.7 * 150);
    } finally {
      proxy.close();
      for (const s of once) s.close();
      client.close();
      await svc.stop();
    }
  }, 30_000);

  test('with 20,000 buckets subscribed, /metrics answers within 250 ms with per-rule sums and /rlqs stays under 5 MB', async () => {
    const svc = await startTestService({
      config: { 'quota.yaml': CONFIG },
      env: { RLQS_MAX_STREAMS_PER_CONNECTION: '20', RLQS_MAX_REPORTS_PER_SECOND: '100000' },
    });
    const client = new grpc.Client(svc.addr, grpc.credentials.createInsecure());
    const streams = Array.from({ length: 20 }, () => rawQuotaStream(client));
    try {
      streams.forEach((s, i) => s.writeBytes(reportBytes(Array.from({ length: 1_000 }, (_, b) => ({ bucket: { tenant: `s${i}-b${b}` }, allowed: 1 })))));
      await Promise.all(streams.map((s) => s.next(20_000)));
      // Past the gauges' 100 ms memo: this scrape walks every budget.
      await sleep(200);
      const started = performance.now();
      const metrics = await request(svc.service.httpPort, 'GET', '/metrics');
      const metricsMs = performance.now() - started;
      const rlqs = await request(svc.service.debugPort, 'GET', '/rlqs');
      console.log('20k buckets', {
        metricsMs: Math.round(metricsMs),
        rlqsBytes: rlqs.text.length,
        proxies: metricValue(metrics.text, 'ratelimit_service_rlqs_proxies', 'descriptor="tenant"'),
        budgets: JSON.parse(rlqs.text).budgets,
      });
      expect(metricsMs).toBeLessThan(250);
      expect(metricValue(metrics.text, 'ratelimit_service_rlqs_proxies', 'descriptor="tenant"')).toBe(20_000);
      expect(rlqs.text.length).toBeLessThan(5 * 2 ** 20);
      expect(JSON.parse(rlqs.text).budgets).toBe(20_000);
    } finally {
      for (const s of streams) s.close();
      client.close();
      await svc.stop();
    }
  }, 60_000);

  test("a proxy's freed share reaches the busy one within three report intervals of the switch", async () => {
    const svc = await startTestService({ config: { 'quota.yaml': CONFIG }, env: { GRPC_TRANSPORT: 'grpc-js' } });
    const [a, b] = Array.from({ length: 2 }, () => new EnvoyQuotaClient({ targets: [svc.addr], domain: 'quota', reportIntervalMs: 500 }));
    try {
      await driveLoad(
        [
          { proxy: a, bucket: { tenant: 'shift' }, rate: 200 },
          { proxy: b, bucket: { tenant: 'shift' }, rate: 10 },
        ],
        4_000,
      );
      // A stops (its bucket keeps being reported, idle); B offers twice the limit.
      const after = await driveLoad([{ proxy: b, bucket: { tenant: 'shift' }, rate: 200 }], 4_500);
      const admitted = admittedBetween(after, 1_500, 4_500);
      console.log('demand shift', { admitted, limit: 300 });
      expect(admitted).toBeGreaterThanOrEqual(0.7 * 100 * 3);
    } finally {
      a.close();
      b.close();
      await svc.stop();
    }
  }, 30_000);

  test('request limit overrides neither blind nor bloat the live view: they count under one rule, and /top/rules stays under 1 MB', async () => {
    const svc = await startTestService({ config: { 'quota.yaml': CONFIG } });
    try {
      for (let i = 0; i < 20; i++) await svc.client.shouldRateLimit({ domain: 'quota', descriptors: [{ entries: [{ key: 'user', value: 'mallory' }] }] });
      const overrides = Array.from({ length: 300 }, (_, i) =>
        svc.client.shouldRateLimit({
          domain: 'quota',
          descriptors: [
            {
              entries: [
                { key: `${'k'.repeat(200)}${i}`, value: `${'v'.repeat(200)}${i}` },
                { key: `${'q'.repeat(200)}${i}`, value: 'x' },
              ],
              limit: { requestsPerUnit: 1, unit: 'SECOND' },
            },
          ],
        }),
      );
      await Promise.all(overrides);
      const page = await request(svc.service.debugPort, 'GET', '/top/rules');
      const body = JSON.parse(page.text);
      const rules = body.rules.map((r: { rule: string }) => r.rule);
      console.log('overrides in the live view', { bytes: page.text.length, rules });
      expect(page.text.length).toBeLessThan(2 ** 20);
      const mallory = body.rules.find((r: { rule: string }) => r.rule === 'user_mallory');
      expect(mallory.denied).toBe(15);
      expect(rules.filter((r: string) => r !== 'user_mallory')).toEqual(['(request limit overrides)']);
    } finally {
      await svc.stop();
    }
  }, 30_000);
});
