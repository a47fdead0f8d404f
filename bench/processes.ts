import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { createServer, connect } from 'node:net';

/**
 * Child processes of a benchmark run. Every process started here is registered and killed on exit,
 * on an error and on SIGINT/SIGTERM, so an interrupted run leaves nothing listening.
 */

const children = new Set<ChildProcess>();
let hooked = false;

function killAll(signal: NodeJS.Signals = 'SIGKILL'): void {
  for (const c of children) {
    if (c.exitCode === null && c.signalCode === null) {
      try {
        c.kill(signal);
      } catch {
        // already gone
      }
    }
  }
}

function hook(): void {
  if (hooked) return;
  hooked = true;
  process.on('exit', () => killAll());
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.on(sig, () => {
      killAll();
      process.exit(130);
    });
  }
  process.on('uncaughtException', (err) => {
    process.stderr.write(`${err.stack ?? err}\n`);
    killAll();
    process.exit(1);
  });
}

/** Spawns a registered child; its stderr is kept (last 8 KiB) for error messages. */
export function spawnTracked(command: string, args: readonly string[], options: SpawnOptions = {}): ChildProcess & { stderrTail: () => string } {
  hook();
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], ...options }) as ChildProcess & { stderrTail: () => string };
  children.add(child);
  let tail = '';
  const keep = (d: Buffer): void => {
    tail = (tail + d.toString()).slice(-8192);
  };
  child.stderr?.on('data', keep);
  child.stdout?.on('data', keep);
  child.stderrTail = () => tail;
  child.on('exit', () => children.delete(child));
  return child;
}

/** Stops a child: SIGTERM, then SIGKILL after graceMs. Resolves once it has exited. */
export async function stopProcess(child: ChildProcess, graceMs = 3000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}

/** Runs a command to completion (bounded by timeoutMs) and returns its stdout. */
export function runCommand(command: string, args: readonly string[], timeoutMs: number): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawnTracked(command, args);
    let stdout = '';
    let stderr = '';
    child.stdout?.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** A TCP port free on 127.0.0.1 at the time of the call. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

/** Resolves once 127.0.0.1:port accepts connections; rejects after timeoutMs or when `alive` turns false. */
export async function waitForPort(port: number, timeoutMs: number, alive: () => boolean = () => true): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (!alive()) throw new Error(`process exited before listening on ${port}`);
    const ok = await new Promise<boolean>((resolve) => {
      const s = connect({ port, host: '127.0.0.1' });
      s.once('connect', () => {
        s.destroy();
        resolve(true);
      });
      s.once('error', () => resolve(false));
    });
    if (ok) return;
    await sleep(50);
  }
  throw new Error(`nothing listening on 127.0.0.1:${port} after ${timeoutMs} ms`);
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** CPU seconds (user + system) and RSS bytes of a process and its descendants, from /proc. */
export interface ProcessUsage {
  readonly cpuSeconds: number;
  readonly rssBytes: number;
}

const TICKS = 100; // USER_HZ on Linux
const PAGE = 4096;

function statOf(pid: number): { ppid: number; cpu: number; rss: number } | undefined {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name, which may itself contain spaces and parentheses.
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    // f[0] is field 3 (state): ppid is field 4, utime 14, stime 15, rss 24.
    return { ppid: Number(f[1]), cpu: (Number(f[11]) + Number(f[12])) / TICKS, rss: Number(f[21]) * PAGE };
  } catch {
    return undefined;
  }
}

/** Sums usage over pid and every descendant (worker processes count too). */
export function processUsage(pid: number): ProcessUsage {
  const parent = new Map<number, number>();
  const stats = new Map<number, { cpu: number; rss: number }>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const st = statOf(Number(name));
    if (!st) continue;
    parent.set(Number(name), st.ppid);
    stats.set(Number(name), st);
  }
  let cpu = 0;
  let rss = 0;
  for (const [p, st] of stats) {
    let q: number | undefined = p;
    for (let depth = 0; q !== undefined && q > 1 && depth < 8; depth++) {
      if (q === pid) {
        cpu += st.cpu;
        rss += st.rss;
        break;
      }
      q = parent.get(q);
    }
  }
  return { cpuSeconds: cpu, rssBytes: rss };
}
