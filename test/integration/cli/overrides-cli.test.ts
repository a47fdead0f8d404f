import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { CliIo } from '../../../src/cli/io';
import { OVERRIDES_EXIT, readImport, runOverrides } from '../../../src/cli/overrides';
import { tokensFile } from '../../helpers/overrides';
import { spawnService, type SpawnedService } from '../../helpers/spawned-service';

/**
 * `slidegate overrides` against the built service in a process of its own: each subcommand, its
 * exit codes and messages, and `import` of YAML and NDJSON files, its waits on 429, and its rate.
 */

const CONFIG = 'domain: edge\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 10}\n';
const TOKEN = 'ops-token-0123456789abcdef';
const CLI_JS = path.resolve(__dirname, '../../../dist/src/cli.js');

function capture(): CliIo & { stdout: string[]; stderr: string[] } {
  const stdout: string[] = [];
  const stderr: string[] = [];
  return { stdout, stderr, out: (l) => stdout.push(l), err: (l) => stderr.push(l) };
}

describe('slidegate overrides', () => {
  let tokens: ReturnType<typeof tokensFile>;
  let dir: string;
  beforeAll(() => {
    tokens = tokensFile({ ops: TOKEN });
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'slidegate-overrides-cli-'));
  });
  afterAll(() => {
    tokens.remove();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const env = { SLIDEGATE_ADMIN_TOKEN: TOKEN };
  const run = async (svc: SpawnedService, args: string[], withEnv: NodeJS.ProcessEnv = env) => {
    const io = capture();
    const code = await runOverrides([...args, '--url', `http://127.0.0.1:${svc.httpPort}`], io, withEnv);
    return { code, stdout: io.stdout, stderr: io.stderr };
  };

  describe('on one service', () => {
    let svc: SpawnedService;
    beforeAll(async () => {
      svc = await spawnService({ config: { 'edge.yaml': CONFIG }, env: { ADMIN_TOKENS_FILE: tokens.path, OVERRIDES_MAX_REQUESTS_PER_SECOND: '100' } });
    });
    afterAll(() => svc?.stop());

    it('sets, gets, lists and deletes, printing each answer as JSON; exit 3 when there is none', async () => {
      const set = await run(svc, [
        'set',
        '--domain',
        'edge',
        '--descriptor',
        'api_key=alice',
        '--rate-limit',
        '{unit: minute, requests_per_unit: 5}',
        '--note',
        'trial',
      ]);
      expect(set).toMatchObject({ code: 0, stderr: [] });
      expect(JSON.parse(set.stdout[0])).toMatchObject({ rate_limit: { unit: 'minute', requests_per_unit: 5 }, note: 'trial', updated_by: 'ops', version: 1 });
      const got = await run(svc, ['get', '--domain', 'edge', '--descriptor', 'api_key=alice']);
      expect(JSON.parse(got.stdout[0])).toEqual(JSON.parse(set.stdout[0]));
      await run(svc, ['set', '--domain', 'edge', '--descriptor', 'api_key=bob', '--rate-limit', '{"unlimited": true}']);
      const listed = await run(svc, ['list', '--domain', 'edge', '--limit', '1']);
      expect(listed.code).toBe(0);
      expect(listed.stdout.map((l) => (JSON.parse(l) as { descriptor: { value: string }[] }).descriptor[0].value)).toEqual(['alice', 'bob']);
      expect((await run(svc, ['delete', '--domain', 'edge', '--descriptor', 'api_key=alice'])).code).toBe(0);
      const gone = await run(svc, ['get', '--domain', 'edge', '--descriptor', 'api_key=alice']);
      expect(gone).toMatchObject({ code: OVERRIDES_EXIT.notFound, stderr: ['no override of this descriptor in domain "edge"'] });
      expect((await run(svc, ['delete', '--domain', 'edge', '--descriptor', 'api_key=alice'])).code).toBe(OVERRIDES_EXIT.notFound);
    });

    it("says what is wrong: no token, a wrong one, the API's refusal, a bad argument", async () => {
      const none = await run(svc, ['list', '--domain', 'edge'], {});
      expect(none.code).toBe(1);
      expect(none.stderr[0]).toMatch(/^SLIDEGATE_ADMIN_TOKEN is not set/);
      expect((await run(svc, ['list', '--domain', 'edge'], { SLIDEGATE_ADMIN_TOKEN: 'nope-nope-nope-nope' })).stderr).toEqual(['HTTP 401: unauthorized']);
      const refused = await run(svc, ['set', '--domain', 'edge', '--descriptor', 'user=x', '--rate-limit', '{unit: minute, requests_per_unit: 1}']);
      expect(refused).toMatchObject({ code: 1, stderr: ['HTTP 400: descriptor[0].key: no rule for key "user" under domain "edge"'] });
      expect((await run(svc, ['set', '--domain', 'edge', '--descriptor', 'api_key'])).stderr[0]).toMatch(
        /^--descriptor: descriptor entry "api_key" is not key=value/,
      );
      expect((await run(svc, ['frob'])).stderr[0]).toMatch(/^unknown subcommand "frob"/);
    });

    it('imports a YAML file, reporting each override refused by where it was, and waits out 429 (100 requests a second here)', async () => {
      const items = Array.from(
        { length: 250 },
        (_, i) => `  - {domain: edge, descriptor: "api_key=y${i}", rate_limit: {unit: hour, requests_per_unit: ${i + 1}}}`,
      );
      items.splice(3, 0, '  - {domain: edge, descriptor: "api_key=bad", rate_limit: {unit: fortnight, requests_per_unit: 1}}');
      const file = path.join(dir, 'overrides.yaml');
      fs.writeFileSync(file, `overrides:\n${items.join('\n')}\n`);
      const imported = await run(svc, ['import', file, '--concurrency', '8']);
      expect(imported.code).toBe(1);
      expect(imported.stderr).toEqual(['item 3: HTTP 400: rate_limit.unit: unknown unit "fortnight"']);
      expect(imported.stdout[0]).toMatch(/^imported 250 of 251 overrides in [0-9.]+ s \(\d+ per second\); 1 refused$/);
      const listed = await run(svc, ['list', '--domain', 'edge']);
      expect(listed.stdout.filter((l) => l.includes('"y')).length).toBe(250);
    });
  });

  it('reads NDJSON and YAML alike', () => {
    expect(readImport('{"domain":"a","descriptor":"k=v","rate_limit":{}}\n\n# note\n{"domain":"b"}\n')).toEqual([
      { at: 'line 1', override: { domain: 'a', descriptor: 'k=v', rate_limit: {} } },
      { at: 'line 4', override: { domain: 'b' } },
    ]);
    expect(readImport('- {domain: a}\n- domain: b\n')).toEqual([
      { at: 'item 0', override: { domain: 'a' } },
      { at: 'item 1', override: { domain: 'b' } },
    ]);
    expect(() => readImport('domain: a\n')).toThrow('an import file is a YAML list of overrides');
  });

  // The rate is `make bench`'s to measure (its override-import section, alone on the machine):
  // here the service shares the cores with the other test files.
  it('imports an NDJSON file of 2,000 overrides with the built command, every one applied (the built service, memory store)', async () => {
    const svc = await spawnService({ config: { 'edge.yaml': CONFIG }, env: { ADMIN_TOKENS_FILE: tokens.path } });
    try {
      const file = path.join(dir, 'overrides.ndjson');
      const lines = Array.from({ length: 2_000 }, (_, i) =>
        JSON.stringify({ domain: 'edge', descriptor: [{ key: 'api_key', value: `n${i}` }], rate_limit: { unit: 'minute', requests_per_unit: 100 + (i % 50) } }),
      );
      fs.writeFileSync(file, `${lines.join('\n')}\n`);
      if (!fs.existsSync(CLI_JS)) throw new Error(`${CLI_JS} is missing: build first (npx tsc -p tsconfig.json, or make test)`);
      // Not spawnSync: the service's log lines come through this process, which must keep reading them.
      const result = await promisify(execFile)(process.execPath, [CLI_JS, 'overrides', 'import', file, '--url', `http://127.0.0.1:${svc.httpPort}`], {
        encoding: 'utf8',
        env: { PATH: process.env.PATH, SLIDEGATE_ADMIN_TOKEN: TOKEN },
        timeout: 60_000,
      });
      expect(result.stderr).toBe('');
      expect(result.stdout).toMatch(/^imported 2000 of 2000 overrides in [0-9.]+ s \(\d+ per second\)\n$/);
      const listed = await run(svc, ['list', '--domain', 'edge']);
      expect(listed.stdout).toHaveLength(2_000);
      expect(JSON.parse(listed.stdout.find((l) => l.includes('"n1234"'))!)).toMatchObject({ rate_limit: { requests_per_unit: 100 + (1234 % 50) } });
    } finally {
      await svc.stop();
    }
  });
});
