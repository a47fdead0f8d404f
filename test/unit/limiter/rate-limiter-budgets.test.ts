import { buildConfig } from '../../../src/config/rule-tree';
import { parseConfigText } from '../../../src/config/rule-reader';
import type { RateLimitConfig } from '../../../src/limiter/rules';
import { counterKey, counterKeyPrefix } from '../../../src/limiter/keys';
import { RateLimiter, type RateLimiterOptions } from '../../../src/limiter/rate-limiter';
import type { Descriptor, DescriptorOutcome, LocalDenial, RateLimitRequest } from '../../../src/limiter/types';
import { DenialCache } from '../../../src/store/denial-cache';
import { MemoryStore } from '../../../src/store/memory-store';
import { FakeClock } from '../../helpers/fake-clock';
import { RecordingStore } from '../../helpers/recording-store';
import { LIMITER_DEFAULTS } from '../../helpers/limiter-defaults';

/**
 * Budgets in the decision: several limits on one rule (`rate_limits`), decided and charged together,
 * reported by the deciding limit; and rules whose counters are charged even when the request is
 * denied (`count_denied_requests`), the post-paid costs of responses.
 */

const RULES = `
domain: llm
descriptors:
  - key: user
    rate_limits:
      - {name: burst, unit: second, unit_multiplier: 2, requests_per_unit: 3}
      - {name: minute, unit: minute, requests_per_unit: 5, algorithm: sliding_log}
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: dry
    shadow_mode: true
    rate_limits:
      - {unit: hour, requests_per_unit: 2}
      - {unit: day, requests_per_unit: 3}
  - key: premium
    rate_limit: {unit: hour, requests_per_unit: 50, replaces: [{name: minute}]}
  - key: everything
    rate_limit: {unit: hour, requests_per_unit: 50, replaces: [{name: minute}, {name: burst}]}
  - key: postpaid
    count_denied_requests: true
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: tokens
    count_denied_requests: true
    rate_limits:
      - {name: per_minute, unit: minute, requests_per_unit: 1000}
      - {name: per_day, unit: day, requests_per_unit: 5000}
`;

const START = 1_699_999_200_000; // an hour boundary, hence a minute's and a 2 s window's

const d = (key: string, value: string, hitsAddend?: number): Descriptor => ({ entries: [{ key, value }], ...(hitsAddend === undefined ? {} : { hitsAddend }) });
const req = (...descriptors: Descriptor[]): RateLimitRequest => ({ domain: 'llm', descriptors, hitsAddend: 0 });

