import { buildConfig } from '../../../../src/config/rule-tree';
import { parseConfigText } from '../../../../src/config/rule-reader';
import { LeasedStore, type LeaseLimits } from '../../../../src/sharing/leases/leased-store';
import { RateLimiter } from '../../../../src/limiter/rate-limiter';
import { LIMITER_DEFAULTS } from '../../../helpers/limiter-defaults';
import { RecordingStore } from '../../../helpers/recording-store';
import type { DemandExchange, ReplicaDemand, ReplicaExchange } from '../../../../src/limiter/replica-exchange';
import { StoreUnavailableError, type CounterRequest, type SettleAnswer, type SettleCall, type Settlements } from '../../../../src/limiter/store';
import type { Clock } from '../../../../src/limiter/types';
import { MemoryExchange } from '../../../../src/store/memory-exchange';
import { MemoryStore } from '../../../../src/store/memory-store';
import { FakeClock } from '../../../helpers/fake-clock';
import { SwitchableStore } from '../../../helpers/switchable-store';

/** Leases on a fake clock: replicas sharing one memory store and exchange, synced by tick(). */

const SYNC_MS = 250;
const TTL_MS = 1_000;
const LIMITS: LeaseLimits = { syncIntervalMs: SYNC_MS, ttlMs: TTL_MS, maxLeases: 100, maxBytes: 1 << 20, maxReplicas: 256, maxSyncBytesPerSecond: 1 << 30 };

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

/**
 * The memory exchange with faults: `down` fails every call; `delayMs` answers that much later on the
 * clock (the entry is written when the call is made, as Redis writes it as the call arrives).
 */
class SlowExchange implements ReplicaExchange {
  down = false;
  delayMs = 0;
  calls = 0;
  private readonly held: { readonly dueMs: number; readonly go: () => void }[] = [];
  constructor(
    private readonly inner: ReplicaExchange,
    private readonly clock: Clock,
  ) {}

  exchangeDemand(exchange: DemandExchange): Promise<ReplicaDemand[]> {
    this.calls++;
    if (this.down) return Promise.reject(new StoreUnavailableError('exchange down'));
    const answer = this.inner.exchangeDemand(exchange);
    if (this.delayMs === 0) return answer;
    const dueMs = this.clock.nowMs() + this.delayMs;
    return new Promise((resolve, reject) => this.held.push({ dueMs, go: () => void answer.then(resolve, reject) }));
  }

  /** Answers the calls due by now. */
  release(): void {
    const now = this.clock.nowMs();
    for (let i = 0; i < this.held.length;) {
      if (this.held[i].dueMs <= now) this.held.splice(i, 1)[0].go();
      else i++;
    }
  }

  put(kind: string, name: string, document: string, ttlMs: number): Promise<void> {
    return this.inner.put(kind, name, document, ttlMs);
  }

  all(kind: string, max: number): Promise<string[]> {
    return this.inner.all(kind, max);
  }
}

function world(limits: Partial<LeaseLimits> = {}) {
  const clock = new FakeClock(1_000_000_000);
  const shared = new MemoryStore({ clock, maxKeys: 10_000, sweepIntervalMs: 0 });
  const demand = new MemoryExchange({ clock });
  const exchange = new SlowExchange(demand, clock);
  const ledger = new FlakyLedger(shared.settlements);
  const inner = new SwitchableStore(shared);
  const refused: number[] = [];
  const reasons: string[] = [];
  const replica = (replicaId: string, options: { clock?: Clock } = {}): LeasedStore =>
    new LeasedStore({
      store: inner,
      settlements: ledger,
      exchange,
      clock: options.clock ?? clock,
      replicaId,
      limits: { ...LIMITS, ...limits },
      observer: {
        onLeaseRefused: (reason) => {
          refused.push(clock.nowMs());
          reasons.push(reason);
        },
      },
    });
  return { clock, shared, demand, exchange, ledger, inner, replica, refused, reasons };
}

