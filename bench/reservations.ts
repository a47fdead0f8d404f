import { spawn, type ChildProcess } from 'node:child_process';
import { loadavg } from 'node:os';
import { buildConfig } from '../src/config/rule-tree';
import { parseConfigText } from '../src/config/rule-reader';
import { counterKey, counterKeyPrefix } from '../src/limiter/keys';
import { RateLimiter } from '../src/limiter/rate-limiter';
import type { Store } from '../src/limiter/store';
import type { RateLimitRequest, RateLimitResponse } from '../src/limiter/types';
import { createRedisClient, parseRedisTarget } from '../src/store/redis/connection';
import { RedisStore } from '../src/store/redis/redis-store';
import { loadSettings } from '../src/settings/settings';
import { freePort } from './processes';

/**
 * Reservations: what they cost, and what they prevent. Starts its own redis-server on a free port
 * and drives the limiter in this process (no gRPC: the store's part is what differs).
 *
 * Rate: closed loops of `concurrency` callers for `seconds` each, alternating, on Redis: plain checks
 * (one descriptor, hits_addend 0, as a post-paid budget is checked before each request) against
 * reserve + commit pairs (two calls per stream). Figures: calls (or pairs) per second, and the
 * ratio of pairs to checks.
 *
 * Overspend: `streams` concurrent streams, each costing `cost` tokens, start at once against a budget
 * of `budget` per hour (a run seldom crosses its end), in each mode: check only (hits_addend 0 before, the cost charged after,
 * dropped when it is over), post-paid (the same with count_denied_requests: charged past the budget),
 * reserve/commit (the cost reserved before, committed after). Figures: streams let through, tokens
 * they spent, and that as a multiple of the budget; recorded: what the budget's counter holds after.
 *
 * Shared descriptor: reserve + commit pairs started at a steady `shared-rate` a second for
 * `shared-seconds` on one descriptor (one book), with the store's default settings (RESERVATION_TTL,
 * RESERVATIONS_MAX_PER_KEY, RESERVATIONS_MAX_KEY_BYTES), at most 1,024 pairs in flight. Figures:
 * pairs a second completed with both answers OK, pairs refused or failed, the pacing's shortfall
 * (pairs the loop could not start in time), and a pair's p99 latency; the load average beside them.
 *
 *   node dist/bench/reservations.js [--seconds 5] [--concurrency 64] [--streams 100] [--cost 100] [--budget 1000]
 *                                   [--shared-seconds 60] [--shared-rate 1000]
 */

export interface RateRow {
  readonly mode: 'check' | 'reserve+commit';
  /** Calls per second for checks, pairs per second for reserve+commit. */
  readonly perSecond: number;
  readonly calls: number;
  readonly seconds: number;
}

export interface OverspendRow {
  readonly mode: 'check only' | 'post-paid' | 'reserve/commit';
  readonly admitted: number;
  readonly spent: number;
  readonly recorded: number;
  /** spent / budget. */
  readonly ofBudget: number;
}

/** Pairs on one shared descriptor at a steady rate. */
export interface SharedRow {
  /** Pairs a second asked for. */
  readonly target: number;
  readonly seconds: number;
  /** Pairs whose reserve and commit both answered OK. */
  readonly completed: number;
  /** completed / seconds. */
  readonly perSecond: number;
  /** Pairs whose reserve was OVER_LIMIT, or whose calls failed. */
  readonly refused: number;
  readonly failed: number;
  /** Pairs the loop could not start on time (the in-flight cap reached): the pacing's shortfall. */
  readonly late: number;
  /** A pair's latency (reserve sent to commit answered), ms. */
  readonly p99Ms: number;
  /** The load average when the run ended. */
  readonly loadAverage: readonly number[];
}

export interface ReservationBench {
  readonly rate: readonly RateRow[];
  readonly overspend: readonly OverspendRow[];
  readonly shared: SharedRow;
  readonly loadAverage: readonly number[];
}

const RULES = `
domain: bench
descriptors:
  - key: checked
    rate_limit: {unit: hour, requests_per_unit: BUDGET}
  - key: postpaid
    count_denied_requests: true
    rate_limit: {unit: hour, requests_per_unit: BUDGET}
  - key: reserved
    reservations: true
    rate_limit: {unit: hour, requests_per_unit: BUDGET}
  - key: fast
    reservations: true
    rate_limit: {unit: minute, requests_per_unit: 1000000000}
`;

function limiterOn(store: Store, budget: number): RateLimiter {
  const config = buildConfig([parseConfigText('bench.yaml', RULES.replaceAll('BUDGET', String(budget)), { defaultAlgorithm: 'sliding_window' })]);
  return new RateLimiter({ store, config: () => config, shadowMode: false, countDenied: false, defaultAlgorithm: 'sliding_window', nearLimitRatio: 0.8 });
}

const ask = (key: string, value: string, hits: number, tail?: [string, string]): RateLimitRequest => ({
  domain: 'bench',
  hitsAddend: 0,
  descriptors: [{ entries: [{ key, value }, ...(tail === undefined ? [] : [{ key: tail[0], value: tail[1] }])], hitsAddend: hits }],
});

