import { configFromTexts } from '../../../../src/config/files';
import { OverCapacityError } from '../../../../src/limiter/errors';
import {
  chargeCap,
  QuotaBudgets,
  type QuotaAction,
  type QuotaLimits,
  type QuotaSubscriber,
  type QuotaUsage,
} from '../../../../src/sharing/quota/quota-budgets';
import type { QuotaStrategy } from '../../../../src/sharing/quota/quota-share';
import type { ReplicaExchange } from '../../../../src/limiter/replica-exchange';
import type { CounterRequest, Store } from '../../../../src/limiter/store';
import { MemoryExchange } from '../../../../src/store/memory-exchange';
import { MemoryStore } from '../../../../src/store/memory-store';
import { FakeClock } from '../../../helpers/fake-clock';
import { SwitchableStore } from '../../../helpers/switchable-store';

/** The quota budgets on a fake clock: reports in, answers and pushes out, charges through a memory store. */

const CONFIG = configFromTexts(
  [
    {
      file: 'q.yaml',
      text: `domain: q
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: tb
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket}
  - key: daily
    rate_limits:
      - {unit: second, requests_per_unit: 100}
      - {unit: day, requests_per_unit: 150}
`,
    },
  ],
  { defaultAlgorithm: 'sliding_window' },
);

const LIMITS: QuotaLimits = {
  maxBucketsPerStream: 100,
  maxBucketPairs: 4,
  maxBucketIdBytes: 256,
  reportIntervalMs: 1_000,
  abandonAfterIdleReports: 1_000,
  maxBytes: 16 * 1024 * 1024,
  syncIntervalMs: 250,
  maxProxiesPerBudget: 1_000,
};

interface Replica {
  readonly budgets: QuotaBudgets;
  readonly pushes: Map<string, QuotaAction[]>;
}

function setup(options: { store?: Store; exchange?: ReplicaExchange; limits?: Partial<QuotaLimits>; clock?: FakeClock } = {}) {
  const clock = options.clock ?? new FakeClock(1_000_000);
  const store = options.store ?? new MemoryStore({ clock, maxKeys: 100_000, sweepIntervalMs: 0 });
  const exchange = options.exchange ?? new MemoryExchange({ clock });
  let n = 0;
  const replica = (): Replica => {
    const pushes = new Map<string, QuotaAction[]>();
    const budgets = new QuotaBudgets({
      store,
      exchange,
      config: () => CONFIG,
      limits: { ...LIMITS, ...options.limits },
      clock,
      replicaId: `r${n++}`,
      onPush: (s, actions) => pushes.set(s.id, [...(pushes.get(s.id) ?? []), ...actions]),
    });
    return { budgets, pushes };
  };
  return { clock, store, exchange, replica };
}

const usage = (bucket: Record<string, string>, allowed: number, denied = 0, timeElapsedSeconds = 0): QuotaUsage => ({
  bucket: Object.entries(bucket).map(([key, value]) => ({ key, value })),
  allowed,
  denied,
  timeElapsedSeconds,
});

/** Requests per second a strategy admits (Envoy's token bucket fill rate). */
function rateOf(s: QuotaStrategy | undefined): number {
  if (s === undefined || s.kind === 'deny_all') return 0;
  if (s.kind === 'allow_all') return Infinity;
  return s.tokensPerFill / s.fillIntervalSeconds;
}

/**
 * A pending answer, with the budgets ticked (a sync each, as the service's timer does) while it waits:
 * a proxy joining a budget already divided in this sync period is answered by the next division.
 */
async function answered<T>(r: Replica, pending: Promise<T>): Promise<T> {
  let done = false;
  void pending.then(
    () => (done = true),
    () => (done = true),
  );
  for (let i = 0; i < 5; i++) {
    await new Promise((resolve) => setImmediate(resolve));
    if (done) break;
    await r.budgets.tick();
  }
  return pending;
}

/** One report, its answer logged with the pushes in the order they came. */
async function report(r: Replica, s: QuotaSubscriber, usages: QuotaUsage[]): Promise<QuotaAction[]> {
  const answers = await answered(r, r.budgets.report(s, 'q', usages));
  r.pushes.set(s.id, [...(r.pushes.get(s.id) ?? []), ...answers]);
  return answers;
}

/** The strategy a subscriber now has: its last answer or push. */
function current(r: Replica, s: QuotaSubscriber): QuotaStrategy | undefined {
  const last = (r.pushes.get(s.id) ?? []).filter((a) => a.abandon !== true).at(-1);
  return last?.abandon === false || (last !== undefined && last.abandon === undefined) ? last.strategy : undefined;
}