describe('RateLimiter budgets', () => {
  let clock: FakeClock;
  let memory: MemoryStore;
  let store: RecordingStore;
  let config: RateLimitConfig;
  let outcomes: DescriptorOutcome[];

  const limiter = (overrides: Partial<RateLimiterOptions> = {}): RateLimiter =>
    new RateLimiter({ store, config: () => config, ...LIMITER_DEFAULTS, observer: { onDescriptor: (o) => outcomes.push(o) }, ...overrides });

  beforeEach(() => {
    clock = new FakeClock(START);
    memory = new MemoryStore({ clock, maxKeys: 10_000, sweepIntervalMs: 0 });
    store = new RecordingStore(memory);
    config = buildConfig([parseConfigText('llm.yaml', RULES, { defaultAlgorithm: 'sliding_window' })]);
    outcomes = [];
  });

  afterEach(() => memory.close());

  describe('several limits on one rule (rate_limits)', () => {
    it('admits exactly 5 within the minute on 3 per 2 s and 5 per minute; the first denial names the 3, the last the 5', async () => {
      const rl = limiter();
      const statuses = [];
      for (let i = 0; i < 4; i++) statuses.push((await rl.shouldRateLimit(req(d('user', 'u')))).statuses[0]);
      expect(statuses.map((s) => [s.code, s.currentLimit?.name, s.limitRemaining])).toEqual([
        ['OK', 'burst', 2],
        ['OK', 'burst', 1],
        ['OK', 'burst', 0],
        ['OVER_LIMIT', 'burst', 0],
      ]);
      // 3 hits in this 2 s window drain below 3 one millisecond into the next one.
      expect(statuses[3]).toMatchObject({ currentLimit: { requestsPerUnit: 3, unit: 'second', windowMs: 2_000 }, durationUntilResetMs: 2_001 });

      clock.advance(4_000);
      const fourth = await rl.shouldRateLimit(req(d('user', 'u')));
      // The minute limit has fewer left (1) than the burst (2): it speaks.
      expect(fourth.statuses[0]).toMatchObject({ code: 'OK', currentLimit: { name: 'minute', requestsPerUnit: 5 }, limitRemaining: 1 });
      expect((await rl.shouldRateLimit(req(d('user', 'u')))).statuses[0]).toMatchObject({ code: 'OK', currentLimit: { name: 'minute' }, limitRemaining: 0 });
      expect((await rl.shouldRateLimit(req(d('user', 'u')))).statuses[0]).toMatchObject({
        code: 'OVER_LIMIT',
        currentLimit: { name: 'minute' },
        durationUntilResetMs: 56_000,
      });

      let admitted = 5;
      let last;
      for (let t = 5_000; t < 60_000; t += 1_000) {
        clock.set(START + t);
        last = (await rl.shouldRateLimit(req(d('user', 'u')))).statuses[0];
        if (last.code === 'OK') admitted++;
      }
      expect(admitted).toBe(5);
      // The 3 hits of t = 0 leave the log at t = 60 s.
      expect(last).toMatchObject({ code: 'OVER_LIMIT', currentLimit: { name: 'minute', requestsPerUnit: 5, unit: 'minute' }, durationUntilResetMs: 1_000 });
      clock.set(START + 60_000);
      expect((await rl.shouldRateLimit(req(d('user', 'u')))).statuses[0].code).toBe('OK');
    });

    it('names, among limits that all deny, the one with the longest wait', async () => {
      const rl = limiter();
      for (let i = 0; i < 3; i++) await rl.shouldRateLimit(req(d('user', 'u')));
      // 3 more hits at once: more than the burst ever holds (wait: one window) and the minute's 2 left (wait: 60 s).
      const res = await rl.shouldRateLimit(req(d('user', 'u', 3)));
      expect(res.statuses[0]).toMatchObject({ code: 'OVER_LIMIT', currentLimit: { name: 'minute' }, durationUntilResetMs: 60_000 });
    });

    it('decides every limit in the one store call of the request, on counters sharing a tag', async () => {
      await limiter().shouldRateLimit(req(d('user', 'u'), d('plain', 'p')));
      expect(store.calls).toHaveLength(1);
      const entries = [{ key: 'user', value: 'u' }];
      const tag = counterKey(counterKeyPrefix('llm', 'sliding_window', 2_000), entries);
      expect(store.calls[0].counters.map((c) => [c.key, c.tag, c.limit])).toEqual([
        [tag, tag, 3],
        [counterKey(counterKeyPrefix('llm', 'sliding_log', 60_000), entries), tag, 5],
        [counterKey(counterKeyPrefix('llm', 'sliding_window', 3_600_000), [{ key: 'plain', value: 'p' }]), undefined, 100],
      ]);
    });

    it('charges nothing when one limit denies: neither its other limits nor the other descriptors', async () => {
      const rl = limiter();
      for (let i = 0; i < 3; i++) await rl.shouldRateLimit(req(d('user', 'u'), d('plain', 'p')));
      const denied = await rl.shouldRateLimit(req(d('user', 'u'), d('plain', 'p')));
      expect(denied.overallCode).toBe('OVER_LIMIT');
      clock.advance(4_000);
      // The minute limit holds 3 hits, not 4; the plain rule 3 of 100.
      const next = await rl.shouldRateLimit(req(d('user', 'u'), d('plain', 'p')));
      expect(next.statuses.map((s) => s.limitRemaining)).toEqual([1, 96]);
      expect(next.statuses[0].currentLimit?.name).toBe('minute');
    });

    it('reports each limit on its own, under the rule stat key and the limit name, or its position when unnamed', async () => {
      const rl = limiter();
      await rl.shouldRateLimit(req(d('user', 'u'), d('dry', 'x')));
      expect(outcomes.map((o) => [o.statKey, o.withinLimit, o.rule.limit.requestsPerUnit])).toEqual([
        ['user.burst', 1, 3],
        ['user.minute', 1, 5],
        ['dry.0', 1, 2],
        ['dry.1', 1, 3],
      ]);
      // The live view groups by rule: one object per limit.
      expect(outcomes[0].rule).not.toBe(outcomes[1].rule);
      expect(outcomes[0].rule.statKey).toBe('user.burst');
    });

    it('names the deciding limit in the dynamic metadata of a denied request', async () => {
      const rl = limiter({ dynamicMetadata: true });
      for (let i = 0; i < 3; i++) await rl.shouldRateLimit(req(d('user', 'u')));
      expect((await rl.shouldRateLimit(req(d('user', 'u')))).dynamicMetadata).toMatchObject({ limitedBy: 'user.burst' });
      clock.advance(4_000);
      await rl.shouldRateLimit(req(d('user', 'u')));
      await rl.shouldRateLimit(req(d('user', 'u')));
      expect((await rl.shouldRateLimit(req(d('user', 'u')))).dynamicMetadata).toMatchObject({ limitedBy: 'user.minute' });
    });

    it('drops a limit whose name another matched rule replaces, and the descriptor once every limit is replaced', async () => {
      const rl = limiter();
      await rl.shouldRateLimit(req(d('user', 'u'), d('premium', 'p')));
      expect(store.calls[0].counters.map((c) => c.limit)).toEqual([3, 50]);
      const all = await rl.shouldRateLimit(req(d('user', 'u'), d('everything', 'e')));
      expect(store.calls[1].counters.map((c) => c.limit)).toEqual([50]);
      expect(all.statuses[0]).toEqual({ code: 'OK', limitRemaining: 0 });
    });

    it('decides the limits of a shadow-mode rule together: one denying keeps the others uncharged', async () => {
      const rl = limiter();
      for (let i = 0; i < 3; i++) await rl.shouldRateLimit(req(d('dry', 'x')));
      // The third went over 2 per hour: shadowed, and the day limit (3) not charged for it.
      expect(outcomes.slice(4, 6).map((o) => [o.statKey, o.overLimit, o.shadowMode, o.withinLimit])).toEqual([
        ['dry.0', 1, 1, 0],
        ['dry.1', 0, 0, 1],
      ]);
      const fourth = await rl.shouldRateLimit(req(d('dry', 'x')));
      expect(fourth.overallCode).toBe('OK');
      expect(outcomes[7]).toMatchObject({ statKey: 'dry.1', withinLimit: 1 });
    });

    it('names the deciding limit afresh on every call of a repeated frozen request', async () => {
      const rl = limiter();
      const frozen = Object.freeze({ ...req(Object.freeze(d('user', 'z'))), descriptors: Object.freeze([Object.freeze(d('user', 'z'))]) });
      const statuses = [];
      for (let i = 0; i < 4; i++) statuses.push((await rl.shouldRateLimit(frozen)).statuses[0]);
      expect(statuses.map((s) => [s.code, s.currentLimit?.name, s.limitRemaining])).toEqual([
        ['OK', 'burst', 2],
        ['OK', 'burst', 1],
        ['OK', 'burst', 0],
        ['OVER_LIMIT', 'burst', 0],
      ]);
    });

    it('answers from remembered denials when every limit is remembered denied, counting down as the limit it names', async () => {
      config = buildConfig([
        parseConfigText(
          'llm.yaml',
          'domain: llm\ndescriptors:\n  - key: k\n    rate_limits:\n' +
            '      - {name: long, unit: minute, requests_per_unit: 2, algorithm: sliding_log}\n' +
            '      - {name: short, unit: second, unit_multiplier: 2, requests_per_unit: 2}\n',
          { defaultAlgorithm: 'sliding_window' },
        ),
      ]);
      const rl = limiter({ store: new DenialCache({ store, maxKeys: 100, clock }) });
      for (let i = 0; i < 3; i++) await rl.shouldRateLimit(req(d('k', 'v')));
      // Both limits denied the third request: the fourth is answered without the store.
      const denials: LocalDenial[] = [];
      const local = await rl.shouldRateLimit(req(d('k', 'v')), (denial) => denials.push(denial));
      expect(store.calls).toHaveLength(3);
      expect(local.statuses[0]).toMatchObject({ code: 'OVER_LIMIT', currentLimit: { name: 'long' }, durationUntilResetMs: 60_000 });
      expect(denials[0].deniedUntilMs).toEqual([START + 60_000]);
    });

    it('keeps the counters of a frozen descriptor, and their tag, across calls with other hits', async () => {
      const rl = limiter();
      const once = Object.freeze(d('user', 'f', 1));
      const twice = Object.freeze(d('user', 'f', 2));
      await rl.shouldRateLimit(req(once));
      await rl.shouldRateLimit(req(once));
      await rl.shouldRateLimit(req(twice));
      expect(store.calls[1].counters[0]).toBe(store.calls[0].counters[0]);
      expect(store.calls[2].counters.map((c) => [c.hits, c.tag])).toEqual([
        [2, store.calls[0].counters[0].key],
        [2, store.calls[0].counters[0].key],
      ]);
    });
  });

  describe('counting denied requests per rule (count_denied_requests)', () => {
    it('records a post-paid 1,000 per minute budget charged 700 then 500 at 1,200, and denies the next check', async () => {
      const rl = limiter();
      expect((await rl.shouldRateLimit(req(d('postpaid', 'app', 0)))).overallCode).toBe('OK');
      expect((await rl.shouldRateLimit(req(d('postpaid', 'app', 700)))).statuses[0]).toMatchObject({ code: 'OK', limitRemaining: 300 });
      expect((await rl.shouldRateLimit(req(d('postpaid', 'app', 500)))).overallCode).toBe('OVER_LIMIT');
      const check = await rl.shouldRateLimit(req(d('postpaid', 'app', 0)));
      // 1,200 in the window ending at 60 s weigh 1,200 x (1 - elapsed) in the next one: below 1,001 from 9,951 ms into it.
      expect(check.statuses[0]).toMatchObject({ code: 'OVER_LIMIT', limitRemaining: 0, durationUntilResetMs: 69_951 });
      expect(store.calls[2].counters[0].countDenied).toBe(true);
      clock.set(START + 69_950);
      expect((await rl.shouldRateLimit(req(d('postpaid', 'app', 0)))).overallCode).toBe('OVER_LIMIT');
      clock.set(START + 69_951);
      expect((await rl.shouldRateLimit(req(d('postpaid', 'app', 0)))).overallCode).toBe('OK');
    });

    it('charges such a rule when another descriptor denies the request, and only that rule', async () => {
      const rl = limiter();
      for (let i = 0; i < 3; i++) await rl.shouldRateLimit(req(d('user', 'u')));
      const res = await rl.shouldRateLimit(req(d('user', 'u'), d('postpaid', 'app', 400), d('plain', 'p')));
      expect(res.statuses.map((s) => s.code)).toEqual(['OVER_LIMIT', 'OK', 'OK']);
      const after = await rl.shouldRateLimit(req(d('postpaid', 'app', 0), d('plain', 'p', 0)));
      expect(after.statuses.map((s) => s.limitRemaining)).toEqual([600, 100]);
    });

    it('records every limit of a rate_limits rule past its limit', async () => {
      const rl = limiter();
      await rl.shouldRateLimit(req(d('tokens', 't', 700)));
      const over = await rl.shouldRateLimit(req(d('tokens', 't', 500)));
      expect(over.statuses[0]).toMatchObject({ code: 'OVER_LIMIT', currentLimit: { name: 'per_minute' } });
      const check = await rl.shouldRateLimit(req(d('tokens', 't', 0)));
      expect(check.statuses[0]).toMatchObject({ code: 'OVER_LIMIT', currentLimit: { name: 'per_minute' } });
      // The day limit holds both charges.
      expect(outcomes[outcomes.length - 1]).toMatchObject({ statKey: 'tokens.per_day', withinLimit: 0 });
      const [day] = await memory.decide([{ ...store.calls[2].counters[1], hits: 0 }]);
      expect(day).toMatchObject({ allowed: true, remaining: 3_800 });
    });

    it('composes with the global setting: a rule without the key is charged on a denial only under COUNT_DENIED_REQUESTS', async () => {
      for (const countDenied of [false, true]) {
        const rl = limiter({ countDenied });
        const key = `p-${countDenied}`;
        await rl.shouldRateLimit(req(d('postpaid', key, 1_000), d('plain', key, 99)));
        await rl.shouldRateLimit(req(d('postpaid', key, 1), d('plain', key, 1)));
        const after = await rl.shouldRateLimit(req(d('postpaid', key, 0), d('plain', key, 0)));
        expect(after.statuses.map((s) => [s.code, s.limitRemaining])).toEqual([
          ['OVER_LIMIT', 0],
          ['OK', countDenied ? 0 : 1],
        ]);
      }
    });

    it('charges a shadow-mode rule that counts denied requests when an enforced rule denies the request', async () => {
      config = buildConfig([
        parseConfigText(
          'llm.yaml',
          `domain: llm
descriptors:
  - key: watch
    shadow_mode: true
    count_denied_requests: true
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: strict
    rate_limit: {unit: hour, requests_per_unit: 1}
`,
          { defaultAlgorithm: 'sliding_window' },
        ),
      ]);
      const rl = limiter();
      await rl.shouldRateLimit(req(d('strict', 's')));
      const denied = await rl.shouldRateLimit(req(d('strict', 's'), d('watch', 'w', 10)));
      expect(denied.overallCode).toBe('OVER_LIMIT');
      const after = await rl.shouldRateLimit(req(d('watch', 'w', 0)));
      expect(after.statuses[0].limitRemaining).toBe(90);
    });
  });
});
