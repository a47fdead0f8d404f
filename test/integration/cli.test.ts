import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { runCli } from '../../src/cli';
import type { CliIo } from '../../src/cli/io';
import { runValidate } from '../../src/cli/validate';
import { startTestService, type TestService } from '../helpers/service';

/** The `slidegate` command: validate against files on disk, client against a live server. */

function capture(): CliIo & { stdout: string[]; stderr: string[] } {
  const stdout: string[] = [];
  const stderr: string[] = [];
  return { stdout, stderr, out: (l) => stdout.push(l), err: (l) => stderr.push(l) };
}

const GOOD = `
domain: cli
descriptors:
  - key: user
    rate_limit: {name: per_user, unit: hour, requests_per_unit: 2}
`;

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'slidegate-cli-'));
  fs.mkdirSync(path.join(dir, 'good'));
  fs.writeFileSync(path.join(dir, 'good', 'cli.yaml'), GOOD);
  fs.mkdirSync(path.join(dir, 'bad'));
  fs.writeFileSync(path.join(dir, 'bad', 'broken.yaml'), 'domain: cli\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 2}\n');
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('slidegate validate', () => {
  it('describes a valid directory and exits 0', async () => {
    const io = capture();
    expect(await runCli(['validate', path.join(dir, 'good')], io)).toBe(0);
    expect(io.stderr).toEqual([]);
    expect(io.stdout.join('\n')).toContain('cli');
    expect(io.stdout[io.stdout.length - 1]).toMatch(/OK \(1 domain\)/);
  });

  it('accepts a single file', async () => {
    const io = capture();
    expect(await runCli(['validate', path.join(dir, 'good', 'cli.yaml')], io)).toBe(0);
  });

  it('names the file and the path of a bad value and exits 1', async () => {
    const io = capture();
    expect(await runCli(['validate', path.join(dir, 'bad')], io)).toBe(1);
    expect(io.stdout).toEqual([]);
    expect(io.stderr).toHaveLength(1);
    expect(io.stderr[0]).toContain('broken.yaml');
    expect(io.stderr[0]).toContain('fortnight');
  });

  it('accepts what the reference loader accepts: any file name, subfolders, its rule keys, split domains with --merge-domain-config', async () => {
    const ref = path.join(dir, 'reference');
    fs.mkdirSync(path.join(ref, 'teams'), { recursive: true });
    fs.writeFileSync(
      path.join(ref, 'ratelimit'),
      'domain: ref\ndescriptors:\n  - key: path\n    value: files/*\n    share_threshold: true\n    quota_mode: true\n' +
        '    metadata: {team: a}\n    rate_limit: {unit: minute, requests_per_unit: 5, shadow_mode: true}\n',
    );
    fs.writeFileSync(path.join(ref, 'teams', 'more.conf'), 'domain: ref\ndescriptors:\n  - key: user\n    value_to_metric: true\n    rate_limit: {unit: hour, requests_per_unit: 1}\n');
    const split = capture();
    expect(await runValidate([ref], split, {})).toBe(1);
    expect(split.stderr.join('\n')).toContain('duplicate domain "ref"');
    const io = capture();
    expect(await runValidate(['--merge-domain-config', ref], io, {})).toBe(0);
    expect(io.stdout).toContain('ref.path_files/*: unit=MINUTE requests_per_unit=5 unit_multiplier=1 algorithm=sliding_window, shadow_mode: false, quota_mode: true');
    expect(io.stdout[io.stdout.length - 1]).toMatch(/OK \(1 domain\)/);
    expect(io.stderr).toEqual([`warning: ${path.join(ref, 'ratelimit')}: descriptors[0].rate_limit.shadow_mode: ignored (not a setting at this level; expected one of: unit, requests_per_unit, unlimited, name, replaces, unit_multiplier, algorithm, burst, sub_windows, strict)`]);
    // MERGE_DOMAIN_CONFIG from the environment, as the server reads it.
    expect(await runValidate([ref], capture(), { MERGE_DOMAIN_CONFIG: 'true' })).toBe(0);
  });

  it('exits 1 for a path that does not exist', async () => {
    const io = capture();
    expect(await runCli(['validate', path.join(dir, 'missing')], io)).toBe(1);
    expect(io.stderr.join('\n')).toContain('missing');
  });

  it('exits 1 with usage when the path is left out', async () => {
    const io = capture();
    expect(await runCli(['validate'], io)).toBe(1);
    expect(io.stderr.join('\n')).toContain('usage');
  });

  it('works as the built binary, with its exit codes', () => {
    const cliJs = path.resolve(__dirname, '../../dist/src/cli.js');
    if (!fs.existsSync(cliJs)) throw new Error(`${cliJs} is missing: build first (npx tsc -p tsconfig.json, or make test)`);
    const ok = spawnSync(process.execPath, [cliJs, 'validate', path.join(dir, 'good')], { encoding: 'utf8', timeout: 15_000 });
    expect(ok.status).toBe(0);
    const bad = spawnSync(process.execPath, [cliJs, 'validate', path.join(dir, 'bad')], { encoding: 'utf8', timeout: 15_000 });
    expect(bad.status).toBe(1);
    expect(bad.stderr).toContain('broken.yaml');
  });
});

