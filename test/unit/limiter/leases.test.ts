import { buildConfig } from '../../../src/config/rule-tree';
import { parseConfigText } from '../../../src/config/rule-reader';
import { LeasedStore, type LeaseLimits } from '../../../src/limiter/leases';
import { RateLimiter } from '../../../src/limiter/rate-limiter';
import { LIMITER_DEFAULTS } from '../../helpers/limiter-defaults';
import { RecordingStore } from '../../helpers/recording-store';
import { StoreUnavailableError, type CounterRequest, type SettleAnswer, type SettleCall, type Settlements } from '../../../src/limiter/store';
import { MemoryExchange } from '../../../src/store/memory-exchange';
import { MemoryStore } from '../../../src/store/memory-store';
import { FakeClock } from '../../helpers/fake-clock';
import { SwitchableStore } from '../../helpers/switchable-store';

/** Leases on a fake clock: replicas sharing one memory store and exchange, synced by tick(). */

const SYNC_MS = 250;
const TTL_MS = 1_000;
const LIMITS: LeaseLimits = { syncIntervalMs: SYNC_MS, ttlMs: TTL_MS, maxLeases: 100, maxBytes: 1 << 20 };

const LEASED: CounterRequest = Object.freeze({
  key: 'd_k_v',
  limit: 100,
  windowMs: 1_000,
  algorithm: 'sliding_window',
  hits: 1,
  burst: 100,
  subWindows: 1,
  lease: 'd.k',
});
const PLAIN: CounterRequest = Object.freeze({ key: 'd_p_v', limit: 5, windowMs: 60_000, algorithm: 'fixed_window', hits: 1, burst: 5, subWindows: 1 });

/** The memory store's settlements, with faults: `down` fails them, `loseReplies` applies them and fails. */
class FlakyLedger implements Settlements {
  down = false;
  loseReplies = false;
  calls = 0;
  constructor(private readonly inner: Settlements) {}

  settle(call: SettleCall): Promise<SettleAnswer> {
    this.calls++;
    if (this.down) return Promise.reject(new StoreUnavailableError('down'));
    const answer = this.inner.settle(call);
    return this.loseReplies ? answer.then(() => Promise.reject(new StoreUnavailableError('reply lost'))) : answer;
  }
}

function world(limits: Partial<LeaseLimits> = {}) {
  const clock = new FakeClock(1_000_000_000);
  const shared = new MemoryStore({ clock, maxKeys: 10_000, sweepIntervalMs: 0 });
  const exchange = new MemoryExchange({ clock });
  const ledger = new FlakyLedger(shared.settlements);
  const inner = new SwitchableStore(shared);
  const refused: number[] = [];
  const replica = (replicaId: string): LeasedStore =>
    new LeasedStore({
      store: inner,
      settlements: ledger,
      exchange,
      clock,
      replicaId,
      limits: { ...LIMITS, ...limits },
      observer: { onLeaseRefused: () => refused.push(clock.nowMs()) },
    });
  return { clock, shared, exchange, ledger, inner, replica, refused };
}

/** The shared counter's usage (a check with hits 0 on the store itself). */
async function usedOf(shared: MemoryStore, c: CounterRequest): Promise<number> {
  const [d] = await shared.decide([{ ...c, hits: 0, lease: undefined }]);
  return c.limit - d.remaining;
}

interface Traffic {
  readonly replica: LeasedStore;
  /** Calls per second, by time since the start (ms). */
  readonly rate: (atMs: number) => number;
  due: number;
  readonly admitted: number[];
  /** Admitted per 10 ms step. */
  readonly steps: number[];
}

/**
 * Drives replicas at their rates in 10 ms steps for `ms`, each tick()ed every SYNC_MS (a dead one
 * neither calls nor ticks from `deadAtMs`); returns each one's admitted count per 10 ms step.
 */
