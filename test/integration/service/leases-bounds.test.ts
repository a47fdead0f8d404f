import { untilUnstretched } from '../../helpers/deadline';
import { startDelayProxy, type DelayProxy } from '../../../bench/delay-proxy';
import { descriptor, rlsClient, type RlsClient, type RlsRequestInput } from '../../helpers/grpc-client';
import {
  admittedCalls,
  burst,
  countBetween,
  drive,
  pollUntil,
  requireSteady,
  startReplica,
  steadiness,
  untilElapsed,
  worstEstimate,
  worstSpan,
  worstSpanAt,
  type Replica,
} from '../../helpers/lease-replicas';
import { sleep, startRedis, type RedisServer } from '../../helpers/redis';

/**
 * The bound of leases (`L x (1 + ε) + L x LEASE_SYNC_INTERVAL / W` in any span of one window)
 * against callers who push: 2,000 calls in flight at once, mixed with other counters, a demand
 * exchange that breaks or answers late, more replicas than a ledger records, a restart under the
 * same REPLICA_ID, and a call of 3,500 descriptors. Replicas are processes of their own on one
 * redis-server (three of them record at most two per counter: LEASE_MAX_REPLICAS=2), and two more
 * reach it through a proxy that holds every answer 400 ms.
 */

const SYNC_MS = 250;
const TTL_MS = 2_000;
const HOUR = 'unit: hour, algorithm: fixed_window';
/** The limit of the bounded rules. */
const LIMIT = 100;
const boundOf = (windowMs: number): number => LIMIT * 1.05 + (LIMIT * SYNC_MS) / windowMs;
/** Long enough for every part to follow the demand of a load that just began: a window and two syncs. */
const WARM_UP_MS = 1_500;
/** How late the proxy passes Redis's answers on: longer than a sync interval. */
const SLOW_MS = 400;

const CONFIG = `domain: lease
descriptors:
  - key: hot
    rate_limit: {unit: minute, requests_per_unit: ${LIMIT}, lease: true}
  - key: wide
    rate_limit: {unit: minute, requests_per_unit: 1000000, lease: true}
  - key: plain
    rate_limit: {${HOUR}, requests_per_unit: 3}
  - key: legit
    rate_limit: {${HOUR}, requests_per_unit: 20}
  - key: four
    rate_limit: {unit: second, unit_multiplier: 4, requests_per_unit: ${LIMIT}, lease: true}
  - key: capped
    rate_limit: {unit: second, requests_per_unit: ${LIMIT}, lease: true}
  - key: slow
    rate_limit: {unit: second, requests_per_unit: ${LIMIT}, lease: true}
  - key: tally
    rate_limit: {${HOUR}, requests_per_unit: 1000000, lease: true}
  - key: n
    rate_limit: {${HOUR}, requests_per_unit: 1000000, lease: true}
  - key: np
    rate_limit: {${HOUR}, requests_per_unit: 1000000}
`;

const ask = (key: string, value: string, hits?: number): RlsRequestInput => ({
  domain: 'lease',
  descriptors: [descriptor([[key, value]], hits === undefined ? {} : { hitsAddend: { value: hits } })],
});

let redis: RedisServer;
let proxy: DelayProxy;
/** a, b, c: on Redis directly; s1, s2: through the proxy. */
let a: Replica;
let b: Replica;
let c: Replica;
let s1: Replica;
let s2: Replica;

const ENV = {
  BACKEND_TYPE: 'redis',
  // One process per replica (WORKERS=1: each worker would be a replica of its own).
  WORKERS: '1',
  STORE_TIMEOUT_MS: '250',
  LEASE_SYNC_INTERVAL: `${SYNC_MS}ms`,
  LEASE_TTL: `${TTL_MS}ms`,
  LEASE_MAX_REPLICAS: '2',
};

beforeAll(async () => {
  redis = await startRedis();
  proxy = await startDelayProxy({ targetPort: redis.port, replyDelayMs: SLOW_MS });
  const direct = { ...ENV, REDIS_URL: redis.url };
  // Through the proxy every Redis call answers after SLOW_MS: a deadline above it.
  const delayed = { ...ENV, REDIS_URL: `127.0.0.1:${proxy.port}`, STORE_TIMEOUT_MS: '1500' };
  [a, b, c, s1, s2] = await Promise.all([
    ...['a', 'b', 'c'].map((name) => startReplica({ name, config: { 'lease.yaml': CONFIG }, env: direct })),
    ...['s1', 's2'].map((name) => startReplica({ name, config: { 'lease.yaml': CONFIG }, env: delayed })),
  ]);
}, 60_000);