function counterOf(key: string, limit: number, windowMs: number, algorithm: CounterRequest['algorithm'] = 'sliding_window'): CounterRequest {
  return { key, limit, windowMs, algorithm, hits: 0 };
}

describe('charges', () => {
  test('a report charges no more than the limit could have admitted in its interval', () => {
    expect(chargeCap({ limit: 100, windowMs: 1_000 }, 0)).toBe(100);
    expect(chargeCap({ limit: 100, windowMs: 1_000 }, 5_000)).toBe(600);
    expect(chargeCap({ limit: 10, windowMs: 1_000, burst: 40 }, 500)).toBe(45);
  });

  test('a report of 2^53 allowed charges a window and a little; the token bucket admits again within two windows', async () => {
    const { clock, store, replica } = setup();
    const r = replica();
    const s = r.budgets.open();
    await report(r, s, [usage({ tb: 'x' }, 2 ** 53 + 10)]);
    await r.budgets.tick();
    const key = r.budgets.view(10, 10).budgets[0].counter;
    const c = { ...counterOf(key, 10, 1_000, 'token_bucket'), burst: 10, hits: 1 };
    expect((await store.decide([c]))[0].allowed).toBe(false);
    clock.advance(2_000);
    expect((await store.decide([c]))[0].allowed).toBe(true);
    // Nothing is carried to later syncs either.
    clock.advance(250);
    await r.budgets.tick();
    expect((await store.decide([c]))[0].allowed).toBe(true);
  });

  test('charges are written in the background, once per sync, to every limit of a rate_limits rule', async () => {
    const { clock, store, replica } = setup();
    const r = replica();
    const s = r.budgets.open();
    await report(r, s, [usage({ daily: 'd' }, 5)]);
    clock.advance(500);
    await report(r, s, [usage({ daily: 'd' }, 40)]);
    await r.budgets.tick();
    const [view] = r.budgets.view(10, 10).budgets;
    const day = view.counter.replace('sw1000', 'sw86400000');
    const decisions = await store.decide([
      { ...counterOf(view.counter, 100, 1_000), tag: view.counter },
      { ...counterOf(day, 150, 86_400_000), tag: view.counter },
    ]);
    expect(decisions.map((d) => d.remaining)).toEqual([55, 105]);
  });

  test('a later limit that denies (a day spent) leaves nothing to assign until it admits again', async () => {
    const { clock, replica } = setup();
    const r = replica();
    const s = r.budgets.open();
    await report(r, s, [usage({ daily: 'e' }, 50)]);
    expect(rateOf(current(r, s))).toBe(100);
    for (let i = 0; i < 4; i++) {
      clock.advance(1_000);
      await report(r, s, [usage({ daily: 'e' }, 100)]);
      await r.budgets.tick();
    }
    expect(current(r, s)).toEqual({ kind: 'deny_all' });
  });

  test('while the store fails, charges wait (at most twice what the counter takes at once), then reach it: nothing is poisoned', async () => {
    const clock = new FakeClock(1_000_000);
    const memory = new MemoryStore({ clock, maxKeys: 1_000, sweepIntervalMs: 0 });
    const store = new SwitchableStore(memory);
    const { replica } = setup({ store, clock });
    const r = replica();
    const s = r.budgets.open();
    await report(r, s, [usage({ k: 'p' }, 1)]);
    store.down = true;
    for (let i = 0; i < 10; i++) {
      clock.advance(1_000);
      await report(r, s, [usage({ k: 'p' }, 2 ** 40)]);
      await r.budgets.tick();
    }
    store.down = false;
    clock.advance(250);
    await r.budgets.tick();
    const key = r.budgets.view(10, 10).budgets[0].counter;
    expect((await memory.decide([counterOf(key, 100, 1_000)]))[0].allowed).toBe(false);
    clock.advance(2_000);
    await r.budgets.tick();
    expect((await memory.decide([counterOf(key, 100, 1_000)]))[0]).toMatchObject({ allowed: true, remaining: 100 });
  });
});

