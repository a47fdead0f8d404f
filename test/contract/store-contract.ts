import { MAX_BUCKET_AHEAD_MS } from '../../src/limiter/algorithms';
import type { Algorithm } from '../../src/limiter/types';
import { ALGORITHMS, isBucket, UNIT_MS } from '../../src/limiter/types';
import type { ReplicaDemand, ReplicaExchange } from '../../src/limiter/replica-exchange';
import type { CounterDecision, CounterRequest, Store } from '../../src/limiter/store';
import { requireBefore, untilUnstretched } from '../helpers/deadline';
import { describeBudgetContract } from './budget-contract';
import { describeCalendarContract } from './calendar-contract';
import { describeReservationContract } from './reservation-contract';
import { describeSettlementContract } from './settlement-contract';
import { timeCases } from './time-cases';

/**
 * The behaviour every Store adapter shares, run once per adapter (see *.test.ts next to this file).
 *
 * Time: a store reads its own clock (memory: an injected fake clock; Redis: `TIME`). `advance(ms)`
 * moves that clock at least `ms` forward: instantly for a fake clock, by sleeping for a real one.
 * So every time-dependent case is written for a real clock too: windows are short (1 s) where time
 * must pass and very long (1 day) where it must not, each case first lines itself up with the start
 * of a window, and waits carry a margin on the side that a slow machine cannot break. A step whose
 * expectation holds only before an instant (a call just before a window ends) is checked against the
 * store's clock after it: a loaded machine that ended it later makes the case start again
 * (test/helpers/deadline.ts) instead of asserting on a moment the case did not intend.
 */

export interface StoreHarness {
  readonly store: Store;
  /** The ReplicaExchange on the same backend (the contract suite holds both ports of an adapter). */
  readonly exchange: ReplicaExchange;
  /** Moves the store's clock forward by at least `ms`. */
  advance(ms: number): Promise<void>;
  /** Releases the store and anything the harness started. */
  close(): Promise<void>;
  /** The store's clock now, ms; default Date.now() (a Redis server on this machine keeps its time). */
  nowMs?(): number;
  /** Another replica's store on the same data (a second connection to the same Redis); default the store itself. */
  readonly peer?: Store;
}

/** Long enough that no test straddles a window boundary (epoch-aligned days). */
const DAY = 86_400_000;
/** Short windows for the cases where time must pass. */
const SHORT = 1_000;
/** Room for real time spent between two calls (scheduling, a network round trip). */
const SLACK = 150;

let sequence = 0;
const run = `${process.pid}-${Date.now().toString(36)}`;

/** A counter identity no other case (or earlier run against the same Redis) uses. */
function freshKey(label: string): string {
  sequence += 1;
  return `contract|${run}|${sequence}|${label}`;
}

function counter(key: string, algorithm: Algorithm, limit: number, hits = 1, windowMs = DAY, shape: CounterShape = {}): CounterRequest {
  return { key, algorithm, limit, windowMs, hits, ...shape };
}

type CounterShape = Pick<CounterRequest, 'subWindows' | 'strict' | 'burst'>;

/** Every algorithm, and the sliding window's other modes: [label, algorithm, options]. */
const MODES: readonly (readonly [string, Algorithm, CounterShape])[] = [
  ...ALGORITHMS.map((a) => [a, a, {}] as const),
  ['sliding_window sub_windows=4', 'sliding_window', { subWindows: 4 }],
  ['sliding_window strict', 'sliding_window', { strict: true }],
  ['sliding_window sub_windows=4 strict', 'sliding_window', { subWindows: 4, strict: true }],
];

export interface ContractOptions {
  /**
   * Whether the cases that wait for real time to pass (window roll-overs, TTLs) run; default true.
   * Redis decides them in its script, at the `TIME` of the server that holds the key: a deployment
   * other than a single Redis (Sentinel's master is one; a Cluster's key lives on one node) would
   * wait out the same windows again in the same script. What it adds, the connection and (Cluster)
   * calls split across slots and refunded, is in every other case.
   */
  readonly timePassing?: boolean;
}

