import { connect, createServer, type Server, type Socket } from 'node:net';
import { startDelayProxy, type DelayProxy } from '../../../bench/delay-proxy';

/**
 * The delay proxy (bench/delay-proxy.ts) measured: each direction's delay within a tolerance, bytes
 * in order whatever the delays do, a partition that passes nothing and keeps connections open, and
 * a heal that delivers what was held.
 */

// A chunk may arrive late by a timer's lateness and a loaded machine's turn; never early.
const EARLY_MS = 2;
const LATE_MS = 60;

/** A server that records what it receives (with when) and lets the test write to each connection. */
interface Target {
  readonly port: number;
  readonly sockets: Socket[];
  readonly received: { readonly at: number; readonly data: Buffer }[];
  bytes(): Buffer;
  close(): Promise<void>;
}

async function startTarget(): Promise<Target> {
  const sockets: Socket[] = [];
  const received: { at: number; data: Buffer }[] = [];
  const server: Server = createServer((socket) => {
    sockets.push(socket);
    socket.on('data', (data) => received.push({ at: performance.now(), data }));
    socket.on('error', () => {});
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return {
    port: (server.address() as { port: number }).port,
    sockets,
    received,
    bytes: () => Buffer.concat(received.map((r) => r.data)),
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** A client connected through the proxy, recording what it receives. */
async function client(proxy: DelayProxy): Promise<{ socket: Socket; received: { at: number; data: Buffer }[]; closed: () => boolean; bytes(): Buffer }> {
  const socket = connect(proxy.port, '127.0.0.1');
  const received: { at: number; data: Buffer }[] = [];
  let closed = false;
  socket.on('data', (data) => received.push({ at: performance.now(), data }));
  socket.on('close', () => (closed = true));
  socket.on('error', () => {});
  await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
  return { socket, received, closed: () => closed, bytes: () => Buffer.concat(received.map((r) => r.data)) };
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

async function until(what: string, check: () => boolean, timeoutMs = 5_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(2);
  }
}

describe('the delay proxy', () => {
  let target: Target;
  let proxy: DelayProxy;

  beforeEach(async () => {
    target = await startTarget();
  });

  afterEach(async () => {
    await proxy?.close();
    await target?.close();
  });

  it('delays each direction by its own one-way delay', async () => {
    proxy = await startDelayProxy({ targetPort: target.port, requestDelayMs: 60, replyDelayMs: 130 });
    expect(proxy.address).toBe(`127.0.0.1:${proxy.port}`);
    const c = await client(proxy);
    await until('the connection to reach the target', () => target.sockets.length === 1);
    for (let i = 0; i < 5; i++) {
      const sent = performance.now();
      c.socket.write(`ping ${i}`);
      await until('the request', () => target.received.length === i + 1);
      const requestMs = target.received[i].at - sent;
      expect(requestMs).toBeGreaterThanOrEqual(60 - EARLY_MS);
      expect(requestMs).toBeLessThan(60 + LATE_MS);
      const answered = performance.now();
      target.sockets[0].write(`pong ${i}`);
      await until('the reply', () => c.received.length === i + 1);
      const replyMs = c.received[i].at - answered;
      expect(replyMs).toBeGreaterThanOrEqual(130 - EARLY_MS);
      expect(replyMs).toBeLessThan(130 + LATE_MS);
    }
    expect(c.bytes().toString()).toBe('pong 0pong 1pong 2pong 3pong 4');
  });

  it('keeps the order of every byte while the delay changes, in both directions', async () => {
    proxy = await startDelayProxy({ targetPort: target.port, delayMs: 150 });
    const c = await client(proxy);
    await until('the connection to reach the target', () => target.sockets.length === 1);
    const sentUp: Buffer[] = [];
    const sentDown: Buffer[] = [];
    for (let i = 0; i < 400; i++) {
      // From 150 ms down to 50 ms and back up: a later chunk with a shorter delay waits for the one ahead.
      if (i % 50 === 0) proxy.setDelay({ requestDelayMs: 50 + ((i / 50) % 3) * 50, replyDelayMs: 150 - ((i / 50) % 3) * 50 });
      const up = Buffer.from(`u${i};`.repeat(1 + (i % 7)));
      const down = Buffer.from(`d${i};`.repeat(1 + (i % 5)));
      sentUp.push(up);
      sentDown.push(down);
      c.socket.write(up);
      target.sockets[0].write(down);
      if (i % 20 === 0) await sleep(5);
    }
    const up = Buffer.concat(sentUp);
    const down = Buffer.concat(sentDown);
    await until('every byte both ways', () => target.bytes().length === up.length && c.bytes().length === down.length);
    expect(target.bytes().equals(up)).toBe(true);
    expect(c.bytes().equals(down)).toBe(true);
  });

  it('passes nothing during a partition, keeps the connections open, and delivers what was held in order after heal', async () => {
    proxy = await startDelayProxy({ targetPort: target.port, delayMs: 50 });
    const c = await client(proxy);
    await until('the connection to reach the target', () => target.sockets.length === 1);
    c.socket.write('before;');
    await until('the first request', () => target.bytes().toString() === 'before;');

    proxy.partition();
    expect(proxy.partitioned).toBe(true);
    c.socket.write('held-1;');
    c.socket.write('held-2;');
    target.sockets[0].write('reply-held;');
    // A connection made during the partition is taken, and held as well.
    const late = await client(proxy);
    late.socket.write('late;');
    await sleep(400);
    expect(target.bytes().toString()).toBe('before;');
    expect(c.received).toEqual([]);
    expect(c.closed()).toBe(false);
    expect(late.closed()).toBe(false);
    expect(proxy.connections()).toBe(2);

    const healed = performance.now();
    proxy.heal();
    expect(proxy.partitioned).toBe(false);
    await until('the held bytes', () => c.bytes().toString() === 'reply-held;' && target.bytes().toString().includes('late;'));
    // Held past their delay already: they go at once, in order, each connection's after its own earlier bytes.
    expect(performance.now() - healed).toBeLessThan(LATE_MS);
    const atTarget = target.bytes().toString();
    expect(atTarget.startsWith('before;')).toBe(true);
    expect(atTarget.replace('late;', '')).toBe('before;held-1;held-2;');

    // And traffic flows with its delay again.
    const sent = performance.now();
    c.socket.write('after;');
    await until('a request after the heal', () => target.bytes().toString().endsWith('after;'));
    expect(target.received[target.received.length - 1].at - sent).toBeGreaterThanOrEqual(50 - EARLY_MS);
  });

  it('resets the open connections on disconnect(), a connection over maxHeldBytes, and everything on close()', async () => {
    proxy = await startDelayProxy({ targetPort: target.port, delayMs: 10, maxHeldBytes: 64 * 1024 });
    const a = await client(proxy);
    await until('the connection to reach the target', () => target.sockets.length === 1);
    proxy.disconnect();
    await until('the client to see its connection closed', () => a.closed());
    expect(proxy.connections()).toBe(0);

    const b = await client(proxy);
    await until('a new connection to reach the target', () => target.sockets.length === 2);
    proxy.partition();
    b.socket.write(Buffer.alloc(100 * 1024, 1));
    await until('the connection over its held bytes to be reset', () => b.closed());
    proxy.heal();

    const c = await client(proxy);
    await until('a third connection', () => proxy.connections() === 1);
    await proxy.close();
    await until('close() to reset it', () => c.closed());
  });
});
