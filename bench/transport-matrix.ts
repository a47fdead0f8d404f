import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import * as http2 from 'node:http2';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { median, summarize } from './latency';
import { fmt, markdownTable } from './markdown';
import { repoRoot } from './paths';
import { freePort, runCommand, sleep, spawnTracked, stopProcess, waitForPort } from './processes';
import { encodeRateLimitRequest, grpcFrame, SHOULD_RATE_LIMIT_PATH, type BenchDescriptor } from './rls-codec';

/**
 * The transport matrix: maximum decisions/s and latency at a fixed 8k calls/s for the no-op servers
 * and the service, per transport (grpc-js, http2), store (memory, redis), descriptors (1, 5) and
 * WORKERS (1, 2), with h2load; plus the attack mix (90% of calls on keys over their limit) with the
 * node generator against the no-op http2 ceiling. Medians of `--repeats` runs.
 *
 * h2load counts any HTTP 200 as a success, and gRPC errors are HTTP 200 too: successes are counted
 * from the DATA bytes received instead (a trailers-only error carries none), so a run whose calls
 * fail (e.g. store timeouts under overload) shows its errors.
 *
 *   node dist/bench/transport-matrix.js [--repeats 3] [--duration 4] [--only REGEX]
 */

const DOMAIN = 'bench';
const CONFIG = `domain: ${DOMAIN}
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: method
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1000000000}
  - key: region
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
  - key: attacker
    rate_limit: {unit: hour, requests_per_unit: 1}
`;

const d = (key: string, value: string): BenchDescriptor => ({ entries: [[key, value]] });
const ONE = grpcFrame(encodeRateLimitRequest(DOMAIN, [d('client', 'c1')]));
const FIVE = grpcFrame(
  encodeRateLimitRequest(DOMAIN, [d('client', 'c1'), d('path', '/api/v1/items'), d('method', 'GET'), d('tenant', 't1'), d('region', 'eu-west')]),
);
const ATTACK = Buffer.concat(
  Array.from({ length: 100 }, (_, i) => grpcFrame(encodeRateLimitRequest(DOMAIN, [i % 10 === 9 ? d('client', `c${i}`) : d('attacker', `a${i}`)]))),
);

type Transport = 'grpc-js' | 'http2';

interface Target {
  readonly name: string;
  readonly kind: 'noop' | 'service';
  readonly transport: Transport;
  readonly backend?: 'memory' | 'redis';
  readonly workers?: number;
}

interface Run {
  readonly rps: number;
  readonly errorPct: number;
  readonly p99: number;
  readonly p999: number;
}

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : fallback;
}

/** One call on a raw session: the DATA bytes of the answer (0 for an error) and the grpc-status. */
function probeOnce(port: number, body: Buffer): Promise<{ dataBytes: number; status: string }> {
  return new Promise((resolve, reject) => {
    const s = http2.connect(`http://127.0.0.1:${port}`);
    s.on('error', reject);
    const st = s.request({ ':method': 'POST', ':path': SHOULD_RATE_LIMIT_PATH, 'content-type': 'application/grpc', te: 'trailers' });
    let bytes = 0;
    let status = '';
    st.on('response', (h) => (status = String(h['grpc-status'] ?? status)));
    st.on('trailers', (t) => (status = String(t['grpc-status'])));
    st.on('data', (c: Buffer) => (bytes += c.length));
    st.on('end', () => {
      s.close();
      resolve({ dataBytes: bytes, status });
    });
    st.on('error', reject);
    st.end(body);
  });
}