/** Registers the contract suite for one adapter; `factory` runs once for the whole suite. */
export function describeStoreContract(name: string, factory: () => Promise<StoreHarness>, options: ContractOptions = {}): void {
  const overTime = timeCases(options.timePassing ?? true);
  describe(`the ${name} store contract`, () => {
    let h: StoreHarness;

    beforeAll(async () => {
      h = await factory();
    });

    afterAll(async () => {
      await h?.close();
    });

    const one = async (c: CounterRequest, countDenied = false): Promise<CounterDecision> => {
      const [d] = await h.store.decide([c], { countDenied });
      return d;
    };

    const now = (): number => h.nowMs?.() ?? Date.now();

    /** `c`'s decision, made before `deadlineMs` (store clock), else the attempt is stretched. */
    const oneBefore = async (deadlineMs: number, c: CounterRequest): Promise<CounterDecision> => {
      const d = await one(c);
      requireBefore(deadlineMs, now(), `a call of ${c.key}`);
      return d;
    };

    /**
     * Returns once the store's clock is at least `room` ms before the end of the current window of
     * `windowMs` (read from a probe counter's reset time), so that the case runs inside one window;
     * resolves with that window's end (store clock, a lower bound: a sliding window's probe waits 1 ms
     * into the window after next).
     */
    const lineUp = async (algorithm: 'sliding_window' | 'fixed_window', windowMs: number, room: number): Promise<number> => {
      const sent = now();
      const probe = await one(counter(freshKey('probe'), algorithm, 1, 1, windowMs));
      const toEnd = algorithm === 'fixed_window' ? probe.resetMs : probe.resetMs - windowMs;
      if (toEnd >= room) return sent + toEnd - 1;
      await h.advance(toEnd + 10);
      return sent + toEnd - 1 + windowMs;
    };

    describeCalendarContract(() => ({ store: h.store, advance: (ms) => h.advance(ms), nowMs: () => h.nowMs?.() ?? Date.now() }), overTime);

    it('reports itself healthy and names itself', () => {
      expect(h.store.isHealthy()).toBe(true);
      expect(typeof h.store.name).toBe('string');
      expect(h.store.name.length).toBeGreaterThan(0);
    });

    it('answers an empty call with no decisions', async () => {
      await expect(h.store.decide([])).resolves.toEqual([]);
    });

    describe.each(MODES)('with %s', (_label, algorithm, shape) => {
      const counter = (key: string, a: Algorithm, limit: number, hits = 1): CounterRequest => ({ key, algorithm: a, limit, windowMs: DAY, hits, ...shape });

      it('allows up to the limit, then denies', async () => {
        const key = freshKey('fill');
        const verdicts: boolean[] = [];
        for (let i = 0; i < 6; i++) verdicts.push((await one(counter(key, algorithm, 4))).allowed);
        expect(verdicts).toEqual([true, true, true, true, false, false]);
      });

      it('reports the exact remaining quota, and 0 once denied', async () => {
        const key = freshKey('remaining');
        const remaining: number[] = [];
        for (let i = 0; i < 4; i++) remaining.push((await one(counter(key, algorithm, 5, 2))).remaining);
        expect(remaining).toEqual([3, 1, 0, 0]);
        // The denied 2-hit requests consumed nothing: one more hit still fits.
        expect(await one(counter(key, algorithm, 5, 1))).toMatchObject({ allowed: true, remaining: 0 });
      });

      it('checks without counting when hits is 0', async () => {
        const key = freshKey('check');
        for (let i = 0; i < 5; i++) expect(await one(counter(key, algorithm, 3, 0))).toMatchObject({ allowed: true, remaining: 3 });
        expect(await one(counter(key, algorithm, 3, 3))).toMatchObject({ allowed: true, remaining: 0 });
        expect(await one(counter(key, algorithm, 3, 0))).toMatchObject({ allowed: true, remaining: 0 });
        expect((await one(counter(key, algorithm, 3, 1))).allowed).toBe(false);
      });

      it('never admits a request asking for more hits than the limit, and it consumes nothing', async () => {
        const key = freshKey('too-many');
        const d = await one(counter(key, algorithm, 3, 4));
        expect(d).toMatchObject({ allowed: false, remaining: 0 });
        expect(d.resetMs).toBeGreaterThan(0);
        expect(await one(counter(key, algorithm, 3, 3))).toMatchObject({ allowed: true, remaining: 0 });
      });

      it('gives a positive wait to a denied request, within two windows', async () => {
        const key = freshKey('wait');
        await one(counter(key, algorithm, 1));
        const d = await one(counter(key, algorithm, 1));
        expect(d.allowed).toBe(false);
        expect(d.resetMs).toBeGreaterThan(0);
        expect(d.resetMs).toBeLessThanOrEqual(2 * DAY);
      });

      it('charges every counter of a denied call when countDenied is set', async () => {
        const key = freshKey('count-denied');
        expect((await one(counter(key, algorithm, 2, 2), true)).allowed).toBe(true);
        expect((await one(counter(key, algorithm, 2, 1), true)).allowed).toBe(false);
        // Charged beyond the limit: even a check no longer fits.
        expect(await one(counter(key, algorithm, 2, 0))).toMatchObject({ allowed: false, remaining: 0 });

        const plain = freshKey('not-counted');
        await one(counter(plain, algorithm, 2, 2));
        expect((await one(counter(plain, algorithm, 2, 1))).allowed).toBe(false);
        expect(await one(counter(plain, algorithm, 2, 0))).toMatchObject({ allowed: true, remaining: 0 });
      });

      it('charges a counter marked countDenied past its limit, and only it: 700 then 500 on 1,000 stand at 1,200', async () => {
        const key = freshKey('post-paid');
        const post = (hits: number, limit = 1_000): CounterRequest => ({ ...counter(key, algorithm, limit, hits), countDenied: true });
        // Tagged with the post-paid counter: one slot on a cluster, so the call is atomic there too.
        const other = (hits: number): CounterRequest => ({ ...counter(freshKey('beside-post-paid'), algorithm, 10, hits), tag: key });
        const beside = other(1);
        expect((await one(post(700))).allowed).toBe(true);
        const [charged, plain] = await h.store.decide([post(500), beside]);
        expect([charged.allowed, plain.allowed]).toEqual([false, true]);
        expect(await one(post(0))).toMatchObject({ allowed: false, remaining: 0 });
        expect(await one({ ...beside, hits: 0 })).toMatchObject({ allowed: true, remaining: 10 });
        if (isBucket(algorithm)) {
          // 200 over a burst of 1,000 at 1,000 a day drain in a fifth of a day.
          const wait = (await one(post(0))).resetMs;
          expect(wait).toBeGreaterThan(DAY / 5 - 60_000);
          expect(wait).toBeLessThanOrEqual(DAY / 5);
        } else {
          expect(await one(post(0, 1_200))).toMatchObject({ allowed: true, remaining: 0 });
          expect((await one(post(0, 1_199))).allowed).toBe(false);
        }
      });
    });

    it('is all-or-nothing: a denied counter keeps every other counter of the call uncharged', async () => {
      const a = freshKey('a');
      const b = freshKey('b');
      const both = (): Promise<CounterDecision[]> => h.store.decide([counter(a, 'sliding_window', 2), counter(b, 'sliding_log', 100)]);
      expect((await both()).map((d) => d.allowed)).toEqual([true, true]);
      expect((await both()).map((d) => d.allowed)).toEqual([true, true]);
      const third = await both();
      expect(third.map((d) => d.allowed)).toEqual([false, true]);
      expect(third[1].remaining).toBe(97); // what B would have left had it been charged
      expect(await one(counter(b, 'sliding_log', 100, 0))).toMatchObject({ allowed: true, remaining: 98 });
    });

    it('charges the other counters of a denied call when countDenied is set', async () => {
      const a = freshKey('a');
      const b = freshKey('b');
      const both = (): Promise<CounterDecision[]> => h.store.decide([counter(a, 'fixed_window', 1), counter(b, 'sliding_window', 10)], { countDenied: true });
      expect((await both()).map((d) => d.allowed)).toEqual([true, true]);
      expect((await both()).map((d) => d.allowed)).toEqual([false, true]);
      expect(await one(counter(b, 'sliding_window', 10, 0))).toMatchObject({ allowed: true, remaining: 8 });
    });

    it('keeps a bucket charged far past its burst (countDenied) at most MAX_BUCKET_AHEAD_MS in debt', async () => {
      // A year's rate of 1 charged the wire's largest hits: unbounded, its TAT would lie 1.35e20 ms ahead.
      const c = (hits: number): CounterRequest => counter(freshKey('deep-debt'), 'token_bucket', 1, hits, UNIT_MS.year, { burst: 1 });
      const deep = c(4_294_967_295);
      expect(await one(deep, true)).toEqual({ allowed: false, remaining: 0, resetMs: UNIT_MS.year });
      const next = await one({ ...deep, hits: 1 });
      expect(next.allowed).toBe(false);
      expect(next.resetMs).toBeLessThanOrEqual(MAX_BUCKET_AHEAD_MS);
      expect(next.resetMs).toBeGreaterThan(MAX_BUCKET_AHEAD_MS - 60_000);
    });

    it('decides counters sharing a tag as one call: 200 concurrent calls of two admit exactly 50, and leave the other charged exactly 50 times', async () => {
      const a = freshKey('tagged-a');
      const b = freshKey('tagged-b');
      const call = (): Promise<CounterDecision[]> =>
        h.store.decide([
          { ...counter(a, 'sliding_window', 50), tag: a },
          { ...counter(b, 'fixed_window', 1_000), tag: a },
        ]);
      const decisions = await Promise.all(Array.from({ length: 200 }, call));
      expect(decisions.filter(([first]) => first.allowed)).toHaveLength(50);
      expect(await one({ ...counter(b, 'fixed_window', 1_000, 0), tag: a })).toMatchObject({ allowed: true, remaining: 950 });
    });

    it('returns decisions in input order', async () => {
      const keys = [freshKey('x'), freshKey('y'), freshKey('z')];
      const call = (): Promise<CounterDecision[]> =>
        h.store.decide([counter(keys[0], 'sliding_window', 3), counter(keys[1], 'fixed_window', 1, 0), counter(keys[2], 'sliding_log', 7, 2)]);
      expect((await call()).map((d) => d.remaining)).toEqual([2, 1, 5]);
      expect((await call()).map((d) => d.remaining)).toEqual([1, 1, 3]);
    });

    it('admits exactly the limit out of 200 concurrent calls on a limit of 50', async () => {
      for (const [label, algorithm, shape] of MODES) {
        const key = freshKey(`race-${label}`);
        const calls = Array.from({ length: 200 }, () => one(counter(key, algorithm, 50, 1, DAY, shape)));
        const decisions = await Promise.all(calls);
        expect(decisions.filter((d) => d.allowed)).toHaveLength(50);
        // Every admitted call saw a distinct remaining value: 49 down to 0.
        const remaining = decisions
          .filter((d) => d.allowed)
          .map((d) => d.remaining)
          .sort((x, y) => x - y);
        expect(remaining).toEqual(Array.from({ length: 50 }, (_, i) => i));
      }
    });

    overTime('rolls a sliding window over: the previous window decays instead of resetting', () =>
      untilUnstretched(async () => {
        const end = await lineUp('sliding_window', SHORT, 600);
        const key = freshKey('roll-sw');
        const c = (hits = 1): CounterRequest => counter(key, 'sliding_window', 3, hits, SHORT);
        for (let i = 0; i < 3; i++) expect((await oneBefore(end, c())).allowed).toBe(true);
        const sent = now();
        const denied = await oneBefore(end, c());
        expect(denied.allowed).toBe(false);
        // All 3 hits sit in the current window: they must decay below 3, i.e. 1 ms into the next window.
        expect(now() + denied.resetMs).toBeGreaterThanOrEqual(end);
        expect(denied.resetMs).toBeLessThanOrEqual(SHORT + 1);
        const resetAt = sent + denied.resetMs;
        await h.advance(Math.max(0, denied.resetMs - SLACK));
        expect((await oneBefore(resetAt, c())).allowed).toBe(false);
        await h.advance(SLACK + 50);
        // Early in the next window (its first 300 ms) the previous 3 still weigh almost fully: one more fits, not three.
        expect((await oneBefore(resetAt + 300, c())).allowed).toBe(true);
        expect((await oneBefore(resetAt + 300, c())).allowed).toBe(false);
      }),
    );

    overTime('rolls a fixed window over: a full reset at the window boundary', () =>
      untilUnstretched(async () => {
        const end = await lineUp('fixed_window', SHORT, 600);
        const key = freshKey('roll-fw');
        const c = (): CounterRequest => counter(key, 'fixed_window', 3, 1, SHORT);
        for (let i = 0; i < 3; i++) expect((await oneBefore(end, c())).allowed).toBe(true);
        const sent = now();
        const denied = await oneBefore(end, c());
        expect(denied.allowed).toBe(false);
        expect(now() + denied.resetMs).toBeGreaterThanOrEqual(end);
        const resetAt = sent + denied.resetMs;
        await h.advance(Math.max(0, denied.resetMs - SLACK));
        expect((await oneBefore(resetAt, c())).allowed).toBe(false);
        await h.advance(SLACK + 50);
        for (let i = 0; i < 3; i++) expect((await oneBefore(resetAt + SHORT, c())).allowed).toBe(true);
        expect((await oneBefore(resetAt + SHORT, c())).allowed).toBe(false);
      }),
    );

    overTime('rolls a sliding log over: each record leaves one window after it was admitted', () =>
      untilUnstretched(async () => {
        const key = freshKey('roll-sl');
        const c = (hits = 1): CounterRequest => counter(key, 'sliding_log', 3, hits, SHORT);
        const firstSent = now();
        expect((await one(c(2))).allowed).toBe(true);
        await h.advance(400);
        const secondSent = now();
        expect((await oneBefore(firstSent + SHORT, c(1))).allowed).toBe(true);
        const sent = now();
        const denied = await oneBefore(firstSent + SHORT, c(1));
        expect(denied.allowed).toBe(false);
        // The first record (2 hits) leaves first: about 600 ms from now, one window after it was admitted.
        expect(now() + denied.resetMs).toBeGreaterThanOrEqual(firstSent + SHORT);
        expect(denied.resetMs).toBeLessThanOrEqual(600);
        await h.advance(Math.max(0, denied.resetMs - SLACK));
        expect((await oneBefore(sent + denied.resetMs, c(1))).allowed).toBe(false);
        await h.advance(SLACK + 50);
        // Only the 1-hit record is left in the window.
        expect(await oneBefore(secondSent + SHORT, c(2))).toMatchObject({ allowed: true, remaining: 0 });
      }),
    );

    overTime('refills a token bucket at its rate: 5 per second with a burst of 10 admits ten at once, then one per 200 ms', async () => {
      for (const algorithm of ['token_bucket', 'leaky_bucket'] as const) {
        await untilUnstretched(async () => {
          const key = freshKey(`refill-${algorithm}`);
          const c = (hits = 1): CounterRequest => counter(key, algorithm, 5, hits, SHORT, { burst: 10 });
          const burstSent = now();
          const first = await h.store.decide(Array.from({ length: 10 }, () => c()));
          expect(first.map((d) => d.allowed)).toEqual(new Array<boolean>(10).fill(true));
          // Full again 2 s after the burst (less the little time the call took).
          expect(first[9]).toMatchObject({ remaining: 0 });
          expect(first[9].resetMs).toBeGreaterThan(2_000 - SLACK);
          expect(first[9].resetMs).toBeLessThanOrEqual(2_000);
          const sent = now();
          const denied = await oneBefore(burstSent + 200, c());
          expect(denied.allowed).toBe(false);
          expect(denied.resetMs).toBeGreaterThan(0);
          expect(denied.resetMs).toBeLessThanOrEqual(200);
          await h.advance(denied.resetMs + 20);
          expect((await one(c())).allowed).toBe(true);
          expect((await oneBefore(sent + denied.resetMs + 200, c())).allowed).toBe(false);
        });
      }
    });

    overTime('rolls sub-windows over: the oldest decays (or, strict, leaves whole) at the predicted instant', async () => {
      for (const strict of [false, true]) {
        await untilUnstretched(async () => {
          // Line up with the start of a 250 ms sub-window, so that the three hits share one.
          const probeSent = now();
          const probe = await one(counter(freshKey('probe'), 'fixed_window', 1, 1, SHORT / 4));
          const subEnd = probeSent + probe.resetMs + (probe.resetMs < 200 ? SHORT / 4 : 0);
          if (probe.resetMs < 200) await h.advance(probe.resetMs + 10);
          const key = freshKey(`roll-sub-${strict}`);
          const c = (): CounterRequest => counter(key, 'sliding_window', 3, 1, SHORT, { subWindows: 4, strict });
          for (let i = 0; i < 3; i++) expect((await oneBefore(subEnd, c())).allowed).toBe(true);
          const sent = now();
          const denied = await oneBefore(subEnd, c());
          expect(denied.allowed).toBe(false);
          // Plain: a quarter of a sub-window before the hits' sub-window has fully left; strict: exactly when it leaves.
          expect(denied.resetMs).toBeGreaterThan(strict ? SHORT : (3 * SHORT) / 4 - SLACK);
          expect(denied.resetMs).toBeLessThanOrEqual(strict ? SHORT + SHORT / 4 : SHORT + 1);
          await h.advance(denied.resetMs - SLACK);
          expect((await oneBefore(sent + denied.resetMs, c())).allowed).toBe(false);
          await h.advance(SLACK + 30);
          expect((await one(c())).allowed).toBe(true);
        });
      }
    });

    overTime('forgets a sliding window counter once two windows have passed', async () => {
      const key = freshKey('forget');
      const c = (hits: number): CounterRequest => counter(key, 'sliding_window', 3, hits, SHORT);
      expect((await one(c(3))).allowed).toBe(true);
      await h.advance(2 * SHORT + 50);
      expect(await one(c(0))).toMatchObject({ allowed: true, remaining: 3 });
    });

    describeBudgetContract(() => h, lineUp, overTime);

    describeReservationContract(
      () => ({ store: h.store, peer: h.peer ?? h.store, advance: (ms) => h.advance(ms), nowMs: () => h.nowMs?.() ?? Date.now() }),
      overTime,
    );

    describeSettlementContract(() => ({ store: h.store, peer: h.peer ?? h.store, advance: (ms) => h.advance(ms), nowMs: () => h.nowMs?.() ?? Date.now() }));

    describe('the replica exchange on the same backend', () => {
      const sorted = (entries: ReplicaDemand[]): ReplicaDemand[] => [...entries].sort((a, b) => (a.member < b.member ? -1 : 1));
      const demand = (member: string, d: number, admitted: number, proxies = 1): ReplicaDemand => ({ member, demand: d, admitted, proxies });

      it("returns every replica's live entry, replaces a replica's own, and drops a withdrawn one", async () => {
        const key = freshKey('demand');
        const exchange = (x: Parameters<ReplicaExchange['exchangeDemand']>[0]) => h.exchange.exchangeDemand(x);
        expect(await exchange({ key, publish: demand('r1', 40, 30, 2), ttlMs: DAY })).toEqual([demand('r1', 40, 30, 2)]);
        const both = await exchange({ key, publish: demand('r2', Infinity, 0), ttlMs: DAY });
        expect(sorted(both)).toEqual([demand('r1', 40, 30, 2), demand('r2', Infinity, 0)]);
        expect(sorted(await exchange({ key, publish: demand('r1', 12.5, 12, 3), ttlMs: DAY }))).toEqual([demand('r1', 12.5, 12, 3), demand('r2', Infinity, 0)]);
        expect(await exchange({ key, withdraw: 'r2', ttlMs: DAY })).toEqual([demand('r1', 12.5, 12, 3)]);
        expect(await exchange({ key: freshKey('other'), withdraw: 'r1', ttlMs: DAY })).toEqual([]);
      });

      it('records at most maxMembers replicas: a new one beyond is left out of the entries, a recorded one keeps its place', async () => {
        const key = freshKey('demand-cap');
        const capped = (member: string, d: number): Parameters<ReplicaExchange['exchangeDemand']>[0] => ({
          key,
          publish: demand(member, d, 0),
          ttlMs: DAY,
          maxMembers: 2,
        });
        await h.exchange.exchangeDemand(capped('r1', 1));
        await h.exchange.exchangeDemand(capped('r2', 2));
        expect(sorted(await h.exchange.exchangeDemand(capped('r3', 3)))).toEqual([demand('r1', 1, 0), demand('r2', 2, 0)]);
        expect(sorted(await h.exchange.exchangeDemand(capped('r1', 5)))).toEqual([demand('r1', 5, 0), demand('r2', 2, 0)]);
        // A withdrawn one makes room.
        await h.exchange.exchangeDemand({ key, withdraw: 'r2', ttlMs: DAY });
        expect(sorted(await h.exchange.exchangeDemand(capped('r3', 3)))).toEqual([demand('r1', 5, 0), demand('r3', 3, 0)]);
      });

      it("keeps a counter's lease demand apart from its quota and region demand, and under a tag of its own apart from the tag's", async () => {
        const key = freshKey('demand-kinds');
        await h.exchange.exchangeDemand({ key, publish: demand('q', 1, 1), ttlMs: DAY });
        expect(await h.exchange.exchangeDemand({ key, kind: 'lease', publish: demand('l', 2, 0), ttlMs: DAY })).toEqual([demand('l', 2, 0)]);
        expect(await h.exchange.exchangeDemand({ key: `${key}|hour`, tag: key, kind: 'lease', publish: demand('t', 3, 0), ttlMs: DAY })).toEqual([
          demand('t', 3, 0),
        ]);
        expect(await h.exchange.exchangeDemand({ key, withdraw: 'nobody', ttlMs: DAY })).toEqual([demand('q', 1, 1)]);
        expect(await h.exchange.exchangeDemand({ key, tag: key, kind: 'lease', withdraw: 'nobody', ttlMs: DAY })).toEqual([demand('l', 2, 0)]);
        expect(await h.exchange.exchangeDemand({ key, kind: 'region', publish: demand('r', 4, 4), ttlMs: DAY })).toEqual([demand('r', 4, 4)]);
        expect(await h.exchange.exchangeDemand({ key, kind: 'lease', withdraw: 'nobody', ttlMs: DAY })).toEqual([demand('l', 2, 0)]);
      });

      overTime('forgets an entry not published again within its ttl', async () => {
        const key = freshKey('demand-ttl');
        await h.exchange.exchangeDemand({ key, publish: demand('short', 1, 1), ttlMs: SHORT });
        await h.exchange.exchangeDemand({ key, publish: demand('long', 2, 2), ttlMs: DAY });
        await h.advance(SHORT + SLACK);
        expect(await h.exchange.exchangeDemand({ key, withdraw: 'nobody', ttlMs: DAY })).toEqual([demand('long', 2, 2)]);
      });

      overTime('keeps documents under their names until their ttl', async () => {
        const kind = freshKey('documents');
        await h.exchange.put(kind, 'a', 'first', DAY);
        await h.exchange.put(kind, 'b', 'short-lived', SHORT);
        await h.exchange.put(kind, 'a', 'second', DAY);
        expect((await h.exchange.all(kind, 10)).sort()).toEqual(['second', 'short-lived']);
        await h.advance(SHORT + SLACK);
        expect(await h.exchange.all(kind, 10)).toEqual(['second']);
      });
    });
  });
}
