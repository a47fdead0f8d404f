import type { DescriptorOutcome } from '../../../src/limiter/types';
import { API_KEY_RULE, FIVE_PER_MINUTE, TOP_T0 } from '../../helpers/top-fixtures';
import { mergeViews, parseTopQuery, topReport, descriptorOf, rulesReport } from '../../../src/top/top-report';
import { boundedId, ID_MAX_CHARS, OVERRIDE_RULE, RULE_NAME_MAX_CHARS, SLICES, STEPS, TopSketch } from '../../../src/top/top-sketch';
import { mergeCounts } from '../../../src/top/summary';

/** The sliding window of the heavy hitters, on a pinned clock: slices leave the view, steps chart it, views merge. */

function outcome(value: string, allowed: boolean, rule = API_KEY_RULE, domain = 'edge'): DescriptorOutcome {
  return {
    domain,
    statKey: rule.statKey,
    hits: 1,
    overLimit: allowed ? 0 : 1,
    nearLimit: 0,
    withinLimit: allowed ? 1 : 0,
    shadowMode: 0,
    overLimitWithLocalCache: 0,
    rule,
    key: `${domain}|sw60000|${rule.statKey}=${value}`,
  };
}

const QUERY = { by: 'denied', limit: 20 } as const;
const sketch = (nowMs = TOP_T0, entries = 16, maxRules = 10) => new TopSketch({ windowMs: 60_000, entries, maxRules, nowMs });

describe('TopSketch', () => {
  it('counts allowed, denied and near-limit hits per descriptor of a rule', () => {
    const s = sketch();
    for (let i = 0; i < 60; i++) s.record(outcome('mallory', i < 5));
    s.record({ ...outcome('alice', true), nearLimit: 1 });
    s.record({ ...outcome('check', true), withinLimit: 0, hits: 0 }); // hits 0: a check counts nothing
    const report = topReport(s.view(), 1, QUERY);
    expect(report).toEqual({
      window_s: 60,
      replicas: 1,
      entries: [
        { domain: 'edge', rule: 'api_key', descriptor: [['api_key', 'mallory']], allowed: 5, denied: 55, near_limit: 0, error: { allowed: 0, denied: 0 } },
        { domain: 'edge', rule: 'api_key', descriptor: [['api_key', 'alice']], allowed: 1, denied: 0, near_limit: 1, error: { allowed: 0, denied: 0 } },
      ],
    });
  });

  it('keeps a hit in view for at least 9/10 of the window and drops it after the whole window', () => {
    const s = sketch();
    s.record(outcome('early', false));
    s.advance(TOP_T0 + 54_000 - 1);
    expect(s.view().rules).toHaveLength(1);
    s.advance(TOP_T0 + 60_000);
    expect(s.view().rules).toHaveLength(0);
  });

  it('charts the window in 60 steps, oldest first, and totals what the slices hold', () => {
    const s = sketch();
    s.record(outcome('a', true));
    s.advance(TOP_T0 + 2_000);
    s.record(outcome('a', false));
    s.record(outcome('b', false));
    const [rule] = s.view().rules;
    expect(rule.stepAllowed).toHaveLength(STEPS);
    expect(rule.stepAllowed[STEPS - 3]).toBe(1);
    expect(rule.stepDenied[STEPS - 1]).toBe(2);
    expect([rule.allowed, rule.denied]).toEqual([1, 2]);
  });

  it('tracks at most maxRules rules and counts the hits of any further one as untracked', () => {
    const s = sketch(TOP_T0, 4, 1);
    s.record(outcome('a', true));
    s.record(outcome('x', true, { statKey: 'user', limit: FIVE_PER_MINUTE, shadowMode: false }));
    const view = s.view();
    expect(view.rules.map((r) => r.rule)).toEqual(['api_key']);
    expect(view.untracked).toBe(1);
  });

  it('takes the new limit of a rule a reload replaced', () => {
    const s = sketch();
    s.record(outcome('a', true));
    s.record(outcome('a', true, { statKey: 'api_key', limit: { ...FIVE_PER_MINUTE, requestsPerUnit: 9 }, shadowMode: true }));
    const [rule] = s.view().rules;
    expect([rule.limit.requestsPerUnit, rule.limit.shadowMode, rule.allowed]).toEqual([9, true, 2]);
  });

  it('holds a fixed number of entries whatever the number of distinct values', () => {
    const s = sketch(TOP_T0, 8);
    for (let slice = 0; slice < SLICES; slice++) {
      s.advance(TOP_T0 + slice * 6_000);
      for (let i = 0; i < 5_000; i++) s.record(outcome(`${slice}-${i}`, true));
    }
    const [rule] = s.view(1_000).rules;
    expect(rule.byAllowed.entries.length).toBeLessThanOrEqual(SLICES * 8);
    expect(rule.byDenied.entries).toEqual([]);
  });
});