async function h2load(port: number, bodyFile: string, opts: { clients: number; durationS: number; rps?: number; okBytes: number; tmp: string }): Promise<Run> {
  const log = join(opts.tmp, `h2load-${Date.now()}.log`);
  const args = ['-c', String(opts.clients), '-m', '50', '-t', '1', '-D', String(opts.durationS), '-d', bodyFile];
  args.push('-H', 'content-type: application/grpc', '-H', 'te: trailers', `--log-file=${log}`);
  if (opts.rps !== undefined) args.push(`--rps=${Math.round(opts.rps / opts.clients)}`);
  args.push(`http://127.0.0.1:${port}${SHOULD_RATE_LIMIT_PATH}`);
  const r = await runCommand('h2load', args, (opts.durationS + 30) * 1000);
  const done = Number(/(\d+) done/.exec(r.stdout)?.[1] ?? 0);
  const data = Number(/\((\d+)\) data/.exec(r.stdout)?.[1] ?? 0);
  const ok = Math.min(done, Math.round(data / opts.okBytes));
  const lines = readFileSync(log, 'utf8').split('\n');
  rmSync(log, { force: true });
  const samples = new Float64Array(lines.length);
  let n = 0;
  for (const line of lines) {
    const cols = line.split('\t');
    if (cols.length >= 3) samples[n++] = Number(cols[2]) / 1000;
  }
  const lat = summarize(samples.subarray(0, n));
  return { rps: ok / opts.durationS, errorPct: done === 0 ? 100 : (100 * (done - ok)) / done, p99: lat.p99, p999: lat.p999 };
}

async function nodeLoad(port: number, bodiesFile: string, durationS: number): Promise<Run> {
  const args = [join(__dirname, 'node-load.js'), '--target', `127.0.0.1:${port}`, '--bodies', bodiesFile];
  args.push('--concurrency', '200', '--connections', '4', '--duration', String(durationS));
  const r = await runCommand(process.execPath, args, (durationS + 30) * 1000);
  const res = JSON.parse(r.stdout.trim().split('\n').pop()!) as { rps: number; requests: number; errors: number; latencyMs: { p99: number; p999: number } };
  return { rps: res.rps, errorPct: res.requests === 0 ? 100 : (100 * res.errors) / res.requests, p99: res.latencyMs.p99, p999: res.latencyMs.p999 };
}

async function start(t: Target, configDir: string, redisPort: number): Promise<{ port: number; stop: () => Promise<void> }> {
  const port = await freePort();
  const child =
    t.kind === 'noop'
      ? spawnTracked(process.execPath, [join(__dirname, 'noop-server.js'), '--transport', t.transport, '--port', String(port)])
      : spawnTracked(process.execPath, [join(repoRoot(__dirname), 'dist', 'src', 'main.js')], {
          env: {
            PATH: process.env.PATH,
            GRPC_HOST: '127.0.0.1',
            GRPC_PORT: String(port),
            HOST: '127.0.0.1',
            PORT: '0',
            DEBUG_HOST: '127.0.0.1',
            DEBUG_PORT: '0',
            CONFIG_PATH: configDir,
            BACKEND_TYPE: t.backend,
            REDIS_URL: t.backend === 'redis' ? `redis://127.0.0.1:${redisPort}` : undefined,
            GRPC_TRANSPORT: t.transport,
            WORKERS: String(t.workers ?? 1),
            LOG_LEVEL: 'warn',
            USE_STATSD: 'false',
          },
        });
  await waitForPort(port, 20_000, () => child.exitCode === null);
  for (let i = 0; i < 100; i++) {
    const p = await probeOnce(port, ONE).catch(() => undefined);
    if (p?.status === '0') break;
    await sleep(100);
  }
  return { port, stop: () => stopProcess(child, 6000) };
}

