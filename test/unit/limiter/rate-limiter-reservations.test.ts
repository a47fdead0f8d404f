import { buildConfig } from '../../../src/config/rule-tree';
import { parseConfigText } from '../../../src/config/rule-reader';
import { InvalidRequestError } from '../../../src/limiter/errors';
import { RateLimiter, type RateLimiterOptions } from '../../../src/limiter/rate-limiter';
import type { Descriptor, DescriptorOutcome, RateLimitRequest, RateLimitResponse, ReservationEvent } from '../../../src/limiter/types';
import { MemoryStore } from '../../../src/store/memory-store';
import { FakeClock } from '../../helpers/fake-clock';
import { LIMITER_DEFAULTS } from '../../helpers/limiter-defaults';
import { RESERVATION_RULES } from '../../helpers/reservation-rules';

/**
 * Reservations in the decision: a descriptor ending in (reserve, ID) holds its hits_addend on its
 * rule's limits, one ending in (commit, ID) charges the real cost and frees the hold, `concurrency`
 * limits holds in flight; all-or-nothing with the request's other descriptors; bad input named.
 */

const RULES = `${RESERVATION_RULES.trimEnd()}
  - key: both
    rate_limits:
      - {name: in_flight, concurrency: 2}
      - {name: tokens, unit: hour, requests_per_unit: 300}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: dry
    shadow_mode: true
    reservations: true
    rate_limit: {unit: hour, requests_per_unit: 10}
`;

const TTL = 600_000;

function setup(options: Partial<RateLimiterOptions> = {}): {
  limiter: RateLimiter;
  store: MemoryStore;
  clock: FakeClock;
  outcomes: DescriptorOutcome[];
  events: ReservationEvent[];
} {
  const clock = new FakeClock(1_700_000_000_000);
  const store = new MemoryStore({ clock, maxKeys: 10_000, sweepIntervalMs: 0, reservations: { ttlMs: TTL, maxPerKey: 1_000 } });
  const config = buildConfig([parseConfigText('llm.yaml', RULES, { defaultAlgorithm: 'sliding_window' })]);
  const outcomes: DescriptorOutcome[] = [];
  const events: ReservationEvent[] = [];
  const limiter = new RateLimiter({
    store,
    config: () => config,
    ...LIMITER_DEFAULTS,
    observer: { onDescriptor: (o) => outcomes.push(o), onReservation: (e) => events.push(e) },
    ...options,
  });
  return { limiter, store, clock, outcomes, events };
}

const d = (entries: [string, string][], hitsAddend?: number): Descriptor => ({
  entries: entries.map(([key, value]) => ({ key, value })),
  ...(hitsAddend === undefined ? {} : { hitsAddend }),
});
const req = (...descriptors: Descriptor[]): RateLimitRequest => ({ domain: 'llm', hitsAddend: 0, descriptors });
const reserve = (key: string, value: string, id: string, hits: number): Descriptor =>
  d(
    [
      [key, value],
      ['reserve', id],
    ],
    hits,
  );
const commit = (key: string, value: string, id: string, hits: number): Descriptor =>
  d(
    [
      [key, value],
      ['commit', id],
    ],
    hits,
  );

