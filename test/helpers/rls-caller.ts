import { spawn } from 'node:child_process';
import * as path from 'node:path';
import type { RlsRequestInput } from './grpc-client';
import type { LegitCall } from './load-turns';

/**
 * RLS calls at a steady rate from a process of their own, each timed there: a jest worker holds up
 * its own event loop for tens of milliseconds now and then (its transforms, its heap), and a call it
 * timed through such a stall measured the worker, not the service. The process runs the built client
 * (dist/src/cli/rls-client.js, as spawned services run dist/).
 */

const CLIENT_JS = path.resolve(__dirname, '../../dist/src/cli/rls-client.js');

export interface RlsCaller {
  /** Calls at the rate for `durationMs`; resolves with each (sentMs in this process's performance.now()). */
  run(durationMs: number): Promise<LegitCall[]>;
  close(): Promise<void>;
}

export interface RlsCallerOptions {
  /** host:port. */
  readonly target: string;
  readonly perSecond: number;
  /** The requests, sent in turn. */
  readonly requests: readonly RlsRequestInput[];
}

/** Starts the caller's process; resolves once its client has answered a first call. */
export async function rlsCaller(options: RlsCallerOptions): Promise<RlsCaller> {
  const script = `
    const { createRlsClient } = require(${JSON.stringify(CLIENT_JS)});
    const [target, perSecond, requests] = JSON.parse(process.argv[1]);
    const client = createRlsClient({ address: target });
    const now = () => performance.timeOrigin + performance.now();
    const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
    async function run(ms) {
      const calls = [];
      const started = now();
      for (let i = 0; now() - started < ms; i++) {
        const wait = started + (i * 1000) / perSecond - now();
        if (wait > 0) await sleep(wait);
        const sent = now();
        calls.push(client.shouldRateLimit(requests[i % requests.length], { deadlineMs: 2000 }).then(
          (r) => ({ sent, ms: now() - sent, error: r.overallCode === 'OK' ? undefined : r.overallCode, answered: true }),
          (err) => ({ sent, ms: now() - sent, error: err.message, answered: false }),
        ));
      }
      return Promise.all(calls);
    }
    let input = '';
    process.stdin.on('data', async (chunk) => {
      input += chunk;
      let nl;
      while ((nl = input.indexOf('\\n')) >= 0) {
        const line = input.slice(0, nl);
        input = input.slice(nl + 1);
        const calls = await run(Number(line));
        process.stdout.write(JSON.stringify(calls) + '\\n');
      }
    });
    run(300).then(() => process.stdout.write('ready\\n'));
  `;
  const child = spawn(process.execPath, ['-e', script, JSON.stringify([options.target, options.perSecond, options.requests])], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let buffered = '';
  const lines: string[] = [];
  let waiter: (() => void) | undefined;
  child.stdout.on('data', (chunk: Buffer) => {
    buffered += chunk.toString();
    let nl: number;
    while ((nl = buffered.indexOf('\n')) >= 0) {
      lines.push(buffered.slice(0, nl));
      buffered = buffered.slice(nl + 1);
    }
    waiter?.();
  });
  const nextLine = async (): Promise<string> => {
    while (lines.length === 0) {
      await Promise.race([new Promise<void>((resolve) => (waiter = resolve)), exited.then(() => Promise.reject(new Error('the RLS caller exited')))]);
    }
    return lines.shift()!;
  };
  await nextLine();
  return {
    run: async (durationMs) => {
      child.stdin.write(`${durationMs}\n`);
      const calls = JSON.parse(await nextLine()) as { sent: number; ms: number; error?: string; answered: boolean }[];
      // From the epoch (the same clock in both processes) into this process's performance.now().
      return calls.map((c) => ({ sentMs: c.sent - performance.timeOrigin, ms: c.ms, error: c.error ?? undefined, answered: c.answered }));
    },
    close: async () => {
      child.kill('SIGTERM');
      await exited;
    },
  };
}
