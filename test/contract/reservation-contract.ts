import { buildConfig } from '../../src/config/rule-tree';
import { parseConfigText } from '../../src/config/rule-reader';
import { RateLimiter } from '../../src/limiter/rate-limiter';
import type { CounterRequest, HoldAnswer, HoldCall, Store } from '../../src/limiter/store';
import type { HoldKind } from '../../src/limiter/reservations';
import type { Descriptor, RateLimitRequest } from '../../src/limiter/types';
import { requireBefore, untilUnstretched } from '../helpers/deadline';
import { LIMITER_DEFAULTS } from '../helpers/limiter-defaults';
import type { TimeCase } from './time-cases';

/**
 * Reservations on each store (part of the store contract, see ./store-contract.ts): holds decided
 * with their counters, visible from another replica (`peer`, a second connection to the same Redis;
 * the memory store is one process, so its peer is itself), lapsing after the store's TTL, bounded
 * per book. The fixtures make every store with RESERVATION_TTL_MS and RESERVATIONS_PER_KEY below.
 */

/** The reservation TTL every contract store is made with: short, so that a case can wait it out. */
export const CONTRACT_RESERVATION_TTL_MS = 1_500;
/** Entries per book every contract store is made with: small, so that a hostile loop reaches it. */
export const CONTRACT_RESERVATIONS_PER_KEY = 60;

interface ReservationHarness {
  readonly store: Store;
  readonly peer: Store;
  advance(ms: number): Promise<void>;
  /** The store's clock now, ms. */
  nowMs(): number;
}

const MINUTE = 60_000;
const DAY = 86_400_000;

let sequence = 0;
const run = `${process.pid}-${Date.now().toString(36)}`;

function freshKey(label: string): string {
  sequence += 1;
  return `reserve|${run}|${sequence}|${label}`;
}

/** A budget's counter as the limiter makes it for a reservation: hits 0, a check. */
const budget = (key: string, limit: number, windowMs = MINUTE, extra: Partial<CounterRequest> = {}): CounterRequest => ({
  key,
  algorithm: 'sliding_window',
  limit,
  windowMs,
  hits: 0,
  ...extra,
});

function call(kind: HoldKind, key: string, id: string, hits: number, counters: readonly CounterRequest[], maxHeld?: number): HoldCall {
  return { kind, key, id, hits, counters, maxHeld };
}

const allowed = (a: HoldAnswer): boolean => a.decisions.every((d) => d.allowed);

