import { buildConfig } from '../../../src/config/rule-tree';
import { parseConfigText } from '../../../src/config/rule-reader';
import { outcomeOf } from '../../../src/limiter/outcome';
import { RequestPlanner, type Counted } from '../../../src/limiter/plan';
import type { Descriptor } from '../../../src/limiter/types';

const EDGE = `
domain: edge
descriptors:
  - key: ten
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: detailed
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: dry
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: two
    rate_limits:
      - {name: per_minute, unit: minute, requests_per_unit: 10}
      - {name: per_hour, unit: hour, requests_per_unit: 100}
`;

const config = buildConfig([parseConfigText('edge.yaml', EDGE, { defaultAlgorithm: 'sliding_window' })]);
const planner = new RequestPlanner({ config: () => config, defaultAlgorithm: 'sliding_window' });
const d = (key: string, value: string, hitsAddend?: number): Descriptor => ({ entries: [{ key, value }], hitsAddend });
/** The counted descriptors of a one-descriptor request. */
const countedOf = (descriptor: Descriptor): readonly Counted[] => planner.planOf({ domain: 'edge', descriptors: [descriptor], hitsAddend: 0 }).counted;
const allowed = (remaining: number) => ({ allowed: true, remaining, resetMs: 1000 });
const DENIED = { allowed: false, remaining: 0, resetMs: 1000 };

describe('outcomeOf', () => {
  it('counts admitted hits as within the limit, and those past floor(limit x ratio) as near it', () => {
    const [c] = countedOf(d('ten', 'a', 3));
    const entries = [{ key: 'ten', value: 'a' }];
    // threshold floor(10 x 0.8) = 8: usage 7 after is below, 9 after has 1 hit past it, 10 after with 8 before has 2.
    expect(outcomeOf('edge', entries, c, allowed(3), false, 0.8)).toMatchObject({ hits: 3, withinLimit: 3, nearLimit: 0, overLimit: 0 });
    expect(outcomeOf('edge', entries, c, allowed(1), false, 0.8)).toMatchObject({ withinLimit: 3, nearLimit: 1 });
    expect(outcomeOf('edge', entries, c, allowed(0), false, 0.8)).toMatchObject({ withinLimit: 3, nearLimit: 2 });
    // Usage already past the threshold before: every hit is near the limit.
    const [one] = countedOf(d('ten', 'a', 1));
    expect(outcomeOf('edge', entries, one, allowed(0), false, 0.8)).toMatchObject({ withinLimit: 1, nearLimit: 1 });
  });

  it('counts denied hits as over the limit, shadowed for a shadow-mode rule, and from the local cache when remembered', () => {
    const [ten] = countedOf(d('ten', 'a', 2));
    const [dry] = countedOf(d('dry', 'a', 2));
    expect(outcomeOf('edge', [], ten, DENIED, false, 0.8)).toMatchObject({ overLimit: 2, shadowMode: 0, overLimitWithLocalCache: 0, withinLimit: 0 });
    expect(outcomeOf('edge', [], dry, DENIED, true, 0.8)).toMatchObject({ overLimit: 2, shadowMode: 2, overLimitWithLocalCache: 2 });
  });

  it("reports under the rule's stat key, the detailed one with detailed_metric, and a limit of rate_limits under its suffix", () => {
    const [ten] = countedOf(d('ten', 'a'));
    expect(outcomeOf('edge', [{ key: 'ten', value: 'a' }], ten, allowed(9), false, 0.8)).toMatchObject({
      domain: 'edge',
      statKey: 'ten',
      key: ten.counter.key,
      rule: ten.rule,
    });
    const [detailed] = countedOf(d('detailed', 'x'));
    expect(outcomeOf('edge', [{ key: 'detailed', value: 'x' }], detailed, allowed(9), false, 0.8).statKey).toBe('detailed_x');
    const [perMinute, perHour] = countedOf(d('two', 'k'));
    const minute = outcomeOf('edge', [{ key: 'two', value: 'k' }], perMinute, allowed(9), false, 0.8);
    expect(minute.statKey).toBe(`two${perMinute.limit!.statSuffix}`);
    expect(minute.rule).toBe(perMinute.limit);
    expect(outcomeOf('edge', [], perHour, allowed(99), false, 0.8).statKey).toBe(`two${perHour.limit!.statSuffix}`);
  });
});
