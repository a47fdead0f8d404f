import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Stretched, untilUnstretched } from '../../helpers/deadline';
import { descriptor, grpc, rlsClient, type DecodedRateLimitResponse, type RlsRequestInput } from '../../helpers/grpc-client';
import {
  admittedCalls,
  mixedCalls,
  countBetween,
  drive,
  pollUntil,
  startReplica,
  untilElapsed,
  worstEstimate,
  worstSpan,
  type CallRecord,
  type Replica,
} from '../../helpers/lease-replicas';
import { sleep, startRedis, type RedisServer } from '../../helpers/redis';

/**
 * Leases (`lease: true`) in the built service: replicas in processes of their own on one
 * redis-server, driven by RLS clients above the limit. What is admitted in any span of a window
 * after a warm-up, how parts move when demand moves or a replica dies, what happens while Redis is
 * frozen and after, all-or-nothing calls, config errors, and a peer flooding the lease table.
 * Each case has its own rule (its own metric series) and its own descriptor values.
 */

const LIMIT = 100;
const SYNC_MS = 250;
const TTL_MS = 2_000;
/** The bound of any span of one window: the limit, 5%, and one sync interval of the limit's rate. */
const BOUND = LIMIT * 1.05 + (LIMIT * SYNC_MS) / 1_000;
/** Long enough for every part to follow the demand of a load that just began: a window and two syncs. */
const WARM_UP_MS = 1_500;
/** A long fixed window whose counts are exact (a case crossing its end is run again: see deadline.ts). */
const HOUR = 'unit: hour, algorithm: fixed_window';

const CONFIG = `domain: lease
descriptors:
  - key: even
    rate_limit: {unit: second, requests_per_unit: ${LIMIT}, lease: true}
  - key: shift
    rate_limit: {unit: second, requests_per_unit: ${LIMIT}, lease: true}
  - key: kill
    rate_limit: {unit: second, requests_per_unit: ${LIMIT}, lease: true}
  - key: tally
    rate_limit: {${HOUR}, requests_per_unit: 1000000, lease: true}
  - key: mixed
    rate_limit: {${HOUR}, requests_per_unit: 1000, lease: true}
  - key: plain
    rate_limit: {${HOUR}, requests_per_unit: 3}
  - key: crowd
    rate_limit: {${HOUR}, requests_per_unit: 20, lease: true}
`;

const ask = (key: string, value: string, hits?: number): RlsRequestInput => ({
  domain: 'lease',
  descriptors: [descriptor([[key, value]], hits === undefined ? {} : { hitsAddend: { value: hits } })],
});

const settledOf = (r: Replica, rule: string): Promise<number> => r.metric('ratelimit_service_lease_settled_hits_total', { domain: 'lease', descriptor: rule });

let redis: RedisServer;
/** a and b: the pair of most cases; c: the one killed; h: the one flooded (LEASE_MAX_KEYS=50). */
let a: Replica;
let b: Replica;
let c: Replica;
let h: Replica;

beforeAll(async () => {
  redis = await startRedis();
  // One process per replica (WORKERS=1: each worker would be a replica of its own), and a Redis
  // deadline that a loaded machine meets: these cases are about leases, not about Redis's latency.
  const env = {
    BACKEND_TYPE: 'redis',
    REDIS_URL: redis.url,
    WORKERS: '1',
    STORE_TIMEOUT_MS: '250',
    LEASE_SYNC_INTERVAL: `${SYNC_MS}ms`,
    LEASE_TTL: `${TTL_MS}ms`,
  };
  [a, b, c, h] = await Promise.all(
    ['a', 'b', 'c', 'h'].map((name) => startReplica({ name, config: { 'lease.yaml': CONFIG }, env: name === 'h' ? { ...env, LEASE_MAX_KEYS: '50' } : env })),
  );
}, 30_000);

afterAll(async () => {
  await Promise.all([a, b, c, h].map((r) => r?.stop()));
  await redis?.stop();
});

/** The hits a fixed-window counter holds in Redis (every window of it, read directly). */
function redisCount(counterKey: string): number {
  const keys = redis.server.cli('--scan', '--pattern', `{${counterKey}}:*`).split('\n').filter(Boolean);
  return keys.reduce((sum, key) => sum + Number(redis.server.cli('GET', key)), 0);
}

