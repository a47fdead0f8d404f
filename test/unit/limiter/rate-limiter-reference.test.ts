import { configFromTexts } from '../../../src/config/files';
import type { RateLimitConfig } from '../../../src/limiter/rules';
import { RateLimiter, type RateLimiterOptions } from '../../../src/limiter/rate-limiter';
import type { DescriptorOutcome } from '../../../src/limiter/types';
import type { Descriptor, RateLimitRequest, RateLimitResponse } from '../../../src/limiter/types';
import { MemoryStore } from '../../../src/store/memory-store';
import { CountingStore } from '../../helpers/counting-store';
import { FakeClock } from '../../helpers/fake-clock';
import { LIMITER_DEFAULTS } from '../../helpers/limiter-defaults';

/**
 * The decision for the reference's rule keys: quota_mode / QUOTA_MODE, share_threshold,
 * value_to_metric and metadata with RESPONSE_DYNAMIC_METADATA, as the reference's service tests
 * expect them, on a real memory store with a pinned clock.
 */

const CONFIG = `
domain: q
descriptors:
  - key: regular
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: quota
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
    metadata: {service: {name: quota-svc, tier: 2}}
  - key: quota2
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: big
    rate_limit: {unit: hour, requests_per_unit: 100}
    metadata: {service: {name: big-svc, zone: eu}, owner: team-big}
  - key: free
    rate_limit: {unlimited: true}
    metadata: {never: shown}
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: own
    value: files/*
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: route
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: {unit: hour, requests_per_unit: 100}
`;

const START = 1_699_999_200_000;

const d = (...pairs: [string, string][]): Descriptor => ({ entries: pairs.map(([key, value]) => ({ key, value })) });
const req = (descriptors: Descriptor[], hitsAddend = 0): RateLimitRequest => ({ domain: 'q', descriptors, hitsAddend });

