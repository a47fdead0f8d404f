import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

/**
 * run-ghz.sh passes the caller's own ghz flags through, and a flag the caller gives replaces the one
 * the GHZ_* variables would add instead of repeating it (ghz refuses any flag given twice: "flag
 * 'duration' cannot be repeated"). ghz here is a fake on PATH that records its arguments; the
 * script around it is the real one, with the built server it starts and stops.
 */

const ROOT = path.resolve(__dirname, '..', '..', '..');

let dir: string;
beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'slidegate-fake-ghz-'));
  // One argument a line, as ghz would have received them.
  fs.writeFileSync(path.join(dir, 'ghz'), '#!/usr/bin/env bash\nprintf \'%s\\n\' "$@" > "$FAKE_GHZ_ARGS"\n', { mode: 0o755 });
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

/** Runs the script with `args` and `env`: what it printed, and the arguments the fake ghz received, --config and its file left out. */
async function run(args: string[], env: Record<string, string> = {}): Promise<{ received: string[]; stdout: string; stderr: string }> {
  const record = path.join(dir, `args-${process.hrtime.bigint()}`);
  const base: Record<string, string | undefined> = { ...process.env };
  for (const name of ['GHZ_TOTAL', 'GHZ_DURATION', 'GHZ_CONCURRENCY', 'GHZ_CONNECTIONS', 'GHZ_REFLECTION']) delete base[name];
  const { stdout, stderr } = await new Promise<{ stdout: string; stderr: string }>((resolve, reject) =>
    execFile(
      'bash',
      ['test/load/run-ghz.sh', ...args],
      { cwd: ROOT, timeout: 60_000, env: { ...base, ...env, FAKE_GHZ_ARGS: record, PATH: `${dir}:${process.env.PATH ?? ''}` } },
      (err, out, errOut) => (err ? reject(new Error(`${err.message}\n${errOut}`)) : resolve({ stdout: out, stderr: errOut })),
    ),
  );
  const received = fs.readFileSync(record, 'utf8').split('\n').slice(0, -1);
  expect(received.slice(0, 1)).toEqual(['--config']);
  return { received: received.slice(2), stdout, stderr };
}

const ghzArgs = async (args: string[], env: Record<string, string> = {}): Promise<string[]> => (await run(args, env)).received;

/** The values given to ghz's flag -SHORT / --LONG, in every form ghz reads, in order. */
function values(args: readonly string[], short: string, long: string): string[] {
  const found: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (arg === `--${long}` || (short !== '' && arg === `-${short}`)) found.push(args[++i]);
    else if (arg.startsWith(`--${long}=`)) found.push(arg.slice(long.length + 3));
    else if (short !== '' && arg.startsWith(`-${short}`) && !arg.startsWith('--')) found.push(arg.slice(2));
  }
  return found;
}

const flags = (args: readonly string[]) => ({
  duration: values(args, 'z', 'duration'),
  total: values(args, 'n', 'total'),
  concurrency: values(args, 'c', 'concurrency'),
  connections: values(args, '', 'connections'),
});

// Each runs the script once (a server start and stop, about a second).
const CASES: ReadonlyArray<readonly [string, string[], Record<string, string>, ReturnType<typeof flags>]> = [
  [
    'GHZ_* alone, as make ghz passes them',
    [],
    { GHZ_TOTAL: '100', GHZ_CONCURRENCY: '7', GHZ_CONNECTIONS: '2' },
    { duration: ['0'], total: ['100'], concurrency: ['7'], connections: ['2'] },
  ],
  ['GHZ_DURATION alone', [], { GHZ_DURATION: '60s' }, { duration: ['60s'], total: [], concurrency: [], connections: [] }],
  ["the caller's -z over GHZ_DURATION", ['-z', '5s'], { GHZ_DURATION: '60s' }, { duration: ['5s'], total: [], concurrency: [], connections: [] }],
  [
    "the caller's --duration=5s over GHZ_TOTAL's -z 0 (its -n stays, which ghz ignores beside a duration)",
    ['--duration=5s'],
    { GHZ_TOTAL: '100' },
    { duration: ['5s'], total: ['100'], concurrency: [], connections: [] },
  ],
  ["the caller's -z5s", ['-z5s'], { GHZ_DURATION: '60s' }, { duration: ['5s'], total: [], concurrency: [], connections: [] }],
  [
    "the caller's -n alone: a number of calls instead of ghz.json's duration",
    ['-n', '500'],
    {},
    { duration: ['0'], total: ['500'], concurrency: [], connections: [] },
  ],
  ["the caller's -n over GHZ_DURATION", ['-n', '500'], { GHZ_DURATION: '60s' }, { duration: ['0'], total: ['500'], concurrency: [], connections: [] }],
  ["the caller's --total over GHZ_TOTAL", ['--total', '300'], { GHZ_TOTAL: '100' }, { duration: ['0'], total: ['300'], concurrency: [], connections: [] }],
  [
    "the caller's -z and -n together, as ghz takes them",
    ['-z', '5s', '-n', '500'],
    { GHZ_TOTAL: '100' },
    { duration: ['5s'], total: ['500'], concurrency: [], connections: [] },
  ],
  [
    "the caller's -c and --connections over GHZ_CONCURRENCY and GHZ_CONNECTIONS",
    ['-c', '10', '--connections=3'],
    { GHZ_CONCURRENCY: '100', GHZ_CONNECTIONS: '8' },
    { duration: [], total: [], concurrency: ['10'], connections: ['3'] },
  ],
];

test.each(CASES)(
  '%s',
  async (_does, args, env, expected) => {
    const received = await ghzArgs(args, env);
    expect(flags(received)).toEqual(expected);
    // The caller's arguments reach ghz whole and last.
    expect(received.slice(received.length - args.length)).toEqual(args);
  },
  90_000,
);

test('arguments after -- are not read as flags of the script', async () => {
  const received = await ghzArgs(['-O', 'json', '--', '-z', '5s'], { GHZ_DURATION: '60s' });
  expect(received).toEqual(['-z', '60s', '-O', 'json', '--', '-z', '5s']);
}, 90_000);

test.each([
  [['-O', 'json'], 'stderr'],
  [['--format=json', '--output', 'report.json'], 'stdout'],
  [['-Ojson', '-oreport.json'], 'stdout'],
] as const)(
  'with ghz flags %j the split of the answers goes to %s',
  async (args, to) => {
    const { stdout, stderr } = await run([...args]);
    const split = 'Answers by overall code';
    expect(to === 'stdout' ? stdout : stderr).toContain(split);
    expect(to === 'stdout' ? stderr : stdout).not.toContain(split);
  },
  90_000,
);
