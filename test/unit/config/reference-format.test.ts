import { buildConfig } from '../../../src/config/rule-tree';
import { configFromTexts } from '../../../src/config/files';
import { parseConfigText } from '../../../src/config/rule-reader';
import { matchDescriptor, requestKeys } from '../../../src/limiter/match';
import { ConfigError } from '../../../src/config/config-error';
import type { RateLimitConfig } from '../../../src/limiter/rules';
import type { Entry } from '../../../src/limiter/types';

/**
 * The config format as the reference server's own config tests exercise it: every case they treat
 * as valid loads here, every case they reject is rejected (with our file-and-path message), and
 * the keys it added (quota_mode, metadata, share_threshold, value_to_metric) mean the same.
 * The fixtures are written for this suite, one per case of the reference's test/config. Which files
 * of a directory are read: test/integration/config/config-files.test.ts.
 */

const opts = { defaultAlgorithm: 'sliding_window' } as const;

function load(text: string, file = 'case.yaml'): RateLimitConfig {
  return configFromTexts([{ file, text }], opts);
}

function rejection(text: string): string {
  try {
    load(text);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as ConfigError).message;
  }
  throw new Error('loaded, but should have been rejected');
}

const entries = (...pairs: [string, string][]): Entry[] => pairs.map(([key, value]) => ({ key, value }));