const shareOf = (r: Replica, rule: string): Promise<number> => r.metric('ratelimit_service_lease_share', { domain: 'lease', descriptor: rule });

/**
 * Opens the lease of `key=value` on each replica with a call that charges nothing, and waits until
 * every one holds a part of the rule (its second sync answered); on several replicas (rules of
 * LIMIT a second), until the parts add up to at most the limit (each has seen the others).
 */
async function openLeases(replicas: readonly Replica[], key: string, value: string): Promise<void> {
  await Promise.all(replicas.map((r) => r.client.shouldRateLimit(ask(key, value, 0))));
  const held = (shares: number[]): boolean => shares.every((s) => s > 0) && (shares.length === 1 || shares.reduce((x, y) => x + y, 0) <= LIMIT * 1.001);
  const shares = await pollUntil(() => Promise.all(replicas.map((r) => shareOf(r, key))), held, 3_000);
  expect({ key, shares, held: held(shares) }).toMatchObject({ held: true });
}

const perSecond = (n: number, fromMs: number, toMs: number): number => (n * 1_000) / (toMs - fromMs);

test('two replicas, each offered 1.5 times the limit, admit at most the limit + 5% + one sync interval of its rate in any second (and in the estimate from the first call), and settle exactly what they admitted', async () => {
  await openLeases([a, b], 'even', 'x');
  const duration = 4_000;
  const log = await drive(
    [a, b].map((r) => ({ client: r.client, request: ask('even', 'x'), rate: () => 1.5 * LIMIT })),
    duration,
  );
  const calls = admittedCalls(log);
  const worst = worstSpan(calls, 1_000, WARM_UP_MS, duration);
  // From the first call: the leases were idle (each half the limit), then both got busy at once.
  const estimate = worstEstimate(log, calls, 1_000, 0, duration);
  const rate = perSecond(countBetween(calls, WARM_UP_MS, duration), WARM_UP_MS, duration);
  const admitted = calls.length;
  // Every hit was decided in process (the leases were live from the start): each one settled once.
  const settled = await pollUntil(
    async () => (await settledOf(a, 'even')) + (await settledOf(b, 'even')),
    (n) => n >= admitted,
    3_000,
  );
  const slowestMs = Math.round(Math.max(...log.calls.flat().map((x) => x.doneMs - x.sentMs)));
  console.log('even demand, 2 x 150/s, limit 100/s', {
    slowestMs,
    worst,
    estimate,
    rate,
    admitted,
    settled,
    perReplica: log.calls.map((cs) => cs.filter((x) => x.allowed).length),
  });
  expect(worst).toBeLessThanOrEqual(BOUND);
  expect(estimate).toBeLessThanOrEqual(BOUND);
  expect(rate).toBeGreaterThanOrEqual(0.85 * LIMIT);
  expect(settled).toBe(admitted);
  expect(log.calls.flat().filter((x) => x.error !== undefined)).toEqual([]);
});

test('when demand moves from one replica to the other, the other admits the whole limit within 3 sync intervals and a window', async () => {
  await openLeases([a, b], 'shift', 'x');
  const switchMs = 2_500;
  const fromMs = switchMs + 3 * SYNC_MS + 1_000;
  const duration = fromMs + 1_250;
  const log = await drive(
    [
      { client: a.client, request: ask('shift', 'x'), rate: (t: number) => (t < switchMs ? 2 * LIMIT : 0) },
      { client: b.client, request: ask('shift', 'x'), rate: (t: number) => (t < switchMs ? 0.2 * LIMIT : 2 * LIMIT) },
    ],
    duration,
  );
  const all = admittedCalls(log);
  const worst = worstSpan(all, 1_000, WARM_UP_MS, duration);
  const estimate = worstEstimate(log, all, 1_000, 0, duration);
  // From 1.5 s on: its first calls wait a sync or two for the busy replica to make room (longer when
  // other test files load the machine and the syncs run late).
  const quiet = log.calls[1].filter((x) => x.sentMs >= 1_500 && x.sentMs < switchMs);
  const quietBefore = quiet.filter((x) => x.allowed).length / quiet.length;
  const after = perSecond(countBetween(admittedCalls(log, [1]), fromMs, duration), fromMs, duration);
  console.log('demand shift a -> b at 2.5 s, limit 100/s', { worst, estimate, quietBefore, after });
  expect(worst).toBeLessThanOrEqual(BOUND);
  expect(estimate).toBeLessThanOrEqual(BOUND);
  // The quiet replica got what it asked (20/s) before the switch: it keeps headroom above its demand.
  // Not always all of it: while the shared counter reads full when it settles (the busy replica's
  // clumped settlements weighed by a sliding window's estimate), its part is held at what it already
  // uses; 0.65 seen in CI runs on a loaded machine, 0.95-1 alone (README, leases).
  expect(quietBefore).toBeGreaterThanOrEqual(0.6);
  expect(after).toBeGreaterThanOrEqual(0.85 * LIMIT);
});

