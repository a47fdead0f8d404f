import { buildConfig } from '../../../src/config/rule-tree';
import { parseConfigText } from '../../../src/config/rule-reader';
import { InvalidRequestError, NotReadyError } from '../../../src/limiter/errors';
import { RequestPlanner, UNLIMITED_REMAINING, type PlannerOptions } from '../../../src/limiter/plan';
import type { RateLimitConfig } from '../../../src/limiter/rules';
import { isPlannedCounters } from '../../../src/limiter/store';
import type { Descriptor, RateLimitRequest } from '../../../src/limiter/types';

const EDGE = `
domain: edge
descriptors:
  - key: big
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: internal
    rate_limit: {unlimited: true}
  - key: dry
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: two
    rate_limits:
      - {name: per_minute, unit: minute, requests_per_unit: 10}
      - {name: per_hour, unit: hour, requests_per_unit: 100}
  - key: vip
    rate_limit: {unit: hour, requests_per_unit: 1000, replaces: [{name: per_minute}, {name: per_hour}]}
`;

const d = (...pairs: [string, string][]): Descriptor => ({ entries: pairs.map(([key, value]) => ({ key, value })) });
const req = (descriptors: Descriptor[], hitsAddend = 0): RateLimitRequest => ({ domain: 'edge', descriptors, hitsAddend });
/** A request as the codec keeps it: frozen, its descriptors too. */
const kept = (request: RateLimitRequest): RateLimitRequest => {
  for (const x of request.descriptors) Object.freeze(x);
  Object.freeze(request.descriptors);
  return Object.freeze(request);
};

describe('RequestPlanner', () => {
  let config: RateLimitConfig | undefined;
  const planner = (overrides: Partial<PlannerOptions> = {}): RequestPlanner =>
    new RequestPlanner({ config: () => config, defaultAlgorithm: 'sliding_window', ...overrides });

  beforeEach(() => {
    config = buildConfig([parseConfigText('edge.yaml', EDGE, { defaultAlgorithm: 'sliding_window' })]);
  });

  it('answers what needs no store, and counts the rest in request order with their hits', () => {
    const plan = planner().planOf(req([d(['nope', 'x']), d(['big', 'a']), d(['internal', 'i']), { ...d(['big', 'b']), hitsAddend: 0 }], 3));
    expect(plan.statuses[0]).toEqual({ code: 'OK', limitRemaining: 0 });
    expect(plan.statuses[2]).toEqual({ code: 'OK', limitRemaining: UNLIMITED_REMAINING });
    expect(plan.counted.map((c) => c.index)).toEqual([1, 3]);
    expect(plan.counters.map((c) => c.hits)).toEqual([3, 0]);
    expect(plan.counters[0]).toBe(plan.counted[0].counter);
    expect(plan.softCount).toBe(0);
    expect(plan.quotaAt).toBeUndefined();
  });

  it('marks shadow-mode and quota-mode descriptors soft, and under quota mode every descriptor but unlimited ones', () => {
    expect(planner().planOf(req([d(['dry', 'x']), d(['big', 'a'])])).softCount).toBe(1);
    const quota = planner({ quotaMode: true }).planOf(req([d(['nope', 'x']), d(['big', 'a']), d(['internal', 'i'])]));
    expect(quota.softCount).toBe(1);
    expect(quota.quotaAt).toEqual([true, true, false]);
  });

  it('counts one counter per limit of a rate_limits rule, with one tag; a rule whose every limit is replaced is not limited', () => {
    const plan = planner().planOf(req([d(['two', 'k'])]));
    expect(plan.counters).toHaveLength(2);
    expect(plan.counters[0].tag).toBe(plan.counters[0].key);
    expect(plan.counters[1].tag).toBe(plan.counters[0].key);
    expect(plan.decidedBy).toEqual([-1]);
    const replaced = planner().planOf(req([d(['two', 'k']), d(['vip', 'v'])]));
    expect(replaced.statuses[0]).toEqual({ code: 'OK', limitRemaining: 0 });
    expect(replaced.counted.map((c) => c.index)).toEqual([1]);
  });

  it('keeps the plan of a kept request: the same PlannedCounters on every call, statuses of its own each time', () => {
    const p = planner();
    const request = kept(req([d(['big', 'a'])]));
    const first = p.planOf(request);
    const second = p.planOf(request);
    expect(isPlannedCounters(first.counters)).toBe(true);
    expect(second.counters).toBe(first.counters);
    expect(second.statuses).not.toBe(first.statuses);
    expect(second.statuses).toEqual(first.statuses);
  });

  it('plans a request that is not kept on every call, its counters free to change', () => {
    const p = planner();
    const request = req([d(['big', 'a'])]);
    const first = p.planOf(request);
    expect(isPlannedCounters(first.counters)).toBe(false);
    expect(p.planOf(request).counters).not.toBe(first.counters);
  });

  it('keys a kept descriptor once, and gives it a new counter only when its hits change', () => {
    const p = planner();
    const big = Object.freeze(d(['big', 'a']));
    const once = p.planOf(req([big])).counters[0];
    expect(p.planOf(req([big])).counters[0]).toBe(once);
    const three = p.planOf(req([big], 3)).counters[0];
    expect(three).toEqual({ ...once, hits: 3 });
    expect(p.planOf(req([big], 3)).counters[0]).toBe(three);
  });

  it('plans again under a new config, and fails as not ready without one, after validating', () => {
    const p = planner();
    const request = kept(req([d(['big', 'a'])]));
    const before = p.planOf(request);
    config = buildConfig([
      parseConfigText('edge.yaml', EDGE.replace('requests_per_unit: 100}', 'requests_per_unit: 50}'), { defaultAlgorithm: 'sliding_window' }),
    ]);
    const after = p.planOf(request);
    expect(after.counters).not.toBe(before.counters);
    expect(after.counters[0].limit).toBe(50);
    config = undefined;
    expect(() => p.planOf(request)).toThrow(NotReadyError);
    expect(() => p.planOf(req([{ entries: [] }]))).toThrow(InvalidRequestError);
  });
});

describe('RequestPlanner with scope: global limits', () => {
  const REGIONS = `
domain: regions
descriptors:
  - key: shared
    rate_limit: {unit: minute, requests_per_unit: 100, scope: global}
  - key: leased
    rate_limit: {unit: minute, requests_per_unit: 100, lease: true}
  - key: local
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: both
    rate_limits:
      - {unit: second, requests_per_unit: 10}
      - {unit: hour, requests_per_unit: 1000, scope: global}
`;

  it("marks a global limit's counter global (and leased), and no other", () => {
    const config = buildConfig([parseConfigText('regions.yaml', REGIONS, { defaultAlgorithm: 'sliding_window' })]);
    const planner = new RequestPlanner({ config: () => config, defaultAlgorithm: 'sliding_window' });
    const plan = planner.planOf({
      domain: 'regions',
      descriptors: [d(['shared', 'a']), d(['leased', 'a']), d(['local', 'a']), d(['both', 'a'])],
      hitsAddend: 1,
    });
    expect(plan.counters.map((c) => [c.global, c.lease !== undefined])).toEqual([
      [true, true],
      [undefined, true],
      [undefined, false],
      [undefined, false],
      [true, true],
    ]);
  });
});