describe('what the reference loads, loads here', () => {
  test('nested rules, a whitelisted value, named, unlimited and detailed rules', () => {
    const config = load(`
# comments and blank lines are fine

domain: shop
descriptors:
  - key: region
    value: eu
    descriptors:
      - key: customer
        rate_limit: {unit: second, requests_per_unit: 4}
      - key: customer
        value: bigco
        rate_limit: {unit: second, requests_per_unit: 40}
  - key: cart
    rate_limit: {unit: minute, requests_per_unit: 12}
  - key: cart
    value: checkout
    rate_limit: {unit: minute, requests_per_unit: 24}
  - key: cart
    value: internal
  - key: search
    rate_limit: {name: search_limit, unit: day, requests_per_unit: 9}
  - key: health
    rate_limit: {unlimited: true}
  - key: sku
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 3}
`);
    expect(matchDescriptor(config, 'shop', entries(['region', 'eu'], ['customer', 'x']))?.limit.requestsPerUnit).toBe(4);
    expect(matchDescriptor(config, 'shop', entries(['region', 'eu'], ['customer', 'bigco']))?.limit.requestsPerUnit).toBe(40);
    expect(matchDescriptor(config, 'shop', entries(['cart', 'internal']))).toBeUndefined();
    expect(matchDescriptor(config, 'shop', entries(['cart', 'checkout']))?.limit.requestsPerUnit).toBe(24);
    expect(matchDescriptor(config, 'shop', entries(['search', 'q']))?.limit.name).toBe('search_limit');
    expect(matchDescriptor(config, 'shop', entries(['health', 'x']))?.limit.unlimited).toBe(true);
    expect(config.warnings).toEqual([]);
  });

  test('a domain with an empty descriptors list, or none at all, loads (and warns that nothing is limited)', () => {
    for (const text of ['domain: quiet\ndescriptors:\n', 'domain: quiet\n', 'domain: quiet\ndescriptors: []\n']) {
      const config = load(text);
      expect([...config.domains.keys()]).toEqual(['quiet']);
      expect(config.warnings).toEqual(['no rule in case.yaml: every request is allowed']);
    }
  });

  test('shadow_mode and quota_mode on any rule', () => {
    const config = load(`
domain: modes
descriptors:
  - key: a
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 30}
`);
    expect(matchDescriptor(config, 'modes', entries(['a', '1']))).toMatchObject({ shadowMode: true, quotaMode: false });
    expect(matchDescriptor(config, 'modes', entries(['b', '1']))).toMatchObject({ shadowMode: false, quotaMode: true });
  });

  test('metadata: any mapping, nested, with lists, numbers and booleans, kept as plain data', () => {
    const config = load(`
domain: meta
descriptors:
  - key: tier
    value: gold
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 5}
        metadata:
          owner: team-a
          routing: {pool: primary, weight: 3}
          tags: [x, 2, true, null]
          1: numeric key
  - key: plain
    metadata: {}
    rate_limit: {unit: minute, requests_per_unit: 20}
`);
    const rule = matchDescriptor(config, 'meta', entries(['tier', 'gold'], ['user', 'u']))!;
    expect(rule.metadata).toEqual({ owner: 'team-a', routing: { pool: 'primary', weight: 3 }, tags: ['x', 2, true, null], '1': 'numeric key' });
    expect(Object.isFrozen(rule.metadata)).toBe(true);
    expect(Object.isFrozen(rule.metadata!.routing)).toBe(true);
    // An empty mapping is no metadata, as the reference reads it.
    expect(matchDescriptor(config, 'meta', entries(['plain', 'p']))!.metadata).toBeUndefined();
  });

  test('metadata with anchors and merge keys reads as the mapping they spell', () => {
    const config = load(`
domain: meta
descriptors:
  - key: a
    metadata: &base {team: core, routing: {pool: primary}}
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: b
    metadata:
      <<: *base
      team: edge
    rate_limit: {unit: second, requests_per_unit: 5}
`);
    expect(matchDescriptor(config, 'meta', entries(['b', 'x']))!.metadata).toEqual({ team: 'edge', routing: { pool: 'primary' } });
    expect(rejection('domain: d\ndescriptors:\n  - key: k\n    metadata: {<<: [1]}\n')).toContain(
      'descriptors[0].metadata: a merge key (<<) must name a mapping',
    );
  });

  test('wildcards: trailing, middle and several stars, nested under an exact value', () => {
    const config = load(`
domain: wild
descriptors:
  - key: w
    value: foo*
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: m
    value: bar*b
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: multi
    value: foo*bar*baz
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: n
    value: v1
    descriptors:
      - key: w
        value: goo*
        rate_limit: {unit: minute, requests_per_unit: 4}
`);
    expect(matchDescriptor(config, 'wild', entries(['w', 'foo']))?.statKey).toBe('w_foo*');
    expect(matchDescriptor(config, 'wild', entries(['w', 'foo123']))?.statKey).toBe('w_foo*');
    expect(matchDescriptor(config, 'wild', entries(['m', 'barxyzb']))?.limit.requestsPerUnit).toBe(2);
    expect(matchDescriptor(config, 'wild', entries(['m', 'barxyz']))).toBeUndefined();
    expect(matchDescriptor(config, 'wild', entries(['multi', 'foo-bar-baz']))?.limit.requestsPerUnit).toBe(3);
    expect(matchDescriptor(config, 'wild', entries(['multi', 'foobaz']))).toBeUndefined();
    expect(matchDescriptor(config, 'wild', entries(['n', 'v1'], ['w', 'goo-x']))?.statKey).toBe('n_v1.w_goo*');
  });

  test('share_threshold on every shape of wildcard, with value_to_metric and detailed_metric beside it', () => {
    const config = load(SHARED);
    expect(config.warnings).toEqual([]);
    expect(matchDescriptor(config, 'shared', entries(['files', 'files/a']))).toMatchObject({ requestKeyed: true });
  });
});