afterAll(async () => {
  await Promise.all([a, b, c, s1, s2].map((r) => r?.stop()));
  await proxy?.close();
  await redis?.stop();
});

const shareOf = (r: Replica, rule: string): Promise<number> => r.metric('ratelimit_service_lease_share', { domain: 'lease', descriptor: rule });
const settledOf = (r: Replica, rule: string): Promise<number> => r.metric('ratelimit_service_lease_settled_hits_total', { domain: 'lease', descriptor: rule });
const refusedOf = (r: Replica, reason: string): Promise<number> => r.metric('ratelimit_service_lease_refused_total', { reason });

/**
 * Opens the lease of each `key=value` on each replica with a call that charges nothing, and waits
 * until every one holds a part of every rule, the parts of a rule adding up to at most its rate
 * (`perSecond`) on several replicas.
 */
async function openLeases(replicas: readonly Replica[], pairs: readonly [string, string][], perSecond: number, timeoutMs = 3_000): Promise<void> {
  await Promise.all(replicas.flatMap((r) => pairs.map(([key, value]) => r.client.shouldRateLimit(ask(key, value, 0)))));
  const held = (shares: number[]): boolean => shares.every((s) => s > 0) && (replicas.length === 1 || shares.reduce((x, y) => x + y, 0) <= perSecond * 1.001);
  for (const [key] of pairs) {
    const shares = await pollUntil(() => Promise.all(replicas.map((r) => shareOf(r, key))), held, timeoutMs);
    expect({ key, shares, held: held(shares) }).toMatchObject({ held: true });
  }
}

/** The hits a counter holds in Redis (every window of it, read directly). */
function redisCount(counterKey: string): number {
  const keys = redis.server.cli('--scan', '--pattern', `{${counterKey}}:*`).split('\n').filter(Boolean);
  return keys.reduce((sum, key) => sum + Number(redis.server.cli('GET', key)), 0);
}

/** The members a hash of the counter's holds (its ledger: `|settled`, its lease demand: `|lease`). */
function membersOf(counterKey: string, suffix: string): string[] {
  return redis.server.cli('HKEYS', `{${counterKey}}${suffix}`).split('\n').filter(Boolean).sort();
}

/**
 * Makes the demand exchange of a counter fail from now on: every hash named after the counter
 * other than its ledger (the demand) becomes a string, which the exchange's script cannot read.
 */
function breakExchange(counterKey: string): string[] {
  const names = redis.server.cli('--scan', '--pattern', `*${counterKey}*`).split('\n').filter(Boolean);
  const broken = names.filter((k) => !k.endsWith('|settled') && redis.server.cli('TYPE', k).trim() === 'hash');
  for (const k of broken) redis.server.cli('SET', k, 'broken');
  return broken;
}

const median = (xs: readonly number[]): number => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];

describe('2,000 calls in flight at once on one replica holding a minute of 100 (bound 105.4)', () => {
  let attempt = 0;
  test.each([
    ['every counter leased and live, over one connection', 'fast', 1],
    ['every counter leased and live, over four connections', 'fast', 4],
    ['a plain counter in each call, over one connection', 'plain', 1],
    ['a plain counter in each call, over four connections', 'plain', 4],
  ] as const)('%s: at most the bound admitted, each hit in Redis once, and a caller beside them answered exactly', async (_label, shape, connections) => {
    attempt++;
    const hot = `h${attempt}`;
    const wide = `w${attempt}`;
    const legit = `l${attempt}`;
    await openLeases(
      [a],
      shape === 'fast'
        ? [
            ['hot', hot],
            ['wide', wide],
          ]
        : [['hot', hot]],
      LIMIT / 60,
    );
    const clients: RlsClient[] = Array.from({ length: connections }, () => rlsClient(`127.0.0.1:${a.run.grpcPort}`));
    try {
      const partner = (i: number): [string, string] => (shape === 'fast' ? ['wide', wide] : ['plain', `o${attempt}-${i}`]);
      const calls = burst(clients, 2_000, (i) => ({ domain: 'lease', descriptors: [descriptor([['hot', hot]]), descriptor([partner(i)])] }));
      // A legitimate caller on its own connection meanwhile: a plain limit of 20, exact.
      const legitReplies = [];
      for (let i = 0; i < 30; i++) legitReplies.push(await a.client.shouldRateLimit(ask('legit', legit)));
      const replies = await calls;
      const errors = replies.filter((r) => 'error' in r);
      const admitted = replies.filter((r) => 'reply' in r && r.reply.overallCode === 'OK').length;
      const counterKey = `lease|sw60000|hot=${hot}`;
      const inRedis = await pollUntil(
        async () => redisCount(counterKey),
        (n) => n >= admitted,
        3_000,
      );
      console.log('2,000 calls in flight', { shape, connections, admitted, inRedis, errors: errors.length });
      expect(errors).toEqual([]);
      expect(admitted).toBeLessThanOrEqual(boundOf(60_000));
      // The replica holds the whole limit: it admits it.
      expect(admitted).toBeGreaterThanOrEqual(95);
      expect(inRedis).toBe(admitted);
      expect(legitReplies.map((r) => r.statuses[0].limitRemaining)).toEqual([...Array.from({ length: 20 }, (_, i) => 19 - i), ...Array(10).fill(0)]);
      expect(legitReplies.map((r) => r.overallCode)).toEqual([...Array(20).fill('OK'), ...Array(10).fill('OVER_LIMIT')]);
    } finally {
      for (const client of clients) client.close();
    }
  });
});