describe('division', () => {
  test('the freed budget reaches the busy proxy at the sync after the report of the one that stopped', async () => {
    const { clock, replica } = setup();
    const r = replica();
    const [a, b] = [r.budgets.open(), r.budgets.open()];
    for (let t = 0; t < 10; t++) {
      await report(r, a, [usage({ k: 'shift' }, 90, 110)]);
      await report(r, b, [usage({ k: 'shift' }, 10, 0)]);
      await r.budgets.tick();
      clock.advance(1_000);
    }
    expect(rateOf(current(r, b))).toBeLessThan(20);
    // A stops; B offers twice the limit. Both are answered from the shares in force; the sync divides again and pushes.
    await report(r, a, [usage({ k: 'shift' }, 0, 0)]);
    await report(r, b, [usage({ k: 'shift' }, 10, 190)]);
    expect(rateOf(current(r, b))).toBeLessThan(20);
    await r.budgets.tick();
    expect(rateOf(current(r, b))).toBeGreaterThanOrEqual(90);
  });

  test('48 proxies reporting one bucket 10 times between syncs: one division per sync, and each proxy pushed at most once per sync', async () => {
    const { clock, replica } = setup();
    const r = replica();
    const proxies = Array.from({ length: 48 }, () => r.budgets.open());
    for (const p of proxies) await report(r, p, [usage({ k: 'shared' }, 1)]);
    const pushesOf = (): number => [...r.pushes.values()].reduce((n, list) => n + list.length, 0);
    let pushedAtSyncs = 0;
    for (let sync = 0; sync < 5; sync++) {
      const before = pushesOf();
      for (let round = 0; round < 10; round++) {
        clock.advance(25);
        // Demand that moves at every report (half the proxies idle, the other half busy, swapping at each sync).
        for (const [i, p] of proxies.entries()) {
          const answers = await r.budgets.report(p, 'q', [usage({ k: 'shared' }, ((i + sync) % 2) * (5 + (round % 3)), 0)]);
          expect(answers).toHaveLength(1);
        }
      }
      // Between syncs: the answers only.
      expect(pushesOf() - before).toBe(0);
      const sizes = new Map([...r.pushes].map(([id, list]) => [id, list.length]));
      await r.budgets.tick();
      const pushed = new Map([...r.pushes].map(([id, list]) => [id, list.length - (sizes.get(id) ?? 0)]));
      // One division: each proxy gets at most one push (one action) from it.
      expect(Math.max(...pushed.values())).toBeLessThanOrEqual(1);
      pushedAtSyncs += [...pushed.values()].reduce((a, b) => a + b, 0);
    }
    // The shares did move: the syncs pushed them.
    expect(pushedAtSyncs).toBeGreaterThan(48);
    // The shares of that one division add up to the limit.
    const shares = r.budgets.view(1, 100).budgets[0].proxies.map((p) => p.share);
    expect(shares).toHaveLength(48);
    expect(shares.reduce((a, b) => a + b, 0)).toBeCloseTo(100, 6);
  });

  test("a proxy joining a budget is answered by the budget's next division: at once when it has had none this sync period, else at the next sync", async () => {
    const { replica } = setup();
    const r = replica();
    const [a, b, c] = [r.budgets.open(), r.budgets.open(), r.budgets.open()];
    const rateIn = (answer: QuotaAction[] | undefined): number =>
      answer?.[0].abandon === false || answer?.[0].abandon === undefined ? rateOf(answer?.[0].strategy) : NaN;
    // A new budget: its first sync divides it (this period's division), and answers A.
    expect(rateIn(await r.budgets.report(a, 'q', [usage({ k: 'join' }, 1)]))).toBe(100);
    // B joins in the same period: it waits for the next sync.
    let bAnswer: QuotaAction[] | undefined;
    const pending = r.budgets.report(b, 'q', [usage({ k: 'join' }, 1)]).then((x) => (bAnswer = x));
    await new Promise((resolve) => setImmediate(resolve));
    expect(bAnswer).toBeUndefined();
    await r.budgets.tick();
    await pending;
    expect(rateIn(bAnswer)).toBe(50);
    // That sync divided the budget in its period: C, joining after it, waits for the next sync too.
    let cAnswer: QuotaAction[] | undefined;
    const third = r.budgets.report(c, 'q', [usage({ k: 'join' }, 1)]).then((x) => (cAnswer = x));
    await new Promise((resolve) => setImmediate(resolve));
    expect(cAnswer).toBeUndefined();
    await r.budgets.tick();
    await third;
    expect(rateIn(cAnswer)).toBe(33);
    // A period in which the budget had nothing due: D, joining, divides it at once.
    await r.budgets.tick();
    const d = r.budgets.open();
    expect(rateIn(await r.budgets.report(d, 'q', [usage({ k: 'join' }, 1)]))).toBe(25);
  });

  test('streams that reported once and went quiet stop counting after two intervals, and leave after three', async () => {
    const { clock, replica } = setup();
    const r = replica();
    const quiet = Array.from({ length: 200 }, () => r.budgets.open());
    for (const q of quiet) await report(r, q, [usage({ k: 'crowd' }, 1)]);
    const real = r.budgets.open();
    for (let t = 0; t < 5; t++) {
      await report(r, real, [usage({ k: 'crowd' }, t === 0 ? 1 : 50)]);
      await r.budgets.tick();
      clock.advance(1_000);
    }
    expect(rateOf(current(r, real))).toBeGreaterThanOrEqual(50);
    expect(r.budgets.subscriptions).toBe(1);
  });

  test('two replicas divide by their demand; a replica that leaves frees its part at the next refresh', async () => {
    const { clock, replica } = setup();
    const [one, two] = [replica(), replica()];
    const [a, b] = [one.budgets.open(), two.budgets.open()];
    for (let t = 0; t < 4; t++) {
      await report(one, a, [usage({ k: 'two' }, 20, 0)]);
      await report(two, b, [usage({ k: 'two' }, 80, 120)]);
      await Promise.all([one.budgets.tick(), two.budgets.tick()]);
      clock.advance(1_000);
    }
    expect(rateOf(current(one, a))).toBe(25);
    expect(rateOf(current(two, b))).toBe(75);
    one.budgets.close(a);
    await one.budgets.tick();
    clock.advance(1_000);
    await two.budgets.tick();
    expect(rateOf(current(two, b))).toBe(100);
  });
});