describe('what the reference rejects stays rejected, naming file and path', () => {
  test.each<[string, string, string]>([
    [
      'an unknown unit',
      'domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n',
      'case.yaml: descriptors[0].rate_limit.unit: unknown unit "fortnight"',
    ],
    ['text that is not YAML', "'''\n", "case.yaml: line 2, column 1: invalid YAML: Missing closing 'quote"],
    ['a missing domain', 'descriptors:\n', 'case.yaml: domain: required'],
    ['a rule without a key', 'domain: d\ndescriptors:\n  - value: v\n', 'case.yaml: descriptors[0].key: required'],
    [
      'the same key and value twice',
      'domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n',
      'case.yaml: descriptors[1]: duplicate rule for key "k" and value "v" (first at descriptors[0])',
    ],
    [
      'a misspelled rule key',
      'domain: d\ndescriptors:\n  - key: k\n    ratelimit: {unit: day, requests_per_unit: 5}\n',
      'case.yaml: descriptors[0].ratelimit: unknown key',
    ],
    [
      'a misspelled limit key',
      'domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requestsperunit: 5}\n',
      'case.yaml: descriptors[0].rate_limit.requestsperunit: unknown key',
    ],
    ['a list of plain values where rules belong', 'domain: d\ndescriptors:\n  - x\n  - y\n', 'case.yaml: descriptors[0]: expected a mapping, got "x"'],
    ['a key that is not a string', '0.5: d\ndescriptors: []\n', 'case.yaml: 0.5: unknown key'],
    [
      'an empty replaces entry',
      'domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: me\n      unit: second\n      requests_per_unit: 5\n      replaces:\n        - name:\n',
      'case.yaml: descriptors[0].rate_limit.replaces[0].name: required',
    ],
    [
      'a rule replacing itself',
      'domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: me\n      unit: second\n      requests_per_unit: 5\n      replaces: [{name: me}]\n',
      'case.yaml: descriptors[0].rate_limit.replaces[0].name: a rule cannot replace its own name "me"',
    ],
    [
      'a unit on an unlimited rule',
      'domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: day, requests_per_unit: 25}\n',
      'case.yaml: descriptors[0].rate_limit.unit: not allowed with unlimited: true',
    ],
    [
      'share_threshold on an exact value',
      'domain: d\ndescriptors:\n  - key: k\n    value: exact\n    share_threshold: true\n    rate_limit: {unit: minute, requests_per_unit: 5}\n',
      "case.yaml: descriptors[0].share_threshold: only allowed on a rule whose value is a wildcard (contains '*')",
    ],
    [
      'share_threshold on a key-only rule',
      'domain: d\ndescriptors:\n  - key: k\n    share_threshold: true\n    rate_limit: {unit: minute, requests_per_unit: 5}\n',
      "case.yaml: descriptors[0].share_threshold: only allowed on a rule whose value is a wildcard (contains '*')",
    ],
    [
      'an unquoted float where a string belongs',
      'domain: d\ndescriptors:\n  - key: version\n    value: 1.5\n',
      'case.yaml: descriptors[0].value: expected a string, got 1.5 (quote it)',
    ],
    [
      'a float written with an exponent where a string belongs',
      'domain: d\ndescriptors:\n  - key: version\n    value: 1e3\n',
      'case.yaml: descriptors[0].value: expected a string, got 1e3 (quote it)',
    ],
    [
      'a float written with a point where an integer belongs',
      'domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10.0}\n',
      'case.yaml: descriptors[0].rate_limit.requests_per_unit: expected an integer from 0 to 4294967295, got 10.0',
    ],
    [
      'metadata that is not a mapping',
      'domain: d\ndescriptors:\n  - key: k\n    metadata: [a]\n',
      'case.yaml: descriptors[0].metadata: expected a mapping, got a list',
    ],
    [
      'an unknown key inside a key the reference ignores',
      'domain: d\ndescriptors:\n  - key: k\n    domain: {colour: red}\n',
      'case.yaml: descriptors[0].domain.colour: unknown key',
    ],
    [
      'a list of plain values inside a key the reference ignores',
      'domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      descriptors: [x]\n',
      'case.yaml: descriptors[0].rate_limit.descriptors[0]: expected a mapping, got "x"',
    ],
  ])('%s', (_, text, message) => {
    expect(rejection(text)).toContain(message);
  });

  test('two files with one domain, unless MERGE_DOMAIN_CONFIG', () => {
    const a = parseConfigText('a.yaml', 'domain: d\ndescriptors:\n  - key: k1\n    value: v1\n    rate_limit: {unit: minute, requests_per_unit: 10}\n', opts);
    const b = parseConfigText('b.yaml', 'domain: d\ndescriptors:\n  - key: k2\n    value: v2\n    rate_limit: {unit: minute, requests_per_unit: 20}\n', opts);
    expect(() => buildConfig([a, b])).toThrow('b.yaml: domain: duplicate domain "d" (already defined in a.yaml; MERGE_DOMAIN_CONFIG=true merges them)');
    const merged = buildConfig([a, b], { mergeDomains: true });
    expect(matchDescriptor(merged, 'd', entries(['k1', 'v1']))?.limit.requestsPerUnit).toBe(10);
    expect(matchDescriptor(merged, 'd', entries(['k2', 'v2']))?.limit.requestsPerUnit).toBe(20);
    expect(merged.domains.get('d')!.file).toBe('a.yaml');
  });

  test('merged domains still reject a rule both files define, naming the second file and both places', () => {
    const a = parseConfigText('a.yaml', 'domain: d\ndescriptors:\n  - key: k\n    value: v\n', opts);
    const b = parseConfigText('b.yaml', 'domain: d\ndescriptors:\n  - key: other\n  - key: k\n    value: v\n', opts);
    expect(() => buildConfig([a, b], { mergeDomains: true })).toThrow(
      new ConfigError('b.yaml', 'descriptors[1]', 'duplicate rule for key "k" and value "v" (first at descriptors[0] of a.yaml, domain "d")'),
    );
    const keyOnlyA = parseConfigText('a.yaml', 'domain: d\ndescriptors:\n  - key: k\n', opts);
    const keyOnlyB = parseConfigText('b.yaml', 'domain: d\ndescriptors:\n  - key: k\n', opts);
    expect(() => buildConfig([keyOnlyA, keyOnlyB], { mergeDomains: true })).toThrow('duplicate rule for key "k" without a value');
    const wildA = parseConfigText('a.yaml', 'domain: d\ndescriptors:\n  - key: k\n    value: x*\n', opts);
    expect(() => buildConfig([wildA, wildA], { mergeDomains: true })).toThrow('duplicate rule for key "k" and value "x*"');
  });
});