test(`the demand exchange broken while two replicas hold parts of {4 s, ${LIMIT}}: they stop deciding in process before their entries can expire, and neither the sliding estimate nor a span of a window after the first passes the bound (${boundOf(4_000)})`, async () => {
  const W = 4_000;
  let attempt = 0;
  await untilUnstretched(async () => {
    attempt++;
    const value = `x${attempt}`;
    const counterKey = `lease|sw4000|four=${value}`;
    // The rule's share counts every lease of it: an earlier attempt's leave once unused for 2 x LEASE_TTL.
    if (attempt > 1) await sleep(2 * TTL_MS + 3 * SYNC_MS);
    await openLeases([a, b], [['four', value]], LIMIT / 4);
    const settledBefore = (await settledOf(a, 'four')) + (await settledOf(b, 'four'));
    const breakMs = 2_000;
    const duration = breakMs + TTL_MS + 2 * W;
    let broken: string[] = [];
    const log = await drive(
      [a, b].map((r) => ({ client: r.client, request: ask('four', value), rate: () => (1.5 * LIMIT * 1_000) / W })),
      duration,
      async (elapsed) => {
        await untilElapsed(elapsed, breakMs);
        broken = breakExchange(counterKey);
      },
    );
    const calls = admittedCalls(log);
    // Spans from the start would count the burst an idle sliding window admits at once, whoever
    // decides (its estimate then drains): spans from one window on, and the estimate from the first call.
    const worst = worstSpan(calls, W, W, duration);
    const estimate = worstEstimate(log, calls, W, 0, duration);
    const after = countBetween(calls, breakMs + TTL_MS, duration);
    const settled = (await settledOf(a, 'four')) + (await settledOf(b, 'four')) - settledBefore;
    const storeErrors = (await a.metric('ratelimit_service_lease_store_errors_total')) + (await b.metric('ratelimit_service_lease_store_errors_total'));
    console.log('exchange broken', { attempt, broken, worst, estimate, after, admitted: calls.length, settled, storeErrors, steadiness: steadiness(log, 250) });
    expect(broken).toHaveLength(1);
    expect(estimate).toBeLessThanOrEqual(boundOf(W));
    // Redis decides after the break: the limit is still reached.
    expect(after).toBeGreaterThanOrEqual((0.85 * LIMIT * (duration - breakMs - TTL_MS)) / W);
    // In process before the break only: what was settled was admitted by calls sent before the parts lapsed.
    expect(settled).toBeLessThanOrEqual(calls.filter((x) => x.sentMs < breakMs + TTL_MS).length);
    expect(storeErrors).toBeGreaterThan(0);
    expect(log.calls.flat().filter((x) => x.error !== undefined)).toEqual([]);
    requireSteady(log, 250, 250);
    expect(worst).toBeLessThanOrEqual(boundOf(W));
  }, 3);
}, 90_000);

