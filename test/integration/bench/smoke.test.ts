import { spawn } from 'node:child_process';
import { availableParallelism, tmpdir } from 'node:os';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { h2loadAvailable, runH2load, runH2loadMix, successesFromData } from '../../../bench/h2load';
import { runHttp2Load } from '../../../bench/http2-load';
import { startNoopServer, type NoopServer } from '../../../bench/noop-server';
import { encodeOkResponse, grpcFrame } from '../../../bench/rls-codec';
import type { BenchResult, ScenarioResult } from '../../../bench/run';

// Runs `node dist/bench/run.js --tiny` end to end (its own redis-server, the service on both stores
// with its default workers, the no-op server, h2load when installed and the two node generators).
// It checks the harness, not the service's speed. Needs the built dist/.
const root = join(__dirname, '..', '..', '..');
const runJs = join(root, 'dist', 'bench', 'run.js');

function runTiny(out: string): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [runJs, '--tiny', '--out', out], { cwd: root, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGINT'), 80_000);
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
  let primary: string;
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
    primary = result.machine.h2load ? 'h2load' : 'http2-load';
  }, 90_000);

  afterAll(() => {
    if (out) rmSync(out, { recursive: true, force: true });
  });

  it('exits cleanly with every scenario measured', () => {
    expect(result.scenarios.filter((s) => s.error).map((s) => `${s.name}: ${s.error}`)).toEqual([]);
    expect(exit.code).toBe(0);
  });

  it('writes the JSON, the SVG chart and the tables side by side', () => {
    const files = readdirSync(out);
    expect(files.some((f) => f.endsWith('.svg'))).toBe(true);
    expect(files.some((f) => f.endsWith('.md'))).toBe(true);
    const svg = readFileSync(
      join(
        out,
        files.find((f) => f.endsWith('.svg'))!,
      ),
      'utf8',
    );
    expect(svg.startsWith('<svg')).toBe(true);
    const md = readFileSync(
      join(
        out,
        files.find((f) => f.endsWith('.md'))!,
      ),
      'utf8',
    );
    expect(md).toContain('measured separately');
  });

  it('describes the machine it ran on', () => {
    expect(result.machine.nproc).toBeGreaterThan(0);
    expect(result.machine.cpuModel.length).toBeGreaterThan(0);
    expect(result.machine.memoryGiB).toBeGreaterThan(0);
  });

  it('reports sane throughput, no errors and ordered latency percentiles for the no-op server and both stores', () => {
    for (const name of [`noop-http2/${primary}`, `memory-1-descriptor/${primary}`, `redis-1-descriptor/${primary}`]) {
      const m = scenario(name).summary!;
      expect(m.decisionsPerS).toBeGreaterThan(10);
      expect(m.errors).toBe(0);
      expect(m.p50Ms).toBeGreaterThan(0);
      expect(m.p50Ms).toBeLessThanOrEqual(m.p99Ms);
      expect(m.p99Ms).toBeLessThanOrEqual(m.p999Ms);
      expect(m.cpuCores).toBeGreaterThan(0);
      expect(m.rssMiB).toBeGreaterThan(10);
    }
    for (const name of [`memory-1-descriptor/${primary}`, `redis-1-descriptor/${primary}`]) {
      const m = scenario(name).summary!;
      expect(m.ratioToCeiling).toBeGreaterThan(0);
      // CPU per call: the service's (and, with Redis, its redis-server's), and the no-op's over it.
      expect(m.cpuUsPerCall).toBeGreaterThan(0);
      expect(m.cpuRatioToCeiling).toBeGreaterThan(0);
      expect(m.cpuRatioToCeiling).toBeLessThan(10);
    }
  });

  it('runs the service as shipped: the http2 transport, and one worker per core with redis', () => {
    const redis = scenario(`redis-1-descriptor/${primary}`);
    expect(redis.transport).toBe('http2');
    expect(redis.workers).toBe(Math.min(64, availableParallelism()));
    expect(scenario(`memory-1-descriptor/${primary}`).workers).toBe(1);
  });

  it('counts Redis calls and commands per decision only for the redis store', () => {
    const redis = scenario(`redis-1-descriptor/${primary}`).summary!;
    expect(redis.redisScriptsPerDecision).toBeGreaterThan(0);
    expect(redis.redisScriptsPerDecision).toBeLessThan(2);
    expect(redis.redisCommandsPerDecision).toBeGreaterThanOrEqual(redis.redisScriptsPerDecision!);
    expect(redis.redisCommandsPerDecision).toBeLessThan(20);
    expect(scenario(`memory-1-descriptor/${primary}`).summary!.redisCommandsPerDecision).toBeUndefined();
  });

  it('decides leased counters in process once synced: Redis sees only their background settlements', () => {
    const plain = scenario(`redis-1-descriptor/${primary}`).summary!;
    const leased = scenario(`redis-1-descriptor-lease/${primary}`).summary!;
    expect(leased.errors).toBe(0);
    expect(leased.decisionsPerS).toBeGreaterThan(10);
    expect(leased.redisCommandsPerDecision).toBeLessThan(plain.redisCommandsPerDecision!);
    // One lease per worker, each a settlement and a demand exchange every 250 ms: a few hundred
    // commands a second with the service's other background work, whatever the call rate.
    expect(leased.redisCommandsPerDecision! * leased.decisionsPerS).toBeLessThan(2000);
  });

  it('decides a `scope: global` rule in process too, measured in the rounds of the leased row on a service in a region', () => {
    const global = scenario(`redis-1-descriptor-global/${primary}`);
    expect(global.beside).toBe(`redis-1-descriptor-lease/${primary}`);
    expect(global.workers).toBe(1);
    const m = global.summary!;
    expect(m.errors).toBe(0);
    expect(m.decisionsPerS).toBeGreaterThan(10);
    // Run by run beside the leased row: as many runs, a ratio and a p99 difference.
    expect(global.runs).toHaveLength(scenario(`redis-1-descriptor-lease/${primary}`).runs.length);
    expect(m.ratioToBeside).toBeGreaterThan(0);
    expect(Number.isFinite(m.p99MsOverBeside)).toBe(true);
    // The region's Redis sees the leases' background settlements only, as for the leased row.
    expect(m.redisCommandsPerDecision! * m.decisionsPerS).toBeLessThan(2000);
    const md = readFileSync(
      join(
        out,
        readdirSync(out).find((f) => f.endsWith('.md'))!,
      ),
      'utf8',
    );
    expect(md).toContain('A `scope: global` rule');
  });

  it('sees most attack calls answered OVER_LIMIT with both node generators, without errors', () => {
    for (const name of ['memory-attack-90pct/http2-load', 'redis-attack-90pct/grpc-js-load']) {
      const s = scenario(name);
      expect(s.summary!.errors).toBe(0);
      // Nine calls in ten are the attacker's; its limit lets a share of them through each window, a
      // larger share the fewer calls a loaded machine makes in a tiny run (0.76 seen beside two busy files).
      expect(s.runs[0].load.overLimit!).toBeGreaterThan(0.6 * s.runs[0].load.ok);
    }
    expect(scenario('memory-attack-90pct/http2-load').summary!.ratioToCeiling).toBeGreaterThan(0);
  });

  it('measures a cold start with the warm-up off and at its default, each on a new service', () => {
    const cold = result.coldStart;
    expect(cold?.map((c) => [c.warmUpCalls, c.isDefault])).toEqual([
      [0, false],
      [10_000, true],
    ]);
    for (const c of cold!) {
      expect(c.error).toBeUndefined();
      expect(c.runs).toHaveLength(1);
      expect(c.runs[0].calls).toBeGreaterThan(0.5 * c.rps * c.durationS);
      expect(c.summary!.errors).toBe(0);
      expect(c.summary!.overTimeout).toBeLessThanOrEqual(c.runs[0].calls);
    }
    expect(
      readFileSync(
        join(
          out,
          readdirSync(out).find((f) => f.endsWith('.md'))!,
        ),
        'utf8',
      ),
    ).toContain('Cold start');
  });

  it('holds a fixed-rate run near its target rate', () => {
    const s = result.scenarios.find((x) => x.kind === 'rate' && x.target === 'service');
    expect(s?.summary).toBeDefined();
    expect(s!.summary!.errors).toBe(0);
    expect(s!.summary!.decisionsPerS).toBeGreaterThan(0.5 * s!.rps!);
    expect(s!.summary!.decisionsPerS).toBeLessThan(1.2 * s!.rps!);
  });
});