describe('keys the reference accepts and ignores', () => {
  test('load, each with a warning naming the file and the path', () => {
    const config = load(
      `
domain: lax
key: stray
descriptors:
  - key: k
    unit: minute
    rate_limit:
      unit: second
      requests_per_unit: 3
      shadow_mode: true
      metadata: {anything: [1, 2]}
      replaces:
        - name: other
          unit: day
`,
      'lax.yaml',
    );
    const rule = matchDescriptor(config, 'lax', entries(['k', 'x']))!;
    expect(rule.shadowMode).toBe(false);
    expect(rule.limit).toMatchObject({ unit: 'second', requestsPerUnit: 3 });
    expect(config.warnings).toEqual([
      'lax.yaml: key: ignored (not a setting at this level; expected one of: domain, descriptors)',
      'lax.yaml: descriptors[0].unit: ignored (not a setting at this level; expected one of: key, value, rate_limit, rate_limits, descriptors, ' +
        'shadow_mode, quota_mode, detailed_metric, count_denied_requests, reservations, reservation_hold_seconds, value_to_metric, share_threshold, metadata)',
      'lax.yaml: descriptors[0].rate_limit.shadow_mode: ignored (not a setting at this level; expected one of: unit, ' +
        'requests_per_unit, unlimited, name, replaces, unit_multiplier, algorithm, burst, sub_windows, strict, calendar, concurrency, lease, scope)',
      'lax.yaml: descriptors[0].rate_limit.metadata: ignored (not a setting at this level; expected one of: unit, ' +
        'requests_per_unit, unlimited, name, replaces, unit_multiplier, algorithm, burst, sub_windows, strict, calendar, concurrency, lease, scope)',
      'lax.yaml: descriptors[0].rate_limit.replaces[0].unit: ignored (not a setting at this level; expected one of: name)',
    ]);
  });
});

