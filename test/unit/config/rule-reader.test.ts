import { mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describeConfig, ruleMatch } from '../../../src/config/describe';
import { buildConfig, emptyConfig } from '../../../src/config/rule-tree';
import { configFromTexts, listConfigFiles, loadConfigPath } from '../../../src/config/files';
import { parseConfigText } from '../../../src/config/rule-reader';
import { ConfigError } from '../../../src/config/config-error';
import { type RuleNode } from '../../../src/limiter/rules';
import { counterKeyPrefix } from '../../../src/limiter/keys';

const FIXTURES = join(__dirname, '..', '..', 'fixtures', 'config');
const opts = { defaultAlgorithm: 'sliding_window' } as const;

function fixture(dir: string, name: string): string {
  return readFileSync(join(FIXTURES, dir, name), 'utf8');
}

function parseFixture(name: string) {
  return parseConfigText(name, fixture('valid', name), opts);
}

function rule(level: ReadonlyMap<string, { exact: ReadonlyMap<string, RuleNode>; keyOnly?: RuleNode }>, key: string, value?: string): RuleNode {
  const rules = level.get(key);
  const node = value === undefined ? rules?.keyOnly : rules?.exact.get(value);
  if (node === undefined) throw new Error(`no rule ${key}=${value}`);
  return node;
}

/** Every invalid fixture and the exact message it must produce. */
const INVALID: Record<string, string> = {
  'descriptor-not-mapping.yaml': 'descriptors[1]: expected a mapping, got "just a string"',
  'descriptors-not-list.yaml': 'descriptors: expected a list, got a mapping',
  'domain-not-string.yaml': 'domain: expected a string, got a list',
  'duplicate-key-only.yaml': 'descriptors[0].descriptors[1]: duplicate rule for key "path" without a value (first at descriptors[0].descriptors[0])',
  'duplicate-value.yaml': 'descriptors[2]: duplicate rule for key "tenant" and value "acme" (first at descriptors[0])',
  'duplicate-wildcard.yaml': 'descriptors[1]: duplicate rule for key "ip" and value "10.*" (first at descriptors[0])',
  'duplicate-yaml-key.yaml': 'line 4, column 5: invalid YAML: Map keys must be unique',
  'empty-domain.yaml': 'domain: must not be empty',
  'empty-key.yaml': 'descriptors[0].key: must not be empty',
  'empty.yaml': 'the file is empty (expected a mapping with "domain" and "descriptors")',
  'fractional-requests.yaml': 'descriptors[0].rate_limit.requests_per_unit: expected an integer from 0 to 4294967295, got 1.5',
  'missing-domain.yaml': 'domain: required',
  'missing-key.yaml': 'descriptors[0].descriptors[0].key: required',
  'missing-unit.yaml': 'descriptors[0].rate_limit.unit: required (or unlimited: true)',
  'negative-requests.yaml': 'descriptors[0].rate_limit.requests_per_unit: expected an integer from 0 to 4294967295, got -1',
  'not-a-mapping.yaml': 'expected a mapping with "domain" and "descriptors", got a list',
  'quoted-requests.yaml': 'descriptors[0].rate_limit.requests_per_unit: expected an integer from 0 to 4294967295, got "10"',
  'replaces-empty-name.yaml': 'descriptors[0].rate_limit.replaces[1].name: must not be empty',
  'replaces-not-list.yaml': 'descriptors[0].rate_limit.replaces: expected a list, got "other"',
  'replaces-self.yaml': 'descriptors[0].rate_limit.replaces[0].name: a rule cannot replace its own name "mine"',
  'shadow-mode-not-bool.yaml': 'descriptors[0].shadow_mode: expected true or false, got "yes"',
  'syntax-error.yaml': 'line 5, column 3: invalid YAML: Flow map in block collection must be sufficiently indented and end with a }',
  'too-many-requests.yaml': 'descriptors[0].rate_limit.requests_per_unit: expected an integer from 0 to 4294967295, got 4294967296',
  'unknown-algorithm.yaml':
    'descriptors[0].rate_limit.algorithm: unknown algorithm "gcra" (expected one of: sliding_window, sliding_log, fixed_window, token_bucket, leaky_bucket)',
  'unknown-rate-limit-key.yaml':
    'descriptors[0].descriptors[0].rate_limit.requests_per_second: unknown key ' +
    '(expected one of: unit, requests_per_unit, unlimited, name, replaces, unit_multiplier, algorithm, burst, sub_windows, strict, calendar, concurrency, lease, scope)',
  'unknown-root-key.yaml': 'descriptor: unknown key (expected one of: domain, descriptors)',
  'unknown-rule-key.yaml':
    'descriptors[0].limit: unknown key (expected one of: key, value, rate_limit, rate_limits, descriptors, shadow_mode, quota_mode, ' +
    'detailed_metric, count_denied_requests, reservations, reservation_hold_seconds, value_to_metric, share_threshold, metadata)',
  'unknown-unit-unknown.yaml': 'descriptors[0].rate_limit.unit: unknown unit "unknown"',
  'unknown-unit.yaml': 'descriptors[2].rate_limit.unit: unknown unit "sec"',
  'unlimited-with-multiplier.yaml': 'descriptors[0].rate_limit.unit_multiplier: not allowed with unlimited: true',
  'unlimited-with-unit.yaml': 'descriptors[0].rate_limit.unit: not allowed with unlimited: true',
  'value-not-string.yaml': 'descriptors[0].value: expected a string, got a mapping',
  'zero-multiplier.yaml': 'descriptors[0].rate_limit.unit_multiplier: expected an integer from 1 to 1000000, got 0',
  'window-too-long.yaml':
    'descriptors[0].rate_limit.unit_multiplier: 1000000 x year is a window of 31536000000000000 ms, over the longest allowed (3153600000000 ms, 100 years)',
  'bucket-refill-too-long.yaml':
    'descriptors[0].rate_limit.burst: 101 at 1 per 31536000000 ms takes 3185136000000 ms to refill, over the longest allowed (3153600000000 ms, 100 years)',
};