test(`a demand exchange answering ${SLOW_MS} ms late (past the sync interval): parts still follow it, live from the time each exchange was sent; broken, they stop in time, and no span of a second passes the bound (${boundOf(1_000)})`, async () => {
  const counterKey = 'lease|sw1000|slow=x';
  await openLeases([s1, s2], [['slow', 'x']], LIMIT, 6_000);
  // A sync of these replicas takes SLOW_MS and a tick (about 650-750 ms). The load begins on both at
  // once from idle, a shift of demand: one replica may see its own demand of before beside the
  // other's new one, hold a small part for a sync, then use its room at once, and a sliding window's
  // estimate (which spreads the previous window's hits evenly) lets the next spans pass the bound
  // (up to 1.34 x L measured; README, leases: the bound is stated for steady demand). Steady from two
  // syncs and a window on.
  const warmUpMs = 3_000;
  // 2 s before the break after the warm-up: the rate the parts admit meanwhile rests on about 200 calls.
  const breakMs = 5_000;
  const duration = breakMs + TTL_MS + 2_500;
  const log = await drive(
    [s1, s2].map((r) => ({ client: r.client, request: ask('slow', 'x'), rate: () => 1.5 * LIMIT })),
    duration,
    async (elapsed) => {
      await untilElapsed(elapsed, breakMs);
      breakExchange(counterKey);
    },
  );
  const calls = admittedCalls(log);
  const { count: worst, atMs: worstAtMs } = worstSpanAt(calls, 1_000, warmUpMs, duration);
  const latency = (from: number, to: number): number =>
    median(
      log.calls
        .flat()
        .filter((x) => x.sentMs >= from && x.sentMs < to)
        .map((x) => x.doneMs - x.sentMs),
    );
  // Before the break the parts answer without Redis; after it has lapsed, Redis answers (late).
  const before = latency(warmUpMs, breakMs);
  const afterLapse = latency(breakMs + TTL_MS, duration);
  const rateBefore = (countBetween(calls, warmUpMs, breakMs) * 1_000) / (breakMs - warmUpMs);
  console.log('slow exchange', {
    worst,
    worstAtMs: Math.round(worstAtMs),
    breakMs,
    lapsedMs: breakMs + TTL_MS,
    before,
    afterLapse,
    rateBefore,
    admitted: calls.length,
  });
  expect(worst).toBeLessThanOrEqual(boundOf(1_000));
  expect(before).toBeLessThan(SLOW_MS / 2);
  expect(afterLapse).toBeGreaterThanOrEqual(SLOW_MS);
  expect(rateBefore).toBeGreaterThanOrEqual(0.85 * LIMIT);
  expect(log.calls.flat().filter((x) => x.error !== undefined)).toEqual([]);
});

test(`three replicas where a counter's ledger and exchange record two (LEASE_MAX_REPLICAS=2): the third decides nothing in process, says so in ratelimit_service_lease_refused_total{reason="replicas"}, and no span of a second passes the bound (${boundOf(1_000)})`, async () => {
  const replicas = [a, b, c];
  const refusedBefore = await Promise.all(replicas.map((r) => refusedOf(r, 'replicas')));
  await Promise.all(replicas.map((r) => r.client.shouldRateLimit(ask('capped', 'x', 0))));
  // Two hold parts; the third is refused.
  const shares = await pollUntil(
    () => Promise.all(replicas.map((r) => shareOf(r, 'capped'))),
    (s) => s.filter((x) => x > 0).length === 2,
    3_000,
  );
  await sleep(2 * SYNC_MS);
  const settledBefore = await Promise.all(replicas.map((r) => settledOf(r, 'capped')));
  const duration = 4_000;
  const log = await drive(
    replicas.map((r) => ({ client: r.client, request: ask('capped', 'x'), rate: () => LIMIT })),
    duration,
  );
  const settled = (await Promise.all(replicas.map((r) => settledOf(r, 'capped')))).map((n, i) => n - settledBefore[i]);
  const refused = (await Promise.all(replicas.map((r) => refusedOf(r, 'replicas')))).map((n, i) => n - refusedBefore[i]);
  const outside = shares.findIndex((x) => x === 0);
  const calls = admittedCalls(log);
  const worst = worstSpan(calls, 1_000, WARM_UP_MS, duration);
  console.log('3 replicas, 2 recorded', { shares, settled, refused, worst, perReplica: log.calls.map((cs) => cs.filter((x) => x.allowed).length) });
  expect(outside).toBeGreaterThanOrEqual(0);
  expect(settled[outside]).toBe(0);
  expect(refused[outside]).toBeGreaterThan(100);
  for (let i = 0; i < 3; i++) if (i !== outside) expect(settled[i]).toBeGreaterThan(0);
  expect(worst).toBeLessThanOrEqual(boundOf(1_000));
  expect(log.calls.flat().filter((x) => x.error !== undefined)).toEqual([]);
});

