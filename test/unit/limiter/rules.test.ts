import { configFromTexts } from '../../../src/config/files';
import { parseConfigText } from '../../../src/config/rule-reader';
import { matchDescriptor } from '../../../src/limiter/match';
import { RULE_SETTINGS, type RuleNode } from '../../../src/limiter/rules';
import { configFromResources, encodeRateLimitConfig, RATE_LIMIT_CONFIG_TYPE_URL } from '../../../src/xds/rate-limit-config';

/**
 * A per-rule flag or number is declared once, in the core's RULE_SETTINGS table: the loader and the
 * xDS translation read whatever the table holds. Here the table is a copy with two keys no source
 * file names, `cost` (a number, inherited) and `audit` (a flag with a check of its own); they load,
 * default, inherit, fail with messages naming file and path, and reach MatchedRule, with nothing
 * else changed.
 */
jest.mock('../../../src/limiter/rules', () => {
  const actual = jest.requireActual('../../../src/limiter/rules');
  return {
    ...actual,
    RULE_SETTINGS: {
      ...actual.RULE_SETTINGS,
      cost: { yaml: 'cost', type: 'integer', min: 1, max: 100, default: 1, inherited: true },
      audit: {
        yaml: 'audit',
        type: 'boolean',
        default: false,
        inherited: false,
        check: (_on: boolean, rule: { key: string; value: string | undefined }) => (rule.value === undefined ? 'only on a rule with a value' : undefined),
      },
    },
  };
});

const OPTS = { defaultAlgorithm: 'sliding_window' } as const;
const LIMIT = 'rate_limit: {unit: second, requests_per_unit: 5}';

/** The table's extra fields of a node, read as the decision would read them. */
function extra(node: RuleNode | undefined): { cost: unknown; audit: unknown } {
  const n = node as unknown as Record<string, unknown>;
  return { cost: n.cost, audit: n.audit };
}

function parse(text: string) {
  return parseConfigText('t.yaml', text, OPTS);
}

function error(text: string): string {
  try {
    parse(text);
  } catch (err) {
    return (err as Error).message;
  }
  throw new Error('expected a ConfigError');
}

describe('a key added to RULE_SETTINGS', () => {
  test('the copy of the table is the one the loader reads', () => {
    expect(Object.keys(RULE_SETTINGS)).toEqual([
      'shadowMode',
      'quotaMode',
      'detailedMetric',
      'countDeniedRequests',
      'reservations',
      'reservationHoldSeconds',
      'cost',
      'audit',
    ]);
  });

  test('loads onto the rule and reaches the matched rule, its default where it is not set', () => {
    const config = configFromTexts(
      [
        {
          file: 't.yaml',
          text: `domain: d\ndescriptors:\n  - key: a\n    value: x\n    cost: 7\n    audit: true\n    ${LIMIT}\n  - key: b\n    ${LIMIT}\n`,
        },
      ],
      OPTS,
    );
    expect(extra(matchDescriptor(config, 'd', [{ key: 'a', value: 'x' }]) as RuleNode)).toEqual({ cost: 7, audit: true });
    expect(extra(matchDescriptor(config, 'd', [{ key: 'b', value: 'y' }]) as RuleNode)).toEqual({ cost: 1, audit: false });
  });

  test('an inherited number is the nearest one set above; a flag that is not inherited stays on its rule', () => {
    const d = parse(
      `domain: d\ndescriptors:\n  - key: a\n    value: x\n    cost: 3\n    audit: true\n    descriptors:\n` +
        `      - key: b\n        descriptors:\n          - key: c\n            cost: 9\n            ${LIMIT}\n`,
    );
    const a = d.rules.get('a')!.exact.get('x')!;
    const b = a.children.get('b')!.keyOnly!;
    const c = b.children.get('c')!.keyOnly!;
    expect([extra(a), extra(b), extra(c)]).toEqual([
      { cost: 3, audit: true },
      { cost: 3, audit: false },
      { cost: 9, audit: false },
    ]);
  });

  test('is rejected by its type, its range and its check, naming the file and the path', () => {
    expect(error(`domain: d\ndescriptors:\n  - key: a\n    cost: 0\n`)).toBe('t.yaml: descriptors[0].cost: expected an integer from 1 to 100, got 0');
    expect(error(`domain: d\ndescriptors:\n  - key: a\n    cost: "2"\n`)).toBe('t.yaml: descriptors[0].cost: expected an integer from 1 to 100, got "2"');
    expect(error(`domain: d\ndescriptors:\n  - key: a\n    audit: yes please\n`)).toBe(
      't.yaml: descriptors[0].audit: expected true or false, got "yes please"',
    );
    expect(error(`domain: d\ndescriptors:\n  - key: a\n    audit: true\n`)).toBe('t.yaml: descriptors[0].audit: only on a rule with a value');
    // The check is of a value other than the default: `audit: false` anywhere is fine.
    expect(extra(parse(`domain: d\ndescriptors:\n  - key: a\n    audit: false\n`).rules.get('a')!.keyOnly)).toEqual({ cost: 1, audit: false });
  });

  test('is a rule key in the list of expected keys, in table order; not being a reference key, misplaced it is an error', () => {
    expect(error(`domain: d\ndescriptors:\n  - key: a\n    limit: 1\n`)).toBe(
      't.yaml: descriptors[0].limit: unknown key (expected one of: key, value, rate_limit, rate_limits, descriptors, shadow_mode, quota_mode, ' +
        'detailed_metric, count_denied_requests, reservations, reservation_hold_seconds, cost, audit, value_to_metric, share_threshold, metadata)',
    );
    expect(error(`domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, cost: 2}\n`)).toMatch(
      /^t\.yaml: descriptors\[0\]\.rate_limit\.cost: unknown key/,
    );
    // A reference key of the table, misplaced, loads with a warning, as before.
    expect(parse(`domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, quota_mode: true}\n`).warnings).toEqual([
      expect.stringMatching(/^t\.yaml: descriptors\[0\]\.rate_limit\.quota_mode: ignored/),
    ]);
  });

  test('an xDS resource never sets a key its proto does not have', () => {
    const value = encodeRateLimitConfig({
      name: 'r',
      domain: 'd',
      descriptors: [{ key: 'a', quotaMode: true, rateLimit: { unit: 'SECOND', requestsPerUnit: 5 } }],
    });
    const node = configFromResources([{ typeUrl: RATE_LIMIT_CONFIG_TYPE_URL, value }], OPTS)
      .domains.get('d')!
      .rules.get('a')!.keyOnly!;
    expect(node.quotaMode).toBe(true);
    expect(extra(node)).toEqual({ cost: 1, audit: false });
  });
});