describe('invalid config files', () => {
  test('every invalid fixture has an expected message', () => {
    expect(readdirSync(join(FIXTURES, 'invalid')).sort()).toEqual(Object.keys(INVALID).sort());
  });

  test.each(Object.entries(INVALID))('%s is rejected with a message naming the file and the path', (name, message) => {
    let caught: unknown;
    try {
      parseConfigText(name, fixture('invalid', name), opts);
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(ConfigError);
    expect((caught as ConfigError).message).toBe(`${name}: ${message}`);
    expect((caught as ConfigError).file).toBe(name);
  });

  test('the error carries the path inside the file separately from the detail', () => {
    const err = (() => {
      try {
        parseConfigText('edge.yaml', fixture('invalid', 'unknown-unit.yaml'), opts);
      } catch (e) {
        return e as ConfigError;
      }
      throw new Error('expected a ConfigError');
    })();
    expect(err.message).toBe('edge.yaml: descriptors[2].rate_limit.unit: unknown unit "sec"');
    expect(err.path).toBe('descriptors[2].rate_limit.unit');
    expect(err.detail).toBe('unknown unit "sec"');
  });

  test('two files with the same domain are rejected naming the second file', async () => {
    const dir = join(FIXTURES, 'duplicate-domain');
    await expect(loadConfigPath(dir, opts)).rejects.toThrow(
      new ConfigError(
        join(dir, 'b.yaml'),
        'domain',
        `duplicate domain "edge" (already defined in ${join(dir, 'a.yaml')}; MERGE_DOMAIN_CONFIG=true merges them)`,
      ),
    );
    const a = parseConfigText('a.yaml', 'domain: edge\n', opts);
    const b = parseConfigText('b.yaml', 'domain: edge\n', opts);
    expect(() => buildConfig([a, b])).toThrow('b.yaml: domain: duplicate domain "edge" (already defined in a.yaml; MERGE_DOMAIN_CONFIG=true merges them)');
  });

  test('a missing path is a ConfigError naming it', async () => {
    const missing = join(FIXTURES, 'no-such-dir');
    await expect(loadConfigPath(missing, opts)).rejects.toBeInstanceOf(ConfigError);
    await expect(loadConfigPath(missing, opts)).rejects.toThrow(`${missing}: cannot read: ENOENT: no such file or directory`);
  });
});

describe('valid config files', () => {
  test('the spec example builds windows, algorithms, stat keys and counter key prefixes at load', () => {
    const d = parseFixture('edge.yaml');
    expect(d.domain).toBe('edge');
    expect(d.file).toBe('edge.yaml');

    const apiKey = rule(d.rules, 'api_key');
    expect(apiKey.value).toBeUndefined();
    expect(apiKey.limit).toEqual({
      requestsPerUnit: 5,
      unit: 'second',
      unitMultiplier: 10,
      windowMs: 10_000,
      algorithm: 'sliding_window',
      burst: 5,
      subWindows: 1,
      strict: false,
      name: undefined,
      unlimited: false,
    });
    expect(apiKey.statKey).toBe('api_key');
    expect(apiKey.keyPrefix).toBe(counterKeyPrefix('edge', 'sliding_window', 10_000));
    expect(apiKey.shadowMode).toBe(false);

    const remote = d.rules.get('remote_address')!;
    expect(remote.exact.size).toBe(0);
    expect(remote.wildcards).toHaveLength(1);
    expect(remote.wildcards[0].pattern).toBe('10.0.*');
    expect(remote.wildcards[0].test('10.0.3.4')).toBe(true);
    expect(remote.wildcards[0].test('10.1.3.4')).toBe(false);
    expect(remote.wildcards[0].node.statKey).toBe('remote_address_10.0.*');
    expect(remote.wildcards[0].node.limit?.windowMs).toBe(60_000);

    const tenant = rule(d.rules, 'tenant', 'acme');
    expect(tenant.limit).toBeUndefined();
    expect(tenant.keyPrefix).toBeUndefined();
    expect(tenant.shadowMode).toBe(true);
    const path = rule(tenant.children, 'path');
    expect(path.statKey).toBe('tenant_acme.path');
    expect(path.limit).toMatchObject({ name: 'acme_path', unit: 'hour', windowMs: 3_600_000, algorithm: 'sliding_log' });
    expect(path.keyPrefix).toBe(counterKeyPrefix('edge', 'sliding_log', 3_600_000));
    expect(path.shadowMode).toBe(true); // inherited from tenant=acme
  });

  test('the reference format loads unchanged, units case-insensitive and string values kept as written', () => {
    const d = parseFixture('reference-format.yaml');
    const marketing = rule(d.rules, 'message_type', 'marketing');
    expect(marketing.limit).toBeUndefined();
    expect(rule(marketing.children, 'to_number').limit).toMatchObject({ unit: 'day', requestsPerUnit: 5 });
    expect(rule(d.rules, 'to_number').limit).toMatchObject({ unit: 'day', requestsPerUnit: 100 });

    const health = rule(d.rules, 'generic_key', 'health');
    expect(health.limit).toMatchObject({ unlimited: true, requestsPerUnit: 0 });

    const proxy = rule(d.rules, 'source_cluster', 'proxy');
    const bank = rule(proxy.children, 'destination_cluster', 'bank');
    expect(bank.detailedMetric).toBe(true);
    expect(bank.replaces).toEqual(['global_limit']);
    expect(bank.limit?.name).toBe('bank_limit');
    expect(bank.statKey).toBe('source_cluster_proxy.destination_cluster_bank');
    expect(rule(proxy.children, 'destination_cluster').limit?.name).toBe('global_limit');

    expect(rule(d.rules, 'client_id', '010').limit).toMatchObject({ unit: 'week', requestsPerUnit: 0 });
    expect(rule(d.rules, 'flag', 'on').limit).toMatchObject({ unit: 'year', requestsPerUnit: 4294967295 });
  });

  test('YAML anchors and merge keys work, and the algorithm name is case-insensitive', () => {
    const d = parseFixture('anchors.yaml');
    expect(rule(d.rules, 'a').limit).toMatchObject({ unit: 'minute', requestsPerUnit: 60, algorithm: 'sliding_window' });
    expect(rule(d.rules, 'b').limit).toMatchObject({ unit: 'minute', requestsPerUnit: 30, algorithm: 'fixed_window' });
  });

  test('rules without an algorithm take the default one given by the caller', () => {
    const d = parseConfigText('x.yaml', fixture('valid', 'edge.yaml'), { defaultAlgorithm: 'fixed_window' });
    expect(rule(d.rules, 'api_key').limit?.algorithm).toBe('fixed_window');
    expect(rule(d.rules, 'api_key').keyPrefix).toBe(counterKeyPrefix('edge', 'fixed_window', 10_000));
    expect(rule(rule(d.rules, 'tenant', 'acme').children, 'path').limit?.algorithm).toBe('sliding_log');
  });

  test('a domain with no descriptors is valid and has no rules', () => {
    const d = parseConfigText('x.yaml', 'domain: quiet\n', opts);
    expect(d.rules.size).toBe(0);
  });

  test('the result is deeply frozen, maps included', () => {
    const config = configFromTexts([{ file: 'edge.yaml', text: fixture('valid', 'edge.yaml') }], opts);
    const d = config.domains.get('edge')!;
    const apiKey = rule(d.rules, 'api_key');
    const path = rule(rule(d.rules, 'tenant', 'acme').children, 'path');
    for (const o of [config, d, apiKey, apiKey.limit, path, path.replaces, d.rules.get('remote_address'), d.rules.get('remote_address')!.wildcards]) {
      expect(Object.isFrozen(o)).toBe(true);
    }
    expect(() => (config.domains as Map<string, unknown>).set('x', {})).toThrow(TypeError);
    expect(() => (d.rules as Map<string, unknown>).delete('api_key')).toThrow(TypeError);
    expect(() => (d.rules.get('tenant')!.exact as Map<string, unknown>).clear()).toThrow(TypeError);
    expect(() => {
      (apiKey.limit as { requestsPerUnit: number }).requestsPerUnit = 1_000;
    }).toThrow(TypeError);
    expect(d.rules.get('api_key')).toBeDefined();
  });

  test('the empty config has no domains and is frozen', () => {
    expect(emptyConfig().domains.size).toBe(0);
    expect(Object.isFrozen(emptyConfig())).toBe(true);
  });
});

describe('loading a path', () => {
  test('a directory loads every file under it, whatever its name, subfolders and dotfiles included unless ignored', async () => {
    const dir = join(FIXTURES, 'dir');
    const all = await loadConfigPath(dir, opts);
    expect([...all.domains.keys()].sort()).toEqual(['alpha', 'beta', 'delta', 'gamma', 'hidden', 'secret']);
    expect(all.domains.get('beta')!.file).toBe(join(dir, 'b.yml'));
    expect(all.domains.get('gamma')!.file).toBe(join(dir, 'tenants', 'ratelimit'));
    expect(all.domains.get('delta')!.file).toBe(join(dir, 'tenants', 'rules.conf'));
    expect(all.domains.get('secret')!.file).toBe(join(dir, 'tenants', '.private', 'config'));
    const visible = await loadConfigPath(dir, { ...opts, ignoreDotFiles: true });
    expect([...visible.domains.keys()].sort()).toEqual(['alpha', 'beta', 'delta', 'gamma']);
  });

  test('a single file path loads that file', async () => {
    const file = join(FIXTURES, 'valid', 'edge.yaml');
    const config = await loadConfigPath(file, opts);
    expect([...config.domains.keys()]).toEqual(['edge']);
    expect(config.domains.get('edge')!.file).toBe(file);
  });

  test('a Kubernetes ConfigMap layout loads through its symlinks and skips the ..data directories', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'slidegate-cm-'));
    try {
      mkdirSync(join(dir, '..2024_01_01_00_00_00.1'));
      writeFileSync(join(dir, '..2024_01_01_00_00_00.1', 'edge.yaml'), 'domain: edge\n');
      symlinkSync('..2024_01_01_00_00_00.1', join(dir, '..data'));
      symlinkSync(join('..data', 'edge.yaml'), join(dir, 'edge.yaml'));
      expect(await listConfigFiles(dir)).toEqual([join(dir, 'edge.yaml')]);
      expect([...(await loadConfigPath(dir, opts)).domains.keys()]).toEqual(['edge']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('a dangling link to a config file is an error rather than a silently missing domain', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'slidegate-dangling-'));
    try {
      symlinkSync(join(dir, 'gone.yaml'), join(dir, 'edge.yaml'));
      await expect(loadConfigPath(dir, opts)).rejects.toThrow(new ConfigError(join(dir, 'edge.yaml'), '', 'cannot read: ENOENT: no such file or directory'));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('describing a config', () => {
  test('each rule with a limit gets one line in the reference dump shape, with window and algorithm', () => {
    const config = configFromTexts(
      [
        { file: 'edge.yaml', text: fixture('valid', 'edge.yaml') },
        { file: 'ref.yaml', text: fixture('valid', 'reference-format.yaml') },
      ],
      opts,
    );
    expect(describeConfig(config)).toEqual([
      'edge.api_key: unit=SECOND requests_per_unit=5 unit_multiplier=10 algorithm=sliding_window, shadow_mode: false, quota_mode: false',
      'edge.remote_address_10.0.*: unit=MINUTE requests_per_unit=100 unit_multiplier=1 algorithm=sliding_window, shadow_mode: false, quota_mode: false',
      'edge.tenant_acme.path: unit=HOUR requests_per_unit=1000 unit_multiplier=1 algorithm=sliding_log name=acme_path, shadow_mode: true, quota_mode: false',
      'messaging.message_type_marketing.to_number: unit=DAY requests_per_unit=5 unit_multiplier=1 algorithm=sliding_window, shadow_mode: false, quota_mode: false',
      'messaging.to_number: unit=DAY requests_per_unit=100 unit_multiplier=1 algorithm=sliding_window, shadow_mode: false, quota_mode: false',
      'messaging.generic_key_health: unlimited, shadow_mode: false, quota_mode: false',
      'messaging.source_cluster_proxy.destination_cluster_bank: unit=SECOND requests_per_unit=500 unit_multiplier=1 algorithm=sliding_window name=bank_limit replaces=global_limit, shadow_mode: false, quota_mode: false',
      'messaging.source_cluster_proxy.destination_cluster: unit=SECOND requests_per_unit=10 unit_multiplier=1 algorithm=sliding_window name=global_limit, shadow_mode: false, quota_mode: false',
      'messaging.client_id_010: unit=WEEK requests_per_unit=0 unit_multiplier=1 algorithm=sliding_window, shadow_mode: false, quota_mode: false',
      'messaging.flag_on: unit=YEAR requests_per_unit=4294967295 unit_multiplier=1 algorithm=sliding_window, shadow_mode: false, quota_mode: false',
    ]);
  });
});

describe('algorithm options', () => {
  const parse = (rateLimit: string, defaultAlgorithm: 'sliding_window' | 'token_bucket' = 'sliding_window') =>
    parseConfigText('algos.yaml', `domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, ${rateLimit}}\n`, { defaultAlgorithm });
  const limitOf = (rateLimit: string, defaultAlgorithm?: 'sliding_window' | 'token_bucket') => rule(parse(rateLimit, defaultAlgorithm).rules, 'k').limit;
  const errorOf = (rateLimit: string): string => {
    try {
      parse(rateLimit);
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      return (err as ConfigError).message;
    }
    throw new Error('no error');
  };

  test('token and leaky buckets take a burst, by default requests_per_unit', () => {
    expect(limitOf('requests_per_unit: 5, algorithm: token_bucket, burst: 10')).toMatchObject({
      algorithm: 'token_bucket',
      burst: 10,
      subWindows: 1,
      strict: false,
    });
    expect(limitOf('requests_per_unit: 5, algorithm: leaky_bucket')).toMatchObject({ algorithm: 'leaky_bucket', burst: 5 });
    // The default algorithm decides which options a rule that names none may take.
    expect(limitOf('requests_per_unit: 5, burst: 7', 'token_bucket')).toMatchObject({ algorithm: 'token_bucket', burst: 7 });
  });

  test('the sliding window takes sub_windows that divide the window, and strict', () => {
    const node = rule(parse('requests_per_unit: 5, unit_multiplier: 10, sub_windows: 8, strict: true').rules, 'k');
    expect(node.limit).toMatchObject({ algorithm: 'sliding_window', subWindows: 8, strict: true, burst: 5 });
    // Another layout of the state is another counter; strictness only reads the same counts differently.
    expect(node.keyPrefix).toBe('d|sw10000/8');
    expect(rule(parse('requests_per_unit: 5, strict: true').rules, 'k').keyPrefix).toBe(counterKeyPrefix('d', 'sliding_window', 1_000));
  });

  test('each option is refused with an algorithm that does not read it, naming the file and path', () => {
    expect(errorOf('requests_per_unit: 5, burst: 10')).toBe(
      'algos.yaml: descriptors[0].rate_limit.burst: only with algorithm token_bucket or leaky_bucket (this rule uses sliding_window)',
    );
    expect(errorOf('requests_per_unit: 5, algorithm: token_bucket, strict: true')).toBe(
      'algos.yaml: descriptors[0].rate_limit.strict: only with algorithm sliding_window (this rule uses token_bucket)',
    );
    expect(errorOf('requests_per_unit: 5, algorithm: fixed_window, sub_windows: 2')).toBe(
      'algos.yaml: descriptors[0].rate_limit.sub_windows: only with algorithm sliding_window (this rule uses fixed_window)',
    );
  });

  test('bad values are refused, naming the file and path', () => {
    expect(errorOf('requests_per_unit: 5, sub_windows: 7')).toBe(
      'algos.yaml: descriptors[0].rate_limit.sub_windows: 7 does not divide the window of 1000 ms into whole milliseconds',
    );
    expect(errorOf('requests_per_unit: 5, sub_windows: 0')).toBe('algos.yaml: descriptors[0].rate_limit.sub_windows: expected an integer from 1 to 100, got 0');
    expect(errorOf('requests_per_unit: 5, algorithm: token_bucket, burst: 0')).toBe(
      'algos.yaml: descriptors[0].rate_limit.burst: expected an integer from 1 to 4294967295, got 0',
    );
    expect(errorOf('requests_per_unit: 5, strict: maybe')).toMatch(/^algos\.yaml: descriptors\[0\]\.rate_limit\.strict: expected true or false/);
  });

  test('/rlconfig names each option where it differs from the plain algorithm', () => {
    const config = configFromTexts(
      [
        {
          file: 'a.yaml',
          text: 'domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 10}}\n  - {key: b, rate_limit: {unit: second, requests_per_unit: 5, sub_windows: 4, strict: true}}\n',
        },
      ],
      opts,
    );
    expect(describeConfig(config)).toEqual([
      'd.a: unit=SECOND requests_per_unit=5 unit_multiplier=1 algorithm=token_bucket burst=10, shadow_mode: false, quota_mode: false',
      'd.b: unit=SECOND requests_per_unit=5 unit_multiplier=1 algorithm=sliding_window sub_windows=4 strict=true, shadow_mode: false, quota_mode: false',
    ]);
  });
});

describe('several limits on one rule (rate_limits)', () => {
  const text = (limits: string, extra = ''): string => `domain: d\ndescriptors:\n  - key: k\n${extra}    rate_limits:\n${limits}`;
  const errorOf = (yaml: string): string => {
    try {
      parseConfigText('budgets.yaml', yaml, opts);
    } catch (err) {
      return (err as Error).message;
    }
    throw new Error('expected a ConfigError');
  };
  const TWO = '      - {name: burst, unit: second, requests_per_unit: 10}\n      - {name: daily, unit: day, requests_per_unit: 250, algorithm: fixed_window}\n';

  test('each limit is read as rate_limit is, onto its own counter and stat key; the rule keeps the first as its limit', () => {
    const node = rule(parseConfigText('budgets.yaml', text(TWO), opts).rules, 'k');
    expect(node.limits!.map((l) => [l.limit.name, l.limit.requestsPerUnit, l.limit.algorithm, l.keyPrefix, l.statKey, l.statSuffix])).toEqual([
      ['burst', 10, 'sliding_window', counterKeyPrefix('d', 'sliding_window', 1_000), 'k.burst', '.burst'],
      ['daily', 250, 'fixed_window', counterKeyPrefix('d', 'fixed_window', 86_400_000), 'k.daily', '.daily'],
    ]);
    expect(node.limit).toBe(node.limits![0].limit);
    expect(node.keyPrefix).toBe(node.limits![0].keyPrefix);
    expect(Object.isFrozen(node.limits)).toBe(true);
    expect(Object.isFrozen(node.limits![1])).toBe(true);
  });

  test('an unnamed limit is named in metrics by its position; shadow mode and count_denied_requests come from the rule', () => {
    const node = rule(
      parseConfigText(
        'budgets.yaml',
        text(
          '      - {unit: second, requests_per_unit: 1}\n      - {unit: hour, requests_per_unit: 9}\n',
          '    shadow_mode: true\n    count_denied_requests: true\n',
        ),
        opts,
      ).rules,
      'k',
    );
    expect(node.limits!.map((l) => [l.statKey, l.shadowMode])).toEqual([
      ['k.0', true],
      ['k.1', true],
    ]);
    expect(node.countDeniedRequests).toBe(true);
  });

  test('the rule replaces what any of its limits replaces', () => {
    const node = rule(
      parseConfigText(
        'budgets.yaml',
        text(
          '      - {unit: second, requests_per_unit: 1, replaces: [{name: a}]}\n      - {unit: hour, requests_per_unit: 9, replaces: [{name: b}, {name: a}]}\n',
        ),
        opts,
      ).rules,
      'k',
    );
    expect(node.replaces).toEqual(['a', 'b']);
    expect(node.limits!.map((l) => l.replaces)).toEqual([['a'], ['b', 'a']]);
  });

  test.each([
    [
      'both keys at one rule',
      text(TWO, '    rate_limit: {unit: second, requests_per_unit: 1}\n'),
      'descriptors[0].rate_limits: not allowed with rate_limit (a rule has one or the other)',
    ],
    [
      'an empty list',
      text('      []\n').replace('rate_limits:\n      []', 'rate_limits: []'),
      'descriptors[0].rate_limits: expected a list of 1 to 10 rate_limit mappings, got 0',
    ],
    [
      'no list at all',
      'domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n',
      'descriptors[0].rate_limits: expected a list of 1 to 10 rate_limit mappings, got nothing',
    ],
    [
      'a mapping',
      'domain: d\ndescriptors:\n  - key: k\n    rate_limits: {unit: second}\n',
      'descriptors[0].rate_limits: expected a list of 1 to 10 rate_limit mappings, got a mapping',
    ],
    [
      'eleven limits',
      text(Array.from({ length: 11 }, (_, i) => `      - {unit: second, unit_multiplier: ${i + 1}, requests_per_unit: 1}\n`).join('')),
      'descriptors[0].rate_limits: expected a list of 1 to 10 rate_limit mappings, got 11',
    ],
    [
      'an empty item',
      text('      - {unit: second, requests_per_unit: 1}\n      -\n'),
      'descriptors[0].rate_limits[1]: expected a rate_limit mapping, got nothing',
    ],
    [
      'unlimited in the list',
      text('      - {unit: second, requests_per_unit: 1}\n      - {unlimited: true}\n'),
      'descriptors[0].rate_limits[1].unlimited: not allowed in rate_limits (every limit of the list counts)',
    ],
    [
      'a name twice',
      text('      - {name: x, unit: second, requests_per_unit: 1}\n      - {name: x, unit: hour, requests_per_unit: 5}\n'),
      'descriptors[0].rate_limits[1].name: duplicate name "x" in this list (first at descriptors[0].rate_limits[0])',
    ],
    [
      'two limits on one counter',
      text('      - {unit: minute, requests_per_unit: 1}\n      - {unit: second, unit_multiplier: 60, requests_per_unit: 5}\n'),
      'descriptors[0].rate_limits[1]: counts on the same counter as descriptors[0].rate_limits[0] (sliding_window over 60000 ms): give one of them another window or algorithm',
    ],
    [
      'a limit replacing its neighbour',
      text('      - {name: x, unit: second, requests_per_unit: 1}\n      - {unit: hour, requests_per_unit: 5, replaces: [{name: y}, {name: x}]}\n'),
      'descriptors[0].rate_limits[1].replaces[1].name: "x" is a limit of the same list',
    ],
    [
      'a bad item, by the rate_limit reader',
      text('      - {unit: second, requests_per_unit: 1}\n      - {unit: sec}\n'),
      'descriptors[0].rate_limits[1].unit: unknown unit "sec"',
    ],
    [
      'an unknown key in an item',
      text('      - {unit: second, limit: 1}\n'),
      'descriptors[0].rate_limits[0].limit: unknown key (expected one of: unit, requests_per_unit, unlimited, name, replaces, unit_multiplier, algorithm, burst, sub_windows, strict, calendar, concurrency, lease, scope)',
    ],
  ])('%s is an error naming the file and the path', (_, yaml, message) => {
    expect(errorOf(yaml)).toBe(`budgets.yaml: ${message}`);
  });

  test('/rlconfig has a line per limit, named as its metrics are; /rlmatch shows every limit', () => {
    const config = configFromTexts([{ file: 'budgets.yaml', text: text(TWO, '    count_denied_requests: true\n') }], opts);
    expect(describeConfig(config)).toEqual([
      'd.k.burst: unit=SECOND requests_per_unit=10 unit_multiplier=1 algorithm=sliding_window name=burst count_denied_requests=true, shadow_mode: false, quota_mode: false',
      'd.k.daily: unit=DAY requests_per_unit=250 unit_multiplier=1 algorithm=fixed_window name=daily count_denied_requests=true, shadow_mode: false, quota_mode: false',
    ]);
    const burst = {
      requestsPerUnit: 10,
      unit: 'second',
      unitMultiplier: 1,
      windowMs: 1_000,
      algorithm: 'sliding_window',
      calendar: false,
      name: 'burst',
      unlimited: false,
    };
    const daily = {
      requestsPerUnit: 250,
      unit: 'day',
      unitMultiplier: 1,
      windowMs: 86_400_000,
      algorithm: 'fixed_window',
      calendar: false,
      name: 'daily',
      unlimited: false,
    };
    expect(ruleMatch(config, 'd', [{ key: 'k', value: 'v' }]).rule).toEqual({
      ...burst,
      shadowMode: false,
      countDeniedRequests: true,
      limits: [
        { ...burst, statKey: 'd.k.burst' },
        { ...daily, statKey: 'd.k.daily' },
      ],
    });
  });
});

/** The message of the ConfigError `load` throws (failing when it loads). */
function rejection(load: () => unknown): string {
  try {
    load();
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as Error).message;
  }
  throw new Error('expected the file to be rejected');
}

describe('in-flight limits (concurrency)', () => {
  const load = (rules: string): ReturnType<typeof parseConfigText> => parseConfigText('flight.yaml', `domain: d\ndescriptors:\n${rules}`, opts);
  const errorOf = (rules: string): string => rejection(() => load(rules));

  test('a rule of `concurrency: N` alone, or among the limits of rate_limits', () => {
    const config = load(
      '  - key: tenant\n    rate_limit: {name: in_flight, concurrency: 5}\n' +
        '  - key: both\n    rate_limits:\n      - {concurrency: 2}\n      - {unit: hour, requests_per_unit: 300}\n',
    );
    const tenant = config.rules.get('tenant')!.keyOnly!;
    expect(tenant.limit).toMatchObject({ concurrency: 5, requestsPerUnit: 5, name: 'in_flight', unlimited: false });
    expect(tenant.keyPrefix).toBe('d|cc');
    const both = config.rules.get('both')!.keyOnly!;
    expect(both.limits!.map((l) => [l.limit.concurrency, l.keyPrefix])).toEqual([
      [2, 'd|cc'],
      [undefined, counterKeyPrefix('d', 'sliding_window', 3_600_000)],
    ]);
    const config2 = buildConfig([config]);
    expect(describeConfig(config2).filter((l) => l.startsWith('d.tenant') || l.startsWith('d.both'))).toEqual([
      'd.tenant: concurrency=5 name=in_flight reservations=true, shadow_mode: false, quota_mode: false',
      'd.both.0: concurrency=2 reservations=true, shadow_mode: false, quota_mode: false',
      'd.both.1: unit=HOUR requests_per_unit=300 unit_multiplier=1 algorithm=sliding_window reservations=true, shadow_mode: false, quota_mode: false',
    ]);
    expect(ruleMatch(config2, 'd', [{ key: 'tenant', value: 'acme' }]).rule).toMatchObject({ concurrency: 5, name: 'in_flight' });
    expect(ruleMatch(config2, 'd', [{ key: 'both', value: 'x' }]).rule?.limits?.map((l) => l.concurrency)).toEqual([2, undefined]);
  });

  test.each([
    [
      'a window key beside it',
      '  - key: k\n    rate_limit: {concurrency: 5, unit: second}\n',
      'descriptors[0].rate_limit.unit: not allowed with concurrency (an in-flight limit has no window)',
    ],
    [
      'an algorithm beside it',
      '  - key: k\n    rate_limit: {concurrency: 5, algorithm: token_bucket}\n',
      'descriptors[0].rate_limit.algorithm: not allowed with concurrency (an in-flight limit has no window)',
    ],
    ['zero', '  - key: k\n    rate_limit: {concurrency: 0}\n', 'descriptors[0].rate_limit.concurrency: expected an integer from 1 to 1000000, got 0'],
    [
      'two in one list',
      '  - key: k\n    rate_limits:\n      - {concurrency: 1}\n      - {concurrency: 2}\n',
      'descriptors[0].rate_limits[1].concurrency: a second in-flight limit in this list (first at descriptors[0].rate_limits[0])',
    ],
  ])('%s is an error naming the file and the path', (_label, rules, message) => {
    expect(errorOf(rules)).toBe(`flight.yaml: ${message}`);
  });
});

describe('reservations (reservations: true, reservation_hold_seconds)', () => {
  const load = (rules: string): ReturnType<typeof parseConfigText> => parseConfigText('holds.yaml', `domain: d\ndescriptors:\n${rules}`, opts);

  test('a rule opts in, with a hold time of its own; a concurrency limit opts in by itself; no other rule takes them', () => {
    const config = buildConfig([
      load(
        '  - key: tokens\n    reservations: true\n    reservation_hold_seconds: 300\n    rate_limit: {unit: minute, requests_per_unit: 1000}\n' +
          '  - key: tenant\n    rate_limit: {concurrency: 5}\n' +
          '  - key: plain\n    rate_limit: {unit: minute, requests_per_unit: 10}\n',
      ),
    ]);
    const rule = (key: string) => config.domains.get('d')!.rules.get(key)!.keyOnly!;
    expect([rule('tokens').reservations, rule('tokens').reservationHoldSeconds]).toEqual([true, 300]);
    expect([rule('tenant').reservations, rule('tenant').reservationHoldSeconds]).toEqual([true, 0]);
    expect([rule('plain').reservations, rule('plain').reservationHoldSeconds]).toEqual([false, 0]);
    expect(describeConfig(config)).toContain(
      'd.tokens: unit=MINUTE requests_per_unit=1000 unit_multiplier=1 algorithm=sliding_window reservations=true reservation_hold_seconds=300, shadow_mode: false, quota_mode: false',
    );
    expect(ruleMatch(config, 'd', [{ key: 'tokens', value: 'a' }]).rule).toMatchObject({ reservations: true, reservationHoldSeconds: 300 });
    expect(ruleMatch(config, 'd', [{ key: 'plain', value: 'a' }]).rule).not.toHaveProperty('reservations');
  });

  test.each([
    ['on a rule without a limit', '  - key: k\n    reservations: true\n', 'descriptors[0].reservations: only on a rule with a limit to reserve against'],
    [
      'on an unlimited rule',
      '  - key: k\n    reservations: true\n    rate_limit: {unlimited: true}\n',
      'descriptors[0].reservations: only on a rule with a limit to reserve against',
    ],
    [
      'a hold time without reservations',
      '  - key: k\n    reservation_hold_seconds: 60\n    rate_limit: {unit: minute, requests_per_unit: 10}\n',
      'descriptors[0].reservation_hold_seconds: only on a rule that takes reservations',
    ],
    [
      'a hold time past 7 days',
      '  - key: k\n    reservations: true\n    reservation_hold_seconds: 604801\n    rate_limit: {unit: minute, requests_per_unit: 10}\n',
      'descriptors[0].reservation_hold_seconds: expected an integer from 1 to 604800, got 604801',
    ],
  ])('%s is an error naming the file and the path', (_label, rules, message) => {
    expect(rejection(() => load(rules))).toContain(`holds.yaml: ${message}`);
  });
});

describe('leased limits (lease: true)', () => {
  const load = (rules: string): ReturnType<typeof parseConfigText> => parseConfigText('lease.yaml', `domain: d\ndescriptors:\n${rules}`, opts);
  const errorOf = (rules: string): string => rejection(() => load(rules));

  test.each(['sliding_window', 'fixed_window', 'token_bucket', 'leaky_bucket'])('%s may be leased, alone or in rate_limits', (algorithm) => {
    const config = load(
      `  - key: k\n    rate_limit: {unit: second, requests_per_unit: 100, algorithm: ${algorithm}, lease: true}\n` +
        `  - key: l\n    rate_limits:\n      - {unit: second, requests_per_unit: 10, algorithm: ${algorithm}, lease: true}\n      - {unit: day, requests_per_unit: 1000}\n`,
    );
    const built = buildConfig([config]);
    expect(ruleMatch(built, 'd', [{ key: 'k', value: 'x' }]).rule).toMatchObject({ algorithm, lease: true });
    expect(ruleMatch(built, 'd', [{ key: 'l', value: 'x' }]).rule?.limits?.map((x) => x.lease)).toEqual([true, undefined]);
    expect(describeConfig(built)).toContain(
      `d.k: unit=SECOND requests_per_unit=100 unit_multiplier=1 algorithm=${algorithm}${algorithm.endsWith('bucket') ? ' burst=100' : ''} lease=true, shadow_mode: false, quota_mode: false`,
    );
  });

  test.each([
    [
      'sliding_log',
      '  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5, algorithm: sliding_log, lease: true}\n',
      'descriptors[0].rate_limit.lease: not available with algorithm sliding_log (leasable: sliding_window, fixed_window, token_bucket, leaky_bucket)',
    ],
    [
      'a strict sliding window',
      '  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5, strict: true, lease: true}\n',
      'descriptors[0].rate_limit.lease: not available with strict: true (each replica would keep its own oldest sub-window)',
    ],
    [
      'an unlimited rule',
      '  - key: k\n    rate_limit: {unlimited: true, lease: true}\n',
      'descriptors[0].rate_limit.lease: not allowed with unlimited: true (nothing to lease)',
    ],
    [
      'an in-flight limit',
      '  - key: k\n    rate_limit: {concurrency: 5, lease: true}\n',
      'descriptors[0].rate_limit.lease: not allowed with concurrency (an in-flight limit has no window)',
    ],
    [
      'not a boolean',
      '  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5, lease: yes please}\n',
      'descriptors[0].rate_limit.lease: expected true or false',
    ],
  ])('%s is an error naming the file and the path', (_label, rules, message) => {
    expect(errorOf(rules)).toContain(`lease.yaml: ${message}`);
  });
});
