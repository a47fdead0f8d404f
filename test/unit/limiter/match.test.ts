import fc from 'fast-check';
import { configFromTexts } from '../../../src/config/files';
import { detailedStatKey, matchDescriptor } from '../../../src/limiter/match';
import { compileWildcard, isWildcard } from '../../../src/config/wildcard';
import type { Entry } from '../../../src/limiter/types';

const CONFIG = configFromTexts(
  [
    {
      file: 'edge.yaml',
      text: `
domain: edge
descriptors:
  - key: ip
    value: "10.0.0.1"
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: ip
    value: "10.*"
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: ip
    value: "*.99"
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: ip
    value: "1*2*3"
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: tenant
    value: acme
    rate_limit: {unit: minute, requests_per_unit: 6}
    descriptors:
      - key: path
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 7}
        descriptors:
          - key: method
            value: GET
            rate_limit: {unit: minute, requests_per_unit: 8}
  - key: tenant
    value: "*"
    descriptors:
      - key: path
        value: /health
        rate_limit: {unlimited: true}
  - key: bare
`,
    },
    { file: 'other.yaml', text: 'domain: other\ndescriptors:\n  - key: ip\n    rate_limit: {unit: hour, requests_per_unit: 9}\n' },
  ],
  { defaultAlgorithm: 'sliding_window' },
);

function e(...pairs: [string, string][]): Entry[] {
  return pairs.map(([key, value]) => ({ key, value }));
}

function limitOf(domain: string, entries: Entry[]): number | 'unlimited' | undefined {
  const rule = matchDescriptor(CONFIG, domain, entries);
  if (rule === undefined) return undefined;
  return rule.limit.unlimited ? 'unlimited' : rule.limit.requestsPerUnit;
}

describe('matching a descriptor to a rule', () => {
  test('an exact value wins over every wildcard and the key-only rule', () => {
    expect(limitOf('edge', e(['ip', '10.0.0.1']))).toBe(1);
  });

  test('a trailing wildcard matches any value with that prefix', () => {
    expect(limitOf('edge', e(['ip', '10.1.2.3']))).toBe(2);
    expect(limitOf('edge', e(['ip', '10.']))).toBe(2);
  });

  test('a leading wildcard matches any value with that suffix', () => {
    expect(limitOf('edge', e(['ip', '192.168.0.99']))).toBe(3);
  });

  test('wildcards are tried in file order and the first match wins', () => {
    expect(limitOf('edge', e(['ip', '10.0.0.99']))).toBe(2);
  });

  test('a wildcard in the middle matches its literal parts in order', () => {
    expect(limitOf('edge', e(['ip', '1x2y3']))).toBe(4);
    expect(limitOf('edge', e(['ip', '123']))).toBe(4);
    expect(limitOf('edge', e(['ip', '1x3y2']))).toBe(5);
  });

  test('a value no exact or wildcard rule takes falls to the key-only rule', () => {
    expect(limitOf('edge', e(['ip', '172.16.0.1']))).toBe(5);
  });

  test('nested entries walk down the tree and take the limit of the last node', () => {
    expect(limitOf('edge', e(['tenant', 'acme']))).toBe(6);
    expect(limitOf('edge', e(['tenant', 'acme'], ['path', '/a']))).toBe(7);
    expect(limitOf('edge', e(['tenant', 'acme'], ['path', '/a'], ['method', 'GET']))).toBe(8);
  });

  test('a deeper descriptor never falls back to a shallower rule', () => {
    expect(limitOf('edge', e(['tenant', 'acme'], ['path', '/a'], ['method', 'POST']))).toBeUndefined();
    expect(limitOf('edge', e(['tenant', 'acme'], ['other', 'x']))).toBeUndefined();
    expect(limitOf('edge', e(['ip', '172.16.0.1'], ['path', '/a']))).toBeUndefined();
  });

  test('a node without a limit matches nothing even when its children have limits', () => {
    expect(limitOf('edge', e(['tenant', 'globex']))).toBeUndefined();
    expect(limitOf('edge', e(['bare', 'x']))).toBeUndefined();
  });

  test('a wildcard node leads to its children', () => {
    expect(limitOf('edge', e(['tenant', 'globex'], ['path', '/health']))).toBe('unlimited');
    expect(limitOf('edge', e(['tenant', 'globex'], ['path', '/other']))).toBeUndefined();
  });

  test('an unknown key, an unknown domain or no entries match nothing', () => {
    expect(limitOf('edge', e(['user', 'u1']))).toBeUndefined();
    expect(limitOf('nowhere', e(['ip', '10.0.0.1']))).toBeUndefined();
    expect(limitOf('edge', [])).toBeUndefined();
  });

  test('domains are separate rule sets', () => {
    expect(limitOf('other', e(['ip', '10.0.0.1']))).toBe(9);
  });

  test('the matched rule carries everything the limiter needs, precomputed', () => {
    const rule = matchDescriptor(CONFIG, 'edge', e(['tenant', 'acme'], ['path', '/a']))!;
    expect(rule.statKey).toBe('tenant_acme.path');
    expect(rule.keyPrefix).toBe(CONFIG.domains.get('edge')!.rules.get('tenant')!.exact.get('acme')!.children.get('path')!.keyOnly!.keyPrefix);
    expect(rule.limit.windowMs).toBe(60_000);
    expect(rule.shadowMode).toBe(false);
    expect(rule.replaces).toEqual([]);
    // Same object every time: matching allocates nothing.
    expect(matchDescriptor(CONFIG, 'edge', e(['tenant', 'acme'], ['path', '/b']))).toBe(rule);
  });
});