describe('RateLimiter with the reference rule keys', () => {
  let clock: FakeClock;
  let memory: MemoryStore;
  let store: CountingStore;
  let config: RateLimitConfig;
  let outcomes: DescriptorOutcome[];

  const limiter = (overrides: Partial<RateLimiterOptions> = {}): RateLimiter =>
    new RateLimiter({
      store,
      config: () => config,
      ...LIMITER_DEFAULTS,
      observer: { onDescriptor: (o) => outcomes.push(o) },
      ...overrides,
    });

  const codes = (r: RateLimitResponse): string[] => [r.overallCode, ...r.statuses.map((s) => s.code)];

  beforeEach(() => {
    clock = new FakeClock(START);
    memory = new MemoryStore({ clock, maxKeys: 10_000, sweepIntervalMs: 0 });
    store = new CountingStore(memory);
    config = configFromTexts([{ file: 'q.yaml', text: CONFIG }], { defaultAlgorithm: 'sliding_window' });
    outcomes = [];
  });

  afterEach(() => memory.close());

  describe('quota_mode', () => {
    test('one quota-mode rule over its limit is OVER_LIMIT overall: every quota rule of the request is over', async () => {
      const l = limiter();
      expect(codes(await l.shouldRateLimit(req([d(['quota', 'a'])])))).toEqual(['OK', 'OK']);
      expect(codes(await l.shouldRateLimit(req([d(['quota', 'a'])])))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
    });

    test('a quota-mode rule over its limit with another one within: OK overall, its own status OVER_LIMIT', async () => {
      const l = limiter();
      await l.shouldRateLimit(req([d(['quota', 'a'])]));
      expect(codes(await l.shouldRateLimit(req([d(['quota', 'a']), d(['quota2', 'b'])])))).toEqual(['OK', 'OVER_LIMIT', 'OK']);
      // Both over now.
      expect(codes(await l.shouldRateLimit(req([d(['quota', 'a']), d(['quota2', 'b'])])))).toEqual(['OVER_LIMIT', 'OVER_LIMIT', 'OVER_LIMIT']);
    });

    test('a regular rule over its limit is OVER_LIMIT overall whatever the quota rules say', async () => {
      const l = limiter();
      await l.shouldRateLimit(req([d(['regular', 'a'])]));
      expect(codes(await l.shouldRateLimit(req([d(['regular', 'a']), d(['quota', 'b'])])))).toEqual(['OVER_LIMIT', 'OVER_LIMIT', 'OK']);
    });

    test('a quota-mode rule over its limit does not veto the charging of the others', async () => {
      const l = limiter();
      await l.shouldRateLimit(req([d(['quota', 'a'])]));
      const res = await l.shouldRateLimit(req([d(['quota', 'a']), d(['quota2', 'b']), d(['big', 'c'])]));
      expect(codes(res)).toEqual(['OK', 'OVER_LIMIT', 'OK', 'OK']);
      expect(res.statuses[2].limitRemaining).toBe(99);
      expect((await l.shouldRateLimit(req([d(['big', 'c'])]))).statuses[0].limitRemaining).toBe(98);
    });

    test('QUOTA_MODE puts every rule in quota mode; a descriptor matching no rule counts as a quota one within its limit', async () => {
      const l = limiter({ quotaMode: true });
      await l.shouldRateLimit(req([d(['regular', 'a'])]));
      expect(codes(await l.shouldRateLimit(req([d(['regular', 'a']), d(['big', 'b'])])))).toEqual(['OK', 'OVER_LIMIT', 'OK']);
      expect(codes(await l.shouldRateLimit(req([d(['regular', 'a']), d(['nothing', 'x'])])))).toEqual(['OK', 'OVER_LIMIT', 'OK']);
      expect(codes(await l.shouldRateLimit(req([d(['regular', 'a'])])))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
      // Unlimited descriptors are never quota ones: alone beside an over quota rule, that rule decides.
      expect(codes(await l.shouldRateLimit(req([d(['regular', 'a']), d(['free', 'x'])])))).toEqual(['OVER_LIMIT', 'OVER_LIMIT', 'OK']);
    });

    test('without quota rules a request makes one store call', async () => {
      await limiter().shouldRateLimit(req([d(['regular', 'a']), d(['big', 'b'])]));
      expect(store.calls).toBe(1);
    });
  });

  describe('share_threshold', () => {
    test('every value matching the pattern draws on one counter', async () => {
      const l = limiter();
      expect(codes(await l.shouldRateLimit(req([d(['files', 'files/a'])])))).toEqual(['OK', 'OK']);
      expect(codes(await l.shouldRateLimit(req([d(['files', 'files/b'])])))).toEqual(['OK', 'OK']);
      expect(codes(await l.shouldRateLimit(req([d(['files', 'files/c'])])))).toEqual(['OVER_LIMIT', 'OVER_LIMIT']);
      expect(outcomes.map((o) => o.statKey)).toEqual(['files_files/*', 'files_files/*', 'files_files/*']);
    });

    test('without it, each value has its own counter', async () => {
      const l = limiter();
      for (const value of ['files/a', 'files/b', 'files/c']) {
        expect(codes(await l.shouldRateLimit(req([d(['own', value])])))).toEqual(['OK', 'OK']);
      }
    });
  });

  test('value_to_metric names metrics by the request value, without changing the counter', async () => {
    const l = limiter();
    await l.shouldRateLimit(req([d(['route', 'draw'], ['method', 'GET'])]));
    const second = await l.shouldRateLimit(req([d(['route', 'draw'], ['method', 'GET'])]));
    expect(second.statuses[0].limitRemaining).toBe(98);
    expect(outcomes.map((o) => o.statKey)).toEqual(['route_draw.method', 'route_draw.method']);
  });

  describe('dynamic metadata (RESPONSE_DYNAMIC_METADATA)', () => {
    test('absent unless enabled', async () => {
      expect((await limiter().shouldRateLimit(req([d(['big', 'a'])]))).dynamicMetadata).toBeUndefined();
    });

    test("the domain, each descriptor's entries, override and hits, the request's hits and the metadata of rules within their limits", async () => {
      const l = limiter({ dynamicMetadata: true });
      await l.shouldRateLimit(req([d(['regular', 'a'])]));
      const res = await l.shouldRateLimit(
        req(
          [
            d(['regular', 'a']),
            { entries: [{ key: 'quota', value: 'b' }], hitsAddend: 1 },
            d(['big', 'c']),
            d(['free', 'x']),
            { entries: [{ key: 'custom', value: 'y' }], limit: { requestsPerUnit: 42, unit: 'hour' } },
          ],
          3,
        ),
      );
      expect(res.dynamicMetadata).toEqual({
        domain: 'q',
        descriptors: [
          { entries: ['regular=a'] },
          { entries: ['quota=b'], hitsAddend: 1 },
          { entries: ['big=c'] },
          { entries: ['free=x'] },
          { entries: ['custom=y'], limit: 'requests_per_unit:42 unit:HOUR' },
        ],
        hitsAddend: 3,
        // Beyond the reference: the rule that denied the request.
        limitedBy: 'regular',
        // quota's mapping first, big's adds what quota's lacks; free (unlimited) and regular (over) add nothing.
        metadata: { service: { name: 'quota-svc', tier: 2, zone: 'eu' }, owner: 'team-big' },
      });
    });

    test('no metadata field when no rule within its limit has metadata; the config is never written', async () => {
      const l = limiter({ dynamicMetadata: true });
      const res = await l.shouldRateLimit(req([d(['regular', 'a'])]));
      expect(res.dynamicMetadata).toEqual({ domain: 'q', descriptors: [{ entries: ['regular=a'] }] });
      await l.shouldRateLimit(req([d(['quota', 'a']), d(['big', 'b'])]));
      expect(JSON.stringify(config.domains.get('q')!.rules.get('quota')!.keyOnly!.metadata)).toBe('{"service":{"name":"quota-svc","tier":2}}');
    });
  });
});
