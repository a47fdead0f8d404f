import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BenchResult, ScenarioResult } from '../../bench/run';

// Runs `node dist/bench/run.js --tiny` end to end (its own redis-server, the service on both stores,
// the no-op server, the node generator and h2load when installed). Needs the built dist/.
const root = join(__dirname, '..', '..');
const runJs = join(root, 'dist', 'bench', 'run.js');

function runTiny(out: string): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [runJs, '--tiny', '--out', out], { cwd: root, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGINT'), 40_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stderr });
    });
  });
}

describe('benchmark harness in tiny mode', () => {
  let out: string;
  let result: BenchResult;
  let exit: { code: number | null; stderr: string };
  const scenario = (name: string): ScenarioResult => {
    const s = result.scenarios.find((x) => x.name === name);
    if (!s) throw new Error(`no scenario ${name} in ${result.scenarios.map((x) => x.name).join(', ')}`);
    if (!s.summary) throw new Error(`${name} failed: ${s.error}`);
    return s;
  };

  beforeAll(async () => {
    if (!existsSync(runJs)) throw new Error(`${runJs} is missing: build first (make test does)`);
    out = mkdtempSync(join(tmpdir(), 'bench-smoke-'));
    exit = await runTiny(out);
    const json = readdirSync(out).find((f) => f.endsWith('.json'));
    if (!json) throw new Error(`no result JSON written; stderr:\n${exit.stderr}`);
    result = JSON.parse(readFileSync(join(out, json), 'utf8')) as BenchResult;
  }, 45_000);

  afterAll(() => {
    if (out) rmSync(out, { recursive: true, force: true });
  });

  it('exits cleanly with every scenario measured', () => {
    expect(result.scenarios.filter((s) => s.error).map((s) => `${s.name}: ${s.error}`)).toEqual([]);
    expect(exit.code).toBe(0);
  });

  it('writes the JSON, the SVG chart and the table side by side', () => {
    const files = readdirSync(out);
    expect(files.some((f) => f.endsWith('.svg'))).toBe(true);
    expect(files.some((f) => f.endsWith('.md'))).toBe(true);
    const svg = readFileSync(join(out, files.find((f) => f.endsWith('.svg'))!), 'utf8');
    expect(svg.startsWith('<svg')).toBe(true);
  });

  it('describes the machine it ran on', () => {
    expect(result.machine.nproc).toBeGreaterThan(0);
    expect(result.machine.cpuModel.length).toBeGreaterThan(0);
    expect(result.machine.memoryGiB).toBeGreaterThan(0);
  });

  it('reports sane throughput and ordered latency percentiles for the no-op server and both stores', () => {
    for (const name of ['noop-grpc-js/node', 'memory-1-descriptor/node', 'redis-1-descriptor/node']) {
      const m = scenario(name).summary!;
      expect(m.decisionsPerS).toBeGreaterThan(10);
      expect(m.errors).toBe(0);
      expect(m.p50Ms).toBeGreaterThan(0);
      expect(m.p50Ms).toBeLessThanOrEqual(m.p99Ms);
      expect(m.p99Ms).toBeLessThanOrEqual(m.p999Ms);
      expect(m.cpuCores).toBeGreaterThan(0);
      expect(m.rssMiB).toBeGreaterThan(10);
    }
    expect(scenario('memory-1-descriptor/node').summary!.ratioToNoop).toBeGreaterThan(0);
  });

  it('counts Redis commands per decision only for the redis store', () => {
    const redis = scenario('redis-1-descriptor/node').summary!;
    expect(redis.redisCommandsPerDecision).toBeGreaterThan(0);
    expect(redis.redisCommandsPerDecision).toBeLessThan(10);
    expect(scenario('memory-1-descriptor/node').summary!.redisCommandsPerDecision).toBeUndefined();
  });

  it('sees most attack requests answered OVER_LIMIT', () => {
    const load = scenario('memory-attack-90pct/node').runs[0].load;
    expect(load.overLimit!).toBeGreaterThan(0.8 * load.ok);
  });

  it('holds a fixed-rate run near its target rate', () => {
    const s = scenario('memory-1-descriptor@50pct/node');
    expect(s.targetRps).toBeGreaterThan(0);
    expect(s.summary!.decisionsPerS).toBeGreaterThan(0.5 * s.targetRps!);
    expect(s.summary!.decisionsPerS).toBeLessThan(1.2 * s.targetRps!);
  });

  it('cross-checks with h2load when it is installed', () => {
    if (!result.machine.h2load) return; // the node generator alone covers the harness
    const m = scenario('memory-1-descriptor/h2load').summary!;
    expect(m.decisionsPerS).toBeGreaterThan(10);
    expect(m.p50Ms).toBeLessThanOrEqual(m.p99Ms);
  });
});