describe('detailed stat keys', () => {
  test('a detailed_metric rule names every entry with its value', () => {
    const entries = e(['tenant', 'acme'], ['path', '/a']);
    const rule = matchDescriptor(CONFIG, 'edge', entries)!;
    expect(detailedStatKey(rule, entries)).toBe('tenant_acme.path_/a');
  });

  test('a rule without detailed_metric keeps its configured stat key', () => {
    const entries = e(['ip', '172.16.0.1']);
    const rule = matchDescriptor(CONFIG, 'edge', entries)!;
    expect(detailedStatKey(rule, entries)).toBe('ip');
  });
});

describe('wildcard patterns', () => {
  test('common shapes match as documented', () => {
    const cases: [string, string, boolean][] = [
      ['foo*', 'foo', true],
      ['foo*', 'foobar', true],
      ['foo*', 'fo', false],
      ['*bar', 'bar', true],
      ['*bar', 'foobar', true],
      ['*bar', 'bars', false],
      ['a*b*c', 'abc', true],
      ['a*b*c', 'aXbYc', true],
      ['a*b*c', 'acb', false],
      ['a*a', 'a', false],
      ['a*a', 'aa', true],
      ['*', '', true],
      ['*', 'anything', true],
      ['**', 'x', true],
      ['a**b', 'ab', true],
      ['.*', 'x', false],
      ['(*)', '(x)', true],
    ];
    for (const [pattern, value, expected] of cases) expect([pattern, value, compileWildcard(pattern)(value)]).toEqual([pattern, value, expected]);
  });

  test('only values containing * are patterns', () => {
    expect(isWildcard('10.*')).toBe(true);
    expect(isWildcard('10.0.0.1')).toBe(false);
  });

  test('a pattern agrees with the equivalent anchored regular expression on every value', () => {
    const alphabet = fc.constantFrom('a', 'b', '.', '*', '+', '(', '\\');
    const pattern = fc.array(alphabet, { maxLength: 8 }).map((cs) => cs.join(''));
    const value = fc.array(fc.constantFrom('a', 'b', '.', '*', '+', '(', '\\', 'c'), { maxLength: 12 }).map((cs) => cs.join(''));
    fc.assert(
      fc.property(pattern, value, (p, v) => {
        const reference = new RegExp(
          `^${p
            .split('*')
            .map((s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))
            .join('.*')}$`,
          's',
        );
        return compileWildcard(p)(v) === reference.test(v);
      }),
      { numRuns: 2_000 },
    );
  });

  test('a pattern built to make a backtracking regex explode answers at once', () => {
    const test = compileWildcard('*a*a*a*a*a*a*a*a*ab*c');
    const started = process.hrtime.bigint();
    expect(test(`${'a'.repeat(100_000)}c`)).toBe(false);
    expect(Number(process.hrtime.bigint() - started) / 1e6).toBeLessThan(500);
  });
});
