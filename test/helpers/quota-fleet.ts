import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import { RLQS_PATH } from '../../src/wire/rlqs-codec';

/**
 * A fleet of quota streams (RLQS) in a process of its own, so that its work costs the test process
 * (and the RLS calls it measures) nothing: `connections` connections of `streamsPerConnection`
 * streams each, every stream writing `message` every `intervalMs` (the streams spread over the
 * interval) and reading what it is sent. `pause` freezes the process (SIGSTOP: its streams stay open
 * and send nothing) until `resume`.
 */

export interface QuotaFleetOptions {
  /** host:port. */
  readonly target: string;
  readonly connections: number;
  readonly streamsPerConnection: number;
  /** One RateLimitQuotaUsageReports message, encoded. */
  readonly message: Uint8Array;
  readonly intervalMs: number;
}

export interface QuotaFleetStats {
  /** Reports written. */
  readonly sent: number;
  /** Messages received (answers and pushes). */
  readonly received: number;
  /** Streams ended by the server, by status code. */
  readonly ended: Record<string, number>;
}

export interface QuotaFleet {
  pause(): void;
  resume(): void;
  /** CPU time the fleet's process has used, seconds (what it costs the machine beside the service). */
  cpuSeconds(): number;
  /** Ends the fleet; resolves with what it did. */
  stop(): Promise<QuotaFleetStats>;
}

export function quotaFleet(options: QuotaFleetOptions): QuotaFleet {
  const script = `
    const grpc = require(${JSON.stringify(require.resolve('@grpc/grpc-js'))});
    const [target, connections, perConnection, intervalMs, message] = JSON.parse(process.argv[1]);
    const bytes = Buffer.from(message, 'base64');
    const stats = { sent: 0, received: 0, ended: {} };
    const streams = [];
    for (let c = 0; c < connections; c++) {
      // A connection of its own per client (grpc-js otherwise shares one per target).
      const client = new grpc.Client(target, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 });
      for (let s = 0; s < perConnection; s++) {
        const call = client.makeBidiStreamRequest(${JSON.stringify(RLQS_PATH)}, (m) => m, (b) => b);
        call.on('data', () => stats.received++);
        call.on('error', () => undefined);
        call.on('status', (st) => (stats.ended[st.code] = (stats.ended[st.code] ?? 0) + 1));
        streams.push(call);
      }
    }
    streams.forEach((call, i) => {
      setTimeout(() => setInterval(() => { call.write(bytes); stats.sent++; }, intervalMs), (i * intervalMs) / streams.length);
    });
    process.on('SIGTERM', () => process.stdout.write(JSON.stringify(stats), () => process.exit(0)));
  `;
  const args = JSON.stringify([
    options.target,
    options.connections,
    options.streamsPerConnection,
    options.intervalMs,
    Buffer.from(options.message).toString('base64'),
  ]);
  const child = spawn(process.execPath, ['-e', script, args], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (c: Buffer) => (out += c.toString()));
  // 'close', not 'exit': the process can be gone before its last output has been read here.
  const closed = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
  let stopped: Promise<QuotaFleetStats> | undefined;
  return {
    pause: () => child.kill('SIGSTOP'),
    resume: () => child.kill('SIGCONT'),
    cpuSeconds: () => {
      // utime and stime, the 14th and 15th fields of /proc/PID/stat, in clock ticks (100 a second).
      const stat = fs.readFileSync(`/proc/${child.pid}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      return (Number(fields[11]) + Number(fields[12])) / 100;
    },
    stop: () =>
      (stopped ??= (async () => {
        child.kill('SIGCONT');
        child.kill('SIGTERM');
        const code = await closed;
        if (out === '') throw new Error(`the quota fleet exited with ${code} and reported nothing`);
        return JSON.parse(out) as QuotaFleetStats;
      })()),
  };
}