describe('reservations through the limiter', () => {
  it('admits 10 of 50 concurrent reserves of 100 against 1,000 per minute, and commits of 30 free the rest at once', async () => {
    const { limiter } = setup();
    const answers = await Promise.all(Array.from({ length: 50 }, (_, i) => limiter.shouldRateLimit(req(reserve('api_key', 'alice', `r${i}`, 100)))));
    const admitted = answers.flatMap((a, i) => (a.overallCode === 'OK' ? [i] : []));
    expect(admitted).toHaveLength(10);
    const denied = answers.find((a) => a.overallCode === 'OVER_LIMIT')!;
    expect(denied.statuses[0]).toMatchObject({ code: 'OVER_LIMIT', currentLimit: { name: 'tokens_per_minute' }, limitRemaining: 0 });
    for (const i of admitted) expect((await limiter.shouldRateLimit(req(commit('api_key', 'alice', `r${i}`, 30)))).overallCode).toBe('OK');
    const again = await Promise.all(Array.from({ length: 10 }, (_, i) => limiter.shouldRateLimit(req(reserve('api_key', 'alice', `s${i}`, 100)))));
    expect(again.filter((a) => a.overallCode === 'OK')).toHaveLength(7);
  });

  it('reports the tightest limit of a reserve, and counts it in the outcomes of each limit', async () => {
    const { limiter, outcomes, events } = setup();
    const answer = await limiter.shouldRateLimit(req(reserve('api_key', 'bob', 'x', 400)));
    expect(answer.statuses[0]).toEqual({
      code: 'OK',
      currentLimit: { name: 'tokens_per_minute', requestsPerUnit: 1000, unit: 'minute', windowMs: 60_000 },
      limitRemaining: 600,
      durationUntilResetMs: 0,
    });
    expect(outcomes.map((o) => [o.statKey, o.hits, o.withinLimit])).toEqual([
      ['api_key.tokens_per_minute', 400, 400],
      ['api_key.tokens_per_day', 400, 400],
    ]);
    expect(events).toMatchObject([{ domain: 'llm', kind: 'reserve', outcome: 'held', held: 1, lapsed: 0 }]);
  });

  it("frees a lapsed hold after its rule's shortest window (the minute, not the TTL), and charges every commit of its ID", async () => {
    const { limiter, clock } = setup();
    expect((await limiter.shouldRateLimit(req(reserve('api_key', 'carol', 'a', 1000)))).overallCode).toBe('OK');
    expect((await limiter.shouldRateLimit(req(reserve('api_key', 'carol', 'b', 1)))).overallCode).toBe('OVER_LIMIT');
    clock.advance(59_999);
    expect((await limiter.shouldRateLimit(req(reserve('api_key', 'carol', 'b', 1)))).overallCode).toBe('OVER_LIMIT');
    clock.advance(1);
    expect((await limiter.shouldRateLimit(req(reserve('api_key', 'carol', 'b', 1)))).overallCode).toBe('OK');
    // 'a' lapsed: unknown, charged 999 past nothing held but b's 1.
    const late = await limiter.shouldRateLimit(req(commit('api_key', 'carol', 'a', 999)));
    expect(late.statuses[0]).toMatchObject({ code: 'OK', limitRemaining: 1 });
    // A second commit of the same ID is charged again: recorded past the limit.
    const again = await limiter.shouldRateLimit(req(commit('api_key', 'carol', 'a', 999)));
    expect(again.statuses[0]).toMatchObject({ code: 'OVER_LIMIT', limitRemaining: 0 });
  });

  it('holds for the TTL on a rule of concurrency alone, and for its own reservation_hold_seconds, capped by the TTL', async () => {
    const clock = new FakeClock(1_700_000_000_000);
    const store = new MemoryStore({ clock, maxKeys: 1_000, sweepIntervalMs: 0, reservations: { ttlMs: TTL } });
    const rules =
      'domain: llm\ndescriptors:\n' +
      '  - key: flight\n    rate_limit: {concurrency: 1}\n' +
      '  - key: slow\n    reservations: true\n    reservation_hold_seconds: 120\n    rate_limit: {unit: second, requests_per_unit: 10}\n' +
      '  - key: long\n    reservations: true\n    reservation_hold_seconds: 3600\n    rate_limit: {unit: second, requests_per_unit: 10}\n';
    const config = buildConfig([parseConfigText('llm.yaml', rules, { defaultAlgorithm: 'sliding_window' })]);
    const limiter = new RateLimiter({ store, config: () => config, ...LIMITER_DEFAULTS });
    const code = async (key: string, id: string, hits = 10): Promise<string> => (await limiter.shouldRateLimit(req(reserve(key, 'x', id, hits)))).overallCode;
    for (const key of ['flight', 'slow', 'long']) expect([await code(key, 'a'), await code(key, 'b')]).toEqual(['OK', 'OVER_LIMIT']);
    clock.advance(120_000 - 1);
    expect([await code('flight', 'b'), await code('slow', 'b'), await code('long', 'b')]).toEqual(['OVER_LIMIT', 'OVER_LIMIT', 'OVER_LIMIT']);
    clock.advance(1);
    expect([await code('flight', 'b'), await code('slow', 'b'), await code('long', 'b')]).toEqual(['OVER_LIMIT', 'OK', 'OVER_LIMIT']);
    clock.advance(TTL - 120_000);
    expect([await code('flight', 'c'), await code('long', 'c')]).toEqual(['OK', 'OK']);
  });

  it('refuses a second reserve of an ID it holds: 10 concurrent reserves of one ID hold once against concurrency 2', async () => {
    const { limiter, store } = setup();
    const answers = await Promise.all(Array.from({ length: 10 }, () => limiter.shouldRateLimit(req(reserve('both', 'k', 'same', 1)))));
    expect(answers.filter((a) => a.overallCode === 'OK')).toHaveLength(1);
    // The one hold counts once in flight: another ID still fits, a third does not.
    expect((await limiter.shouldRateLimit(req(reserve('both', 'k', 'other', 1)))).overallCode).toBe('OK');
    expect((await limiter.shouldRateLimit(req(reserve('both', 'k', 'third', 1)))).overallCode).toBe('OVER_LIMIT');
    expect(store.reservations.size).toBe(2);
    // The refused reserve's wait: until the ID's hold lapses (its rule's hour, capped by the TTL).
    const reused = await limiter.shouldRateLimit(req(reserve('both', 'k', 'same', 1)));
    expect(reused.statuses[0]).toMatchObject({ code: 'OVER_LIMIT', limitRemaining: 0, durationUntilResetMs: TTL });
  });

  it("charges a commit at most its limit: one of 2^32-1 denies a token bucket's descriptor for one window, not for years", async () => {
    const clock = new FakeClock(1_700_000_000_000);
    const store = new MemoryStore({ clock, maxKeys: 1_000, sweepIntervalMs: 0 });
    const rules =
      'domain: llm\ndescriptors:\n  - key: b\n    reservations: true\n    rate_limit: {unit: minute, requests_per_unit: 600, algorithm: token_bucket}\n';
    const config = buildConfig([parseConfigText('llm.yaml', rules, { defaultAlgorithm: 'sliding_window' })]);
    const outcomes: DescriptorOutcome[] = [];
    const limiter = new RateLimiter({ store, config: () => config, ...LIMITER_DEFAULTS, observer: { onDescriptor: (o) => outcomes.push(o) } });
    const huge = await limiter.shouldRateLimit(req(commit('b', 'x', 'id', 4_294_967_295)));
    expect(huge.statuses[0]).toMatchObject({ code: 'OK', limitRemaining: 0 });
    // The outcome reports what was charged.
    expect(outcomes[0]).toMatchObject({ hits: 600 });
    expect((await limiter.shouldRateLimit(req(reserve('b', 'x', 'r', 1)))).statuses[0]).toMatchObject({ code: 'OVER_LIMIT' });
    // 600 a minute refill one a 100 ms: after the window, the bucket is full again.
    clock.advance(60_000);
    expect((await limiter.shouldRateLimit(req(reserve('b', 'x', 'r', 600)))).statuses[0]).toMatchObject({ code: 'OK', limitRemaining: 0 });
  });

  it('takes reserve and commit entries only on a rule that opts in; a rule keyed like the entry is matched as the reference does', async () => {
    const clock = new FakeClock(1_700_000_000_000);
    const store = new MemoryStore({ clock, maxKeys: 1_000, sweepIntervalMs: 0 });
    const rules =
      'domain: llm\ndescriptors:\n' +
      '  - key: plain\n    rate_limit: {unit: minute, requests_per_unit: 5}\n' +
      '  - key: git\n    rate_limit: {unit: minute, requests_per_unit: 5}\n    descriptors:\n      - key: commit\n        rate_limit: {unit: minute, requests_per_unit: 2}\n';
    const config = buildConfig([parseConfigText('llm.yaml', rules, { defaultAlgorithm: 'sliding_window' })]);
    const limiter = new RateLimiter({ store, config: () => config, ...LIMITER_DEFAULTS });
    for (const entry of [reserve('plain', 'x', 'id', 1), commit('plain', 'x', 'id', 1_000_000)]) {
      await expect(limiter.shouldRateLimit(req(d([['other', 'y']]), entry))).rejects.toThrow(
        /^descriptors\[1\]: its rule \(plain\) takes no reservations: a "reserve" or "commit" entry needs `reservations: true` on the rule$/,
      );
    }
    // (git, x), (commit, sha) is the nested rule `commit`, counted as any descriptor: 2 a minute.
    const codes: string[] = [];
    for (let i = 0; i < 3; i++) codes.push((await limiter.shouldRateLimit(req(commit('git', 'x', 'sha', 1)))).overallCode);
    expect(codes).toEqual(['OK', 'OK', 'OVER_LIMIT']);
    // A descriptor that matches no rule, with or without its last entry, is not limited, as any other.
    expect(await limiter.shouldRateLimit(req(commit('nothing', 'x', 'id', 5)))).toMatchObject({ overallCode: 'OK', statuses: [{ limitRemaining: 0 }] });
    expect(store.reservations.size).toBe(0);
  });

  it('limits 5 in flight: the sixth is OVER_LIMIT until a commit frees one, whose hits are not charged', async () => {
    const { limiter } = setup();
    const codes: string[] = [];
    for (let i = 0; i < 6; i++) codes.push((await limiter.shouldRateLimit(req(reserve('tenant', 'acme', `f${i}`, 1)))).overallCode);
    expect(codes).toEqual(['OK', 'OK', 'OK', 'OK', 'OK', 'OVER_LIMIT']);
    const done = await limiter.shouldRateLimit(req(commit('tenant', 'acme', 'f0', 5000)));
    expect(done.statuses[0]).toEqual({ code: 'OK', currentLimit: undefined, limitRemaining: 1, durationUntilResetMs: 0 });
    expect((await limiter.shouldRateLimit(req(reserve('tenant', 'acme', 'f6', 1)))).overallCode).toBe('OK');
  });

  it('holds both in flight and tokens on a rule with both, and a denial by either holds nothing', async () => {
    const { limiter } = setup();
    expect((await limiter.shouldRateLimit(req(reserve('both', 'k', 'a', 200)))).overallCode).toBe('OK');
    // 200 + 200 > 300: the tokens deny, the in-flight place is not taken.
    const over = await limiter.shouldRateLimit(req(reserve('both', 'k', 'b', 200)));
    expect(over.statuses[0]).toMatchObject({ code: 'OVER_LIMIT', currentLimit: { name: 'tokens' } });
    expect((await limiter.shouldRateLimit(req(reserve('both', 'k', 'c', 100)))).overallCode).toBe('OK');
    const third = await limiter.shouldRateLimit(req(reserve('both', 'k', 'd', 0)));
    expect(third.statuses[0]).toMatchObject({ code: 'OVER_LIMIT', currentLimit: undefined });
  });

  it('is all-or-nothing with the request: a reserve beside a denied descriptor holds nothing, and a denied reserve charges no other counter', async () => {
    const { limiter } = setup();
    expect((await limiter.shouldRateLimit(req(d([['path', '/a']])))).overallCode).toBe('OK');
    const denied = await limiter.shouldRateLimit(req(reserve('api_key', 'dan', 'x', 1000), d([['path', '/a']])));
    expect(denied.overallCode).toBe('OVER_LIMIT');
    expect(denied.statuses.map((s) => s.code)).toEqual(['OK', 'OVER_LIMIT']);
    // Released: the whole minute is there again.
    expect((await limiter.shouldRateLimit(req(reserve('api_key', 'dan', 'y', 1000)))).overallCode).toBe('OK');
    // Denied by the reserve: /b is only checked, not charged.
    const blocked = await limiter.shouldRateLimit(req(reserve('api_key', 'dan', 'z', 1), d([['path', '/b']])));
    expect(blocked.statuses.map((s) => s.code)).toEqual(['OVER_LIMIT', 'OK']);
    expect((await limiter.shouldRateLimit(req(d([['path', '/b']])))).overallCode).toBe('OK');
  });

  it('answers a shadow-mode rule OK over its limit, holding nothing', async () => {
    const { limiter } = setup();
    const answer = await limiter.shouldRateLimit(req(reserve('dry', 'e', 'a', 11)));
    expect(answer.overallCode).toBe('OK');
    expect((await limiter.shouldRateLimit(req(reserve('dry', 'e', 'b', 10)))).statuses[0]).toMatchObject({ code: 'OK', limitRemaining: 0 });
  });

  it('reads renamed entry keys, and then takes the default ones as ordinary entries', async () => {
    const { limiter } = setup({ reservationKeys: { reserve: 'hold', commit: 'settle' } });
    const answer = await limiter.shouldRateLimit(
      req(
        d(
          [
            ['api_key', 'erin'],
            ['hold', 'r1'],
          ],
          1000,
        ),
      ),
    );
    expect(answer.statuses[0]).toMatchObject({ code: 'OK', limitRemaining: 0 });
    // (api_key, reserve) matches no rule under these keys: not limited.
    expect(await limiter.shouldRateLimit(req(reserve('api_key', 'erin', 'r2', 1)))).toMatchObject({
      overallCode: 'OK',
      statuses: [{ code: 'OK', limitRemaining: 0 }],
    });
    expect(
      (
        await limiter.shouldRateLimit(
          req(
            d(
              [
                ['api_key', 'erin'],
                ['settle', 'r1'],
              ],
              10,
            ),
          ),
        )
      ).statuses[0],
    ).toMatchObject({ limitRemaining: 990 });
  });

  describe('refuses bad input, naming it', () => {
    const cases: [string, Descriptor, RegExp][] = [
      [
        'a reserve entry not last',
        d([
          ['reserve', 'x'],
          ['api_key', 'a'],
        ]),
        /descriptors\[0\]\.entries\[0\]: a "reserve" entry must be the descriptor's last/,
      ],
      ['a commit entry alone', d([['commit', 'x']]), /descriptors\[0\]\.entries\[0\]: a "commit" entry needs the entries of a rule before it/],
      ['an empty ID', reserve('api_key', 'a', '', 1), /descriptors\[0\]\.entries\[1\]\.value: a reservation ID must not be empty/],
      ['an ID over 256 bytes', reserve('api_key', 'a', 'é'.repeat(129), 1), /a reservation ID of 258 bytes, over the cap of 256/],
      ['a plain descriptor on an in-flight rule', d([['tenant', 'acme']]), /descriptors\[0\]: its rule \(tenant\) limits reservations in flight/],
      [
        'a limit override',
        { ...reserve('api_key', 'a', 'x', 1), limit: { requestsPerUnit: 5, unit: 'second' } },
        /descriptors\[0\]\.limit: a "reserve" descriptor holds on its rule's limits/,
      ],
    ];
    it.each(cases)('%s', async (_label, descriptor, message) => {
      const { limiter } = setup();
      const answer: Promise<RateLimitResponse> = limiter.shouldRateLimit(req(descriptor));
      await expect(answer).rejects.toThrow(InvalidRequestError);
      await expect(limiter.shouldRateLimit(req(descriptor))).rejects.toThrow(message);
    });

    it('a plain descriptor on an in-flight rule, kept and asked again', async () => {
      const { limiter } = setup();
      const kept = Object.freeze(req(Object.freeze(d([['both', 'k']]))));
      for (let i = 0; i < 2; i++)
        await expect(limiter.shouldRateLimit(kept)).rejects.toThrow(/descriptors\[0\]: its rule \(both\) limits reservations in flight/);
    });

    it('a store that holds no reservations', async () => {
      const { store } = setup();
      const bare = { name: 'bare', decide: store.decide.bind(store), isHealthy: () => true, close: async () => {} };
      const config = buildConfig([parseConfigText('llm.yaml', RULES, { defaultAlgorithm: 'sliding_window' })]);
      const limiter = new RateLimiter({ store: bare, config: () => config, ...LIMITER_DEFAULTS });
      await expect(limiter.shouldRateLimit(req(reserve('api_key', 'a', 'x', 1)))).rejects.toThrow(/descriptors\[0\]: the bare store holds no reservations/);
    });
  });

  it('costs an ordinary kept request nothing new: its plan has no holds', async () => {
    const { limiter } = setup();
    const frozen = Object.freeze(req(Object.freeze(d([['path', '/c']]))));
    expect((await limiter.shouldRateLimit(frozen)).overallCode).toBe('OK');
    expect(limiter.planOf(frozen).holds).toBeUndefined();
  });
});
