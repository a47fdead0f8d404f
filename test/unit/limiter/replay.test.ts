import fc from 'fast-check';
import { buildConfig } from '../../../src/config/rule-tree';
import { parseConfigText } from '../../../src/config/rule-reader';
import type { RateLimitConfig } from '../../../src/limiter/rules';
import { RateLimiter, type RateLimiterOptions } from '../../../src/limiter/rate-limiter';
import { Replays } from '../../../src/limiter/replay';
import type { Descriptor, DescriptorOutcome, LocalDenial, RateLimitRequest, RateLimitResponse } from '../../../src/limiter/types';
import { DenialCache } from '../../../src/store/denial-cache';
import { MemoryStore } from '../../../src/store/memory-store';
import { CountingStore } from '../../helpers/counting-store';
import { FakeClock } from '../../helpers/fake-clock';
import { LIMITER_DEFAULTS } from '../../helpers/limiter-defaults';

const CONFIG = `
domain: edge
descriptors:
  - key: one
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: two
    rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 2, algorithm: fixed_window}
  - key: big
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: dry
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`;

const START = 1_699_999_200_000;

const d = (key: string, value: string, hitsAddend?: number): Descriptor => ({ entries: [{ key, value }], hitsAddend });
const req = (...descriptors: Descriptor[]): RateLimitRequest => ({ domain: 'edge', descriptors, hitsAddend: 0 });
/** Any string that tells requests apart will do as the key; the gRPC edge uses the wire bytes. */
const keyOf = (r: RateLimitRequest): string => JSON.stringify(r);

/**
 * A limiter over a denial cache over a memory store, and the replays of its local denials (their
 * encoding the answer itself), all on one fake clock, with what they report.
 */
function stack(clock: FakeClock, config: () => RateLimitConfig, overrides: Partial<RateLimiterOptions> = {}, maxKeys = 100) {
  const memory = new MemoryStore({ clock, maxKeys: 10_000, sweepIntervalMs: 0 });
  const store = new CountingStore(new DenialCache({ store: memory, maxKeys: 1_000, clock }));
  const outcomes: DescriptorOutcome[] = [];
  const shadowed: string[] = [];
  let replays = 0;
  const observer = {
    onDescriptor: (o: DescriptorOutcome) => outcomes.push(o),
    onGlobalShadowMode: (domain: string) => shadowed.push(domain),
    onReplay: () => replays++,
  };
  const limiter = new RateLimiter({ store, config, ...LIMITER_DEFAULTS, observer, ...overrides });
  const replaying = new Replays<RateLimitResponse>({ maxKeys, config, encode: (response) => response, observer, clock });
  return {
    limiter,
    store,
    outcomes,
    shadowed,
    replays: () => replays,
    replaying,
    /** A call as the gRPC edge makes it: decided with the replays' listener for its name. */
    decide: (r: RateLimitRequest) => limiter.shouldRateLimit(r, replaying.remembering(keyOf(r))),
    /** The replayed answer to `r`, if the replays hold one. */
    replay: (r: RateLimitRequest) => replaying.answer(keyOf(r)),
    close: () => memory.close(),
  };
}