const ok = (r: RateLimitResponse): boolean => r.overallCode === 'OK';
const UINT32_MAX = 4_294_967_295;

/** `streams` streams of `cost` against one budget, in one mode; the counter's usage is read back with a check. */
export async function overspend(
  limiter: RateLimiter,
  store: Store,
  mode: OverspendRow['mode'],
  o: { streams: number; cost: number; budget: number },
): Promise<OverspendRow> {
  const key = mode === 'check only' ? 'checked' : mode === 'post-paid' ? 'postpaid' : 'reserved';
  const value = `${mode}-${Date.now()}-${Math.random()}`;
  const ids = Array.from({ length: o.streams }, (_, i) => `stream-${i}`);
  const before = await Promise.all(
    ids.map((id) => limiter.shouldRateLimit(mode === 'reserve/commit' ? ask(key, value, o.cost, ['reserve', id]) : ask(key, value, 0))),
  );
  const running = ids.filter((_, i) => ok(before[i]));
  await Promise.all(
    running.map((id) => limiter.shouldRateLimit(mode === 'reserve/commit' ? ask(key, value, o.cost, ['commit', id]) : ask(key, value, o.cost))),
  );
  // What the counter holds: a check of it under a limit no usage reaches (the limit is not part of its key).
  const counter = counterKey(counterKeyPrefix('bench', 'sliding_window', 3_600_000), [{ key, value }]);
  const [probe] = await store.decide([{ key: counter, algorithm: 'sliding_window', windowMs: 3_600_000, limit: UINT32_MAX, hits: 0 }]);
  const recorded = UINT32_MAX - probe.remaining;
  return { mode, admitted: running.length, spent: running.length * o.cost, recorded, ofBudget: (running.length * o.cost) / o.budget };
}

/** `concurrency` closed loops for `seconds`: plain checks, or reserve + commit pairs. */
export async function rate(limiter: RateLimiter, mode: RateRow['mode'], o: { seconds: number; concurrency: number }): Promise<RateRow> {
  const until = performance.now() + o.seconds * 1000;
  let calls = 0;
  const started = performance.now();
  const loop = async (worker: number): Promise<void> => {
    let n = 0;
    while (performance.now() < until) {
      if (mode === 'check') {
        await limiter.shouldRateLimit(ask('fast', `w${worker}`, 0));
      } else {
        const id = `w${worker}-${n++}`;
        await limiter.shouldRateLimit(ask('fast', `w${worker}`, 10, ['reserve', id]));
        await limiter.shouldRateLimit(ask('fast', `w${worker}`, 7, ['commit', id]));
      }
      calls++;
    }
  };
  await Promise.all(Array.from({ length: o.concurrency }, (_, w) => loop(w)));
  const seconds = (performance.now() - started) / 1000;
  return { mode, perSecond: calls / seconds, calls, seconds };
}

/** Pairs in flight at most in the shared run: past it the loop waits (and counts the pairs it starts late). */
const SHARED_IN_FLIGHT = 1_024;

/**
 * Reserve + commit pairs on one descriptor, started at `rate` a second for `seconds` (a tick every
 * 10 ms starts the pairs due by then), each a reserve of 10 and a commit of 7 under an ID of its own.
 */
export async function sharedRate(limiter: RateLimiter, o: { seconds: number; rate: number }): Promise<SharedRow> {
  const value = `shared-${Date.now()}`;
  const latencies: number[] = [];
  let completed = 0;
  let refused = 0;
  let failed = 0;
  let late = 0;
  let started = 0;
  let inFlight = 0;
  const pending = new Set<Promise<void>>();
  const pair = async (n: number): Promise<void> => {
    const id = `pair-${n}`;
    const t0 = performance.now();
    try {
      const reserved = await limiter.shouldRateLimit(ask('fast', value, 10, ['reserve', id]));
      if (!ok(reserved)) {
        refused++;
        return;
      }
      const committed = await limiter.shouldRateLimit(ask('fast', value, 7, ['commit', id]));
      if (ok(committed)) {
        completed++;
        latencies.push(performance.now() - t0);
      } else refused++;
    } catch {
      failed++;
    }
  };
  const begin = performance.now();
  const end = begin + o.seconds * 1000;
  while (performance.now() < end) {
    const due = Math.floor(((performance.now() - begin) / 1000) * o.rate);
    while (started < due) {
      if (inFlight >= SHARED_IN_FLIGHT) {
        late += due - started;
        started = due;
        break;
      }
      inFlight++;
      const p = pair(started++).finally(() => {
        inFlight--;
        pending.delete(p);
      });
      pending.add(p);
    }
    await new Promise((r) => setTimeout(r, 10));
  }
  await Promise.all(pending);
  const seconds = (performance.now() - begin) / 1000;
  latencies.sort((x, y) => x - y);
  const p99Ms = latencies.length === 0 ? 0 : latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * 0.99))];
  return { target: o.rate, seconds, completed, perSecond: completed / seconds, refused, failed, late, p99Ms, loadAverage: loadavg() };
}