test("a SIGKILL'd replica's part goes to the other within LEASE_TTL, 3 sync intervals and a window", async () => {
  await openLeases([b, c], 'kill', 'x');
  const killMs = 1_500;
  const fromMs = killMs + TTL_MS + 3 * SYNC_MS + 1_000;
  const duration = fromMs + 1_250;
  let killedAt = 0;
  const log = await drive(
    [b, c].map((r) => ({ client: r.client, request: ask('kill', 'x'), rate: () => 2 * LIMIT })),
    duration,
    async (elapsed) => {
      await untilElapsed(elapsed, killMs);
      c.run.child.kill('SIGKILL');
      killedAt = elapsed();
      await c.run.exited;
    },
  );
  const all = admittedCalls(log);
  const worstAfter = worstSpan(all, 1_000, fromMs, duration);
  // Across the handover b's admissions step from half the limit to all of it, and any-alignment
  // spans of a sliding window's admissions overshoot at such a step (one exact counter offered
  // 50/s then 200/s: up to 130 of 100); the estimate the algorithm bounds is what must hold.
  const estimate = worstEstimate(log, all, 1_000, 0, duration);
  const worstAcross = worstSpan(all, 1_000, WARM_UP_MS / 2, duration);
  const survivorBefore = perSecond(countBetween(admittedCalls(log, [0]), WARM_UP_MS / 2, killMs), WARM_UP_MS / 2, killMs);
  const after = perSecond(countBetween(admittedCalls(log, [0]), fromMs, duration), fromMs, duration);
  console.log('c killed at 1.5 s, 2 x 200/s, limit 100/s', { killedAt, worstAfter, worstAcross, estimate, survivorBefore, after });
  expect(worstAfter).toBeLessThanOrEqual(BOUND);
  expect(estimate).toBeLessThanOrEqual(BOUND);
  // Before: b held about half the limit; after: all of it.
  expect(survivorBefore).toBeLessThanOrEqual(0.5 * BOUND);
  expect(after).toBeGreaterThanOrEqual(0.85 * LIMIT);
});