describe('Replays', () => {
  let clock: FakeClock;
  let config: RateLimitConfig;
  let s: ReturnType<typeof stack>;

  const parse = (): RateLimitConfig => buildConfig([parseConfigText('edge.yaml', CONFIG, { defaultAlgorithm: 'sliding_window' })]);

  beforeEach(() => {
    clock = new FakeClock(START);
    config = parse();
    s = stack(clock, () => config);
  });

  afterEach(() => s.close());

  /** Calls `r` as the edge does until the denial cache answers it; returns that answer. */
  async function untilCached(r: RateLimitRequest): Promise<RateLimitResponse> {
    for (let i = 0; i < 5; i++) {
      const before = s.store.localAnswers;
      const res = await s.decide(r);
      if (res.overallCode === 'OVER_LIMIT' && s.store.localAnswers === before + 1 && s.replay(r) !== undefined) return res;
    }
    throw new Error('never answered from the denial cache');
  }

  it('answers a repeat of a call the denial cache answered without the store, its reset counting down', async () => {
    const r = req(d('one', 'a'));
    expect((await s.decide(r)).overallCode).toBe('OK');
    const denied = await s.decide(r);
    expect(denied.overallCode).toBe('OVER_LIMIT');
    // Decided by the store: nothing to replay yet.
    expect(s.replay(r)).toBeUndefined();
    const cached = await s.decide(r);
    const reset = cached.statuses[0].durationUntilResetMs!;
    expect(reset).toBe(denied.statuses[0].durationUntilResetMs);
    const calls = s.store.calls;

    const replayed = s.replay(r);
    expect(replayed).toEqual(cached);
    clock.advance(1_000);
    expect(s.replay(r)!.statuses[0]).toEqual({ ...cached.statuses[0], durationUntilResetMs: reset - 1_000 });
    expect(s.store.calls).toBe(calls);
    expect(s.replays()).toBe(2);

    clock.advance(reset - 1_000 - 1);
    expect(s.replay(r)!.statuses[0].durationUntilResetMs).toBe(1);
    clock.advance(1);
    expect(s.replay(r)).toBeUndefined();
    expect((await s.decide(r)).overallCode).toBe('OK');
  });

  it('replays nothing for a request whose calls the store decided, or that was decided without the listener', async () => {
    const r = req(d('big', 'b'));
    for (let i = 0; i < 3; i++) await s.decide(r);
    expect(s.replay(r)).toBeUndefined();
    const over = req(d('one', 'c'));
    for (let i = 0; i < 4; i++) await s.limiter.shouldRateLimit(over);
    expect(s.store.localAnswers).toBeGreaterThan(0);
    expect(s.replay(over)).toBeUndefined();
  });

  it('forgets its answers when the config changes', async () => {
    const r = req(d('one', 'a'));
    await untilCached(r);
    config = parse();
    expect(s.replay(r)).toBeUndefined();
  });

  it('reports each replay to the observer as the full path reports a cache answer', async () => {
    const r = req(d('one', 'a'));
    await untilCached(r);
    const reported = s.outcomes[s.outcomes.length - 1];
    expect(reported).toMatchObject({ statKey: 'one', hits: 1, overLimit: 1, overLimitWithLocalCache: 1 });
    const count = s.outcomes.length;
    const replays = s.replays();
    const first = s.replay(r);
    // Within one millisecond the same encoding is handed out again, and still reported.
    expect(s.replay(r)).toBe(first);
    expect(s.outcomes.slice(count)).toEqual([reported, reported]);
    expect(s.replays()).toBe(replays + 2);
  });

  it('replays a request only once the cache denies every counter of it', async () => {
    await untilCached(req(d('one', 'a')));
    const r = req(d('two', 't'), d('one', 'a'), d('nomatch', 'x'));
    // `two` was not consulted: reported allowed, and not replayable, for another call may get it denied.
    const partial = await s.decide(r);
    expect(partial.statuses.map((st) => st.code)).toEqual(['OK', 'OVER_LIMIT', 'OK']);
    expect(s.replay(r)).toBeUndefined();
    // `two` alone: 2 per 10 s, then denied by the store, then by the cache.
    await untilCached(req(d('two', 't')));
    const full = await s.decide(r);
    expect(full.statuses.map((st) => st.code)).toEqual(['OVER_LIMIT', 'OVER_LIMIT', 'OK']);
    clock.advance(250);
    const replayed = s.replay(r)!;
    expect(replayed.statuses.map((st) => st.code)).toEqual(['OVER_LIMIT', 'OVER_LIMIT', 'OK']);
    expect(replayed.statuses[1].durationUntilResetMs).toBe(full.statuses[1].durationUntilResetMs! - 250);
    expect(replayed.statuses[2]).toEqual(full.statuses[2]);
  });

  it('holds only until the earliest of its denials expires', async () => {
    const r = req(d('one', 'a'), d('two', 't'));
    // Deny both counters on their own first, so the cache knows both.
    await untilCached(req(d('one', 'a')));
    await untilCached(req(d('two', 't')));
    const cached = await s.decide(r);
    const resets = cached.statuses.map((st) => st.durationUntilResetMs!);
    expect(cached.statuses.map((st) => st.code)).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
    clock.advance(Math.min(...resets) - 1);
    expect(s.replay(r)).toBeDefined();
    clock.advance(1);
    expect(s.replay(r)).toBeUndefined();
  });

  it('does not remember requests that mix shadow-mode and enforced rules (they take several store calls)', async () => {
    await untilCached(req(d('one', 'a')));
    const mixed = req(d('dry', 'x'), d('one', 'a'));
    for (let i = 0; i < 3; i++) await s.decide(mixed);
    expect(s.replay(mixed)).toBeUndefined();
  });

  it('under global shadow mode, answers OK overall and reports the shadowing on each replay', async () => {
    s.close();
    s = stack(clock, () => config, { shadowMode: true });
    const r = req(d('one', 'a'));
    for (let i = 0; i < 3; i++) await s.decide(r);
    expect(s.shadowed).toEqual(['edge', 'edge']);
    const replayed = s.replay(r)!;
    expect(replayed.overallCode).toBe('OK');
    expect(replayed.statuses[0].code).toBe('OVER_LIMIT');
    expect(s.replay(r)).toBe(replayed);
    expect(s.shadowed).toEqual(['edge', 'edge', 'edge', 'edge']);
  });

  it('gives the answers the full path gives, at every step of any sequence of calls', async () => {
    // Two stacks fed the same calls on one clock: A replays whatever it can, B never does.
    const shapes = [
      req(d('one', 'a')),
      req(d('one', 'b', 2)),
      req(d('two', 't')),
      req(d('big', 'x'), d('one', 'a')),
      req(d('two', 't'), d('one', 'a'), d('nomatch', 'n')),
      req(d('dry', 'y')),
    ];
    const step = fc.record({ shape: fc.integer({ min: 0, max: shapes.length - 1 }), advance: fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 20_000 })) });
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 60 }), async (steps) => {
        const time = new FakeClock(START);
        const cfg = parse();
        const a = stack(time, () => cfg);
        const b = stack(time, () => cfg);
        try {
          for (const { shape, advance } of steps) {
            time.advance(advance);
            const r = shapes[shape];
            const fromA = a.replay(r) ?? (await a.decide(r));
            // B's calls come without the listener: it never remembers, never replays.
            const fromB = await b.limiter.shouldRateLimit(r);
            expect(fromA).toEqual(fromB);
          }
          expect(a.outcomes).toEqual(b.outcomes);
        } finally {
          a.close();
          b.close();
        }
      }),
      {
        numRuns: 150,
        // Found by this property: a counter the cache did not consult (`two`) got denied by a later call.
        examples: [[[2, 0, 0, 4, 2, 2, 4, 0].map((shape) => ({ shape, advance: 0 }))]],
      },
    );
  });
});

