import { mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigSource } from '../../../src/config/source';
import { ConfigError } from '../../../src/config/config-error';
import { type RateLimitConfig } from '../../../src/limiter/rules';

/** ConfigSource on real files: a temporary directory written, renamed and linked under it. */

function limitFile(domain: string, requestsPerUnit: number): string {
  return `domain: ${domain}\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: ${requestsPerUnit}}\n`;
}

function limitOf(config: RateLimitConfig | undefined, domain: string): number | undefined {
  return config?.domains.get(domain)?.rules.get('k')?.keyOnly?.limit?.requestsPerUnit;
}

/** Polls until `check` holds; fails after `timeoutMs`. */
async function eventually(check: () => boolean, timeoutMs = 3_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('reloading the config', () => {
  let dir: string;
  let source: ConfigSource | undefined;
  let loads: { config: RateLimitConfig; files: readonly string[] }[];
  let errors: Error[];

  function open(path: string, extra: { watchRoot?: boolean | string } = {}): ConfigSource {
    source = new ConfigSource({
      path,
      defaultAlgorithm: 'sliding_window',
      debounceMs: 50,
      pollMs: 200,
      onLoad: (config, files) => loads.push({ config, files }),
      onError: (err) => errors.push(err),
      ...extra,
    });
    return source;
  }

  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'slidegate-source-'));
    loads = [];
    errors = [];
  });

  afterEach(() => {
    source?.close();
    source = undefined;
    rmSync(dir, { recursive: true, force: true });
  });

  test('the first load applies the config and reports it', async () => {
    writeFileSync(join(dir, 'edge.yaml'), limitFile('edge', 5));
    const s = open(dir);
    expect(s.current()).toBeUndefined();
    expect(s.generation).toBe(0);
    const config = await s.load();
    expect(limitOf(config, 'edge')).toBe(5);
    expect(s.current()).toBe(config);
    expect(s.generation).toBe(1);
    expect(loads).toEqual([{ config, files: [join(dir, 'edge.yaml')] }]);
  });

  test('a first load that fails throws a ConfigError naming the file and path, and applies nothing', async () => {
    writeFileSync(join(dir, 'edge.yaml'), 'domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: sec}\n');
    const s = open(dir);
    await expect(s.load()).rejects.toThrow(new ConfigError(join(dir, 'edge.yaml'), 'descriptors[0].rate_limit.unit', 'unknown unit "sec"'));
    expect(s.current()).toBeUndefined();
    expect(s.generation).toBe(0);
  });

  test('rewriting a file reloads it', async () => {
    const file = join(dir, 'edge.yaml');
    writeFileSync(file, limitFile('edge', 5));
    const s = open(dir);
    await s.load();
    s.start();
    writeFileSync(file, limitFile('edge', 7));
    await eventually(() => limitOf(s.current(), 'edge') === 7);
    expect(s.generation).toBe(2);
    expect(errors).toEqual([]);
  });

  test('a single-file path reloads when that file is rewritten', async () => {
    const file = join(dir, 'edge.yaml');
    writeFileSync(file, limitFile('edge', 5));
    const s = open(file);
    await s.load();
    s.start();
    writeFileSync(file, limitFile('edge', 8));
    await eventually(() => limitOf(s.current(), 'edge') === 8);
  });

  test('adding a file loads its domain and removing it drops the domain', async () => {
    writeFileSync(join(dir, 'edge.yaml'), limitFile('edge', 5));
    const s = open(dir);
    await s.load();
    s.start();
    writeFileSync(join(dir, 'internal.yml'), limitFile('internal', 3));
    await eventually(() => limitOf(s.current(), 'internal') === 3);
    expect(limitOf(s.current(), 'edge')).toBe(5);
    expect(loads.at(-1)!.files).toEqual([join(dir, 'edge.yaml'), join(dir, 'internal.yml')]);
    unlinkSync(join(dir, 'internal.yml'));
    await eventually(() => s.current()?.domains.has('internal') === false);
  });

  test('a file rewritten in a subfolder, whatever its name, is reloaded', async () => {
    mkdirSync(join(dir, 'teams'));
    writeFileSync(join(dir, 'teams', 'ratelimit'), limitFile('teams', 5));
    const s = open(dir);
    await s.load();
    s.start();
    writeFileSync(join(dir, 'teams', 'ratelimit'), limitFile('teams', 8));
    await eventually(() => limitOf(s.current(), 'teams') === 8);
    expect(loads.at(-1)!.files).toEqual([join(dir, 'teams', 'ratelimit')]);
  });

  test('a Kubernetes ConfigMap update, an atomic swap of the ..data symlink, is applied', async () => {
    // The layout kubelet writes: timestamped directory, ..data pointing at it, files linked through ..data.
    mkdirSync(join(dir, '..2024_01_01_00_00_00.1'));
    writeFileSync(join(dir, '..2024_01_01_00_00_00.1', 'edge.yaml'), limitFile('edge', 5));
    symlinkSync('..2024_01_01_00_00_00.1', join(dir, '..data'));
    symlinkSync(join('..data', 'edge.yaml'), join(dir, 'edge.yaml'));
    const s = open(dir);
    await s.load();
    s.start();

    mkdirSync(join(dir, '..2024_01_01_00_01_00.2'));
    writeFileSync(join(dir, '..2024_01_01_00_01_00.2', 'edge.yaml'), limitFile('edge', 9));
    symlinkSync('..2024_01_01_00_01_00.2', join(dir, '..data_tmp'));
    renameSync(join(dir, '..data_tmp'), join(dir, '..data'));
    rmSync(join(dir, '..2024_01_01_00_00_00.1'), { recursive: true });

    await eventually(() => limitOf(s.current(), 'edge') === 9);
    expect(errors).toEqual([]);
  });

  test('a swap of the whole config directory under a watched root is applied', async () => {
    mkdirSync(join(dir, 'v1'));
    writeFileSync(join(dir, 'v1', 'edge.yaml'), limitFile('edge', 5));
    symlinkSync('v1', join(dir, 'config'));
    const s = open(join(dir, 'config'), { watchRoot: dir });
    await s.load();
    s.start();

    mkdirSync(join(dir, 'v2'));
    writeFileSync(join(dir, 'v2', 'edge.yaml'), limitFile('edge', 6));
    symlinkSync('v2', join(dir, 'config_tmp'));
    renameSync(join(dir, 'config_tmp'), join(dir, 'config'));

    await eventually(() => limitOf(s.current(), 'edge') === 6);
  });

  test('an invalid file keeps the previous config and reports an error naming the file and path', async () => {
    const file = join(dir, 'edge.yaml');
    writeFileSync(file, limitFile('edge', 5));
    const s = open(dir);
    const first = await s.load();
    s.start();

    writeFileSync(file, 'domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, bucket_size: 2}\n');
    await eventually(() => errors.length > 0);
    expect(errors[0]).toBeInstanceOf(ConfigError);
    expect(errors[0].message).toBe(
      `${file}: descriptors[0].rate_limit.bucket_size: unknown key ` +
        '(expected one of: unit, requests_per_unit, unlimited, name, replaces, unit_multiplier, algorithm, burst, sub_windows, strict, calendar, concurrency, lease, scope)',
    );
    expect(s.current()).toBe(first);
    expect(s.generation).toBe(1);

    // Fixing the file recovers; the broken version was reported once, not on every poll.
    writeFileSync(file, limitFile('edge', 4));
    await eventually(() => limitOf(s.current(), 'edge') === 4);
    expect(errors).toHaveLength(1);
    expect(s.generation).toBe(2);
  });

  test('a duplicate domain across files keeps the previous config', async () => {
    writeFileSync(join(dir, 'a.yaml'), limitFile('edge', 5));
    const s = open(dir);
    const first = await s.load();
    s.start();
    writeFileSync(join(dir, 'b.yaml'), limitFile('edge', 6));
    await eventually(() => errors.length > 0);
    expect(errors[0].message).toBe(
      `${join(dir, 'b.yaml')}: domain: duplicate domain "edge" (already defined in ${join(dir, 'a.yaml')}; MERGE_DOMAIN_CONFIG=true merges them)`,
    );
    expect(s.current()).toBe(first);
  });

  test('touching a file without changing it does not count as a new config', async () => {
    const file = join(dir, 'edge.yaml');
    writeFileSync(file, limitFile('edge', 5));
    const s = open(dir);
    await s.load();
    s.start();
    writeFileSync(file, limitFile('edge', 5));
    writeFileSync(join(dir, 'notes.txt'), 'not a config file');
    await new Promise((r) => setTimeout(r, 600)); // several debounce and poll periods
    expect(s.generation).toBe(1);
    expect(loads).toHaveLength(1);
  });

  test('an empty directory is an empty config, and a file added later is applied', async () => {
    const s = open(dir);
    expect((await s.load()).domains.size).toBe(0);
    s.start();
    writeFileSync(join(dir, 'edge.yaml'), limitFile('edge', 2));
    await eventually(() => limitOf(s.current(), 'edge') === 2);
  });

  test('watching after a failed first load applies the first valid config', async () => {
    const file = join(dir, 'edge.yaml');
    writeFileSync(file, 'domain: ""\n');
    const s = open(dir);
    await expect(s.load()).rejects.toThrow(`${file}: domain: must not be empty`);
    s.start();
    writeFileSync(file, limitFile('edge', 3));
    await eventually(() => limitOf(s.current(), 'edge') === 3);
    expect(s.generation).toBe(1);
  });

  test('close stops reloading', async () => {
    const file = join(dir, 'edge.yaml');
    writeFileSync(file, limitFile('edge', 5));
    const s = open(dir);
    await s.load();
    s.start();
    s.close();
    writeFileSync(file, limitFile('edge', 6));
    await new Promise((r) => setTimeout(r, 500));
    expect(limitOf(s.current(), 'edge')).toBe(5);
  });
});