test('Redis frozen for 3 s: the part answers until LEASE_TTL, then UNAVAILABLE; once Redis is back every admitted hit is in its counter exactly once', async () => {
  await openLeases([a], 'tally', 'x');
  const errorsBefore = await a.metric('ratelimit_service_lease_store_errors_total');
  const stopMs = 700;
  const resumeMs = stopMs + 3_000;
  // Hits while the part surely lives (1.2 s after the stop, its TTL runs from a sync at most one
  // interval before); then checks (hits 0), which charge nothing whoever decides them; hits again
  // 300 ms after Redis is back.
  const hitsUntilMs = stopMs + 1_200;
  const hitsAgainMs = resumeMs + 300;
  const duration = hitsAgainMs + 1_000;
  let stoppedAt = 0;
  let resumedAt = 0;
  const log = await drive(
    [
      { client: a.client, request: ask('tally', 'x'), rate: (t: number) => (t < hitsUntilMs || t >= hitsAgainMs ? LIMIT : 0) },
      { client: a.client, request: ask('tally', 'x', 0), rate: (t: number) => (t >= hitsUntilMs && t < hitsAgainMs ? 20 : 0) },
    ],
    duration,
    async (elapsed) => {
      await untilElapsed(elapsed, stopMs);
      redis.server.pause();
      stoppedAt = elapsed();
      await untilElapsed(elapsed, resumeMs);
      redis.server.resume();
      resumedAt = elapsed();
    },
  );
  const [hits, checks] = log.calls;
  const sentIn = (calls: readonly CallRecord[], fromMs: number, toMs: number): CallRecord[] => calls.filter((x) => x.sentMs >= fromMs && x.sentMs < toMs);
  const answered = (calls: readonly CallRecord[]): string[] =>
    calls.map((x) => (x.allowed ? 'OK' : x.error === grpc.status.UNAVAILABLE ? 'UNAVAILABLE' : `other ${x.error}`));
  const frozenHits = sentIn(hits, stoppedAt, hitsUntilMs);
  const liveChecks = sentIn(checks, hitsUntilMs, stoppedAt + TTL_MS - SYNC_MS - 250);
  const lapsedChecks = sentIn(checks, stoppedAt + TTL_MS + 100, resumedAt - 300);
  const firstFailure = checks.find((x) => !x.allowed)?.sentMs;
  const admitted = hits.filter((x) => x.allowed).length;
  const admittedBeforeResume = hits.filter((x) => x.allowed && x.sentMs < resumedAt).length;
  const inRedis = await pollUntil(
    async () => redisCount('lease|fw3600000|tally=x'),
    (n) => n >= admitted,
    3_000,
  );
  const settled = await pollUntil(
    () => settledOf(a, 'tally'),
    (n) => n >= admittedBeforeResume,
    3_000,
  );
  const storeErrors = (await a.metric('ratelimit_service_lease_store_errors_total')) - errorsBefore;
  console.log('redis SIGSTOP for 3 s', {
    stoppedAt,
    resumedAt,
    frozenHits: frozenHits.length,
    firstFailureAfterStop: firstFailure === undefined ? undefined : firstFailure - stoppedAt,
    admitted,
    admittedBeforeResume,
    inRedis,
    settled,
    storeErrors,
  });
  expect(frozenHits.length).toBeGreaterThan(50);
  expect(new Set(answered(frozenHits))).toEqual(new Set(['OK']));
  expect(new Set(answered(liveChecks))).toEqual(new Set(['OK']));
  expect(lapsedChecks.length).toBeGreaterThan(5);
  expect(new Set(answered(lapsedChecks))).toEqual(new Set(['UNAVAILABLE']));
  // Back: every hit answered, and every admitted hit counted once (none lost, none twice).
  expect(new Set(answered(sentIn(hits, hitsAgainMs, duration)))).toEqual(new Set(['OK']));
  expect(inRedis).toBe(admitted);
  // The hits admitted from the part reached Redis as settlements (the ones after it, some by Redis directly).
  expect(settled).toBeGreaterThanOrEqual(admittedBeforeResume);
  expect(settled).toBeLessThanOrEqual(admitted);
  expect(storeErrors).toBeGreaterThan(0);
});

test('a call mixing a leased and a plain descriptor is all-or-nothing both ways', async () => {
  let attempt = 0;
  await untilUnstretched(async () => {
    attempt++;
    const [leased, plain, spare] = [`m${attempt}`, `p${attempt}`, `s${attempt}`];
    await openLeases([a], 'mixed', leased);
    // After a first attempt, the rule's share also counts that attempt's lease.
    await sleep(2 * SYNC_MS);
    const settledBefore = await settledOf(a, 'mixed');
    const { replies, call, both } = mixedCalls(a, leased, plain);
    const admitted: number[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await call(both());
      expect(r.statuses.map((s) => s.code)).toEqual(['OK', 'OK']);
      admitted.push(r.statuses[0].limitRemaining);
      expect(r.statuses[1].limitRemaining).toBe(2 - i);
    }
    expect(admitted[1]).toBe(admitted[0] - 1);
    expect(admitted[2]).toBe(admitted[1] - 1);
    // The plain limit denies: the leased hit, though within its part, is not charged.
    const denied = await call(both());
    expect(denied.overallCode).toBe('OVER_LIMIT');
    expect(denied.statuses.map((s) => s.code)).toEqual(['OK', 'OVER_LIMIT']);
    expect((await call(ask('mixed', leased, 0))).statuses[0].limitRemaining).toBe(admitted[2]);
    // The leased limit denies (more hits than its part): the plain one is not charged.
    const over = await call(both(5_000, spare));
    expect(over.statuses.map((s) => s.code)).toEqual(['OVER_LIMIT', 'OK']);
    expect((await call(ask('plain', spare, 0))).statuses[0].limitRemaining).toBe(3);
    expect((await call(ask('mixed', leased, 0))).statuses[0].limitRemaining).toBe(admitted[2]);
    requireOneWindow(replies);
    // Decided in process (settled, not charged by Redis directly), and in Redis exactly once.
    const settled = await pollUntil(
      async () => (await settledOf(a, 'mixed')) - settledBefore,
      (n) => n >= 3,
      3_000,
    );
    console.log('mixed call', { attempt, remaining: admitted, settled });
    expect(settled).toBe(3);
    expect(redisCount(`lease|fw3600000|mixed=${leased}`)).toBe(3);
    expect(redisCount(`lease|fw3600000|plain=${plain}`)).toBe(3);
    expect(redisCount(`lease|fw3600000|plain=${spare}`)).toBe(0);
  });
});