const SHARED = `
domain: shared
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: nested
    value: parent
    descriptors:
      - key: files
        value: nested/*
        share_threshold: true
        rate_limit: {unit: minute, requests_per_unit: 200}
  - key: files
    value: top/*
    share_threshold: true
    descriptors:
      - key: files
        value: nested/*
        share_threshold: true
        rate_limit: {unit: minute, requests_per_unit: 300}
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: method
        rate_limit: {unit: minute, requests_per_unit: 60}
  - key: service
    value: svc/*
    share_threshold: true
    descriptors:
      - key: endpoint
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 80}
  - key: path
    value: path/*
    share_threshold: true
    descriptors:
      - key: file
        value: file/*
        share_threshold: false
        descriptors:
          - key: type
            rate_limit: {unit: minute, requests_per_unit: 120}
  - key: file
    value: test1
    rate_limit: {unit: minute, requests_per_unit: 50}
  - key: file
    value: test*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: midpath
    value: /api*v1
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: multiroute
    value: svc*ep*rpc
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 50}
  - key: tenant
    value: t*prod
    share_threshold: true
    descriptors:
      - key: resource
        value: res*v2
        share_threshold: true
        rate_limit: {unit: minute, requests_per_unit: 60}
`;

const VALUE_TO_METRIC = `
domain: d
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 60}
  - key: k1
    descriptors:
      - key: k2
        value: Y
        descriptors:
          - key: k3
            value_to_metric: true
            rate_limit: {unit: second, requests_per_unit: 1}
  - key: plain
    descriptors:
      - key: k2
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit: {unit: minute, requests_per_unit: 100}
  - key: wild
    value: foo*
    descriptors:
      - key: other
        value_to_metric: true
        descriptors:
          - key: limit
            rate_limit: {unit: minute, requests_per_unit: 100}
  - key: detailed
    value_to_metric: true
    descriptors:
      - key: leaf
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 100}
`;

/** What a request's counter is keyed by and reported under, as `requestKeys` computes it (or the rule's own keys). */
function keysOf(config: RateLimitConfig, domain: string, pairs: [string, string][]): { counted: string[]; statKey: string } {
  const e = entries(...pairs);
  const rule = matchDescriptor(config, domain, e);
  if (rule === undefined) throw new Error(`no rule for ${JSON.stringify(pairs)}`);
  if (!rule.requestKeyed) return { counted: e.map((x) => x.value), statKey: rule.statKey };
  const keys = requestKeys(config, domain, e, rule);
  return { counted: keys.entries.map((x) => x.value), statKey: keys.statKey };
}