test('a replica restarted under the same REPLICA_ID (two workers) takes its own places again in the ledger and the exchange: every hit in Redis once', async () => {
  const counterKey = 'lease|fw3600000|tally=r';
  await untilUnstretched(async () => {
    const env = { ...ENV, REDIS_URL: redis.url, REPLICA_ID: 'pod-7', WORKERS: '2' };
    const admittedIn = async (r: Replica, n: number): Promise<number> => {
      // Two connections: the workers take one each.
      const clients = [r.client, rlsClient(`127.0.0.1:${r.run.grpcPort}`)];
      try {
        await Promise.all(clients.map((cl) => cl.shouldRateLimit(ask('tally', 'r', 0))));
        await sleep(4 * SYNC_MS);
        const replies = await Promise.all(Array.from({ length: n }, (_, i) => clients[i % 2].shouldRateLimit(ask('tally', 'r'))));
        requireOneHour(replies.map((x) => Number(x.statuses[0].durationUntilReset?.seconds ?? 0)));
        return replies.filter((x) => x.overallCode === 'OK').length;
      } finally {
        clients[1].close();
      }
    };
    const before = redisCount(counterKey);
    const first = await startReplica({ name: 'r1', config: { 'lease.yaml': CONFIG }, env });
    let admitted = await admittedIn(first, 30);
    await first.stop();
    const membersBefore = membersOf(counterKey, '|settled');
    const second = await startReplica({ name: 'r2', config: { 'lease.yaml': CONFIG }, env });
    try {
      admitted += await admittedIn(second, 20);
      const settled = await pollUntil(
        () => second.metric('ratelimit_service_lease_settled_hits_total', { domain: 'lease', descriptor: 'tally' }),
        (n) => n >= 15,
        3_000,
      );
      const inRedis = await pollUntil(
        async () => redisCount(counterKey) - before,
        (n) => n >= admitted,
        3_000,
      );
      const ledger = membersOf(counterKey, '|settled');
      const demand = membersOf(counterKey, '|lease');
      console.log('restart under REPLICA_ID', { admitted, inRedis, settled, membersBefore, ledger, demand });
      expect(admitted).toBe(50);
      expect(inRedis).toBe(50);
      expect(settled).toBeGreaterThan(0);
      for (const members of [membersBefore, ledger, demand]) {
        expect(members.length).toBeGreaterThan(0);
        for (const m of members) expect(['pod-7-0', 'pod-7-1']).toContain(m);
      }
    } finally {
      await second.stop();
    }
  });
});

/** Every answer of a case in one hour (the time to reset never grew); else it ran across the end of the hour. */
function requireOneHour(resetSeconds: readonly number[]): void {
  for (let i = 1; i < resetSeconds.length; i++) if (resetSeconds[i] > resetSeconds[0] + 1) throw new Error('the hour ended during the case');
}

test('a call of 3,500 descriptors on one live lease is decided in a single pass: faster than the same call on a plain rule through Redis', async () => {
  const N = 3_500;
  await openLeases([a], [['n', 'x']], Infinity);
  // Short names, one hit each (of a million an hour): the request fits in 64 KiB.
  const call = (key: string): RlsRequestInput => ({ domain: 'lease', descriptors: Array.from({ length: N }, () => descriptor([[key, 'x']])) });
  const leased = call('n');
  const plain = call('np');
  // Its answers are 80 KB: a client that takes them.
  const client = rlsClient(`127.0.0.1:${a.run.grpcPort}`, { maxReceiveBytes: 1 << 20 });
  const timeOf = async (req: RlsRequestInput): Promise<number> => {
    const t = performance.now();
    const reply = await client.shouldRateLimit(req, { deadlineMs: 20_000 });
    expect(reply.statuses).toHaveLength(N);
    return performance.now() - t;
  };
  // Warm: both compiled, both plans kept.
  for (let i = 0; i < 2; i++) {
    await timeOf(leased);
    await timeOf(plain);
  }
  const times = { leased: [] as number[], plain: [] as number[] };
  // Interleaved, so that the machine's load weighs on both alike.
  for (let i = 0; i < 7; i++) {
    times.leased.push(await timeOf(leased));
    times.plain.push(await timeOf(plain));
  }
  client.close();
  const result = { leased: Math.round(median(times.leased) * 10) / 10, plain: Math.round(median(times.plain) * 10) / 10 };
  console.log('3,500 descriptors, median ms', result, times);
  expect(result.leased).toBeLessThan(result.plain);
});