/** A redis-server of its own on a free loopback port, no persistence. */
export async function startBenchRedis(): Promise<{ url: string; stop(): void }> {
  const port = await freePort();
  const child: ChildProcess = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  const stop = (): void => {
    if (child.exitCode === null) child.kill('SIGKILL');
  };
  process.once('exit', stop);
  const url = `127.0.0.1:${port}`;
  const probe = new RedisStore({ client: createRedisClient(parseRedisTarget(loadSettings({ REDIS_URL: url }).redis)), timeoutMs: 1_000 });
  const ready = await probe.whenReady(5_000);
  await probe.close();
  if (!ready) {
    stop();
    throw new Error(`redis-server did not start on ${url}`);
  }
  return { url, stop };
}

export async function runReservationBench(o: {
  seconds: number;
  concurrency: number;
  streams: number;
  cost: number;
  budget: number;
  sharedSeconds: number;
  sharedRate: number;
}): Promise<ReservationBench> {
  const redis = await startBenchRedis();
  // The store as the service makes it, with the default reservation settings.
  const settings = loadSettings({ REDIS_URL: redis.url });
  const store = new RedisStore({
    client: createRedisClient(parseRedisTarget(settings.redis)),
    timeoutMs: 1_000,
    reservationTtlMs: settings.reservations.ttlMs,
    reservationsPerKey: settings.reservations.maxPerKey,
    reservationKeyBytes: settings.reservations.maxKeyBytes,
  });
  try {
    if (!(await store.whenReady(5_000))) throw new Error('the store did not connect');
    const limiter = limiterOn(store, o.budget);
    // Alternating rounds, so that a machine that gets busier slows both alike.
    const rounds: RateRow[] = [];
    for (let r = 0; r < 2; r++) {
      rounds.push(await rate(limiter, 'check', { seconds: o.seconds / 2, concurrency: o.concurrency }));
      rounds.push(await rate(limiter, 'reserve+commit', { seconds: o.seconds / 2, concurrency: o.concurrency }));
    }
    const merged = (mode: RateRow['mode']): RateRow => {
      const mine = rounds.filter((x) => x.mode === mode);
      const calls = mine.reduce((s, x) => s + x.calls, 0);
      const seconds = mine.reduce((s, x) => s + x.seconds, 0);
      return { mode, calls, seconds, perSecond: calls / seconds };
    };
    const overspendRows: OverspendRow[] = [];
    for (const mode of ['check only', 'post-paid', 'reserve/commit'] as const) overspendRows.push(await overspend(limiter, store, mode, o));
    const shared = await sharedRate(limiter, { seconds: o.sharedSeconds, rate: o.sharedRate });
    return { rate: [merged('check'), merged('reserve+commit')], overspend: overspendRows, shared, loadAverage: loadavg() };
  } finally {
    await store.close();
    redis.stop();
  }
}

/** The bench's figures as markdown tables. */
export function reservationTables(b: ReservationBench, o: { streams: number; cost: number; budget: number }): string {
  const [check, pairs] = b.rate;
  const lines = [
    '| on Redis, in process | per second | vs plain checks |',
    '| --- | ---: | ---: |',
    `| plain checks (calls) | ${Math.round(check.perSecond)} | 1.00 |`,
    `| reserve + commit (pairs) | ${Math.round(pairs.perSecond)} | ${(pairs.perSecond / check.perSecond).toFixed(2)} |`,
    '',
    `| ${o.streams} concurrent streams of ${o.cost} against ${o.budget} an hour | let through | tokens spent | x budget | recorded |`,
    '| --- | ---: | ---: | ---: | ---: |',
    ...b.overspend.map((r) => `| ${r.mode} | ${r.admitted} | ${r.spent} | ${r.ofBudget.toFixed(1)} | ${r.recorded} |`),
    '',
    `| one shared descriptor, ${b.shared.target} pairs a second asked for ${Math.round(b.shared.seconds)} s, default settings | pairs a second | refused | failed | started late | p99 of a pair | load average |`,
    '| --- | ---: | ---: | ---: | ---: | ---: | --- |',
    `| reserve + commit | ${Math.round(b.shared.perSecond)} | ${b.shared.refused} | ${b.shared.failed} | ${b.shared.late} | ${b.shared.p99Ms.toFixed(1)} ms | ${b.shared.loadAverage.map((x) => x.toFixed(2)).join(' ')} |`,
    '',
    `load average ${b.loadAverage.map((x) => x.toFixed(2)).join(' ')}`,
  ];
  return lines.join('\n');
}

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
}

if (require.main === module) {
  const o = {
    seconds: arg('seconds', 10),
    concurrency: arg('concurrency', 64),
    streams: arg('streams', 100),
    cost: arg('cost', 100),
    budget: arg('budget', 1000),
    sharedSeconds: arg('shared-seconds', 60),
    sharedRate: arg('shared-rate', 1000),
  };
  runReservationBench(o).then(
    (b) => {
      process.stdout.write(reservationTables(b, o) + '\n');
      process.exit(0);
    },
    (err: unknown) => {
      process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exit(1);
    },
  );
}
