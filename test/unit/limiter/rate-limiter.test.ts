import { buildConfig } from '../../../src/config/rule-tree';
import { parseConfigText } from '../../../src/config/rule-reader';
import type { RateLimitConfig } from '../../../src/limiter/rules';
import { InvalidRequestError, NotReadyError } from '../../../src/limiter/errors';
import { counterKey, counterKeyPrefix } from '../../../src/limiter/keys';
import { RateLimiter, type RateLimiterOptions } from '../../../src/limiter/rate-limiter';
import type { DescriptorOutcome, LimiterObserver } from '../../../src/limiter/types';
import type { Descriptor, DescriptorStatus, RateLimitRequest } from '../../../src/limiter/types';
import { MemoryStore } from '../../../src/store/memory-store';
import type { Store } from '../../../src/limiter/store';
import { FakeClock } from '../../helpers/fake-clock';
import { RecordingStore } from '../../helpers/recording-store';
import { LIMITER_DEFAULTS } from '../../helpers/limiter-defaults';

const EDGE = `
domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 5}
  - key: fixed
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: fixed_window}
  - key: small
    rate_limit: {name: small, unit: hour, requests_per_unit: 2}
  - key: big
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: ten
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: internal
    rate_limit: {unlimited: true}
  - key: tenant
    value: acme
    descriptors:
      - key: path
        rate_limit: {name: acme_path, unit: hour, requests_per_unit: 3, algorithm: sliding_log}
  - key: tenant
    value: vip
    descriptors:
      - key: path
        rate_limit:
          unit: hour
          requests_per_unit: 1000
          replaces: [{name: acme_path}, {name: small}]
  - key: dry
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: nested
    descriptors:
      - key: leaf
        rate_limit: {unit: hour, requests_per_unit: 1}
  - key: bucket
    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: token_bucket, burst: 10}
`;

const START = 1_699_999_200_000; // an hour boundary: window positions below are easy to read
const HOUR = 3_600_000;

const d = (...pairs: [string, string][]): Descriptor => ({ entries: pairs.map(([key, value]) => ({ key, value })) });
const req = (descriptors: Descriptor[], hitsAddend = 0, domain = 'edge'): RateLimitRequest => ({ domain, descriptors, hitsAddend });

