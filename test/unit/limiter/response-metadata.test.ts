import { buildConfig } from '../../../src/config/rule-tree';
import { parseConfigText } from '../../../src/config/rule-reader';
import { RequestPlanner, type Plan } from '../../../src/limiter/plan';
import { dynamicMetadataOf } from '../../../src/limiter/response-metadata';
import type { Descriptor } from '../../../src/limiter/types';

const EDGE = `
domain: edge
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 10}
    metadata: {service: {name: a-svc, tier: 1}, owner: team-a}
  - key: b
    rate_limit: {unit: hour, requests_per_unit: 10}
    metadata: {service: {name: b-svc, zone: eu}, extra: more}
  - key: two
    rate_limits:
      - {name: per_minute, unit: minute, requests_per_unit: 10}
      - {name: per_hour, unit: hour, requests_per_unit: 100}
`;

const config = buildConfig([parseConfigText('edge.yaml', EDGE, { defaultAlgorithm: 'sliding_window' })]);
const planner = new RequestPlanner({ config: () => config, defaultAlgorithm: 'sliding_window' });
const d = (key: string, value: string): Descriptor => ({ entries: [{ key, value }] });
const OK = { code: 'OK', limitRemaining: 1 } as const;
const OVER = { code: 'OVER_LIMIT', limitRemaining: 0 } as const;

/** The plan of `descriptors`, decided as `over` says (a descriptor's index: over its limit). */
function decided(descriptors: Descriptor[], over: readonly number[], hitsAddend = 0): Plan {
  const plan = planner.planOf({ domain: 'edge', descriptors, hitsAddend });
  for (const { index } of plan.counted) plan.statuses[index] = over.includes(index) ? OVER : OK;
  return plan;
}

describe('dynamicMetadataOf', () => {
  it("holds the domain, each descriptor's entries, limit override and hits, and the request's hits when not 0", () => {
    const override: Descriptor = { ...d('x', '1'), limit: { requestsPerUnit: 5, unit: 'minute' }, hitsAddend: 2 };
    const zero: Descriptor = { ...d('y', '2'), limit: { requestsPerUnit: 0, unit: 'second' } };
    expect(dynamicMetadataOf(decided([override, zero], [], 3))).toEqual({
      domain: 'edge',
      descriptors: [
        { entries: ['x=1'], limit: 'requests_per_unit:5 unit:MINUTE', hitsAddend: 2 },
        { entries: ['y=2'], limit: 'unit:SECOND' },
      ],
      hitsAddend: 3,
    });
    expect(dynamicMetadataOf(decided([d('nope', 'n')], [])).hitsAddend).toBeUndefined();
  });

  it('merges the metadata of rules within their limit, first one winning key by key, and names the first rule over its limit', () => {
    expect(dynamicMetadataOf(decided([d('a', '1'), d('b', '2')], []))).toMatchObject({
      metadata: { service: { name: 'a-svc', tier: 1, zone: 'eu' }, owner: 'team-a', extra: 'more' },
    });
    const limited = dynamicMetadataOf(decided([d('a', '1'), d('b', '2')], [0]));
    expect(limited.metadata).toEqual({ service: { name: 'b-svc', zone: 'eu' }, extra: 'more' });
    expect(limited.limitedBy).toBe('a');
    expect(dynamicMetadataOf(decided([d('a', '1')], [0])).metadata).toBeUndefined();
  });

  it('names the deciding limit of a rule with several limits', () => {
    const plan = decided([d('two', 'k')], [0]);
    plan.decidedBy![0] = 1;
    expect(dynamicMetadataOf(plan).limitedBy).toBe(plan.counted[1].limit!.statKey);
    expect(plan.counted[1].limit!.statKey).not.toBe(plan.counted[0].limit!.statKey);
  });

  it('keeps a "__proto__" key of a rule and never writes the config', () => {
    const proto = buildConfig([
      parseConfigText(
        'p.yaml',
        'domain: edge\ndescriptors:\n  - key: p\n    rate_limit: {unit: hour, requests_per_unit: 1}\n    metadata: {"__proto__": {x: 1}}\n',
        { defaultAlgorithm: 'sliding_window' },
      ),
    ]);
    const p = new RequestPlanner({ config: () => proto, defaultAlgorithm: 'sliding_window' });
    const plan = p.planOf({ domain: 'edge', descriptors: [d('p', '1')], hitsAddend: 0 });
    plan.statuses[0] = OK;
    const metadata = dynamicMetadataOf(plan).metadata as Record<string, unknown>;
    expect(Object.keys(metadata)).toEqual(['__proto__']);
    expect(Object.getPrototypeOf(metadata)).toBe(Object.prototype);
  });
});