async function drive(
  clock: FakeClock,
  traffic: Traffic[],
  ms: number,
  dead?: { index: number; atMs: number },
  counter: CounterRequest = LEASED,
): Promise<void> {
  const start = clock.nowMs();
  for (let t = 0; t < ms; t += 10) {
    for (let r = 0; r < traffic.length; r++) {
      const tr = traffic[r];
      let admitted = 0;
      if (!(dead !== undefined && dead.index === r && t >= dead.atMs)) {
        tr.due += tr.rate(t) / 100;
        while (tr.due >= 1) {
          tr.due -= 1;
          const [d] = await tr.replica.decide([counter]);
          if (d.allowed) admitted++;
        }
      }
      tr.steps.push(admitted);
    }
    clock.advance(10);
    if ((clock.nowMs() - start) % SYNC_MS === 0) {
      await Promise.all(traffic.filter((_, r) => !(dead !== undefined && dead.index === r && t >= dead.atMs)).map((tr) => tr.replica.tick()));
    }
  }
}

function traffic(replica: LeasedStore, rate: (atMs: number) => number): Traffic {
  return { replica, rate, due: 0, admitted: [], steps: [] };
}

/** The most admitted by all together in any span of `spanMs` starting at or after `fromMs`. */
function worstSpan(all: Traffic[], fromMs: number, spanMs = 1_000, toMs = Infinity): number {
  const n = Math.min(all[0].steps.length, Math.floor(toMs / 10));
  const total = Array.from({ length: n }, (_, i) => all.reduce((s, tr) => s + tr.steps[i], 0));
  const w = spanMs / 10;
  let worst = 0;
  for (let i = Math.floor(fromMs / 10); i + w <= n; i++) {
    let s = 0;
    for (let j = i; j < i + w; j++) s += total[j];
    worst = Math.max(worst, s);
  }
  return worst;
}

/**
 * The highest sliding-window estimate of all replicas' hits together after `fromMs` (what one
 * sliding_window counter holds under its limit): the previous window's hits weighted by the part
 * of it still in the span, plus the current window's. `startMs`: the clock when drive() began.
 */
function worstEstimate(all: Traffic[], startMs: number, fromMs: number, windowMs = 1_000): number {
  const n = all[0].steps.length;
  const total = Array.from({ length: n }, (_, i) => all.reduce((s, tr) => s + tr.steps[i], 0));
  const hitsIn = (from: number, to: number): number => {
    let s = 0;
    for (let i = 0; i < n; i++) if (startMs + 10 * i >= from && startMs + 10 * i < to) s += total[i];
    return s;
  };
  let worst = 0;
  for (let i = Math.floor(fromMs / 10); i < n; i++) {
    const at = startMs + 10 * i;
    const windowStart = Math.floor(at / windowMs) * windowMs;
    const estimate = hitsIn(windowStart - windowMs, windowStart) * (1 - (at - windowStart) / windowMs) + hitsIn(windowStart, at + 1);
    worst = Math.max(worst, estimate);
  }
  return worst;
}

function admittedBetween(tr: Traffic, fromMs: number, toMs: number): number {
  let s = 0;
  for (let i = Math.floor(fromMs / 10); i < Math.floor(toMs / 10) && i < tr.steps.length; i++) s += tr.steps[i];
  return s;
}

