import * as net from 'node:net';
import type { AddressInfo } from 'node:net';
import { spawnService } from '../../helpers/spawned-service';

/**
 * The built service with USE_STATSD on, beside a statsd agent that accepts the connection and never
 * reads: what the service holds for it stays within STATSD_MAX_QUEUED_BYTES, and the lines it drops
 * are counted on /metrics. The same calls to a service without statsd tell what the calls themselves cost.
 */

const MIB = 1024 * 1024;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// detailed_metric: one statsd name per value, so each flush sends a line per value seen.
const EDGE = `
domain: edge
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 1000000}
`;

interface Run {
  readonly rssGrowth: number;
  readonly droppedLines: number;
  readonly droppedBytes: number;
  readonly warned: boolean;
}

/** 400 calls of 400 values of 240 characters (8,000 values in all) after 20 to warm up; RSS growth at its peak. */
async function run(statsd: boolean): Promise<Run> {
  const sockets: net.Socket[] = [];
  const agent = net.createServer((socket) => {
    socket.pause();
    sockets.push(socket);
  });
  await new Promise<void>((resolve) => agent.listen(0, '127.0.0.1', resolve));
  const svc = await spawnService({
    config: { 'edge.yaml': EDGE },
    env: {
      USE_STATSD: String(statsd),
      STATSD_HOST: '127.0.0.1',
      STATSD_PORT: String((agent.address() as AddressInfo).port),
      STATS_FLUSH_INTERVAL: '100ms',
      STATSD_MAX_QUEUED_BYTES: String(MIB),
    },
  });
  try {
    const values = Array.from({ length: 8_000 }, (_, i) => `${i}-${'v'.repeat(240)}`);
    const call = async (i: number): Promise<void> => {
      const descriptors = Array.from({ length: 400 }, (_, j) => ({ entries: [{ key: 'user', value: values[(i * 400 + j) % values.length] }] }));
      const res = await fetch(`http://127.0.0.1:${svc.httpPort}/json`, { method: 'POST', body: JSON.stringify({ domain: 'edge', descriptors }) });
      expect(res.status).toBe(200);
    };
    for (let i = 0; i < 20; i++) await call(i);
    await sleep(500);
    const before = svc.rssBytes();
    let peak = before;
    const sampler = setInterval(() => (peak = Math.max(peak, svc.rssBytes())), 50);
    let next = 20;
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        while (next < 420) await call(next++);
      }),
    );
    await sleep(500);
    clearInterval(sampler);
    const metrics = await (await fetch(`http://127.0.0.1:${svc.httpPort}/metrics`)).text();
    const counter = (name: string): number =>
      Number(
        metrics
          .split('\n')
          .find((l) => l.startsWith(`${name} `))
          ?.split(' ')[1] ?? 0,
      );
    return {
      rssGrowth: peak - before,
      droppedLines: counter('ratelimit_service_statsd_dropped_lines_total'),
      droppedBytes: counter('ratelimit_service_statsd_dropped_bytes_total'),
      warned: svc.lines.some((l) => String(l.msg).startsWith('statsd send failed') && String(l.err).includes('STATSD_MAX_QUEUED_BYTES')),
    };
  } finally {
    await svc.stop();
    for (const s of sockets) s.destroy();
    agent.close();
  }
}

describe('statsd over TCP to an agent that never reads', () => {
  it('costs the service at most STATSD_MAX_QUEUED_BYTES and counts the lines it drops', async () => {
    const stalled = await run(true);
    const without = await run(false);
    process.stdout.write(
      `400 calls of 400 detailed_metric values: RSS peak +${(stalled.rssGrowth / MIB).toFixed(1)} MiB with a statsd agent not reading, ` +
        `+${(without.rssGrowth / MIB).toFixed(1)} MiB without statsd; ${stalled.droppedLines} lines (${(stalled.droppedBytes / MIB).toFixed(1)} MiB) dropped\n`,
    );
    // Tens of times the bound and the kernel's socket buffers were sent while the agent did not read ...
    expect(stalled.droppedBytes).toBeGreaterThan(48 * MIB);
    expect(stalled.droppedLines).toBeGreaterThan(150_000);
    expect(stalled.warned).toBe(true);
    // ... and the service grew by what the calls and the statsd lines built for them cost (up to 32 MiB
    // more than without statsd: runs of the same calls differ by 15 MiB), not by the lines it could not
    // send, which alone are more than the margin.
    expect(stalled.rssGrowth - without.rssGrowth).toBeLessThan(48 * MIB);
    // 33 s at load average 7 beside the other test files, 72 s at 15: the work is fixed, the time is not.
  }, 150_000);
});
