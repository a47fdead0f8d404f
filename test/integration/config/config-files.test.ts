import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findConfigFiles, loadConfigPath } from '../../../src/config/files';

/** Which files of a config directory are read, as the reference reads its runtime directory: on real files. */

const opts = { defaultAlgorithm: 'sliding_window' } as const;

describe('which files are read', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'slidegate-files-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  const rules = (domain: string): string => `domain: ${domain}\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n`;

  test('ConfigMap keys of any name and subfolders at any depth; links to files followed, links to directories skipped with a warning', async () => {
    writeFileSync(join(dir, 'ratelimit'), rules('plain-name'));
    writeFileSync(join(dir, 'rules.conf'), rules('conf'));
    mkdirSync(join(dir, 'teams', 'payments'), { recursive: true });
    writeFileSync(join(dir, 'teams', 'payments', 'limits.yaml'), rules('deep'));
    const elsewhere = mkdtempSync(join(tmpdir(), 'slidegate-elsewhere-'));
    try {
      writeFileSync(join(elsewhere, 'linked.yaml'), rules('linked'));
      writeFileSync(join(elsewhere, 'not-followed.yaml'), rules('not-followed'));
      symlinkSync(join(elsewhere, 'linked.yaml'), join(dir, 'linked'));
      symlinkSync(elsewhere, join(dir, 'shared'));
      const config = await loadConfigPath(dir, opts);
      expect([...config.domains.keys()].sort()).toEqual(['conf', 'deep', 'linked', 'plain-name']);
      expect(config.warnings).toEqual([`${join(dir, 'shared')}: skipped: a link to a directory is not followed (link its files instead)`]);
    } finally {
      rmSync(elsewhere, { recursive: true, force: true });
    }
  });

  test('dot directories are skipped with RUNTIME_IGNOREDOTFILES, read without it; ..data never', async () => {
    mkdirSync(join(dir, '.git'));
    writeFileSync(join(dir, '.git', 'config'), rules('dot-dir'));
    mkdirSync(join(dir, '..2026_01_01_00_00_00.1'));
    writeFileSync(join(dir, '..2026_01_01_00_00_00.1', 'a.yaml'), rules('a'));
    symlinkSync('..2026_01_01_00_00_00.1', join(dir, '..data'));
    symlinkSync(join('..data', 'a.yaml'), join(dir, 'a.yaml'));
    expect((await findConfigFiles(dir, { ignoreDotFiles: true })).files).toEqual([join(dir, 'a.yaml')]);
    expect((await findConfigFiles(dir)).files).toEqual([join(dir, '.git', 'config'), join(dir, 'a.yaml')]);
  });

  test("beside the config directory, names starting with the directory's name and a dot are read too (the watched-root layout)", async () => {
    mkdirSync(join(dir, 'config'));
    writeFileSync(join(dir, 'config', 'a.yaml'), rules('a'));
    writeFileSync(join(dir, 'config.yaml'), rules('beside'));
    mkdirSync(join(dir, 'config.d'));
    writeFileSync(join(dir, 'config.d', 'more'), rules('more'));
    writeFileSync(join(dir, 'other.yaml'), rules('other'));
    const beside = { dir, prefix: 'config.' };
    expect((await findConfigFiles(join(dir, 'config'), { beside })).files).toEqual([
      join(dir, 'config', 'a.yaml'),
      join(dir, 'config.d', 'more'),
      join(dir, 'config.yaml'),
    ]);
    // Without its config directory, what lies beside it is the config; with neither, the path is an error.
    rmSync(join(dir, 'config'), { recursive: true });
    expect((await findConfigFiles(join(dir, 'config'), { beside })).files).toEqual([join(dir, 'config.d', 'more'), join(dir, 'config.yaml')]);
    await expect(findConfigFiles(join(dir, 'config'), { beside: { dir, prefix: 'nothing.' } })).rejects.toThrow('cannot read: ENOENT');
  });

  test('a directory with no file loads with a warning that every request is allowed', async () => {
    const config = await loadConfigPath(dir, opts);
    expect(config.domains.size).toBe(0);
    expect(config.warnings).toEqual(['no config file found: every request is allowed']);
  });

  test('a file that is not a config is an error naming it, not a silent skip', async () => {
    writeFileSync(join(dir, 'a.yaml'), rules('a'));
    writeFileSync(join(dir, 'NOTES'), 'remember to raise the limits\n');
    await expect(loadConfigPath(dir, opts)).rejects.toThrow(
      `${join(dir, 'NOTES')}: expected a mapping with "domain" and "descriptors", got "remember to raise the limits"`,
    );
  });
});