/** Registers the reservation cases inside a store's contract suite (`overTime` registers a case that waits for real time). */
export function describeReservationContract(harness: () => ReservationHarness, overTime: TimeCase): void {
  describe('reservations', () => {
    const hold = (store: Store, c: HoldCall): Promise<HoldAnswer> => store.reservations!.hold(c);

    it('admits 10 of 50 concurrent reserves of 100 against 1,000, and commits of 30 free the rest at once', async () => {
      const h = harness();
      const key = freshKey('fifty');
      // A day's window: no boundary passes during the case on a real clock.
      const counters = [budget(key, 1_000, DAY)];
      const answers = await Promise.all(
        Array.from({ length: 50 }, (_, i) => hold(i % 2 === 0 ? h.store : h.peer, call('reserve', key, `r${i}`, 100, counters))),
      );
      const admitted = answers.flatMap((a, i) => (a.outcome === 'held' ? [i] : []));
      expect(admitted).toHaveLength(10);
      expect(answers.filter((a) => a.outcome === 'denied')).toHaveLength(40);
      for (const a of answers) expect(allowed(a)).toBe(a.outcome === 'held');
      // The last admitted one has nothing left; a denial is told to wait (one window at most).
      expect(Math.min(...answers.filter((a) => a.outcome === 'held').map((a) => a.decisions[0].remaining))).toBe(0);
      const denied = answers.find((a) => a.outcome === 'denied')!;
      expect(denied.decisions[0]).toEqual({ allowed: false, remaining: 0, resetMs: DAY });

      // Each commit charges 30 and frees 100: after all ten, 300 counted, nothing held.
      const commits = await Promise.all(admitted.map((i) => hold(i % 3 === 0 ? h.store : h.peer, call('commit', key, `r${i}`, 30, counters))));
      for (const c of commits) expect(c.outcome).toBe('committed');
      const last = commits.reduce((a, b) => (a.held <= b.held ? a : b));
      expect(last.held).toBe(0);
      expect(Math.min(...commits.map((c) => c.decisions[0].remaining))).toBe(700);
      const again = await Promise.all(Array.from({ length: 10 }, (_, i) => hold(h.store, call('reserve', key, `s${i}`, 100, counters))));
      expect(again.filter((a) => a.outcome === 'held')).toHaveLength(7);
    });

    it('is reserved on one replica and committed on another, and a second commit charges nothing', async () => {
      const h = harness();
      const key = freshKey('replicas');
      const counters = [budget(key, 1_000, DAY)];
      expect(await hold(h.store, call('reserve', key, 'req-1', 400, counters))).toMatchObject({
        outcome: 'held',
        held: 1,
        decisions: [{ allowed: true, remaining: 600 }],
      });
      // The peer sees the hold: 700 more does not fit.
      expect(await hold(h.peer, call('reserve', key, 'req-2', 700, counters))).toMatchObject({ outcome: 'denied', held: 1 });
      const commit = await hold(h.peer, call('commit', key, 'req-1', 250, counters));
      expect(commit).toMatchObject({ outcome: 'committed', held: 0, decisions: [{ allowed: true, remaining: 750 }] });
      expect(await hold(h.store, call('commit', key, 'req-1', 250, counters))).toMatchObject({
        outcome: 'duplicate',
        decisions: [{ allowed: true, remaining: 750 }],
      });
      expect(await hold(h.peer, call('reserve', key, 'req-2', 700, counters))).toMatchObject({
        outcome: 'held',
        decisions: [{ allowed: true, remaining: 50 }],
      });
    });

    it('charges the commit of an unknown ID all the same, past the limit, and remembers it', async () => {
      const h = harness();
      const key = freshKey('unknown');
      const counters = [budget(key, 100, DAY)];
      expect(await hold(h.store, call('commit', key, 'never-reserved', 80, counters))).toMatchObject({
        outcome: 'unknown',
        decisions: [{ allowed: true, remaining: 20 }],
      });
      // Recorded past the limit (answered OVER_LIMIT, too late to stop anything).
      expect(await hold(h.peer, call('commit', key, 'other', 50, counters))).toMatchObject({ outcome: 'unknown', decisions: [{ allowed: false }] });
      expect(await hold(h.store, call('commit', key, 'other', 50, counters))).toMatchObject({ outcome: 'duplicate' });
      expect(await hold(h.store, call('reserve', key, 'next', 1, counters))).toMatchObject({ outcome: 'denied', held: 0 });
    });

    overTime('releases a hold without a charge, and lets an uncommitted one lapse after the TTL', async () => {
      const h = harness();
      const key = freshKey('lapse');
      const counters = [budget(key, 100, DAY)];
      expect(await hold(h.store, call('reserve', key, 'a', 60, counters))).toMatchObject({ outcome: 'held' });
      expect(await hold(h.store, call('release', key, 'a', 0, counters))).toMatchObject({
        outcome: 'released',
        held: 0,
        decisions: [{ allowed: true, remaining: 100 }],
      });
      expect(await hold(h.store, call('reserve', key, 'b', 60, counters))).toMatchObject({ outcome: 'held', decisions: [{ remaining: 40 }] });
      expect(await hold(h.peer, call('reserve', key, 'c', 60, counters))).toMatchObject({ outcome: 'denied' });
      await h.advance(CONTRACT_RESERVATION_TTL_MS + 200);
      const after = await hold(h.peer, call('reserve', key, 'c', 60, counters));
      // (Whether the call met the lapsed hold is the store's: a Redis book whose entries all lapsed is gone whole.)
      expect(after).toMatchObject({ outcome: 'held', held: 1, decisions: [{ allowed: true, remaining: 40 }] });
      // The lapsed ID is unknown now: its commit charges.
      expect(await hold(h.store, call('commit', key, 'b', 10, counters))).toMatchObject({ outcome: 'unknown', held: 1 });
    });

    it('holds the estimate on every limit of a rule, and answers a reserve of an ID it holds without a second hold', async () => {
      const h = harness();
      const tag = freshKey('limits');
      const counters = [budget(tag, 1_000, MINUTE, { tag }), budget(`${tag}|day`, 1_500, DAY, { tag, algorithm: 'fixed_window' })];
      const first = await hold(h.store, call('reserve', tag, 'x', 900, counters));
      expect(first.decisions.map((d) => d.remaining)).toEqual([100, 600]);
      await hold(h.store, call('commit', tag, 'x', 900, counters));
      // The minute has 100 left, the day 600: 200 is denied by the minute alone.
      const second = await hold(h.peer, call('reserve', tag, 'y', 200, counters));
      expect(second.outcome).toBe('denied');
      expect(second.decisions.map((d) => d.allowed)).toEqual([false, true]);
      expect(await hold(h.peer, call('reserve', tag, 'z', 100, counters))).toMatchObject({ outcome: 'held' });
      expect(await hold(h.store, call('reserve', tag, 'z', 100, counters))).toMatchObject({ outcome: 'again', held: 1 });
    });

    it('limits reservations in flight across replicas (concurrency 5): a commit frees one, its hits not charged', async () => {
      const h = harness();
      const key = freshKey('in-flight');
      const answers = await Promise.all(Array.from({ length: 8 }, (_, i) => hold(i % 2 === 0 ? h.store : h.peer, call('reserve', key, `f${i}`, 1, [], 5))));
      expect(answers.filter((a) => a.outcome === 'held')).toHaveLength(5);
      const refused = answers.find((a) => a.outcome === 'denied')!;
      expect(refused.decisions).toHaveLength(1);
      expect(refused.decisions[0].allowed).toBe(false);
      expect(refused.decisions[0].resetMs).toBeGreaterThan(0);
      expect(refused.decisions[0].resetMs).toBeLessThanOrEqual(CONTRACT_RESERVATION_TTL_MS);
      const heldIds = answers.flatMap((a, i) => (a.outcome === 'held' ? [`f${i}`] : []));
      expect(await hold(h.peer, call('commit', key, heldIds[0], 1_000, [], 5))).toMatchObject({
        outcome: 'committed',
        held: 4,
        decisions: [{ allowed: true, remaining: 1 }],
      });
      expect(await hold(h.store, call('reserve', key, 'late', 1, [], 5))).toMatchObject({
        outcome: 'held',
        held: 5,
        decisions: [{ allowed: true, remaining: 0 }],
      });
      expect(await hold(h.store, call('reserve', key, 'later', 1, [], 5))).toMatchObject({ outcome: 'denied', held: 5 });
    });

    it('keeps a hostile loop of fresh IDs to its own book, bounded, while a legit caller beside it gets its exact answers', async () => {
      const h = harness();
      const hostile = freshKey('hostile');
      const legit = freshKey('legit');
      const hostileCounters = [budget(hostile, 1_000_000, DAY)];
      const legitCounters = [budget(legit, 500, DAY)];
      const outcomes = new Map<string, number>();
      const legitAnswers: HoldAnswer[] = [];
      for (let round = 0; round < 10; round++) {
        const burst = await Promise.all(
          Array.from({ length: 10 }, (_, i) =>
            hold(i % 2 ? h.store : h.peer, call('reserve', hostile, `${'x'.repeat(200)}-${round}-${i}`, 0, hostileCounters)),
          ),
        );
        for (const a of burst) outcomes.set(a.outcome, (outcomes.get(a.outcome) ?? 0) + 1);
        legitAnswers.push(await hold(h.store, call('reserve', legit, `legit-${round}`, 100, legitCounters)));
        if (round % 2 === 1) legitAnswers.push(await hold(h.peer, call('commit', legit, `legit-${round}`, 100, legitCounters)));
      }
      // The hostile book stops at its bound: every reserve past it is refused and holds nothing.
      expect(outcomes.get('held')).toBe(CONTRACT_RESERVATIONS_PER_KEY);
      expect(outcomes.get('full')).toBe(100 - CONTRACT_RESERVATIONS_PER_KEY);
      // The legit caller, 100 a round against 500 (a commit of 100 every other round), answered exactly:
      // rounds 0-4 fit (counted 200, held 300), then its reserves are denied and its commits unknown.
      expect(legitAnswers.map((a) => a.outcome)).toEqual([
        ...['held', 'held', 'committed', 'held', 'held', 'committed', 'held'],
        ...['denied', 'unknown', 'denied', 'denied', 'unknown', 'denied', 'denied', 'unknown'],
      ]);
    });

    describe('through the limiter, one per replica', () => {
      const RULES = (domain: string): string =>
        `domain: ${domain}\ndescriptors:\n` +
        '  - key: api_key\n    rate_limits:\n' +
        '      - {name: tokens_per_minute, unit: minute, requests_per_unit: 1000}\n' +
        '      - {name: tokens_per_day, unit: day, requests_per_unit: 100000, algorithm: fixed_window}\n' +
        '  - key: tenant\n    rate_limit: {concurrency: 5}\n';
      const limiters = (h: ReservationHarness, domain: string): [RateLimiter, RateLimiter] => {
        const config = buildConfig([parseConfigText('llm.yaml', RULES(domain), { defaultAlgorithm: 'sliding_window' })]);
        return [h.store, h.peer].map((store) => new RateLimiter({ store, config: () => config, ...LIMITER_DEFAULTS })) as [RateLimiter, RateLimiter];
      };
      const ask = (domain: string, key: string, value: string, kind: string, id: string, hits: number): RateLimitRequest => {
        const d: Descriptor = {
          entries: [
            { key, value },
            { key: kind, value: id },
          ],
          hitsAddend: hits,
        };
        return { domain, hitsAddend: 0, descriptors: [d] };
      };
      /**
       * Waits, on a real clock, until at least `room` ms are left in the current minute; resolves with
       * the minute's end (store clock).
       */
      const inOneMinute = async (h: ReservationHarness, room: number): Promise<number> => {
        const left = MINUTE - (h.nowMs() % MINUTE);
        if (left < room) await h.advance(left + 20);
        return h.nowMs() - (h.nowMs() % MINUTE) + MINUTE;
      };

      it('admits 10 of 50 concurrent reserves of 100 against 1,000 per minute across two replicas; commits of 30 on the other free the rest', () =>
        untilUnstretched(async () => {
          const h = harness();
          const domain = freshKey('llm').replace(/\|/g, '-');
          const [a, b] = limiters(h, domain);
          // The per-minute limit is a sliding window: every step must end inside one minute.
          const end = await inOneMinute(h, 3_000);
          const answers = await Promise.all(
            Array.from({ length: 50 }, (_, i) => (i % 2 ? a : b).shouldRateLimit(ask(domain, 'api_key', 'alice', 'reserve', `r${i}`, 100))),
          );
          requireBefore(end, h.nowMs(), 'the 50 reserves');
          const admitted = answers.flatMap((r, i) => (r.overallCode === 'OK' ? [i] : []));
          expect(admitted).toHaveLength(10);
          const commits = await Promise.all(admitted.map((i) => (i % 2 ? b : a).shouldRateLimit(ask(domain, 'api_key', 'alice', 'commit', `r${i}`, 30))));
          requireBefore(end, h.nowMs(), 'the commits');
          expect(commits.map((r) => r.overallCode)).toEqual(admitted.map(() => 'OK'));
          expect(Math.min(...commits.map((r) => r.statuses[0].limitRemaining))).toBe(700);
          const again = await Promise.all(Array.from({ length: 10 }, (_, i) => a.shouldRateLimit(ask(domain, 'api_key', 'alice', 'reserve', `s${i}`, 100))));
          requireBefore(end, h.nowMs(), 'the reserves after the commits');
          expect(again.filter((r) => r.overallCode === 'OK')).toHaveLength(7);
        }));

      it('holds 5 in flight across two replicas', async () => {
        const h = harness();
        const domain = freshKey('flight').replace(/\|/g, '-');
        const [a, b] = limiters(h, domain);
        const answers = await Promise.all(
          Array.from({ length: 7 }, (_, i) => (i % 2 ? a : b).shouldRateLimit(ask(domain, 'tenant', 'acme', 'reserve', `f${i}`, 1))),
        );
        const admitted = answers.flatMap((r, i) => (r.overallCode === 'OK' ? [i] : []));
        expect(admitted).toHaveLength(5);
        await a.shouldRateLimit(ask(domain, 'tenant', 'acme', 'commit', `f${admitted[0]}`, 1));
        expect((await b.shouldRateLimit(ask(domain, 'tenant', 'acme', 'reserve', 'late', 1))).overallCode).toBe('OK');
        expect((await a.shouldRateLimit(ask(domain, 'tenant', 'acme', 'reserve', 'later', 1))).overallCode).toBe('OVER_LIMIT');
      });
    });
  });
}