describe('slidegate client', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startTestService({ config: { 'cli.yaml': GOOD } });
  });
  afterAll(async () => {
    await svc?.stop();
  });

  it('prints OK and each status, then OVER_LIMIT with exit 2 once the limit is used up', async () => {
    const args = ['client', '--addr', svc.addr, '--domain', 'cli', '--descriptor', 'user=alice', '--descriptor', 'other=x'];
    const first = capture();
    expect(await runCli(args, first)).toBe(0);
    expect(first.stdout[0]).toBe('OK');
    expect(first.stdout[1]).toContain('user=alice: OK');
    expect(first.stdout[1]).toContain('limit 2/hour (per_user)');
    expect(first.stdout[1]).toContain('remaining 1');
    expect(first.stdout[2]).toContain('other=x: OK');
    expect(first.stdout[2]).toContain('no matching rule');

    expect(await runCli(args, capture())).toBe(0);
    const third = capture();
    expect(await runCli(args, third)).toBe(2);
    expect(third.stdout[0]).toBe('OVER_LIMIT');
    expect(third.stdout[1]).toMatch(/user=alice: OVER_LIMIT.*reset in \d+\.\d{3}s/);
  });

  it('sends --hits as the request hits_addend', async () => {
    const io = capture();
    expect(await runCli(['client', '--addr', svc.addr, '--domain', 'cli', '--descriptor', 'user=bob', '--hits', '3'], io)).toBe(2);
  });

  it('exits 1 on a descriptor that is not key=value', async () => {
    const io = capture();
    expect(await runCli(['client', '--addr', svc.addr, '--domain', 'cli', '--descriptor', '=x'], io)).toBe(1);
    expect(io.stderr.join('\n')).toContain('key=value');
  });

  it('exits 1 with usage when required options are missing', async () => {
    const io = capture();
    expect(await runCli(['client', '--addr', svc.addr, '--descriptor', 'user=x'], io)).toBe(1);
    expect(io.stderr.join('\n')).toContain('--domain');
  });

  it('exits 1 when no server answers', async () => {
    const port = await new Promise<number>((resolve) => {
      const s = net.createServer().listen(0, '127.0.0.1', () => {
        const p = (s.address() as net.AddressInfo).port;
        s.close(() => resolve(p));
      });
    });
    const io = capture();
    expect(await runCli(['client', '--addr', `127.0.0.1:${port}`, '--timeout-ms', '1000', '--domain', 'cli', '--descriptor', 'user=x'], io)).toBe(1);
    expect(io.stderr[0]).toContain(`127.0.0.1:${port}`);
  });
});

describe('slidegate', () => {
  it('exits 1 on an unknown command', async () => {
    const io = capture();
    expect(await runCli(['frobnicate'], io)).toBe(1);
    expect(io.stderr.join('\n')).toContain('unknown command');
  });
});