describe('ids and display', () => {
  it('keeps short counter keys as they are and cuts long ones, with a hash that tells them apart', () => {
    const short = 'edge|sw60000|api_key=alice';
    expect(boundedId(short)).toBe(short);
    const a = boundedId(`edge|sw60000|api_key=${'x'.repeat(500)}a`);
    const b = boundedId(`edge|sw60000|api_key=${'x'.repeat(500)}b`);
    expect(a.length).toBeLessThanOrEqual(ID_MAX_CHARS);
    expect(a).not.toBe(b);
    expect(descriptorOf(a)[0][1]).toMatch(/^x{64}…#[0-9a-z]+$/);
  });

  it('reads escaped keys and values back, and cuts long values for display', () => {
    expect(descriptorOf('edge%7C|sw60000|k%3D=v%7Cw|path=')).toEqual([
      ['k=', 'v|w'],
      ['path', ''],
    ]);
    expect(descriptorOf(`edge|sw60000|k=${'y'.repeat(100)}`)[0][1]).toBe(`${'y'.repeat(64)}…`);
  });
});

describe('merging views', () => {
  it('adds up counts, totals and steps of the same rule across processes', () => {
    const a = sketch();
    const b = sketch();
    for (let i = 0; i < 3; i++) a.record(outcome('mallory', false));
    b.record(outcome('mallory', false));
    b.record(outcome('alice', true));
    const merged = mergeViews([a.view(), b.view()], 16);
    expect(topReport(merged, 2, QUERY).entries.map((e) => [e.descriptor[0][1], e.allowed, e.denied])).toEqual([
      ['mallory', 0, 4],
      ['alice', 1, 0],
    ]);
    expect(merged.rules[0].stepDenied[STEPS - 1]).toBe(4);
  });

  it('aligns steps by their time when processes are a step apart', () => {
    const a = sketch(TOP_T0);
    const b = sketch(TOP_T0);
    a.record(outcome('x', true));
    b.advance(TOP_T0 + 1_000);
    b.record(outcome('x', true));
    const merged = mergeViews([a.view(), b.view()], 16);
    expect(merged.rules[0].stepAllowed.slice(-2)).toEqual([1, 1]);
  });

  it('adds the floor of a full part to the counts and errors of the entries it lacks, and drops the lowest', () => {
    const merged = mergeCounts(
      [
        { entries: [{ id: 'a', count: 5, error: 1, near: 2 }], floor: 2 },
        { entries: [{ id: 'b', count: 3, error: 0, near: 0 }], floor: 0 },
      ],
      1,
    );
    expect(merged.entries).toEqual([{ id: 'a', count: 5, error: 1, near: 2 }]);
    // b: 3 in the second part, up to 2 in the first one; dropped with 5, which becomes the floor.
    expect(merged.floor).toBe(5);
    const both = mergeCounts(
      [
        { entries: [{ id: 'a', count: 5, error: 1, near: 2 }], floor: 2 },
        { entries: [{ id: 'b', count: 3, error: 0, near: 0 }], floor: 0 },
      ],
      2,
    );
    expect(both).toEqual({
      entries: [
        { id: 'a', count: 5, error: 1, near: 2 },
        { id: 'b', count: 5, error: 2, near: 2 },
      ],
      floor: 2,
    });
  });

  it('lays out /top/rules for the page, rules of a domain by denials', () => {
    const s = sketch();
    s.record(outcome('a', true));
    s.record(outcome('b', false, { statKey: 'user', limit: { ...FIVE_PER_MINUTE, name: 'per_user' }, shadowMode: false }));
    const report = rulesReport(s.view(), 1, { rlqs: [] }) as { rules: { rule: string; limit: { name: string | null } }[]; rlqs: unknown[] };
    expect(report.rules.map((r) => [r.rule, r.limit.name])).toEqual([
      ['user', 'per_user'],
      ['api_key', null],
    ]);
    expect(report.rlqs).toEqual([]);
  });
});

describe('parseTopQuery', () => {
  it('reads domain, by and limit with their defaults', () => {
    expect(parseTopQuery(new URLSearchParams(''))).toEqual({ by: 'denied', limit: 20 });
    expect(parseTopQuery(new URLSearchParams('domain=edge&by=near_limit&limit=5'))).toEqual({ domain: 'edge', by: 'near_limit', limit: 5 });
  });

  it('names the parameter it rejects', () => {
    expect(parseTopQuery(new URLSearchParams('by=x'))).toMatch(/^by:/);
    for (const limit of ['0', '-1', '1.5', '1001', ' 2', '']) expect(parseTopQuery(new URLSearchParams(`limit=${limit}`))).toMatch(/^limit:/);
  });
});

describe('TopSketch under callers that name their own rules', () => {
  it("counts every request limit override under one rule, whatever keys the caller named it by, and keeps the config's rules in view", () => {
    const s = sketch(TOP_T0, 16, 3);
    for (let i = 0; i < 100; i++) {
      const rule = { ...API_KEY_RULE, statKey: `k${i}.${'x'.repeat(300)}`, override: true };
      s.record(outcome(`v${i}`, false, rule));
    }
    for (let i = 0; i < 20; i++) s.record(outcome('mallory', false));
    const rules = s.view().rules;
    expect(rules.map((r) => r.rule).sort()).toEqual([OVERRIDE_RULE, 'api_key'].sort());
    expect(rules.find((r) => r.rule === OVERRIDE_RULE)!.denied).toBe(100);
    expect(s.view().untracked).toBe(0);
  });

  it('cuts rule names, and frees the place of a rule silent for a whole window', () => {
    const s = sketch(TOP_T0, 16, 1);
    s.record(outcome('a', false, { ...API_KEY_RULE, statKey: 'r'.repeat(1_000) }));
    expect(s.view().rules[0].rule).toHaveLength(RULE_NAME_MAX_CHARS);
    s.record(outcome('b', false));
    expect(s.view().untracked).toBe(1);
    s.advance(TOP_T0 + 61_000);
    s.record(outcome('c', false));
    expect(s.view().rules.map((r) => r.rule)).toEqual(['api_key']);
  });

  it('keeps /top/rules within its byte budget, the rules with the most denials first', () => {
    const s = sketch(TOP_T0, 1_000, 100);
    for (let r = 0; r < 100; r++) {
      const rule = { ...API_KEY_RULE, statKey: `rule${r}` };
      for (let v = 0; v < 200; v++) s.record(outcome(`${'v'.repeat(150)}${v}`, r !== 7, rule));
    }
    const report = rulesReport(s.view(), 1) as { rules: { rule: string }[]; more_rules: number };
    expect(JSON.stringify(report).length).toBeLessThan(600 * 1024);
    expect(report.rules[0].rule).toBe('rule7');
    expect(report.more_rules).toBeGreaterThan(0);
  });
});