/** Lets every promise the memory stores resolved run its handlers. */
const flush = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

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
  options: { exchange?: SlowExchange; at?: (t: number) => void } = {},
): Promise<void> {
  const start = clock.nowMs();
  for (let t = 0; t < ms; t += 10) {
    options.at?.(t);
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
    options.exchange?.release();
    if ((clock.nowMs() - start) % SYNC_MS === 0) {
      // Not awaited: a slow exchange holds a sync past the next steps, as a slow Redis would.
      for (const tr of traffic.filter((_, r) => !(dead !== undefined && dead.index === r && t >= dead.atMs))) void tr.replica.tick();
    }
    await flush();
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

  test('2,000 concurrent calls mixing a live leased counter with a plain one each: the leased hits are taken as they are judged, so at most its part passes', async () => {
    const w = world();
    const a = w.replica('a');
    await a.decide([{ ...LEASED, hits: 0 }]);
    await a.tick();
    const plain = (i: number): CounterRequest => ({ ...PLAIN, key: `d_p_${i}` });
    // All in flight at once: each is judged before any store answer comes back.
    const answers = await Promise.all(Array.from({ length: 2_000 }, (_, i) => a.decide([LEASED, plain(i)])));
    const admitted = answers.filter((d) => d[0].allowed && d[1].allowed).length;
    expect(admitted).toBe(100);
    // The leased counter's denials charged the plain ones nothing.
    expect(await usedOf(w.shared, plain(1_999))).toBe(0);
    w.clock.advance(SYNC_MS);
    await a.tick();
    expect(await usedOf(w.shared, LEASED)).toBe(100);
  });

  test('hits taken from a lease by calls in flight count for every other call, and are given back when the store denies', async () => {
    const w = world();
    const a = w.replica('a');
    const small: CounterRequest = { ...LEASED, key: 'd_small', limit: 10, burst: 10 };
    await a.decide([{ ...small, hits: 0 }]);
    await a.tick();
    // Five calls in flight, each with a plain counter that the store will deny (5 a minute, used up).
    const full: CounterRequest = { ...PLAIN, key: 'd_p_full' };
    for (let i = 0; i < 5; i++) await w.shared.decide([full]);
    const inFlight = Array.from({ length: 5 }, () => a.decide([{ ...small, hits: 2 }, full]));
    // Meanwhile the part (10) is taken: a call in process sees it.
    expect(a.decideNow([small])![0]).toMatchObject({ allowed: false });
    const denied = await Promise.all(inFlight);
    expect(denied.every((d) => !d[1].allowed)).toBe(true);
    // Given back: the whole part again, and nothing pending to settle.
    expect(a.decideNow([{ ...small, hits: 10 }])![0]).toMatchObject({ allowed: true, remaining: 0 });
    w.clock.advance(SYNC_MS);
    await a.tick();
    expect(await usedOf(w.shared, small)).toBe(10);
  });

  test('a mixed call whose store part fails takes nothing from the lease', async () => {
    const w = world();
    const a = w.replica('a');
    await a.decide([{ ...LEASED, hits: 0 }]);
    await a.tick();
    w.inner.down = true;
    await expect(a.decide([{ ...LEASED, hits: 40 }, PLAIN])).rejects.toBeInstanceOf(StoreUnavailableError);
    w.inner.down = false;
    expect(a.decideNow([{ ...LEASED, hits: 100 }])![0]).toMatchObject({ allowed: true, remaining: 0 });
  });

  test('a call naming one leased counter 3,500 times reads each counter a constant number of times (O(counters), not a scan of the earlier ones per counter)', async () => {
    const w = world();
    const a = w.replica('a');
    await a.decide([{ ...LEASED, hits: 0 }]);
    await a.tick();
    const counted = (counters: readonly CounterRequest[]): { counters: CounterRequest[]; reads: () => number } => {
      let reads = 0;
      const proxy = new Proxy([...counters], {
        get(target, prop, receiver) {
          if (typeof prop === 'string' && /^\d+$/.test(prop)) reads++;
          return Reflect.get(target, prop, receiver) as unknown;
        },
      });
      return { counters: proxy, reads: () => reads };
    };
    const N = 3_500;
    const checks = Array.from({ length: N }, () => ({ ...LEASED, hits: 0 }));
    const fast = counted(checks);
    expect(a.decideNow(fast.counters)).toHaveLength(N);
    expect(fast.reads()).toBeLessThanOrEqual(6 * N);
    // Mixed with a plain counter (through the store): the same.
    const mixed = counted([...checks, PLAIN]);
    expect(await a.decide(mixed.counters)).toHaveLength(N + 1);
    expect(mixed.reads()).toBeLessThanOrEqual(8 * (N + 1));
    // The same counter many times in one call still sees its earlier hits: 100 of 150 single hits.
    const hits = Array.from({ length: 150 }, () => LEASED);
    expect(a.decideNow(hits)!.filter((d) => d.allowed)).toHaveLength(100);
  });

  test('a broken demand exchange: the lease stops deciding in process one sync interval before its entry can expire, though settlements go through; the store decides, exactly', async () => {
    const w = world();
    const a = w.replica('a');
    await a.decide([{ ...LEASED, hits: 0 }]);
    await a.tick();
    w.clock.advance(SYNC_MS);
    await a.tick();
    // The last exchange that went through was sent now.
    const sentMs = w.clock.nowMs();
    w.exchange.down = true;
    for (let t = SYNC_MS; t <= TTL_MS; t += SYNC_MS) {
      w.clock.set(sentMs + t);
      await a.tick();
    }
    w.clock.set(sentMs + TTL_MS - SYNC_MS);
    expect(a.decideNow([{ ...LEASED, hits: 0 }])).toBeDefined();
    w.clock.set(sentMs + TTL_MS - SYNC_MS + 1);
    expect(a.decideNow([{ ...LEASED, hits: 0 }])).toBeUndefined();
    const settles = w.ledger.calls;
    w.clock.set(sentMs + 2 * TTL_MS);
    await a.tick();
    expect(w.ledger.calls).toBeGreaterThan(settles);
    expect(a.view(1).leases[0]).toMatchObject({ live: false });
    // The store decides: exact against the shared counter.
    const before = await usedOf(w.shared, LEASED);
    const answers = [];
    for (let i = 0; i < 120; i++) answers.push((await a.decide([LEASED]))[0].allowed);
    expect(answers.filter(Boolean)).toHaveLength(100 - before);
  });

  test('two replicas whose demand exchange breaks ({10 s, 100}): no span of one window admits more than the limit + 5% + one sync interval of its rate', async () => {
    const w = world();
    const counter: CounterRequest = { ...LEASED, key: 'd_ten', windowMs: 10_000 };
    const all = [traffic(w.replica('a'), () => 30), traffic(w.replica('b'), () => 30)];
    await drive(w.clock, all, 40_000, undefined, counter, {
      exchange: w.exchange,
      at: (t) => {
        if (t === 12_000) w.exchange.down = true;
      },
    });
    const bound = 100 * 1.05 + (100 * SYNC_MS) / 10_000;
    expect(worstSpan(all, 1_000, 10_000)).toBeLessThanOrEqual(bound);
    // Redis decides after the break: the limit is still reached.
    expect(admittedBetween(all[0], 20_000, 40_000) + admittedBetween(all[1], 20_000, 40_000)).toBeGreaterThanOrEqual(190);
  });

  test('a slow demand exchange (answers 1.6 sync intervals late): parts live from the time the exchange was sent, so a lease stops before the others can drop its entry', async () => {
    const w = world();
    const a = w.replica('a');
    const b = w.replica('b');
    for (const r of [a, b]) await r.decide([{ ...LEASED, hits: 0 }]);
    w.exchange.delayMs = 400;
    const step = async (): Promise<void> => {
      w.clock.advance(10);
      w.exchange.release();
      if (w.clock.nowMs() % SYNC_MS === 0) for (const r of [a, b]) void r.tick();
      await flush();
    };
    // Live on slow answers: each sync waits for its answer, the next starts at the tick after it.
    for (let i = 0; i < 200; i++) await step();
    expect(a.decideNow([{ ...LEASED, hits: 0 }])).toBeDefined();
    // Broken now: the last exchange that went through was sent at most 400 + 250 ms ago.
    w.exchange.down = true;
    const brokenAt = w.clock.nowMs();
    let stoppedAt: number | undefined;
    let droppedAt: number | undefined;
    for (let i = 0; i < 200 && (stoppedAt === undefined || droppedAt === undefined); i++) {
      await step();
      if (stoppedAt === undefined && a.decideNow([{ ...LEASED, hits: 0 }]) === undefined) stoppedAt = w.clock.nowMs();
      if (droppedAt === undefined) {
        const entries = await w.demand.exchangeDemand({ key: LEASED.key, kind: 'lease', withdraw: 'nobody', ttlMs: TTL_MS });
        if (!entries.some((e) => e.member === 'a')) droppedAt = w.clock.nowMs();
      }
    }
    expect(stoppedAt).toBeDefined();
    expect(droppedAt).toBeDefined();
    // One sync interval before the entry is gone, though the answer came 400 ms after it was written.
    expect(droppedAt! - stoppedAt!).toBeGreaterThanOrEqual(SYNC_MS);
    expect(stoppedAt! - brokenAt).toBeLessThanOrEqual(TTL_MS - SYNC_MS);
  });

  test('two replicas on a slow demand exchange (400 ms) keep the bound through a shift of demand', async () => {
    const w = world();
    w.exchange.delayMs = 400;
    const a = traffic(w.replica('a'), (t) => (t < 5_000 ? 200 : 20));
    const b = traffic(w.replica('b'), (t) => (t < 5_000 ? 20 : 200));
    await drive(w.clock, [a, b], 10_000, undefined, LEASED, { exchange: w.exchange });
    expect(worstSpan([a, b], 2_000)).toBeLessThanOrEqual(105 + 25);
    // Syncs every 500 ms (an answer, then the next tick): within 3 of them and a window, a has what it
    // asks (20/s, its part 25/s with headroom) and b the rest (75/s).
    expect(admittedBetween(a, 7_500, 10_000) / 2.5).toBeGreaterThanOrEqual(19);
    expect(admittedBetween(b, 7_500, 10_000) / 2.5).toBeGreaterThanOrEqual(72);
  });

  test('more replicas than maxReplicas: the one the ledger and exchange do not record never decides in process, is counted as refused, and the parts of all never pass the bound', async () => {
    const w = world({ maxReplicas: 2 });
    const replicas = [w.replica('a'), w.replica('b'), w.replica('c')];
    const all = replicas.map((r) => traffic(r, () => 120));
    let inProcessOfC = 0;
    await drive(w.clock, all, 6_000, undefined, LEASED, {
      at: () => {
        if (replicas[2].decideNow([{ ...LEASED, hits: 0 }]) !== undefined) inProcessOfC++;
      },
    });
    expect(inProcessOfC).toBe(0);
    expect(replicas[2].view(1).leases[0]).toMatchObject({ live: false, refused: 'replicas' });
    expect(w.reasons.filter((r) => r === 'replicas').length).toBeGreaterThan(100);
    expect(worstSpan(all, 2_000)).toBeLessThanOrEqual(105 + 25);
    // Recorded ones decide in process.
    expect(replicas[0].view(1).leases[0]).toMatchObject({ live: true, refused: undefined });
  });

  test('a ledger full of other members refuses the settlement, charges nothing, and the replica keeps its hits and decides nothing in process until it has a place', async () => {
    const w = world({ maxReplicas: 2 });
    // Two other members hold the ledger of the counter (and its demand).
    for (const [i, m] of ['x', 'y'].entries()) {
      await w.shared.settlements.settle({ key: LEASED.key, member: m, seq: 1, counters: [{ ...LEASED, hits: 0 }], ttlMs: 2 * TTL_MS, maxMembers: 2 });
      await w.demand.exchangeDemand({
        key: LEASED.key,
        kind: 'lease',
        publish: { member: m, demand: 10 * (i + 1), admitted: 0, proxies: 1 },
        ttlMs: 2 * TTL_MS,
      });
    }
    const a = w.replica('a');
    await a.decide([LEASED]);
    for (let i = 0; i < 4; i++) {
      w.clock.advance(SYNC_MS);
      await a.tick();
      expect(a.decideNow([{ ...LEASED, hits: 0 }])).toBeUndefined();
    }
    expect(a.view(1).leases[0]).toMatchObject({ refused: 'replicas', live: false, pending: 0 });
    // Decided by the store: charged there, once.
    expect(await usedOf(w.shared, LEASED)).toBe(1);
    // The others' entries lapse: a takes a place (its first sync then publishes, its second takes a part).
    for (let t = 4 * SYNC_MS; t < 2 * TTL_MS + 3 * SYNC_MS; t += SYNC_MS) {
      w.clock.advance(SYNC_MS);
      await a.decide([{ ...LEASED, hits: 0 }]);
      await a.tick();
    }
    expect(a.view(1).leases[0]).toMatchObject({ refused: undefined, live: true });
    expect(a.decideNow([LEASED])).toBeDefined();
  });

  test('a replica restarted under the same name continues above its earlier seqs: nothing it settles is taken for a resend', async () => {
    const w = world();
    // An hour's fixed window: its count is exact whatever the time the case takes.
    const TALLY: CounterRequest = { ...LEASED, key: 'd_tally', algorithm: 'fixed_window', windowMs: 3_600_000, limit: 1_000, burst: 1_000 };
    const first = w.replica('pod-0');
    await first.decide([{ ...TALLY, hits: 0 }]);
    await first.tick();
    let admitted = 0;
    for (let i = 0; i < 30; i++) if ((await first.decide([TALLY]))[0].allowed) admitted++;
    await first.shutdown();
    w.clock.advance(1);
    const second = w.replica('pod-0');
    await second.decide([{ ...TALLY, hits: 0 }]);
    await second.tick();
    for (let i = 0; i < 20; i++) if ((await second.decide([TALLY]))[0].allowed) admitted++;
    w.clock.advance(SYNC_MS);
    await second.tick();
    expect(admitted).toBe(50);
    expect(await usedOf(w.shared, TALLY)).toBe(50);
    expect(second.view(1).leases[0]).toMatchObject({ settled: 20, pending: 0 });
    // Its clock 10 s behind the first's (a clock stepped back across the restart): the ledger holds
    // a higher seq of the name than the process sent, which it tells from a resend and goes above.
    const behind = new FakeClock(w.clock.nowMs() - 10_000);
    const third = w.replica('pod-0', { clock: behind });
    await third.decide([{ ...TALLY, key: 'd_other', hits: 0 }]);
    await second.shutdown();
    const again = w.replica('pod-0', { clock: behind });
    await again.decide([{ ...TALLY, hits: 0 }]);
    for (let i = 0; i < 3; i++) {
      behind.advance(SYNC_MS);
      w.clock.advance(SYNC_MS);
      await again.tick();
    }
    let late = 0;
    for (let i = 0; i < 10; i++) if ((await again.decide([TALLY]))[0].allowed) late++;
    for (let i = 0; i < 3; i++) {
      behind.advance(SYNC_MS);
      w.clock.advance(SYNC_MS);
      await again.tick();
    }
    expect(late).toBe(10);
    expect(await usedOf(w.shared, TALLY)).toBe(60);
    expect(again.view(1).leases[0]).toMatchObject({ settled: 10, pending: 0 });
  });

  test("two leased limits of one descriptor settle on ledgers of their own: one's failed settlement, sent again after the other's went through, is charged", async () => {
    const w = world();
    const a = w.replica('a');
    const tag = 'd_k_v';
    const minute: CounterRequest = { ...LEASED, tag };
    const hour: CounterRequest = { ...LEASED, key: 'd_k_v|hour', windowMs: 3_600_000, limit: 1_000, burst: 1_000, tag };
    await a.decide([
      { ...minute, hits: 0 },
      { ...hour, hits: 0 },
    ]);
    await a.tick();
    w.clock.advance(SYNC_MS);
    await a.tick();
    for (let i = 0; i < 5; i++) expect((await a.decide([minute, hour])).every((d) => d.allowed)).toBe(true);
    // The minute's settlement fails (its reply lost before Redis ran it), the hour's goes through.
    const settle = w.ledger.settle.bind(w.ledger);
    w.ledger.settle = (call) => (call.counters[0]?.key === minute.key ? Promise.reject(new StoreUnavailableError('lost')) : settle(call));
    w.clock.advance(SYNC_MS);
    await a.tick();
    w.ledger.settle = settle;
    w.clock.advance(SYNC_MS);
    await a.tick();
    expect(await usedOf(w.shared, minute)).toBe(5);
    expect(await usedOf(w.shared, hour)).toBe(5);
  });

  test('leases past the sync byte budget are refused (reason traffic) and decided by the store, exactly', async () => {
    const perSecond = (bytes: number): number => Math.ceil((bytes * 1_000) / SYNC_MS);
    // Room for one lease of a short key (about 600 bytes a sync), not two.
    const w = world({ maxSyncBytesPerSecond: perSecond(1_000) });
    const a = w.replica('a');
    await a.decide([LEASED]);
    expect(a.size).toBe(1);
    const other: CounterRequest = { ...LEASED, key: 'd_k_other', limit: 3 };
    const answers = [];
    for (let i = 0; i < 5; i++) answers.push((await a.decide([other]))[0].allowed);
    expect(answers).toEqual([true, true, true, false, false]);
    expect(a.size).toBe(1);
    expect(w.reasons).toEqual(Array(5).fill('traffic'));
    expect(a.syncBytes).toBeGreaterThan(perSecond(500));
    expect(a.syncBytes).toBeLessThanOrEqual(perSecond(1_000));
    // A long key costs its length twice a sync: refused though the budget has room for short ones.
    const roomy = world({ maxSyncBytesPerSecond: perSecond(20_000) });
    const r = roomy.replica('r');
    await r.decide([{ ...LEASED, key: 'v'.repeat(10_000) }]);
    expect(roomy.reasons).toEqual(['traffic']);
    await r.decide([LEASED]);
    expect(r.size).toBe(1);
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
    expect(w.reasons).toEqual(['keys', 'keys', 'keys']);
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
    expect(await w.exchange.exchangeDemand({ key: 'x', kind: 'lease', ttlMs: TTL_MS, withdraw: 'nobody' })).toEqual([]);
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