describe('success counting of the load generators', () => {
  let server: NoopServer;
  let dir: string;
  // Wire type 7 does not exist: the no-op server answers this call with a gRPC error (trailers only).
  const bad = grpcFrame(Buffer.from([0x0f, 0x00]));

  beforeAll(async () => {
    server = await startNoopServer({ transport: 'http2' });
    dir = mkdtempSync(join(tmpdir(), 'bench-count-'));
  });

  afterAll(async () => {
    await server?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('bounds h2load successes by the DATA bytes an answer carries', () => {
    expect(successesFromData({ http200: 100, dataBytes: 0, okBytes: { min: 36, max: 37 } })).toEqual({ okAtMost: 0, okAtLeast: 0 });
    expect(successesFromData({ http200: 100, dataBytes: 100 * 37, okBytes: { min: 36, max: 37 } })).toEqual({ okAtMost: 100, okAtLeast: 100 });
    expect(successesFromData({ http200: 100, dataBytes: 50 * 36, okBytes: { min: 36, max: 37 } })).toEqual({ okAtMost: 50, okAtLeast: 49 });
  });

  it('counts gRPC errors answered with HTTP 200 as errors in h2load runs', async () => {
    // `make test` installs h2load (nghttp2-client); its absence is a set-up fault, not a reason to skip.
    expect(await h2loadAvailable()).toBe(true);
    const body = join(dir, 'bad.body');
    writeFileSync(body, bad);
    const r = await runH2load({
      port: server.port,
      bodyFile: body,
      clients: 1,
      streams: 4,
      threads: 1,
      durationS: 0.3,
      okBytes: { min: 9, max: 9 },
      tmpDir: dir,
    });
    expect(r.requests).toBeGreaterThan(0);
    expect(r.ok).toBe(0);
    expect(r.errors).toBe(r.requests);
  });

  it("paces the attack mix's normal process at its given rate while the attacker runs flat out", async () => {
    expect(await h2loadAvailable()).toBe(true);
    // Domain "b" and one empty descriptor: the no-op server answers it OK.
    const body = join(dir, 'one.body');
    writeFileSync(body, grpcFrame(Buffer.from([0x0a, 0x01, 0x62, 0x12, 0x00])));
    const size = grpcFrame(encodeOkResponse(1)).length;
    const ok = { min: size, max: size };
    const durationS = 2;
    const rps = 1000;
    const r = await runH2loadMix({
      port: server.port,
      streams: 10,
      threads: 1,
      durationS,
      tmpDir: dir,
      attacker: { bodyFile: body, clients: 2, okBytes: ok },
      normal: { bodyFile: body, clients: 1, okBytes: ok, rps },
    });
    expect(r.errors).toBe(0);
    const normal = Math.round(r.requests * (1 - r.attackShare!));
    // Paced: about rps x duration calls (h2load sends each second's quota in bursts); flat out it would
    // be about half of the attacker's, thousands per second on any machine.
    expect(normal).toBeGreaterThan(0.7 * rps * durationS);
    expect(normal).toBeLessThan(1.3 * rps * durationS);
    expect(r.attackShare!).toBeGreaterThan(0.5);
  });

  it('counts gRPC errors as errors in http2-load runs, and OK answers as OK', async () => {
    const good = grpcFrame(Buffer.from([0x0a, 0x01, 0x62, 0x12, 0x00]));
    const r = await runHttp2Load({ port: server.port, frames: [bad, good], connections: 1, streams: 4, durationS: 0.3 });
    expect(r.requests).toBeGreaterThan(0);
    expect(r.ok + r.errors).toBe(r.requests);
    expect(Math.abs(r.ok - r.errors)).toBeLessThanOrEqual(4);
    expect(r.firstError).toContain('grpc-status');
  });
});