describe('Replays, the bounded store of answers', () => {
  const config = {};
  const response: RateLimitResponse = {
    overallCode: 'OVER_LIMIT',
    statuses: [{ code: 'OVER_LIMIT', limitRemaining: 0, durationUntilResetMs: 100 }],
    responseHeaders: [],
  };
  const denial = (untilMs: number, cfg: object = config): LocalDenial => ({
    config: cfg,
    domain: 'edge',
    response,
    deniedUntilMs: [untilMs],
    outcomes: [],
    shadowed: false,
    headers: undefined,
  });

  it('drops the oldest entry beyond its bound, and expired or stale entries when they are met', () => {
    const clock = new FakeClock(0);
    let current: object = config;
    const replays = new Replays<RateLimitResponse>({ maxKeys: 2, config: () => current, encode: (r) => r, clock });
    replays.remember('a', denial(100));
    replays.remember('b', denial(100));
    replays.remembering('c')(denial(100));
    expect(replays.size).toBe(2);
    expect(replays.answer('a')).toBeUndefined();
    clock.advance(99);
    expect(replays.answer('b')!.statuses[0].durationUntilResetMs).toBe(1);
    clock.advance(1);
    expect(replays.answer('b')).toBeUndefined();
    clock.set(0);
    current = {};
    expect(replays.answer('c')).toBeUndefined();
    expect(replays.size).toBe(0);
  });

  it('holds at most maxBytes of requests, however few, dropping the oldest', () => {
    const clock = new FakeClock(0);
    const replays = new Replays<RateLimitResponse>({ maxKeys: 1_000, maxBytes: 8_000, config: () => config, encode: (r) => r, clock });
    for (let i = 0; i < 20; i++) replays.remember(`${i}`.padEnd(500, 'q'), denial(100));
    expect(replays.bytes).toBeLessThanOrEqual(8_000);
    expect(replays.size).toBeGreaterThan(2);
    expect(replays.size).toBeLessThan(20);
    expect(replays.answer('19'.padEnd(500, 'q'))).toBeDefined();
    expect(replays.answer('0'.padEnd(500, 'q'))).toBeUndefined();
  });

  it('encodes an answer once per millisecond, however often it is asked', () => {
    const clock = new FakeClock(0);
    let encoded = 0;
    const replays = new Replays<number>({ maxKeys: 2, config: () => config, encode: () => ++encoded, clock });
    replays.remember('a', denial(100));
    expect([replays.answer('a'), replays.answer('a')]).toEqual([1, 1]);
    clock.advance(1);
    expect(replays.answer('a')).toBe(2);
  });

  it('rejects a bound that is not a positive integer', () => {
    expect(() => new Replays({ maxKeys: 0, config: () => config, encode: (r) => r })).toThrow(RangeError);
  });
});