describe('share_threshold: values matching the pattern share one counter', () => {
  const config = load(SHARED);
  test.each<[string, [string, string][], string[], string]>([
    ['a trailing wildcard', [['files', 'files/a.txt']], ['files/*'], 'files_files/*'],
    [
      'a nested one under an exact value',
      [
        ['nested', 'parent'],
        ['files', 'nested/x'],
      ],
      ['parent', 'nested/*'],
      'nested_parent.files_nested/*',
    ],
    [
      'two levels with the same key',
      [
        ['files', 'top/1'],
        ['files', 'nested/2'],
      ],
      ['top/*', 'nested/*'],
      'files_top/*.files_nested/*',
    ],
    [
      'over value_to_metric on the same rule',
      [
        ['route', 'api/v1'],
        ['method', 'GET'],
      ],
      ['api/*', 'GET'],
      'route_api/*.method',
    ],
    [
      'with detailed_metric below it',
      [
        ['service', 'svc/a'],
        ['endpoint', 'get'],
      ],
      ['svc/*', 'get'],
      'service_svc/*.endpoint_get',
    ],
    [
      'only where set, a wildcard without it below',
      [
        ['path', 'path/p'],
        ['file', 'file/f'],
        ['type', 't'],
      ],
      ['path/*', 'file/f', 't'],
      'path_path/*.file_file/*.type',
    ],
    ['a middle wildcard', [['midpath', '/api/users/v1']], ['/api*v1'], 'midpath_/api*v1'],
    ['several stars', [['multiroute', 'svc-a-ep-b-rpc']], ['svc*ep*rpc'], 'multiroute_svc*ep*rpc'],
    [
      'middle wildcards at two levels',
      [
        ['tenant', 'team-prod'],
        ['resource', 'res-1-v2'],
      ],
      ['t*prod', 'res*v2'],
      'tenant_t*prod.resource_res*v2',
    ],
    ['not an exact value beside the wildcard', [['file', 'test1']], ['test1'], 'file_test1'],
    ['the wildcard beside an exact value', [['file', 'test2']], ['test*'], 'file_test*'],
  ])('%s', (_, pairs, counted, statKey) => {
    expect(keysOf(config, 'shared', pairs)).toEqual({ counted, statKey });
  });

  test('a config without share_threshold or value_to_metric keys nothing by the request', () => {
    const plain = load('domain: p\ndescriptors:\n  - key: w\n    value: a*\n    rate_limit: {unit: minute, requests_per_unit: 1}\n');
    expect(matchDescriptor(plain, 'p', entries(['w', 'abc']))!.requestKeyed).toBe(false);
  });
});

describe('value_to_metric: the request value names the level in metrics', () => {
  const config = load(VALUE_TO_METRIC);
  test.each<[string, [string, string][], string]>([
    [
      'on key-only levels',
      [
        ['route', 'draw'],
        ['http_method', 'GET'],
        ['subject_id', '123'],
      ],
      'route_draw.http_method_GET.subject_id',
    ],
    [
      'an empty value names the key alone',
      [
        ['route', ''],
        ['http_method', 'GET'],
        ['subject_id', '1'],
      ],
      'route.http_method_GET.subject_id',
    ],
    [
      'both empty',
      [
        ['route', ''],
        ['http_method', ''],
        ['subject_id', '1'],
      ],
      'route.http_method.subject_id',
    ],
    [
      'at one level only, an exact value above it',
      [
        ['k1', 'X'],
        ['k2', 'Y'],
        ['k3', 'Z'],
      ],
      'k1.k2_Y.k3_Z',
    ],
    [
      'on a wildcard level, the value instead of the pattern',
      [
        ['user', 'alice'],
        ['action', 'readfile'],
        ['resource', 'docs'],
      ],
      'user_alice.action_readfile.resource',
    ],
    [
      'elsewhere on the path, the wildcard keeps its pattern',
      [
        ['wild', 'foo1'],
        ['other', 'bar'],
        ['limit', 'x'],
      ],
      'wild_foo*.other_bar.limit',
    ],
    [
      'detailed_metric wins',
      [
        ['detailed', 'a'],
        ['leaf', 'b'],
      ],
      'detailed_a.leaf_b',
    ],
  ])('%s', (_, pairs, statKey) => {
    expect(keysOf(config, 'd', pairs).statKey).toBe(statKey);
  });

  test('without it, the configured names stay', () => {
    expect(
      keysOf(config, 'd', [
        ['plain', 'A'],
        ['k2', 'B'],
      ]).statKey,
    ).toBe('plain.k2');
  });

  test('it never changes the counter', () => {
    expect(
      keysOf(config, 'd', [
        ['route', 'draw'],
        ['http_method', 'GET'],
        ['subject_id', '123'],
      ]).counted,
    ).toEqual(['draw', 'GET', '123']);
  });
});