async function main(): Promise<void> {
  const repeats = Number(arg('--repeats', '3'));
  const durationS = Number(arg('--duration', '4'));
  const only = new RegExp(arg('--only', '.'));
  const tmp = mkdtempSync(join(tmpdir(), 'slidegate-matrix-'));
  const configDir = join(tmp, 'config');
  require('node:fs').mkdirSync(configDir);
  writeFileSync(join(configDir, 'bench.yaml'), CONFIG);
  const files = { one: join(tmp, 'one.bin'), five: join(tmp, 'five.bin'), attack: join(tmp, 'attack.bin') };
  writeFileSync(files.one, ONE);
  writeFileSync(files.five, FIVE);
  writeFileSync(files.attack, ATTACK);
  const redisPort = await freePort();
  const redis = spawnTracked('redis-server', ['--port', String(redisPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no']);
  await waitForPort(redisPort, 10_000);

  const targets: Target[] = [
    { name: 'noop grpc-js', kind: 'noop', transport: 'grpc-js' },
    { name: 'noop http2', kind: 'noop', transport: 'http2' },
  ];
  for (const backend of ['memory', 'redis'] as const) {
    for (const transport of ['grpc-js', 'http2'] as const) {
      for (const workers of backend === 'memory' ? [1] : [1, 2]) {
        targets.push({ name: `service ${transport} ${backend} W=${workers}`, kind: 'service', transport, backend, workers });
      }
    }
  }
  const rows: string[][] = [];
  const med = (runs: Run[], k: keyof Run): number => median(runs.map((r) => r[k]));
  try {
    for (const t of targets.filter((x) => only.test(x.name))) {
      for (const workload of t.kind === 'noop' ? (['one'] as const) : (['one', 'five'] as const)) {
        const svc = await start(t, configDir, redisPort);
        try {
          const okBytes = (await probeOnce(svc.port, workload === 'one' ? ONE : FIVE)).dataBytes;
          const file = files[workload];
          await h2load(svc.port, file, { clients: 4, durationS: 1, okBytes, tmp }); // warm-up
          const max: Run[] = [];
          const at8k4: Run[] = [];
          const at8k40: Run[] = [];
          for (let i = 0; i < repeats; i++) {
            max.push(await h2load(svc.port, file, { clients: 4, durationS, okBytes, tmp }));
            if (workload === 'one') {
              at8k4.push(await h2load(svc.port, file, { clients: 4, durationS, rps: 8000, okBytes, tmp }));
              at8k40.push(await h2load(svc.port, file, { clients: 40, durationS, rps: 8000, okBytes, tmp }));
            }
          }
          const row = [t.name, workload === 'one' ? '1' : '5', fmt(med(max, 'rps')), fmt(med(max, 'errorPct'), 1)];
          if (workload === 'one') {
            row.push(fmt(med(at8k4, 'p99'), 1), fmt(med(at8k4, 'p999'), 1), fmt(med(at8k4, 'errorPct'), 1), fmt(med(at8k40, 'p99'), 1), fmt(med(at8k40, 'errorPct'), 1));
          } else row.push('', '', '', '', '');
          rows.push(row);
          process.stderr.write(row.join(' | ') + '\n');
          if (workload === 'one' && (t.kind === 'noop' ? t.transport === 'http2' : t.transport === 'http2' && t.backend === 'redis')) {
            const attack: Run[] = [];
            for (let i = 0; i < repeats; i++) attack.push(await nodeLoad(svc.port, files.attack, durationS));
            const line = [`${t.name} (attack mix, node generator)`, '1', fmt(med(attack, 'rps')), fmt(med(attack, 'errorPct'), 1), '', '', '', '', ''];
            rows.push(line);
            process.stderr.write(line.join(' | ') + '\n');
          }
        } finally {
          await svc.stop();
        }
      }
    }
  } finally {
    await stopProcess(redis);
    rmSync(tmp, { recursive: true, force: true });
  }
  const header = ['target', 'descr.', 'max calls/s', 'err % at max', 'p99 ms @8k (4c)', 'p99.9 ms @8k (4c)', 'err % @8k', 'p99 ms @8k (40c)', 'err % @8k (40c)'];
  process.stdout.write(markdownTable(header, rows, ['l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r']) + '\n');
}

void main().catch((e: unknown) => {
  process.stderr.write(`${e instanceof Error ? e.stack : String(e)}\n`);
  process.exit(1);
});
