import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { runCli, USAGE } from '../../../src/cli';
import { CLIENT_HELP } from '../../../src/cli/client';
import { VALIDATE_HELP } from '../../../src/cli/validate';
import type { CliIo } from '../../../src/cli/io';
import { runValidate } from '../../../src/cli/validate';
import { startTestService, type TestService } from '../../helpers/service';

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
  - key: api_key
    rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 5}
  - key: tier
    value: internal
    rate_limit: {unlimited: true}
`;

const CLI_JS = path.resolve(__dirname, '../../../dist/src/cli.js');

/** The built binary, as a user runs it. */
function binary(args: string[]) {
  if (!fs.existsSync(CLI_JS)) throw new Error(`${CLI_JS} is missing: build first (npx tsc -p tsconfig.json, or make test)`);
  return spawnSync(process.execPath, [CLI_JS, ...args], { encoding: 'utf8', timeout: 15_000 });
}

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

  it('describes each limit of a rule with several, and names the file and path of a bad list', async () => {
    const budgets = path.join(dir, 'budgets.yaml');
    fs.writeFileSync(
      budgets,
      'domain: llm\ndescriptors:\n  - key: api_key\n    count_denied_requests: true\n    rate_limits:\n' +
        '      - {name: per_minute, unit: minute, requests_per_unit: 1000}\n      - {name: per_day, unit: day, requests_per_unit: 50000}\n',
    );
    const io = capture();
    expect(await runCli(['validate', budgets], io)).toBe(0);
    expect(io.stdout.filter((l) => l.startsWith('llm.'))).toEqual([
      'llm.api_key.per_minute: unit=MINUTE requests_per_unit=1000 unit_multiplier=1 algorithm=sliding_window name=per_minute count_denied_requests=true, shadow_mode: false, quota_mode: false',
      'llm.api_key.per_day: unit=DAY requests_per_unit=50000 unit_multiplier=1 algorithm=sliding_window name=per_day count_denied_requests=true, shadow_mode: false, quota_mode: false',
    ]);
    fs.writeFileSync(budgets, 'domain: llm\ndescriptors:\n  - key: api_key\n    rate_limits:\n      - {unlimited: true}\n');
    const bad = capture();
    expect(await runCli(['validate', budgets], bad)).toBe(1);
    expect(bad.stderr.join('\n')).toContain('budgets.yaml: descriptors[0].rate_limits[0].unlimited: not allowed in rate_limits');
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
    fs.writeFileSync(
      path.join(ref, 'teams', 'more.conf'),
      'domain: ref\ndescriptors:\n  - key: user\n    value_to_metric: true\n    rate_limit: {unit: hour, requests_per_unit: 1}\n',
    );
    const split = capture();
    expect(await runValidate([ref], split, {})).toBe(1);
    expect(split.stderr.join('\n')).toContain('duplicate domain "ref"');
    const io = capture();
    expect(await runValidate(['--merge-domain-config', ref], io, {})).toBe(0);
    expect(io.stdout).toContain(
      'ref.path_files/*: unit=MINUTE requests_per_unit=5 unit_multiplier=1 algorithm=sliding_window, shadow_mode: false, quota_mode: true',
    );
    expect(io.stdout[io.stdout.length - 1]).toMatch(/OK \(1 domain\)/);
    expect(io.stderr).toEqual([
      `warning: ${path.join(ref, 'ratelimit')}: descriptors[0].rate_limit.shadow_mode: ignored (not a setting at this level; expected one of: unit, requests_per_unit, unlimited, name, replaces, unit_multiplier, algorithm, burst, sub_windows, strict, calendar, concurrency, lease, scope)`,
    ]);
    // MERGE_DOMAIN_CONFIG from the environment, as the server reads it.
    expect(await runValidate([ref], capture(), { MERGE_DOMAIN_CONFIG: 'true' })).toBe(0);
  });

  it('checks scope: global windows against REGION_SYNC_INTERVAL from the environment, read as the server reads it', async () => {
    fs.mkdirSync(path.join(dir, 'global'));
    const file = path.join(dir, 'global', 'global.yaml');
    fs.writeFileSync(file, 'domain: g\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5, scope: global}\n');
    const io = capture();
    expect(await runValidate([file], io, {})).toBe(0);
    expect(io.stdout).toContain(
      'g.k: unit=MINUTE requests_per_unit=5 unit_multiplier=1 algorithm=sliding_window lease=true scope=global, shadow_mode: false, quota_mode: false',
    );
    const slow = capture();
    expect(await runValidate([file], slow, { REGION_SYNC_INTERVAL: '10s' })).toBe(1);
    expect(slow.stderr).toHaveLength(1);
    expect(slow.stderr[0]).toContain(
      'global.yaml: descriptors[0].rate_limit.scope: global needs a window of at least 10 x REGION_SYNC_INTERVAL (100000 ms); 1 x minute is 60000 ms',
    );
    const bad = capture();
    expect(await runValidate([file], bad, { REGION_SYNC_INTERVAL: '10ms' })).toBe(1);
    expect(bad.stderr).toEqual(['invalid setting REGION_SYNC_INTERVAL: expected a duration from 100ms to 60s, got "10ms"']);
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
    const cliJs = path.resolve(__dirname, '../../../dist/src/cli.js');
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
  let debug: string[];
  beforeAll(async () => {
    svc = await startTestService({ config: { 'cli.yaml': GOOD } });
    debug = ['--debug-addr', `127.0.0.1:${svc.service.debugPort}`];
  });
  afterAll(async () => {
    await svc?.stop();
  });

  it('prints OK and each status, then OVER_LIMIT with exit 2 once the limit is used up', async () => {
    const args = ['client', '--addr', svc.addr, ...debug, '--domain', 'cli', '--descriptor', 'user=alice', '--descriptor', 'other=x'];
    const first = capture();
    expect(await runCli(args, first)).toBe(0);
    expect(first.stdout[0]).toBe('OK');
    expect(first.stdout[1]).toContain('user=alice: OK');
    expect(first.stdout[1]).toContain('limit 2 per hour (per_user)');
    expect(first.stdout[1]).toContain('remaining 1');
    expect(first.stdout[2]).toContain('other=x: OK');
    expect(first.stdout[2]).toContain('no matching rule');

    expect(await runCli(args, capture())).toBe(0);
    const third = capture();
    expect(await runCli(args, third)).toBe(2);
    expect(third.stdout[0]).toBe('OVER_LIMIT');
    expect(third.stdout[1]).toMatch(/user=alice: OVER_LIMIT.*reset in \d+\.\d{3}s/);
  });

  it("sends --hits as each descriptor's hits_addend", async () => {
    const io = capture();
    expect(await runCli(['client', '--addr', svc.addr, ...debug, '--domain', 'cli', '--descriptor', 'user=bob', '--hits', '3'], io)).toBe(2);
  });

  it('--hits 0 checks without counting, as a descriptor hits_addend of 0 does on the wire', async () => {
    const check = ['client', '--addr', svc.addr, ...debug, '--domain', 'cli', '--descriptor', 'user=carol', '--hits', '0'];
    for (let i = 0; i < 3; i++) {
      const io = capture();
      expect(await runCli(check, io)).toBe(0);
      expect(io.stdout[1]).toContain('remaining 2');
    }
    const counted = capture();
    expect(await runCli(['client', '--addr', svc.addr, ...debug, '--domain', 'cli', '--descriptor', 'user=carol'], counted)).toBe(0);
    expect(counted.stdout[1]).toContain('remaining 1');
  });

  it('shows the rule\'s whole window ("5 per 10 s"), asked of the debug port', async () => {
    const io = capture();
    expect(await runCli(['client', '--addr', svc.addr, ...debug, '--domain', 'cli', '--descriptor', 'api_key=k1'], io)).toBe(0);
    expect(io.stdout[1]).toContain('api_key=k1: OK, limit 5 per 10 s, remaining 4');
  });

  it('says when the debug port cannot tell the window, rather than print the unit as the window', async () => {
    const io = capture();
    const closedPort = await freePort();
    expect(await runCli(['client', '--addr', svc.addr, '--debug-addr', `127.0.0.1:${closedPort}`, '--domain', 'cli', '--descriptor', 'api_key=k2'], io)).toBe(
      0,
    );
    expect(io.stdout[1]).toContain('limit 5 per second unit (window unknown');
    expect(io.stdout[1]).not.toContain('5/second');
  });

  it('prints "unlimited" for an unlimited rule, not "no matching rule"', async () => {
    const io = capture();
    expect(await runCli(['client', '--addr', svc.addr, ...debug, '--domain', 'cli', '--descriptor', 'tier=internal'], io)).toBe(0);
    expect(io.stdout[1]).toBe('  [0] tier=internal: OK, unlimited');
    expect(io.stderr).toEqual([]);
  });

  it('hints that the domain is not loaded, and names the loaded ones', async () => {
    const io = capture();
    expect(await runCli(['client', '--addr', svc.addr, ...debug, '--domain', 'nope', '--descriptor', 'user=x'], io)).toBe(0);
    expect(io.stdout[1]).toContain('no matching rule');
    expect(io.stderr).toEqual(['hint: domain "nope" is not loaded (loaded: "cli")']);
  });

  it('hints that no rule of a loaded domain matches the keys', async () => {
    const io = capture();
    expect(await runCli(['client', '--addr', svc.addr, ...debug, '--domain', 'cli', '--descriptor', 'colour=red'], io)).toBe(0);
    expect(io.stderr[0]).toMatch(/^hint: domain "cli" is loaded, but no rule of it matches/);
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
    const port = await freePort();
    const io = capture();
    expect(await runCli(['client', '--addr', `127.0.0.1:${port}`, '--timeout-ms', '1000', '--domain', 'cli', '--descriptor', 'user=x'], io)).toBe(1);
    expect(io.stderr[0]).toContain(`127.0.0.1:${port}`);
  });
});

/** A port nothing listens on. */
function freePort(): Promise<number> {
  return new Promise<number>((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(p));
    });
  });
}

describe('slidegate', () => {
  it('without a command prints the help on stderr and exits 1, starting no server', () => {
    const run = binary([]);
    expect(run.status).toBe(1);
    expect(run.stderr).toContain('usage: slidegate <command>');
    expect(run.stdout).toBe('');
  });

  it('--version prints the package version and exits 0', () => {
    const version = (JSON.parse(fs.readFileSync(path.resolve(__dirname, '../../../package.json'), 'utf8')) as { version: string }).version;
    const run = binary(['--version']);
    expect({ status: run.status, stdout: run.stdout }).toEqual({ status: 0, stdout: `slidegate ${version}\n` });
  });

  it.each([['client'], ['validate'], ['serve']])('%s --help prints its help on stdout and exits 0', (command) => {
    const run = binary([command, '--help']);
    expect(run.status).toBe(0);
    expect(run.stdout).toContain(`usage: slidegate ${command}`);
    expect(run.stderr).toBe('');
  });

  it('--help lists every flag of every command, and the default addresses', async () => {
    const io = capture();
    expect(await runCli(['--help'], io)).toBe(0);
    const flags = [...`${CLIENT_HELP}\n${VALIDATE_HELP}`.matchAll(/^ +(--[a-z-]+)/gm)].map((m) => m[1]);
    expect(flags.length).toBeGreaterThanOrEqual(8);
    for (const flag of flags) expect({ flag, listed: USAGE.includes(`    ${flag} `) }).toEqual({ flag, listed: true });
    for (const address of ['127.0.0.1:8081', '0.0.0.0:8081', 'port 6070']) expect(io.stdout.join('\n')).toContain(address);
    expect(io.stdout.join('\n')).toContain('--version');
  });

  it('exits 1 on an unknown command', async () => {
    const io = capture();
    expect(await runCli(['frobnicate'], io)).toBe(1);
    expect(io.stderr.join('\n')).toContain('unknown command');
  });
});
