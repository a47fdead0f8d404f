import { buildConfig } from '../../src/config/rule-tree';
import { parseConfigText } from '../../src/config/rule-reader';
import { RateLimiter } from '../../src/limiter/rate-limiter';
import type { CounterRequest, HoldAnswer, HoldCall, Store } from '../../src/limiter/store';
import { HOLD_ENTRY_BYTES, type HoldKind } from '../../src/limiter/reservations';
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
/** Holds per book every contract store is made with: small, so that a hostile loop reaches it. */
export const CONTRACT_RESERVATIONS_PER_KEY = 60;
/** Bytes per book every contract store is made with: 30 holds of 204-byte IDs (64 + 204 each), more than 60 of short ones. */
export const CONTRACT_RESERVATION_KEY_BYTES = 8_192;

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

    it('is reserved on one replica and committed on another, and a second commit of the ID is charged again', async () => {
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
        outcome: 'unknown',
        held: 0,
        decisions: [{ allowed: true, remaining: 500 }],
      });
      expect(await hold(h.peer, call('reserve', key, 'req-2', 700, counters))).toMatchObject({ outcome: 'denied' });
      expect(await hold(h.peer, call('reserve', key, 'req-2', 500, counters))).toMatchObject({
        outcome: 'held',
        decisions: [{ allowed: true, remaining: 0 }],
      });
    });

    it('charges the commit of an unknown ID all the same, past the limit, each time, remembering nothing', async () => {
      const h = harness();
      const key = freshKey('unknown');
      const counters = [budget(key, 100, DAY)];
      expect(await hold(h.store, call('commit', key, 'never-reserved', 80, counters))).toMatchObject({
        outcome: 'unknown',
        held: 0,
        decisions: [{ allowed: true, remaining: 20 }],
      });
      // Recorded past the limit (answered OVER_LIMIT, too late to stop anything).
      expect(await hold(h.peer, call('commit', key, 'other', 50, counters))).toMatchObject({ outcome: 'unknown', decisions: [{ allowed: false }] });
      expect(await hold(h.store, call('commit', key, 'other', 50, counters))).toMatchObject({ outcome: 'unknown', decisions: [{ allowed: false }] });
      expect(await hold(h.store, call('reserve', key, 'next', 1, counters))).toMatchObject({ outcome: 'denied', held: 0 });
      // 180 recorded: a check under a limit no usage reaches says so (the limit is not part of a counter's key).
      const [probe] = await h.peer.decide([budget(key, 1_000_000, DAY)]);
      expect(probe.remaining).toBe(1_000_000 - 180);
    });

    it("charges a commit at most each counter's limit: one of 2^32-1 records 100 and 1,000", async () => {
      const h = harness();
      const tag = freshKey('cap');
      const counters = [budget(tag, 100, MINUTE, { tag }), budget(`${tag}|day`, 1_000, DAY, { tag, algorithm: 'token_bucket' })];
      const huge = await hold(h.store, call('commit', tag, 'id', 4_294_967_295, counters));
      expect(huge).toMatchObject({
        outcome: 'unknown',
        decisions: [
          { allowed: true, remaining: 0 },
          { allowed: true, remaining: 0 },
        ],
      });
      const [probe] = await h.peer.decide([budget(tag, 1_000_000, MINUTE, { tag })]);
      expect(probe.remaining).toBe(1_000_000 - 100);
      // The bucket's state: a wait of its capacity's refill (one day for 1,000 a day), not 2^32 days.
      expect(await hold(h.peer, call('reserve', tag, 'r', 1, counters))).toMatchObject({ outcome: 'denied' });
      const [bucket] = await h.store.decide([{ ...counters[1], hits: 1 }]);
      expect(bucket.allowed).toBe(false);
      expect(bucket.resetMs).toBeLessThanOrEqual(DAY / 1_000 + 1_000);
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

    overTime("holds for the call's hold time (its rule's), capped by the TTL", async () => {
      const h = harness();
      const short = freshKey('short');
      const long = freshKey('long');
      const counters = (key: string) => [budget(key, 100, DAY)];
      expect(await hold(h.store, { ...call('reserve', short, 'a', 100, counters(short)), holdMs: 400 })).toMatchObject({ outcome: 'held' });
      expect(await hold(h.store, { ...call('reserve', long, 'a', 100, counters(long)), holdMs: 3_600_000 })).toMatchObject({ outcome: 'held' });
      expect(await hold(h.peer, call('reserve', short, 'b', 1, counters(short)))).toMatchObject({ outcome: 'denied' });
      await h.advance(600);
      expect(await hold(h.peer, call('reserve', short, 'b', 1, counters(short)))).toMatchObject({ outcome: 'held', held: 1 });
      expect(await hold(h.peer, call('reserve', long, 'b', 1, counters(long)))).toMatchObject({ outcome: 'denied' });
      await h.advance(CONTRACT_RESERVATION_TTL_MS);
      expect(await hold(h.peer, call('reserve', long, 'b', 1, counters(long)))).toMatchObject({ outcome: 'held', held: 1 });
    });

    it('holds the estimate on every limit of a rule, and refuses a second reserve of an ID it holds', async () => {
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
      const reused = await hold(h.store, call('reserve', tag, 'z', 100, counters));
      expect(reused).toMatchObject({ outcome: 'reused', held: 1 });
      for (const d of reused.decisions) {
        expect(d).toMatchObject({ allowed: false, remaining: 0 });
        // Until the hold of `z` lapses.
        expect(d.resetMs).toBeGreaterThan(0);
        expect(d.resetMs).toBeLessThanOrEqual(CONTRACT_RESERVATION_TTL_MS);
      }
    });

    it('holds one ID once: 200 concurrent reserves of it across replicas never pass concurrency 2, beside 50 legit reserves answered exactly', async () => {
      const h = harness();
      const shared = freshKey('one-id');
      const legit = freshKey('beside');
      const legitCounters = [budget(legit, 1_000, DAY)];
      const calls = [
        ...Array.from({ length: 200 }, (_, i) => hold(i % 2 ? h.store : h.peer, call('reserve', shared, 'same', 10, [budget(shared, 1_000_000, DAY)], 2))),
        ...Array.from({ length: 50 }, (_, i) => hold(i % 2 ? h.peer : h.store, call('reserve', legit, `legit-${i}`, 20, legitCounters))),
      ];
      const answers = await Promise.all(calls);
      const mine = answers.slice(0, 200);
      expect(mine.filter((a) => a.outcome === 'held')).toHaveLength(1);
      expect(mine.filter((a) => a.outcome === 'reused')).toHaveLength(199);
      expect(Math.max(...mine.map((a) => a.held))).toBe(1);
      const theirs = answers.slice(200);
      expect(theirs.every((a) => a.outcome === 'held')).toBe(true);
      expect(theirs.map((a) => a.decisions[0].remaining).sort((x, y) => x - y)).toEqual(Array.from({ length: 50 }, (_, i) => 20 * i));
      // A commit of 0 first, then a later one of 500: both charged, the second not free.
      const counters = [budget(shared, 1_000_000, DAY)];
      expect(await hold(h.peer, call('commit', shared, 'same', 0, counters, 2))).toMatchObject({ outcome: 'committed', held: 0 });
      expect(await hold(h.store, call('commit', shared, 'same', 500, counters, 2))).toMatchObject({
        outcome: 'unknown',
        decisions: [
          { allowed: true, remaining: 1_000_000 - 500 },
          { allowed: true, remaining: 2 },
        ],
      });
      // 21 reserve + commit pairs of 100 on one ID: each reserve a new hold, each commit charged.
      for (let i = 0; i < 21; i++) {
        expect((await hold(i % 2 ? h.store : h.peer, call('reserve', shared, 'same', 100, counters, 2))).outcome).toBe('held');
        expect((await hold(i % 2 ? h.peer : h.store, call('commit', shared, 'same', 100, counters, 2))).outcome).toBe('committed');
      }
      const [probe] = await h.store.decide(counters);
      expect(probe.remaining).toBe(1_000_000 - 500 - 2_100);
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

    it('keeps a hostile loop of fresh IDs to its own book, bounded in bytes, while a legit caller beside it gets its exact answers', async () => {
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
            // IDs of 204 bytes: 268 each against the book's 8,192 bytes.
            hold(i % 2 ? h.store : h.peer, call('reserve', hostile, `${'x'.repeat(200)}-${String(round * 10 + i).padStart(3, '0')}`, 0, hostileCounters)),
          ),
        );
        for (const a of burst) outcomes.set(a.outcome, (outcomes.get(a.outcome) ?? 0) + 1);
        legitAnswers.push(await hold(h.store, call('reserve', legit, `legit-${round}`, 100, legitCounters)));
        if (round % 2 === 1) legitAnswers.push(await hold(h.peer, call('commit', legit, `legit-${round}`, 100, legitCounters)));
      }
      // The hostile book stops at its bound in bytes: every reserve past it is refused and holds nothing.
      const fit = Math.floor(CONTRACT_RESERVATION_KEY_BYTES / (HOLD_ENTRY_BYTES + 204));
      expect(outcomes.get('held')).toBe(fit);
      expect(outcomes.get('full')).toBe(100 - fit);
      // The legit caller, 100 a round against 500 (a commit of 100 every other round), answered exactly:
      // rounds 0-4 fit (counted 200, held 300), then its reserves are denied and its commits unknown.
      expect(legitAnswers.map((a) => a.outcome)).toEqual([
        ...['held', 'held', 'committed', 'held', 'held', 'committed', 'held'],
        ...['denied', 'unknown', 'denied', 'denied', 'unknown', 'denied', 'denied', 'unknown'],
      ]);
    });

    it('bounds a book of short IDs by its holds, and refuses only its own reserves, hundreds in flight beside another book', async () => {
      const h = harness();
      const hostile = freshKey('many');
      const legit = freshKey('other');
      const answers = await Promise.all([
        ...Array.from({ length: 150 }, (_, i) => hold(i % 2 ? h.store : h.peer, call('reserve', hostile, `h${i}`, 0, [budget(hostile, 1_000_000, DAY)]))),
        ...Array.from({ length: 50 }, (_, i) => hold(i % 2 ? h.peer : h.store, call('reserve', legit, `l${i}`, 2, [budget(legit, 100, DAY)]))),
      ]);
      const hostileOutcomes = answers.slice(0, 150).map((a) => a.outcome);
      expect(hostileOutcomes.filter((o) => o === 'held')).toHaveLength(CONTRACT_RESERVATIONS_PER_KEY);
      expect(hostileOutcomes.filter((o) => o === 'full')).toHaveLength(150 - CONTRACT_RESERVATIONS_PER_KEY);
      // The other book: 50 of 2 against 100, every one held, the last with nothing left.
      expect(answers.slice(150).every((a) => a.outcome === 'held')).toBe(true);
      expect(Math.min(...answers.slice(150).map((a) => a.decisions[0].remaining))).toBe(0);
      // The hostile book's commits still charge and free: its own reserves fit again.
      expect(await hold(h.store, call('commit', hostile, 'h0', 1, [budget(hostile, 1_000_000, DAY)]))).toMatchObject({ outcome: 'committed' });
    });

    describe('through the limiter, one per replica', () => {
      const RULES = (domain: string): string =>
        `domain: ${domain}\ndescriptors:\n` +
        '  - key: api_key\n    reservations: true\n    rate_limits:\n' +
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