/**
 * Every admitted hit in the same window (the time to reset never grew); else the case ran across
 * the end of the hour. (A denial of more hits than the limit resets in a whole window: skipped.)
 */
function requireOneWindow(replies: readonly DecodedRateLimitResponse[]): void {
  let last = Infinity;
  for (const r of replies) {
    for (const s of r.statuses) {
      if (s.code !== 'OK') continue;
      const seconds = Number(s.durationUntilReset?.seconds ?? 0);
      if (seconds > last) throw new Stretched('the fixed window ended during the case');
      last = seconds;
    }
  }
}

describe('a lease refused at load', () => {
  const refused: [string, string, string][] = [
    ['sliding_log', '{unit: second, requests_per_unit: 5, algorithm: sliding_log, lease: true}', 'not available with algorithm sliding_log'],
    ['strict', '{unit: second, requests_per_unit: 5, strict: true, lease: true}', 'not available with strict: true'],
    ['unlimited', '{unlimited: true, lease: true}', 'not allowed with unlimited: true'],
  ];
  const cliJs = path.resolve(__dirname, '../../../dist/src/cli.js');

  test.each(refused)('by validate: %s, naming the file and the path', (name, limit, why) => {
    if (!fs.existsSync(cliJs)) throw new Error(`${cliJs} is missing: build first (npx tsc -p tsconfig.json, or make test)`);
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'slidegate-lease-validate-'));
    try {
      const file = path.join(dir, `${name}.yaml`);
      fs.writeFileSync(
        file,
        `domain: d\ndescriptors:\n  - key: ok\n    rate_limit: {unit: second, requests_per_unit: 5, lease: true}\n  - key: k\n    rate_limit: ${limit}\n`,
      );
      const run = spawnSync(process.execPath, [cliJs, 'validate', dir], { encoding: 'utf8', timeout: 15_000 });
      expect(run.status).toBe(1);
      expect(run.stderr).toContain(`${file}: descriptors[1].rate_limit.lease: ${why}`);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('by a reload, which keeps the running config and its leases', async () => {
    const file = path.join(a.configDir, 'lease.yaml');
    const errorsBefore = await a.metric('ratelimit_service_config_load_error');
    const linesBefore = a.lines.length;
    // The same rules with one limit changed and one that cannot be leased.
    fs.writeFileSync(
      file,
      CONFIG.replace(`requests_per_unit: ${LIMIT}, lease`, `requests_per_unit: ${LIMIT / 2}, lease`) +
        '  - key: log\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: sliding_log, lease: true}\n',
    );
    try {
      const errors = await pollUntil(
        () => a.metric('ratelimit_service_config_load_error'),
        (n) => n > errorsBefore,
        5_000,
      );
      expect(errors).toBeGreaterThan(errorsBefore);
      const rejected = a.lines.slice(linesBefore).find((l) => l.msg === 'config load failed; keeping the previous config');
      expect(String(rejected?.err)).toContain(`${file}: descriptors[7].rate_limit.lease: not available with algorithm sliding_log`);
      // Still the old limit, still leased: the lease of a new value opens and takes the whole limit.
      const reply = await a.client.shouldRateLimit(ask('even', 'after-reload'));
      expect(reply.statuses[0].currentLimit?.requestsPerUnit).toBe(LIMIT);
      await openLeases([a], 'even', 'after-reload');
    } finally {
      fs.writeFileSync(file, CONFIG);
    }
  });
});

test('a peer flooding a leased rule with distinct values fills at most LEASE_MAX_KEYS leases, the rest decided by Redis and counted, while a legit key keeps exact answers', async () => {
  const MAX = 50;
  const LEGIT_LIMIT = 20;
  let attempt = 0;
  await untilUnstretched(async () => {
    attempt++;
    const legit = `legit${attempt}`;
    // An attempt after one that crossed the end of the hour starts once its leases are dropped.
    expect(
      await pollUntil(
        () => h.metric('ratelimit_service_leases'),
        (n) => n === 0,
        3 * TTL_MS,
        250,
      ),
    ).toBe(0);
    await openLeases([h], 'crowd', legit);
    const held = await h.metric('ratelimit_service_leases');
    const refusedBefore = await h.metric('ratelimit_service_lease_refused_total', { reason: 'keys' });
    const hostile = rlsClient(`127.0.0.1:${h.run.grpcPort}`);
    const VALUES = 2_000;
    let next = 0;
    let flooding = true;
    const startMs = performance.now();
    let floodMs = 0;
    const flood = Promise.all(
      Array.from({ length: 32 }, async () => {
        while (next < VALUES) {
          const i = next++;
          await hostile.shouldRateLimit(ask('crowd', `h${attempt}-${i}`)).catch(() => undefined);
        }
      }),
    ).finally(() => {
      flooding = false;
      floodMs = performance.now() - startMs;
    });
    let maxLeases = 0;
    const gauge = (async () => {
      while (flooding) {
        maxLeases = Math.max(maxLeases, await h.metric('ratelimit_service_leases'));
        await sleep(50);
      }
    })();
    const replies: DecodedRateLimitResponse[] = [];
    for (let i = 0; i < LEGIT_LIMIT + 10; i++) {
      replies.push(await h.client.shouldRateLimit(ask('crowd', legit)));
      if (flooding) await sleep(20);
    }
    await Promise.all([flood, gauge]);
    hostile.close();
    const refused = (await h.metric('ratelimit_service_lease_refused_total', { reason: 'keys' })) - refusedBefore;
    requireOneWindow(replies);
    const legitAdmitted = replies.filter((r) => r.overallCode === 'OK').length;
    console.log('flood of 2000 values, LEASE_MAX_KEYS 50', {
      held,
      maxLeases,
      refused,
      floodMs: Math.round(floodMs),
      legitAdmitted,
      legitInRedis: redisCount(`lease|fw3600000|crowd=${legit}`),
    });
    expect(held).toBe(1);
    expect(maxLeases).toBeLessThanOrEqual(MAX);
    expect(await h.metric('ratelimit_service_leases')).toBeLessThanOrEqual(MAX);
    // Each flooding value is called once: it took one of the 49 free leases, or was refused one.
    // A lease unused for 2 x LEASE_TTL leaves, so a longer flood may take 49 more per such span.
    expect(refused).toBeLessThanOrEqual(VALUES - (MAX - 1));
    expect(refused).toBeGreaterThanOrEqual(VALUES - (MAX - 1) * (1 + Math.floor(floodMs / (2 * TTL_MS))));
    // The legit key: its limit exactly, in order, then denials.
    expect(replies.map((r) => r.statuses[0].limitRemaining)).toEqual([
      ...Array.from({ length: LEGIT_LIMIT }, (_, i) => LEGIT_LIMIT - 1 - i),
      ...Array(10).fill(0),
    ]);
    expect(legitAdmitted).toBe(LEGIT_LIMIT);
    await pollUntil(
      async () => redisCount(`lease|fw3600000|crowd=${legit}`),
      (n) => n >= LEGIT_LIMIT,
      3_000,
    );
    expect(redisCount(`lease|fw3600000|crowd=${legit}`)).toBe(LEGIT_LIMIT);
  });
});