describe('LeasedStore', () => {
  test('a call without leased counters goes to the store as it is', async () => {
    const w = world();
    const a = w.replica('a');
    const decisions = await a.decide([PLAIN, PLAIN]);
    expect(decisions.map((d) => d.allowed)).toEqual([true, true]);
    expect(a.decideNow([PLAIN])).toBeUndefined();
    expect(a.size).toBe(0);
    expect(await usedOf(w.shared, PLAIN)).toBe(2);
  });

  test('a new lease is decided by the store until the others have seen it (its second sync), then in process with no store call', async () => {
    const w = world();
    const a = w.replica('a');
    expect(a.decideNow([LEASED])).toBeUndefined();
    const [first] = await a.decide([LEASED]);
    expect(first.allowed).toBe(true);
    expect(await usedOf(w.shared, LEASED)).toBe(1);
    // Its first sync (when it opened) published its demand: no part yet.
    expect(a.view(1).leases[0]).toMatchObject({ live: false });
    expect(a.decideNow([LEASED])).toBeUndefined();
    w.clock.advance(SYNC_MS);
    await a.tick();
    const settles = w.ledger.calls;
    const local = a.decideNow([LEASED]);
    expect(local).toBeDefined();
    expect(local![0].allowed).toBe(true);
    // Decided here: the store has not seen it yet; the next sync settles it, once.
    expect(await usedOf(w.shared, LEASED)).toBe(1);
    expect(w.ledger.calls).toBe(settles);
    w.clock.advance(SYNC_MS);
    await a.tick();
    expect(await usedOf(w.shared, LEASED)).toBe(2);
    expect(a.view(10).leases[0]).toMatchObject({ rule: 'd.k', counter: 'd_k_v', settled: 1, pending: 0, live: true });
  });

  test('alone, a replica holds the whole limit: 100 of 100 in a window, then denials', async () => {
    const w = world();
    const a = w.replica('a');
    await a.decide([{ ...LEASED, hits: 0 }]);
    await a.tick();
    let allowed = 0;
    for (let i = 0; i < 150; i++) if ((await a.decide([LEASED]))[0].allowed) allowed++;
    expect(allowed).toBe(100);
  });

  test("the calls the store decided before the lease's first sync count against its part", async () => {
    const w = world();
    const a = w.replica('a');
    const small: CounterRequest = { ...LEASED, key: 'd_small', limit: 5, burst: 5 };
    // The first call opens the lease: its first settlement reaches the store before the call itself.
    let allowed = 0;
    for (let i = 0; i < 10; i++) if ((await a.decide([small]))[0].allowed) allowed++;
    expect(allowed).toBe(5);
    w.clock.advance(SYNC_MS);
    await a.tick();
    expect(await usedOf(w.shared, small)).toBe(5);
  });

  test('two replicas with even demand above the limit admit the limit together in any span of a window', async () => {
    const w = world();
    const all = [traffic(w.replica('a'), () => 150), traffic(w.replica('b'), () => 150)];
    await drive(w.clock, all, 10_000);
    // After the first second (both leases known to each other): the bound.
    const worst = worstSpan(all, 2_000);
    expect(worst).toBeLessThanOrEqual(105);
    expect(worst).toBeGreaterThanOrEqual(95);
    expect(admittedBetween(all[0], 2_000, 10_000)).toBeGreaterThan(0.4 * 800);
    expect(admittedBetween(all[1], 2_000, 10_000)).toBeGreaterThan(0.4 * 800);
  });

  test.each([
    ['fixed_window', { algorithm: 'fixed_window' }, 100],
    // A bucket admits its burst, then its rate: 100 + 100 in the first second, 100 in any later one.
    ['token_bucket', { algorithm: 'token_bucket', burst: 100 }, 100],
    ['sliding_window with 10 sub-windows', { subWindows: 10 }, 100],
  ] as const)('%s: two replicas with even demand admit the limit together', async (_label, shape, limit) => {
    const w = world();
    const counter: CounterRequest = { ...LEASED, key: `d_${_label}`, ...shape };
    const all = [traffic(w.replica('a'), () => 150), traffic(w.replica('b'), () => 150)];
    await drive(w.clock, all, 8_000, undefined, counter);
    const worst = worstSpan(all, 2_000);
    expect(worst).toBeLessThanOrEqual(limit * 1.05);
    expect(worst).toBeGreaterThanOrEqual(limit * 0.9);
  });

  test('replicas idle with their leases open, then busy at once, keep the estimate of all their hits within the limit and one sync interval of its rate', async () => {
    const w = world();
    const replicas = [w.replica('a'), w.replica('b')];
    for (const r of replicas) await r.decide([{ ...LEASED, hits: 0 }]);
    for (let i = 0; i < 3; i++) {
      w.clock.advance(SYNC_MS);
      await Promise.all(replicas.map((r) => r.tick()));
    }
    // Each replica holds half the limit, having asked for nothing; then both ask twice the limit.
    const startMs = w.clock.nowMs();
    const all = replicas.map((r) => traffic(r, () => 200));
    await drive(w.clock, all, 3_000);
    // Spans of any alignment overshoot after a cold start whoever decides (the first hits fill the
    // end of a window, whose estimate then drains): the estimate is what the algorithm holds.
    expect(worstEstimate(all, startMs, 0)).toBeLessThanOrEqual(105 + 25);
  });

  test('a new counter busy on two replicas at once: the estimate of all their hits stays within the limit and one sync interval of its rate', async () => {
    const w = world();
    const startMs = w.clock.nowMs();
    const all = [w.replica('a'), w.replica('b')].map((r) => traffic(r, () => 1_000));
    await drive(w.clock, all, 3_000);
    expect(worstEstimate(all, startMs, 0)).toBeLessThanOrEqual(105 + 25);
  });

  test('uneven demand (3:1): the quiet replica gets what it asks, the busy one the rest', async () => {
    const w = world();
    const busy = traffic(w.replica('a'), () => 120);
    const quiet = traffic(w.replica('b'), () => 40);
    await drive(w.clock, [busy, quiet], 10_000);
    expect(worstSpan([busy, quiet], 2_000)).toBeLessThanOrEqual(105);
    // The quiet one asks 40/s and gets all of it (its part keeps 25% headroom: 50/s); the busy one the other 50/s.
    expect(admittedBetween(quiet, 2_000, 10_000) / 8).toBeGreaterThanOrEqual(39);
    expect(admittedBetween(busy, 2_000, 10_000) / 8).toBeGreaterThanOrEqual(48);
  });

  test('a demand shift: the replica whose demand rises gets the freed part within 3 sync intervals', async () => {
    const w = world();
    const a = traffic(w.replica('a'), (t) => (t < 5_000 ? 200 : 0));
    const b = traffic(w.replica('b'), (t) => (t < 5_000 ? 20 : 200));
    await drive(w.clock, [a, b], 10_000);
    // Steady before the switch: within 5%. Across it, the bound's second term (one sync interval
    // of the limit's rate, 25): b's admissions rise within a window, which a sliding window's
    // estimate weighs as if they were even (108 measured).
    expect(worstSpan([a, b], 2_000, 1_000, 5_000)).toBeLessThanOrEqual(105);
    expect(worstSpan([a, b], 2_000)).toBeLessThanOrEqual(105 + 25);
    // From 3 intervals + one window after the switch, b admits the whole limit.
    const from = 5_000 + 3 * SYNC_MS + 1_000;
    expect(admittedBetween(b, from, 10_000) / ((10_000 - from) / 1_000)).toBeGreaterThanOrEqual(95);
  });

  test('a replica that dies stops holding its part within its TTL and 3 sync intervals', async () => {
    const w = world();
    const a = traffic(w.replica('a'), () => 200);
    const b = traffic(w.replica('b'), () => 200);
    await drive(w.clock, [a, b], 10_000, { index: 0, atMs: 4_000 });
    expect(worstSpan([a, b], 2_000)).toBeLessThanOrEqual(105);
    const from = 4_000 + TTL_MS + 3 * SYNC_MS + 1_000;
    expect(admittedBetween(b, from, 10_000) / ((10_000 - from) / 1_000)).toBeGreaterThanOrEqual(95);
  });

  test('the store down: the part holds for its TTL, then calls fail; what was admitted is settled once when it is back', async () => {
    const w = world();
    const a = w.replica('a');
    await a.decide([{ ...LEASED, hits: 0 }]);
    await a.tick();
    w.ledger.down = true;
    w.inner.down = true;
    let admitted = 0;
    for (let i = 0; i < 30; i++) if ((await a.decide([LEASED]))[0].allowed) admitted++;
    expect(admitted).toBe(30);
    w.clock.advance(SYNC_MS);
    await a.tick();
    // Still live (heard from the store within the TTL): decided here.
    expect(a.decideNow([LEASED])?.[0].allowed).toBe(true);
    admitted++;
    w.clock.advance(TTL_MS);
    await a.tick();
    expect(a.decideNow([LEASED])).toBeUndefined();
    await expect(a.decide([LEASED])).rejects.toBeInstanceOf(StoreUnavailableError);
    // Back, but the first settlement's reply is lost after it was applied: the resend charges nothing.
    w.ledger.down = false;
    w.inner.down = false;
    w.ledger.loseReplies = true;
    w.clock.advance(SYNC_MS);
    await a.tick();
    w.ledger.loseReplies = false;
    w.clock.advance(SYNC_MS);
    await a.tick();
    w.clock.advance(SYNC_MS);
    await a.tick();
    expect(await usedOf(w.shared, LEASED)).toBe(admitted);
    expect(a.view(1).leases[0]).toMatchObject({ settled: admitted, pending: 0, live: true });
  });

  test('a call mixing leased and other counters is all-or-nothing', async () => {
    const w = world();
    const a = w.replica('a');
    await a.decide([{ ...LEASED, hits: 0 }]);
    await a.tick();
    // The plain counter (5 a minute) denies the sixth call: its leased hit is not charged.
    for (let i = 0; i < 5; i++) expect((await a.decide([LEASED, PLAIN])).map((d) => d.allowed)).toEqual([true, true]);
    expect((await a.decide([LEASED, PLAIN])).map((d) => d.allowed)).toEqual([true, false]);
    w.clock.advance(SYNC_MS);
    await a.tick();
    expect(await usedOf(w.shared, LEASED)).toBe(5);
    // A leased counter that denies (hits over its part) charges the plain one nothing.
    const other: CounterRequest = { ...PLAIN, key: 'd_p_w' };
    const big: CounterRequest = { ...LEASED, hits: 96 };
    expect((await a.decide([big, other])).map((d) => d.allowed)).toEqual([false, true]);
    expect(await usedOf(w.shared, other)).toBe(0);
  });

  test('a counter refused a lease is counted once per call, as the limiter asks (decideNow, then decide)', async () => {
    const w = world({ maxLeases: 1 });
    const a = w.replica('a');
    const keyed = (k: string): CounterRequest => ({ ...LEASED, key: k });
    await a.decide([keyed('x')]);
    expect(w.refused).toEqual([]);
    for (let i = 1; i <= 3; i++) {
      expect(a.decideNow([keyed('y')])).toBeUndefined();
      expect((await a.decide([keyed('y')]))[0].allowed).toBe(true);
      expect(w.refused).toHaveLength(i);
    }
    expect(await usedOf(w.shared, keyed('y'))).toBe(3);
  });

  test('leases are bounded: a counter past maxLeases is decided by the store, and an idle lease leaves', async () => {
    const w = world({ maxLeases: 2 });
    const a = w.replica('a');
    const keyed = (k: string): CounterRequest => ({ ...LEASED, key: k });
    for (const k of ['x', 'y', 'z']) await a.decide([keyed(k)]);
    expect(a.size).toBe(2);
    expect(w.refused.length).toBeGreaterThan(0);
    await a.tick();
    // z is exact through the store all the same.
    expect(await usedOf(w.shared, keyed('z'))).toBe(1);
    // Unused for two TTLs: withdrawn and dropped.
    for (let t = 0; t <= 2 * TTL_MS + SYNC_MS; t += SYNC_MS) {
      w.clock.advance(SYNC_MS);
      await a.tick();
    }
    expect(a.size).toBe(0);
    expect(await w.exchange.exchangeDemand({ key: 'x|lease', ttlMs: TTL_MS, withdraw: 'nobody' })).toEqual([]);
  });

  test('through the limiter: a leased rule is answered without a store call once synced, a plain one with one; each counter names its rule', async () => {
    const w = world();
    const recording = new RecordingStore(w.inner);
    const leased = new LeasedStore({ store: recording, settlements: w.ledger, exchange: w.exchange, clock: w.clock, replicaId: 'a', limits: LIMITS });
    const config = buildConfig([
      parseConfigText(
        'lease.yaml',
        'domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 3, lease: true}\n  - key: p\n    rate_limit: {unit: second, requests_per_unit: 3}\n',
        { defaultAlgorithm: 'sliding_window' },
      ),
    ]);
    const limiter = new RateLimiter({ ...LIMITER_DEFAULTS, store: leased, config: () => config });
    const ask = (key: string) => limiter.shouldRateLimit({ domain: 'd', descriptors: [{ entries: [{ key, value: 'v' }] }], hitsAddend: 0 });
    expect((await ask('k')).overallCode).toBe('OK');
    expect(recording.calls).toHaveLength(1);
    expect(recording.calls[0].counters[0].lease).toBe('d\u0000k');
    await leased.tick();
    const codes = [];
    for (let i = 0; i < 3; i++) codes.push((await ask('k')).overallCode);
    // 1 admitted by the store before the sync, counted against this replica's part: 2 more here.
    expect(codes).toEqual(['OK', 'OK', 'OVER_LIMIT']);
    expect(recording.calls).toHaveLength(1);
    expect((await ask('p')).overallCode).toBe('OK');
    expect(recording.calls).toHaveLength(2);
    expect(recording.calls[1].counters[0].lease).toBeUndefined();
    expect(leased.view(1).leases[0]).toMatchObject({ domain: 'd', rule: 'k' });
  });
});
