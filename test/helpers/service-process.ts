import { spawn, type ChildProcess } from 'node:child_process';
import * as path from 'node:path';
import type { RlsClient } from './grpc-client';

/** The built service (`node dist/src/main.js`) as a child process, for tests that signal or kill it. */

const ROOT = path.resolve(__dirname, '../..');
export const MAIN = path.join(ROOT, 'dist/src/main.js');

export interface Running {
  readonly child: ChildProcess;
  readonly grpcPort: number;
  readonly httpPort: number;
  readonly debugPort: number;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>;
}

/** Spawns the built service and resolves once it logged both listening lines. */
export function spawnService(env: Record<string, string>): Promise<Running> {
  const child = spawn(process.execPath, [MAIN], { cwd: ROOT, env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; at: number }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal, at: Date.now() })),
  );
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return new Promise((resolve, reject) => {
    let grpcPort: number | undefined;
    let httpPort: number | undefined;
    let debugPort: number | undefined;
    let buffered = '';
    let stdout = '';
    const timer = setTimeout(() => fail(new Error('the service did not start within 20 s')), 20_000);
    const fail = (err: Error): void => {
      clearTimeout(timer);
      child.kill('SIGKILL');
      reject(new Error(`${err.message}\nstdout: ${stdout}\nstderr: ${stderr}`));
    };
    const early = (code: number | null): void => fail(new Error(`the service exited early with code ${code}`));
    child.once('exit', early);
    child.stdout!.on('data', (chunk: Buffer) => {
      buffered += chunk.toString();
      stdout += chunk.toString();
      let nl: number;
      while ((nl = buffered.indexOf('\n')) >= 0) {
        const line = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        let entry: { msg?: string; port?: number; http?: string; debug?: string };
        try {
          entry = JSON.parse(line);
        } catch {
          continue;
        }
        if (entry.msg === 'gRPC listening') grpcPort = entry.port;
        if (entry.msg === 'HTTP listening' && entry.http) httpPort = Number(entry.http.split(':').pop());
        if (entry.msg === 'HTTP listening' && entry.debug) debugPort = Number(entry.debug.split(':').pop());
        if (grpcPort !== undefined && httpPort !== undefined && debugPort !== undefined) {
          clearTimeout(timer);
          child.off('exit', early);
          resolve({ child, grpcPort, httpPort, debugPort, exited });
          return;
        }
      }
    });
  });
}

export async function waitForServing(client: RlsClient): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    if ((await client.healthCheck('', { deadlineMs: 1_000 }).catch(() => undefined)) === 'SERVING') return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('the service never became SERVING');
}
