import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describeConfig, ruleMatch } from '../../../src/config/describe';
import { ConfigError } from '../../../src/config/config-error';
import { loadConfigPath } from '../../../src/config/files';
import { overrideLimitParser } from '../../../src/config/override-limit';
import { parseConfigText, parseRateLimitValue, type ParseOptions } from '../../../src/config/rule-reader';
import { buildConfig } from '../../../src/config/rule-tree';
import { InvalidRequestError } from '../../../src/limiter/errors';
import { limitScope } from '../../../src/limiter/types';

/** `scope: global` (regions): read, implied lease, and every refusal naming the file and the path. */

const opts: ParseOptions = { defaultAlgorithm: 'sliding_window' };
const load = (rules: string, o: ParseOptions = opts) => parseConfigText('regions.yaml', `domain: d\ndescriptors:\n${rules}`, o);

/** The message of the ConfigError `run` throws (failing when it loads). */
function rejection(run: () => unknown): string {
  try {
    run();
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as Error).message;
  }
  throw new Error('expected the file to be rejected');
}

describe('scope: global', () => {
  test.each(['sliding_window', 'fixed_window', 'token_bucket', 'leaky_bucket'])('%s may be global, which leases it', (algorithm) => {
    const config = load(`  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1000, algorithm: ${algorithm}, scope: global}\n`);
    const limit = config.rules.get('k')?.keyOnly?.limit;
    expect(limit).toMatchObject({ algorithm, windowMs: 60_000, lease: true, scope: 'global' });
    expect(limitScope(limit!)).toBe('global');
    const built = buildConfig([config]);
    expect(ruleMatch(built, 'd', [{ key: 'k', value: 'x' }]).rule).toMatchObject({ algorithm, lease: true, scope: 'global' });
    expect(describeConfig(built).join('\n')).toContain(`algorithm=${algorithm}${algorithm.endsWith('bucket') ? ' burst=1000' : ''} lease=true scope=global,`);
  });

  test('regional is the default, spelled or not, and leaves a limit as it was', () => {
    const config = load(
      '  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 5, scope: regional}\n' +
        '  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 5}\n' +
        '  - key: c\n    rate_limit: {unit: second, requests_per_unit: 5, scope: regional, lease: true}\n',
    );
    const limitOf = (key: string) => config.rules.get(key)?.keyOnly?.limit;
    expect(limitOf('a')).toEqual(limitOf('b'));
    expect(limitOf('a')).not.toHaveProperty('scope');
    expect(limitOf('a')).not.toHaveProperty('lease');
    expect(limitScope(limitOf('a')!)).toBe('regional');
    // A regional lease keeps any window: the bound on windows is the regions'.
    expect(limitOf('c')).toMatchObject({ lease: true, windowMs: 1_000 });
    expect(limitOf('c')).not.toHaveProperty('scope');
  });

  test('takes lease: true beside it, any case, a calendar window and a place in rate_limits', () => {
    const config = load(
      '  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 5, scope: GLOBAL, lease: true}\n' +
        '  - key: b\n    rate_limit: {unit: month, requests_per_unit: 5, calendar: true, scope: global}\n' +
        '  - key: c\n    rate_limits:\n      - {unit: second, requests_per_unit: 10}\n      - {unit: day, requests_per_unit: 1000, scope: global}\n',
    );
    expect(config.rules.get('a')?.keyOnly?.limit).toMatchObject({ lease: true, scope: 'global' });
    expect(config.rules.get('b')?.keyOnly?.limit).toMatchObject({ calendar: true, algorithm: 'fixed_window', lease: true, scope: 'global' });
    const limits = config.rules.get('c')?.keyOnly?.limits?.map((l) => [l.limit.scope, l.limit.lease]);
    expect(limits).toEqual([
      [undefined, undefined],
      ['global', true],
    ]);
  });

  test('needs a window of ten REGION_SYNC_INTERVALs: exactly ten is taken', () => {
    expect(
      load('  - key: k\n    rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 5, scope: global}\n').rules.get('k')?.keyOnly?.limit,
    ).toMatchObject({
      windowMs: 10_000,
      scope: 'global',
    });
    const slow = { ...opts, regionSyncIntervalMs: 6_000 };
    expect(load('  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5, scope: global}\n', slow).rules.get('k')?.keyOnly?.limit?.scope).toBe(
      'global',
    );
    expect(rejection(() => load('  - key: k\n    rate_limit: {unit: second, unit_multiplier: 59, requests_per_unit: 5, scope: global}\n', slow))).toBe(
      'regions.yaml: descriptors[0].rate_limit.scope: global needs a window of at least 10 x REGION_SYNC_INTERVAL (60000 ms); 59 x second is 59000 ms',
    );
  });

  test.each([
    [
      'a window under ten syncs',
      '  - key: k\n    rate_limit: {unit: second, unit_multiplier: 9, requests_per_unit: 5, scope: global}\n',
      'descriptors[0].rate_limit.scope: global needs a window of at least 10 x REGION_SYNC_INTERVAL (10000 ms); 9 x second is 9000 ms',
    ],
    [
      'a one-second window',
      '  - key: k\n    descriptors:\n      - key: l\n        rate_limit: {unit: second, requests_per_unit: 5, scope: global}\n',
      'descriptors[0].descriptors[0].rate_limit.scope: global needs a window of at least 10 x REGION_SYNC_INTERVAL (10000 ms); 1 x second is 1000 ms',
    ],
    [
      'a calendar second',
      '  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5, calendar: true, scope: global}\n',
      'descriptors[0].rate_limit.scope: global needs a window of at least 10 x REGION_SYNC_INTERVAL (10000 ms); a calendar second is 1000 ms',
    ],
    [
      'a short window in rate_limits',
      '  - key: k\n    rate_limits:\n      - {unit: hour, requests_per_unit: 10, scope: global}\n      - {unit: second, requests_per_unit: 1, scope: global}\n',
      'descriptors[0].rate_limits[1].scope: global needs a window of at least 10 x REGION_SYNC_INTERVAL (10000 ms); 1 x second is 1000 ms',
    ],
    [
      'sliding_log',
      '  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding_log, scope: global}\n',
      'descriptors[0].rate_limit.scope: global limits are leased within each region: not available with algorithm sliding_log (leasable: sliding_window, fixed_window, token_bucket, leaky_bucket)',
    ],
    [
      'a strict sliding window',
      '  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5, strict: true, scope: global}\n',
      'descriptors[0].rate_limit.scope: global limits are leased within each region: not available with strict: true (each replica would keep its own oldest sub-window)',
    ],
    [
      'an unlimited rule',
      '  - key: k\n    rate_limit: {unlimited: true, scope: global}\n',
      'descriptors[0].rate_limit.scope: global is not allowed with unlimited: true (nothing to share)',
    ],
    [
      'lease: false',
      '  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5, lease: false, scope: global}\n',
      'descriptors[0].rate_limit.lease: false is not allowed with scope: global (a global limit is leased within each region)',
    ],
    [
      'an in-flight limit',
      '  - key: k\n    rate_limit: {concurrency: 5, scope: global}\n',
      'descriptors[0].rate_limit.scope: not allowed with concurrency (an in-flight limit has no window)',
    ],
    [
      'an unknown scope',
      '  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5, scope: world}\n',
      'descriptors[0].rate_limit.scope: unknown scope "world" (expected global or regional)',
    ],
    [
      'a list',
      '  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5, scope: [global]}\n',
      'descriptors[0].rate_limit.scope: expected a string, got a list',
    ],
  ])('%s is an error naming the file and the path', (_label, rules, message) => {
    expect(rejection(() => load(rules))).toBe(`regions.yaml: ${message}`);
  });

  test('is checked against the interval given to a directory load, as the server and `validate` give it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'slidegate-scope-'));
    try {
      writeFileSync(join(dir, 'd.yaml'), 'domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5, scope: global}\n');
      expect((await loadConfigPath(dir, opts)).domains.size).toBe(1);
      await expect(loadConfigPath(dir, { ...opts, regionSyncIntervalMs: 10_000 })).rejects.toThrow(
        'd.yaml: descriptors[0].rate_limit.scope: global needs a window of at least 10 x REGION_SYNC_INTERVAL (100000 ms); 1 x minute is 60000 ms',
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('reads the same in a runtime override, against the interval it is given', () => {
    expect(parseRateLimitValue('override', { unit: 'hour', requests_per_unit: 5, scope: 'global' }, opts).limit).toMatchObject({
      lease: true,
      scope: 'global',
    });
    const parse = overrideLimitParser('sliding_window', 500);
    expect(parse({ unit: 'second', unit_multiplier: 5, requests_per_unit: 5, scope: 'global' })).toMatchObject({ limit: { scope: 'global', windowMs: 5_000 } });
    expect(() => parse({ unit: 'second', requests_per_unit: 5, scope: 'global' })).toThrow(InvalidRequestError);
    expect(() => parse({ unit: 'second', requests_per_unit: 5, scope: 'global' })).toThrow(
      'rate_limit.scope: global needs a window of at least 10 x REGION_SYNC_INTERVAL (5000 ms); 1 x second is 1000 ms',
    );
  });
});