describe('bounds', () => {
  test('streams and subscriptions count against the byte budget: past it, OverCapacityError and nothing kept', async () => {
    const { replica } = setup({ limits: { maxBytes: 64 * 1024 } });
    const r = replica();
    const s = r.budgets.open();
    const many = Array.from({ length: 100 }, (_, i) => usage({ k: `${i}`.padEnd(200, 'x') }, 1));
    await expect(r.budgets.report(s, 'q', many)).rejects.toThrow(OverCapacityError);
    expect(r.budgets.subscriptions).toBe(0);
    await report(r, s, many.slice(0, 5));
    expect(r.budgets.subscriptions).toBe(5);
    const opened: QuotaSubscriber[] = [];
    expect(() => {
      for (let i = 0; i < 100; i++) opened.push(r.budgets.open());
    }).toThrow(OverCapacityError);
    for (const o of opened) r.budgets.close(o);
    r.budgets.close(s);
    expect(r.budgets.bytes).toBeLessThan(64 * 1024);
  });

  test('a budget holds at most maxProxiesPerBudget subscriptions: a report adding one more is refused and changes nothing', async () => {
    const { replica } = setup({ limits: { maxProxiesPerBudget: 3 } });
    const r = replica();
    const streams = Array.from({ length: 4 }, () => r.budgets.open());
    for (const s of streams.slice(0, 3)) await report(r, s, [usage({ k: 'capped' }, 1)]);
    const bytes = r.budgets.bytes;
    // Two buckets of the same rule counter (the pairs differ only in order)... and another budget beside.
    await expect(r.budgets.report(streams[3], 'q', [usage({ k: 'other' }, 1), usage({ k: 'capped' }, 1)])).rejects.toThrow(
      /bucket \{k=capped\}: its budget already has 3 proxies on this replica \(RLQS_MAX_PROXIES_PER_BUDGET\)/,
    );
    expect(r.budgets.bytes).toBe(bytes);
    expect(r.budgets.bucketsOf(streams[3])).toBe(0);
    // The stream itself goes on: a bucket of another budget is served.
    expect(await report(r, streams[3], [usage({ k: 'other' }, 1)])).toHaveLength(1);
    // One leaves: there is room again.
    r.budgets.close(streams[0]);
    expect(await report(r, streams[3], [usage({ k: 'capped' }, 1)])).toHaveLength(1);
    expect(r.budgets.view(10, 10).budgets.find((b) => b.counter.includes('capped'))?.proxies).toHaveLength(3);
  });

  test('a bucket named many times in one report is one subscription with the counts added', async () => {
    const { replica } = setup();
    const r = replica();
    const s = r.budgets.open();
    const answers = await r.budgets.report(
      s,
      'q',
      Array.from({ length: 1_000 }, () => usage({ k: 'same' }, 1)),
    );
    expect(answers).toHaveLength(1);
    expect(r.budgets.subscriptions).toBe(1);
    await r.budgets.tick();
    expect(r.budgets.view(10, 10).budgets[0].used).toBe(100);
  });
});
