import * as net from 'node:net';
import type { AddressInfo } from 'node:net';
import { TcpStatsdClient } from '../../../src/metrics/statsd-tcp';

/**
 * The plain statsd client against a real TCP agent on 127.0.0.1: an agent that stops reading costs
 * at most STATSD_MAX_QUEUED_BYTES, every line is either delivered or counted as dropped, and
 * delivery resumes once the agent reads again.
 */

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Agent {
  readonly port: number;
  /** Lines received so far. */
  lines(): number;
  pause(): void;
  resume(): void;
  close(): void;
}

async function agent(): Promise<Agent> {
  let count = 0;
  const sockets = new Set<net.Socket>();
  let paused = false;
  const server = net.createServer((socket) => {
    sockets.add(socket);
    if (paused) socket.pause();
    socket.on('data', (chunk: Buffer) => {
      for (const byte of chunk) if (byte === 0x0a) count++;
    });
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    lines: () => count,
    pause: () => {
      paused = true;
      for (const s of sockets) s.pause();
    },
    resume: () => {
      paused = false;
      for (const s of sockets) s.resume();
    },
    close: () => {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}

async function until(check: () => boolean, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check() && Date.now() < deadline) await sleep(20);
}

describe('statsd over TCP to an agent that stops reading', () => {
  it('holds at most maxQueuedBytes, counts every line it drops, and delivers again once the agent reads', async () => {
    const a = await agent();
    const maxQueuedBytes = 64 * 1024;
    const client = new TcpStatsdClient({ host: '127.0.0.1', port: a.port, maxQueuedBytes, flushIntervalMs: 10 });
    try {
      client.increment('warm', 1);
      await until(() => a.lines() === 1, 2_000);
      a.pause();
      // 100-byte lines until the kernel's buffers are full and the client has dropped some.
      const name = `ratelimit.service.rate_limit.edge.${'v'.repeat(72)}`;
      let sent = 1;
      let highest = 0;
      while (client.drops().lines < 1_000 && sent < 2_000_000) {
        for (let i = 0; i < 1_000; i++) client.increment(name, 1);
        sent += 1_000;
        highest = Math.max(highest, client.queuedBytes());
        await sleep(1);
      }
      expect(client.drops().lines).toBeGreaterThanOrEqual(1_000);
      expect(highest).toBeLessThanOrEqual(maxQueuedBytes);
      expect(client.drops().bytes).toBe(client.drops().lines * (name.length + 5));

      a.resume();
      await until(() => client.queuedBytes() === 0 && a.lines() === sent - client.drops().lines, 5_000);
      expect(a.lines()).toBe(sent - client.drops().lines);
      const dropped = client.drops().lines;
      client.increment('after', 1);
      await until(() => a.lines() === sent + 1 - dropped, 2_000);
      expect(a.lines()).toBe(sent + 1 - dropped);
    } finally {
      client.close();
      a.close();
    }
  });

  it('keeps lines within the bound while there is no agent, and sends them once it can connect', async () => {
    const a = await agent();
    const port = a.port;
    a.close();
    await sleep(50);
    const client = new TcpStatsdClient({ host: '127.0.0.1', port, maxQueuedBytes: 1024, flushIntervalMs: 10, reconnectDelayMs: 50 });
    try {
      // 100 lines of 11 or 12 bytes, 1,190 in all: the first ones up to 1,024 bytes wait, the rest are dropped.
      for (let i = 0; i < 100; i++) client.increment(`line.${i}`, 1);
      expect(client.queuedBytes()).toBeLessThanOrEqual(1024);
      expect(client.drops().lines).toBeGreaterThan(0);
      const server = net.createServer((socket) => socket.on('data', (chunk: Buffer) => received.push(chunk.toString())));
      const received: string[] = [];
      await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
      try {
        await until(() => received.join('').split('\n').length - 1 === 100 - client.drops().lines, 3_000);
        expect(received.join('').startsWith('line.0:1|c\nline.1:1|c\n')).toBe(true);
        expect(received.join('').split('\n').length - 1).toBe(100 - client.drops().lines);
      } finally {
        client.close();
        server.close();
      }
    } finally {
      client.close();
    }
  });

  it('sends what is waiting when closed', async () => {
    const a = await agent();
    const client = new TcpStatsdClient({ host: '127.0.0.1', port: a.port, maxQueuedBytes: 1 << 20, flushIntervalMs: 60_000 });
    await sleep(100);
    client.increment('a', 1);
    client.timing('b', 3);
    await new Promise<void>((resolve) => client.close(() => resolve()));
    await until(() => a.lines() === 2, 2_000);
    expect(a.lines()).toBe(2);
    a.close();
  });
});