describe('RateLimiter', () => {
  let clock: FakeClock;
  let memory: MemoryStore;
  let store: RecordingStore;
  let config: RateLimitConfig | undefined;
  let outcomes: DescriptorOutcome[];
  let globalShadowed: string[];
  const observer: LimiterObserver = {
    onDescriptor: (o) => outcomes.push(o),
    onGlobalShadowMode: (domain) => globalShadowed.push(domain),
  };

  const limiter = (overrides: Partial<RateLimiterOptions> = {}): RateLimiter =>
    new RateLimiter({
      store,
      config: () => config,
      ...LIMITER_DEFAULTS,
      observer,
      ...overrides,
    });

  beforeEach(() => {
    clock = new FakeClock(START);
    memory = new MemoryStore({ clock, maxKeys: 10_000, sweepIntervalMs: 0 });
    store = new RecordingStore(memory);
    config = buildConfig([parseConfigText('edge.yaml', EDGE, { defaultAlgorithm: 'sliding_window' })]);
    outcomes = [];
    globalShadowed = [];
  });

  afterEach(() => memory.close());

  it('decides on a store that decides in process (decideNow) without its decide(), answering as through decide()', async () => {
    const other = new MemoryStore({ clock, maxKeys: 10_000, sweepIntervalMs: 0 });
    const decide = jest.spyOn(other, 'decide');
    try {
      const direct = limiter({ store: other });
      const through = limiter();
      const request = req([d(['api_key', 'k']), d(['small', 's']), d(['fixed', 'f'])]);
      for (let i = 0; i < 7; i++) {
        const expected = await through.shouldRateLimit(request);
        const pending = direct.shouldRateLimit(request);
        expect(pending).toBeInstanceOf(Promise);
        expect(await pending).toEqual(expected);
        clock.advance(100);
      }
      expect(decide).not.toHaveBeenCalled();
      // A store failure is the call's rejection, never a throw.
      jest.spyOn(other, 'decideNow').mockImplementation(() => {
        throw new Error('broken');
      });
      const failing = direct.shouldRateLimit(request);
      await expect(failing).rejects.toThrow('broken');
    } finally {
      await other.close();
    }
  });

  describe('request validation', () => {
    it.each<[string, RateLimitRequest]>([
      ['an empty domain', req([d(['api_key', 'a'])], 0, '')],
      ['no descriptors', req([])],
      ['a descriptor without entries', req([d(['api_key', 'a']), { entries: [] }])],
      ['an entry with an empty key', req([d(['api_key', 'a'], ['', 'x'])])],
      ['a negative override', req([{ ...d(['api_key', 'a']), limit: { requestsPerUnit: -1, unit: 'second' } }])],
      ['a fractional override', req([{ ...d(['api_key', 'a']), limit: { requestsPerUnit: 1.5, unit: 'second' } }])],
    ])('rejects %s as an invalid request without touching the store', async (_, request) => {
      await expect(limiter().shouldRateLimit(request)).rejects.toBeInstanceOf(InvalidRequestError);
      expect(store.calls).toHaveLength(0);
    });

    it('accepts an entry with an empty value, which Envoy may send', async () => {
      const res = await limiter().shouldRateLimit(req([d(['api_key', ''])]));
      expect(res.statuses[0]).toMatchObject({ code: 'OK', limitRemaining: 4 });
    });

    it('fails as not ready while no config is loaded', async () => {
      config = undefined;
      await expect(limiter().shouldRateLimit(req([d(['api_key', 'a'])]))).rejects.toBeInstanceOf(NotReadyError);
    });
  });

  it('answers a matched descriptor with its limit, exact remaining quota and reset', async () => {
    clock.set(START + 2_500); // 2.5 s into a 10 s window
    const res = await limiter().shouldRateLimit(req([d(['api_key', 'k1'])]));
    expect(res).toEqual({
      overallCode: 'OK',
      statuses: [
        { code: 'OK', currentLimit: { requestsPerUnit: 5, unit: 'second', windowMs: 10_000 }, limitRemaining: 4, durationUntilResetMs: 7_500 + 10_000 },
      ],
      responseHeaders: [],
    });
    expect(store.calls[0].counters).toEqual([
      {
        key: counterKey(counterKeyPrefix('edge', 'sliding_window', 10_000), [{ key: 'api_key', value: 'k1' }]),
        limit: 5,
        windowMs: 10_000,
        algorithm: 'sliding_window',
        hits: 1,
        burst: 5,
        subWindows: 1,
        strict: false,
      },
    ]);
  });

  it('answers OVER_LIMIT with the time until the same request would be allowed', async () => {
    const rl = limiter();
    for (let i = 0; i < 2; i++) await rl.shouldRateLimit(req([d(['fixed', 'x'])]));
    clock.advance(20_000);
    const res = await rl.shouldRateLimit(req([d(['fixed', 'x'])]));
    expect(res.overallCode).toBe('OVER_LIMIT');
    expect(res.statuses[0]).toEqual({
      code: 'OVER_LIMIT',
      currentLimit: { requestsPerUnit: 2, unit: 'minute', windowMs: 60_000 },
      limitRemaining: 0,
      durationUntilResetMs: 40_000,
    });
  });

  it('answers OK without a current limit for a descriptor that matches no rule, and for an unknown domain', async () => {
    const res = await limiter().shouldRateLimit(req([d(['nope', 'x']), d(['nested', 'a'])]));
    expect(res).toEqual({
      overallCode: 'OK',
      statuses: [
        { code: 'OK', limitRemaining: 0 },
        { code: 'OK', limitRemaining: 0 },
      ],
      responseHeaders: [],
    });
    const other = await limiter().shouldRateLimit(req([d(['api_key', 'a'])], 0, 'elsewhere'));
    expect(other.statuses).toEqual([{ code: 'OK', limitRemaining: 0 }]);
    expect(store.calls).toHaveLength(0);
  });

  describe('hits', () => {
    it('takes the descriptor hits when set, with 0 meaning a check that counts nothing', async () => {
      const rl = limiter();
      const check = await rl.shouldRateLimit(req([{ ...d(['big', 'a']), hitsAddend: 0 }], 7));
      expect(check.statuses[0].limitRemaining).toBe(100);
      const five = await rl.shouldRateLimit(req([{ ...d(['big', 'a']), hitsAddend: 5 }], 7));
      expect(five.statuses[0].limitRemaining).toBe(95);
    });

    it('falls back to the request hits, where 0 means 1', async () => {
      const rl = limiter();
      expect((await rl.shouldRateLimit(req([d(['big', 'b'])], 0))).statuses[0].limitRemaining).toBe(99);
      expect((await rl.shouldRateLimit(req([d(['big', 'b'])], 3))).statuses[0].limitRemaining).toBe(96);
    });
  });

  it('answers an unlimited rule with the largest remaining count and never asks the store', async () => {
    const res = await limiter().shouldRateLimit(req([d(['internal', 'x'])]));
    expect(res.statuses).toEqual([{ code: 'OK', limitRemaining: 4_294_967_295 }]);
    expect(store.calls).toHaveLength(0);
    expect(outcomes).toHaveLength(0);
  });

  it('drops limits replaced by another matched rule of the same request', async () => {
    const res = await limiter().shouldRateLimit(req([d(['tenant', 'acme'], ['path', '/a']), d(['tenant', 'vip'], ['path', '/a']), d(['small', 's'])]));
    expect(res.statuses[0]).toEqual({ code: 'OK', limitRemaining: 0 });
    expect(res.statuses[1]).toMatchObject({ code: 'OK', limitRemaining: 999 });
    expect(res.statuses[2]).toEqual({ code: 'OK', limitRemaining: 0 });
    expect(store.calls).toHaveLength(1);
    expect(store.calls[0].counters).toHaveLength(1);
    // Without the replacing rule, the named limits apply.
    const alone = await limiter().shouldRateLimit(req([d(['tenant', 'acme'], ['path', '/a'])]));
    expect(alone.statuses[0]).toMatchObject({ currentLimit: { name: 'acme_path', requestsPerUnit: 3 }, limitRemaining: 2 });
  });

  describe('frozen descriptors (the codec hands out one object per distinct descriptor)', () => {
    const frozen = (descriptor: Descriptor): Descriptor => {
      for (const e of descriptor.entries) Object.freeze(e);
      Object.freeze(descriptor.entries);
      return Object.freeze(descriptor);
    };

    it('are matched and keyed once: a repeat reuses the counter, with the hits of each request', async () => {
      const rl = limiter();
      const big = frozen(d(['big', 'a']));
      expect((await rl.shouldRateLimit(req([big]))).statuses[0].limitRemaining).toBe(99);
      expect((await rl.shouldRateLimit(req([big]))).statuses[0].limitRemaining).toBe(98);
      expect(store.calls[1].counters[0]).toBe(store.calls[0].counters[0]);
      expect((await rl.shouldRateLimit(req([big], 3))).statuses[0].limitRemaining).toBe(95);
      expect(store.calls[2].counters[0]).toMatchObject({ key: store.calls[0].counters[0].key, hits: 3 });
      expect((await rl.shouldRateLimit(req([big], 3))).statuses[0].limitRemaining).toBe(92);
    });

    it('are matched again under a new config and in another domain', async () => {
      const rl = limiter();
      const big = frozen(d(['big', 'a']));
      expect((await rl.shouldRateLimit(req([big]))).statuses[0].limitRemaining).toBe(99);
      config = buildConfig([
        parseConfigText('edge.yaml', EDGE.replace('requests_per_unit: 100', 'requests_per_unit: 50'), { defaultAlgorithm: 'sliding_window' }),
      ]);
      expect((await rl.shouldRateLimit(req([big]))).statuses[0]).toMatchObject({ currentLimit: { requestsPerUnit: 50 }, limitRemaining: 48 });
      expect((await rl.shouldRateLimit(req([big], 0, 'elsewhere'))).statuses[0]).toEqual({ code: 'OK', limitRemaining: 0 });
      config = undefined;
      await expect(rl.shouldRateLimit(req([big]))).rejects.toBeInstanceOf(NotReadyError);
    });

    it('are still validated when first seen', async () => {
      await expect(limiter().shouldRateLimit(req([frozen({ entries: [] })]))).rejects.toBeInstanceOf(InvalidRequestError);
    });
  });

  describe('frozen requests (the codec hands out one object per distinct request message)', () => {
    const frozenRequest = (descriptors: Descriptor[], hitsAddend = 0, domain = 'edge'): RateLimitRequest =>
      Object.freeze({ domain, descriptors: Object.freeze(descriptors.map((x) => Object.freeze(x))), hitsAddend });

    it('are planned once per config: a repeat makes the same store call, each answer with statuses of its own', async () => {
      const rl = limiter();
      const request = frozenRequest([d(['big', 'a']), d(['nope', 'x']), d(['api_key', 'k'])], 2);
      const first = await rl.shouldRateLimit(request);
      const second = await rl.shouldRateLimit(request);
      expect(store.calls[1].counters[0]).toBe(store.calls[0].counters[0]);
      expect(store.calls[1].counters[1]).toBe(store.calls[0].counters[1]);
      // The store is handed one frozen array per request from its second call on (Store.decide).
      const third = await rl.shouldRateLimit(request);
      expect(store.calls[2].given).toBe(store.calls[1].given);
      expect(Object.isFrozen(store.calls[1].given)).toBe(true);
      expect(first.statuses.map((s) => s.limitRemaining)).toEqual([98, 0, 3]);
      expect(second.statuses.map((s) => s.limitRemaining)).toEqual([96, 0, 1]);
      expect(second.statuses).not.toBe(first.statuses);
      expect(third.overallCode).toBe('OVER_LIMIT');
      expect(third.statuses.map((s) => s.code)).toEqual(['OK', 'OK', 'OVER_LIMIT']);
      expect(second.statuses.map((s) => s.code)).toEqual(['OK', 'OK', 'OK']);
    });

    it('are planned again under a new config', async () => {
      const rl = limiter();
      const request = frozenRequest([d(['big', 'a'])]);
      expect((await rl.shouldRateLimit(request)).statuses[0].limitRemaining).toBe(99);
      config = buildConfig([
        parseConfigText('edge.yaml', EDGE.replace('requests_per_unit: 100', 'requests_per_unit: 50'), { defaultAlgorithm: 'sliding_window' }),
      ]);
      expect((await rl.shouldRateLimit(request)).statuses[0]).toMatchObject({ currentLimit: { requestsPerUnit: 50 }, limitRemaining: 48 });
      config = undefined;
      await expect(rl.shouldRateLimit(request)).rejects.toBeInstanceOf(NotReadyError);
    });

    it('that are invalid are refused every time', async () => {
      const rl = limiter();
      const request = frozenRequest([d(['api_key', 'a'])], 0, '');
      await expect(rl.shouldRateLimit(request)).rejects.toBeInstanceOf(InvalidRequestError);
      await expect(rl.shouldRateLimit(request)).rejects.toBeInstanceOf(InvalidRequestError);
      expect(store.calls).toHaveLength(0);
    });
  });

  it('makes one store call for all counted descriptors, in request order', async () => {
    await limiter().shouldRateLimit(req([d(['api_key', 'a']), d(['nope', 'x']), d(['big', 'b']), d(['internal', 'i']), d(['fixed', 'f'])]));
    expect(store.calls).toHaveLength(1);
    expect(store.calls[0].counters.map((c) => c.limit)).toEqual([5, 100, 2]);
    expect(store.calls[0].options).toEqual({ countDenied: false });
  });

  it('is all-or-nothing: after A is denied, B shows it was not charged', async () => {
    const rl = limiter();
    const both = req([d(['small', 'a']), d(['big', 'b'])]);
    await rl.shouldRateLimit(both);
    await rl.shouldRateLimit(both);
    const denied = await rl.shouldRateLimit(both);
    expect(denied.overallCode).toBe('OVER_LIMIT');
    expect(denied.statuses.map((s) => s.code)).toEqual(['OVER_LIMIT', 'OK']);
    const b = await rl.shouldRateLimit(req([d(['big', 'b'])]));
    expect(b.statuses[0].limitRemaining).toBe(97); // 2 charged before, 1 now: the denied request cost nothing
  });

  it('charges every counter of a denied request only when countDenied is on', async () => {
    const rl = limiter({ countDenied: true });
    const both = req([d(['small', 'a']), d(['big', 'b'])]);
    for (let i = 0; i < 3; i++) await rl.shouldRateLimit(both);
    expect(store.calls[2].options).toEqual({ countDenied: true });
    const b = await rl.shouldRateLimit(req([d(['big', 'b'])]));
    expect(b.statuses[0].limitRemaining).toBe(96);
  });

  describe('request limit override', () => {
    it('applies without matching, counted under the default algorithm and the unit window', async () => {
      const rl = limiter({ defaultAlgorithm: 'fixed_window' });
      const over: Descriptor = { ...d(['nope', 'x'], ['user', 'u1']), limit: { requestsPerUnit: 1, unit: 'minute' } };
      const first = await rl.shouldRateLimit(req([over]));
      expect(first.statuses[0]).toEqual({
        code: 'OK',
        currentLimit: { requestsPerUnit: 1, unit: 'minute', windowMs: 60_000 },
        limitRemaining: 0,
        durationUntilResetMs: 60_000,
      });
      expect(store.calls[0].counters[0]).toEqual({
        key: counterKey(counterKeyPrefix('edge', 'fixed_window', 60_000), over.entries),
        limit: 1,
        windowMs: 60_000,
        algorithm: 'fixed_window',
        hits: 1,
        burst: 1,
        subWindows: 1,
        strict: false,
      });
      expect((await rl.shouldRateLimit(req([over]))).overallCode).toBe('OVER_LIMIT');
      // Reported under its keys alone: a caller picking new values makes no new series.
      expect(outcomes[0]).toMatchObject({ domain: 'edge', statKey: 'nope.user' });
    });

    it('wins over a matching rule, and applies only to a configured domain, as in the reference server', async () => {
      const over: Descriptor = { ...d(['small', 'a']), limit: { requestsPerUnit: 50, unit: 'second' } };
      const res = await limiter().shouldRateLimit(req([over]));
      expect(res.statuses[0]).toMatchObject({ currentLimit: { requestsPerUnit: 50, unit: 'second' }, limitRemaining: 49 });
      const unknown = await limiter().shouldRateLimit(req([over], 0, 'elsewhere'));
      expect(unknown.statuses[0]).toEqual({ code: 'OK', limitRemaining: 0 });
    });
  });

  describe('shadow mode', () => {
    it('answers OK for a shadow-mode rule over its limit and reports it as shadowed', async () => {
      const rl = limiter();
      await rl.shouldRateLimit(req([d(['dry', 'x'])]));
      const res = await rl.shouldRateLimit(req([d(['dry', 'x'])]));
      expect(res.overallCode).toBe('OK');
      expect(res.statuses[0]).toMatchObject({ code: 'OK', limitRemaining: 0 });
      expect(outcomes[1]).toMatchObject({ statKey: 'dry', overLimit: 1, shadowMode: 1, withinLimit: 0 });
    });

    it('never lets a shadow-mode rule over its limit stop the enforced rules of the request from counting', async () => {
      const rl = limiter();
      await rl.shouldRateLimit(req([d(['dry', 'x'])]));
      const mixed = req([d(['dry', 'x']), d(['small', 's'])]);
      expect((await rl.shouldRateLimit(mixed)).overallCode).toBe('OK');
      expect((await rl.shouldRateLimit(mixed)).overallCode).toBe('OK');
      const third = await rl.shouldRateLimit(mixed);
      expect(third.overallCode).toBe('OVER_LIMIT');
      expect(third.statuses.map((s) => s.code)).toEqual(['OK', 'OVER_LIMIT']);
    });

    it('counts nothing in a shadow-mode rule when an enforced rule denies the request', async () => {
      const rl = limiter();
      for (let i = 0; i < 2; i++) await rl.shouldRateLimit(req([d(['small', 's'])]));
      const denied = await rl.shouldRateLimit(req([d(['dry', 'y']), d(['small', 's'])]));
      expect(denied.overallCode).toBe('OVER_LIMIT');
      expect(denied.statuses[0]).toMatchObject({ code: 'OK', limitRemaining: 0 });
      // The shadow counter is still empty: its one hit fits.
      const after = await rl.shouldRateLimit(req([d(['dry', 'y'])]));
      expect(outcomes[outcomes.length - 1]).toMatchObject({ withinLimit: 1, shadowMode: 0 });
      expect(after.statuses[0]).toMatchObject({ limitRemaining: 0 });
    });

    it('with global shadow mode, keeps each descriptor code but always answers OK overall', async () => {
      const rl = limiter({ shadowMode: true });
      for (let i = 0; i < 2; i++) await rl.shouldRateLimit(req([d(['small', 's'])]));
      const res = await rl.shouldRateLimit(req([d(['small', 's']), d(['big', 'b'])]));
      expect(res.overallCode).toBe('OK');
      expect(res.statuses.map((s) => s.code)).toEqual(['OVER_LIMIT', 'OK']);
      expect(globalShadowed).toEqual(['edge']);
    });
  });

  describe('observer', () => {
    it('reports hits, within-limit and near-limit counts the way the reference server counts them', async () => {
      const rl = limiter();
      // Limit 10, ratio 0.8: usage above 8 is near the limit.
      await rl.shouldRateLimit(req([{ ...d(['ten', 't']), hitsAddend: 7 }]));
      await rl.shouldRateLimit(req([{ ...d(['ten', 't']), hitsAddend: 2 }])); // 7 -> 9: one hit above 8
      await rl.shouldRateLimit(req([{ ...d(['ten', 't']), hitsAddend: 1 }])); // 9 -> 10: already above
      await rl.shouldRateLimit(req([{ ...d(['ten', 't']), hitsAddend: 4 }])); // denied
      await rl.shouldRateLimit(req([{ ...d(['ten', 't']), hitsAddend: 0 }])); // a check
      expect(outcomes.map(({ hits, withinLimit, nearLimit, overLimit, shadowMode }) => [hits, withinLimit, nearLimit, overLimit, shadowMode])).toEqual([
        [7, 7, 0, 0, 0],
        [2, 2, 1, 0, 0],
        [1, 1, 1, 0, 0],
        [4, 0, 0, 4, 0],
        [0, 0, 0, 0, 0],
      ]);
    });

    it("measures a bucket's near-limit hits against its burst", async () => {
      const rl = limiter();
      // Burst 10, ratio 0.8: a level above 8 is near the limit, as for a window of 10.
      await rl.shouldRateLimit(req([{ ...d(['bucket', 'b']), hitsAddend: 7 }]));
      const res = await rl.shouldRateLimit(req([{ ...d(['bucket', 'b']), hitsAddend: 2 }]));
      expect(res.statuses[0]).toMatchObject({ code: 'OK', limitRemaining: 1, currentLimit: { requestsPerUnit: 5, unit: 'hour' } });
      expect(outcomes.map(({ withinLimit, nearLimit }) => [withinLimit, nearLimit])).toEqual([
        [7, 0],
        [2, 1],
      ]);
    });

    it('names the rule by its key path, or by every entry value when the rule asks for detailed metrics', async () => {
      await limiter().shouldRateLimit(req([d(['tenant', 'acme'], ['path', '/x']), d(['ten', 'abc']), d(['api_key', 'k'])]));
      expect(outcomes.map((o) => [o.domain, o.statKey])).toEqual([
        ['edge', 'tenant_acme.path'],
        ['edge', 'ten_abc'],
        ['edge', 'api_key'],
      ]);
    });
  });

  describe('response headers', () => {
    it('passes the statuses to the header builder and returns its headers', async () => {
      const seen: (readonly DescriptorStatus[])[] = [];
      const rl = limiter({
        responseHeaders: (statuses) => {
          seen.push(statuses);
          return [{ key: 'X-Test', value: String(statuses.length) }];
        },
      });
      const res = await rl.shouldRateLimit(req([d(['api_key', 'a']), d(['nope', 'n'])]));
      expect(res.responseHeaders).toEqual([{ key: 'X-Test', value: '2' }]);
      expect(seen[0]).toBe(res.statuses);
    });

    it('builds the RateLimit-* headers from the header settings', async () => {
      const rl = limiter({
        responseHeaders: {
          enabled: true,
          limitHeader: 'RateLimit-Limit',
          remainingHeader: 'RateLimit-Remaining',
          resetHeader: 'RateLimit-Reset',
          draftEnabled: false,
        },
      });
      const res = await rl.shouldRateLimit(req([d(['big', 'a'])]));
      expect(res.responseHeaders.map((h) => h.key)).toEqual(['RateLimit-Limit', 'RateLimit-Remaining', 'RateLimit-Reset']);
      expect(res.responseHeaders[1].value).toBe('99');
    });

    it('adds no headers when none are configured', async () => {
      expect((await limiter().shouldRateLimit(req([d(['big', 'a'])]))).responseHeaders).toEqual([]);
    });
  });

  it('passes store failures through to the caller', async () => {
    const failing: Store = {
      name: 'failing',
      decide: () => Promise.reject(new Error('down')),
      isHealthy: () => false,
      close: async () => undefined,
    };
    await expect(limiter({ store: failing }).shouldRateLimit(req([d(['big', 'a'])]))).rejects.toThrow('down');
  });

  it('rejects a near-limit ratio outside 0..1', () => {
    expect(() => limiter({ nearLimitRatio: 1.5 })).toThrow(RangeError);
  });

  it('keeps the remaining quota exact over an hour of a 3-per-hour sliding log', async () => {
    const rl = limiter();
    const r = async (): Promise<DescriptorStatus> => (await rl.shouldRateLimit(req([d(['tenant', 'acme'], ['path', '/p'])]))).statuses[0];
    expect((await r()).limitRemaining).toBe(2);
    clock.advance(HOUR / 2);
    expect((await r()).limitRemaining).toBe(1);
    expect((await r()).limitRemaining).toBe(0);
    const denied = await r();
    expect(denied).toMatchObject({ code: 'OVER_LIMIT', durationUntilResetMs: HOUR / 2 });
    clock.advance(HOUR / 2);
    expect(await r()).toMatchObject({ code: 'OK', limitRemaining: 0 });
  });
});
