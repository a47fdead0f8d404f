import * as fs from 'node:fs';
import * as net from 'node:net';
import { performance } from 'node:perf_hooks';
import type { H2Stream } from '../../../src/http2/connection';
import { CONNECTION_PREFACE, ErrorCode, Flag, frame, FrameType, Setting, settingsFrame, wordFrame } from '../../../src/http2/frames';
import { encodeHeaderBlock } from '../../../src/http2/hpack';
import { H2Server, type H2ServerOptions } from '../../../src/http2/server';
import { WindowBudget } from '../../../src/http2/window-budget';
import { makeTestCerts } from '../../helpers/certs';
import { dataFrame, headersFrame, isType, legitRoundTrip, RawClient, REQUEST, RESPONSE, TRAILERS } from '../../helpers/h2-raw-client';

/**
 * The HTTP/2 layer under the known denial-of-service patterns, each from one connection with a
 * well-behaved connection beside it: the attacker is cut off (GOAWAY with the code, then the
 * socket closes), what it made the server hold stays bounded, and the other connection is still
 * answered promptly.
 */

const pause = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
// Generous for a loaded 2-core machine; an unbounded attack costs seconds (or the process).
const LEGIT_MAX_MS = 1000;

describe('the HTTP/2 layer under attack', () => {
  let server: H2Server;
  let port: number;
  // Streams opened on the path only attackers use.
  let attackerOpened = 0;
  const held: H2Stream[] = [];

  async function start(options: Partial<H2ServerOptions> = {}): Promise<void> {
    attackerOpened = 0;
    server = new H2Server({
      maxConcurrentStreams: 100,
      initialWindowSize: 65_536,
      connectionWindowSize: 1 << 20,
      maxHeaderListSize: 16 * 1024,
      ...options,
      onStream:
        options.onStream ??
        ((stream, headers) => {
          const path = headers[headers.indexOf(':path') + 1];
          if (path.startsWith('/attack')) attackerOpened++;
          // '/hold', '/attack-hold': the request is kept unanswered (a handler still deciding).
          if (path.endsWith('hold')) {
            held.push(stream);
            return;
          }
          const chunks: Buffer[] = [];
          stream.onData = (c) => chunks.push(Buffer.from(c));
          stream.onEnd = () => {
            stream.respond(RESPONSE, false);
            stream.write(Buffer.concat(chunks));
            stream.end(TRAILERS);
          };
        }),
    });
    port = await server.listen('127.0.0.1', 0);
  }

  afterEach(async () => {
    held.length = 0;
    await server.close(100);
  });

  /** Round trips of a legit client, one after another, while `attack` runs; the slowest, ms. */
  async function slowestBeside(attack: Promise<unknown>): Promise<number> {
    let done = false;
    const attacking = attack.finally(() => (done = true));
    let slowest = 0;
    do slowest = Math.max(slowest, await legitRoundTrip(port));
    while (!done);
    await attacking;
    return slowest;
  }

  /** Writes frames from `next` (given a counter) until the server closes the socket, or `max` rounds. */
  async function flood(client: RawClient, next: (i: number) => Buffer, max: number): Promise<number> {
    let i = 0;
    while (!client.closed && client.goaway() === undefined && i < max) {
      const batch: Buffer[] = [];
      for (let k = 0; k < 100 && i < max; k++) batch.push(next(i++));
      if (!client.socket.write(Buffer.concat(batch))) await new Promise((r) => client.socket.once('drain', r).once('close', r));
      // Let the server's answers (GOAWAY among them) arrive between batches.
      await new Promise((r) => setImmediate(r));
    }
    return i;
  }

  const HOLD = encodeHeaderBlock([
    [':method', 'POST'],
    [':scheme', 'http'],
    [':path', '/hold'],
    [':authority', 'localhost'],
  ]);
  const ATTACK = encodeHeaderBlock([
    [':method', 'POST'],
    [':scheme', 'http'],
    [':path', '/attack'],
    [':authority', 'localhost'],
  ]);
  const ATTACK_HOLD = encodeHeaderBlock([
    [':method', 'POST'],
    [':scheme', 'http'],
    [':path', '/attack-hold'],
    [':authority', 'localhost'],
  ]);

  it('rapid reset: streams opened and reset at once cost the connection past 1,000 (GOAWAY ENHANCE_YOUR_CALM)', async () => {
    await start();
    const attacker = await RawClient.connect(port);
    const heapBefore = process.memoryUsage().heapUsed;
    const started = performance.now();
    const attack = flood(
      attacker,
      (i) => Buffer.concat([headersFrame(2 * i + 1, Flag.END_HEADERS, ATTACK_HOLD), wordFrame(FrameType.RST_STREAM, 2 * i + 1, ErrorCode.CANCEL)]),
      100_000,
    );
    const slowest = await slowestBeside(attack);
    await attacker.waitClosed();
    const seconds = (performance.now() - started) / 1000;
    expect(attacker.goaway()?.code).toBe(ErrorCode.ENHANCE_YOUR_CALM);
    // The budget: 1,000 at once and 33 a second, plus what one read of the socket carries.
    expect(attackerOpened).toBeLessThanOrEqual(1000 + 33 * seconds + 200);
    expect(attackerOpened).toBeGreaterThanOrEqual(1000);
    expect(process.memoryUsage().heapUsed - heapBefore).toBeLessThan(64 * 1024 * 1024);
    expect(slowest).toBeLessThan(LEGIT_MAX_MS);
  });

  it('a client resetting its streams now and then (cancellations) keeps its connection', async () => {
    await start({ resetBurst: 20, resetsPerSecond: 100 });
    const client = await RawClient.connect(port);
    for (let i = 0; i < 30; i++) {
      client.send(headersFrame(2 * i + 1, Flag.END_HEADERS, HOLD), wordFrame(FrameType.RST_STREAM, 2 * i + 1, ErrorCode.CANCEL));
      await pause(20);
    }
    client.send(headersFrame(61, Flag.END_HEADERS), dataFrame(61, Buffer.from('still served')));
    expect(await client.waitFor((f) => f.type === FrameType.HEADERS && f.streamId === 61 && (f.flags & Flag.END_STREAM) !== 0)).toBeDefined();
    expect(client.goaway()).toBeUndefined();
    client.close();
  });

  it('zero window: a client that never reads its answers fills its streams, then its refusals cut it (GOAWAY ENHANCE_YOUR_CALM)', async () => {
    await start({ maxConcurrentStreams: 50, resetBurst: 200 });
    const socket = net.connect(port, '127.0.0.1');
    await new Promise((r) => socket.once('connect', r));
    const attacker = new RawClient(socket);
    attacker.send(Buffer.concat([CONNECTION_PREFACE, settingsFrame([[Setting.INITIAL_WINDOW_SIZE, 0]])]));
    const started = performance.now();
    const attack = flood(
      attacker,
      (i) => Buffer.concat([headersFrame(2 * i + 1, Flag.END_HEADERS, ATTACK), dataFrame(2 * i + 1, Buffer.from('answer me'))]),
      100_000,
    );
    const slowest = await slowestBeside(attack);
    await attacker.waitClosed();
    const seconds = (performance.now() - started) / 1000;
    expect(attacker.goaway()?.code).toBe(ErrorCode.ENHANCE_YOUR_CALM);
    // The burst of 200, the refusal that overdraws it, and what the budget refills meanwhile (33/s;
    // a loaded machine stretches the attack over seconds).
    expect(attacker.frames.filter((f) => f.type === FrameType.RST_STREAM && f.payload.readUInt32BE(0) === ErrorCode.REFUSED_STREAM).length).toBeLessThanOrEqual(
      201 + Math.ceil(33 * seconds),
    );
    // Streams held: at most the concurrency limit, each with its answer's headers and no DATA.
    expect(attackerOpened).toBeLessThanOrEqual(50);
    expect(attacker.frames.filter((f) => f.type === FrameType.DATA)).toEqual([]);
    expect(slowest).toBeLessThan(LEGIT_MAX_MS);
  });

  it('header lists over the limit, again and again: each stream is refused, then the connection is cut (GOAWAY ENHANCE_YOUR_CALM)', async () => {
    await start({ maxHeaderListSize: 4096 });
    const attacker = await RawClient.connect(port);
    const big = encodeHeaderBlock([
      [':method', 'POST'],
      [':scheme', 'http'],
      [':path', '/attack'],
      ['x-big', 'a'.repeat(5000)],
    ]);
    const attack = flood(attacker, (i) => headersFrame(2 * i + 1, Flag.END_HEADERS | Flag.END_STREAM, big), 10_000);
    const slowest = await slowestBeside(attack);
    await attacker.waitClosed();
    expect(attacker.goaway()?.code).toBe(ErrorCode.ENHANCE_YOUR_CALM);
    const refusals = attacker.frames.filter((f) => f.type === FrameType.RST_STREAM);
    expect(refusals.length).toBeGreaterThanOrEqual(5);
    expect(refusals.length).toBeLessThanOrEqual(11);
    expect(refusals.every((f) => f.payload.readUInt32BE(0) === ErrorCode.ENHANCE_YOUR_CALM)).toBe(true);
    expect(attackerOpened).toBe(0);
    expect(slowest).toBeLessThan(LEGIT_MAX_MS);
  });

  it('an HPACK bomb (one large table entry referenced over and over) is refused and then cut, the memory it asks for never allocated', async () => {
    await start({ maxHeaderListSize: 16 * 1024 });
    const attacker = await RawClient.connect(port);
    // Stream 1 stores a 4,000-octet value in the dynamic table (literal with incremental indexing, new name).
    const value = Buffer.alloc(4000, 0x62);
    const insert = Buffer.concat([
      REQUEST,
      Buffer.from([0x40, 0x05]),
      Buffer.from('x-bmb'),
      Buffer.from([0x7f, 0xa1, 0x1e]) /* 4000 = 127 + 0x21 + 30 * 128 */,
      value,
    ]);
    attacker.send(headersFrame(1, Flag.END_HEADERS | Flag.END_STREAM, insert));
    // Each next block: the request, and the entry (index 62) 4,000 times: 16 MB decoded from 4 kB.
    const bomb = Buffer.concat([ATTACK, Buffer.alloc(4000, 0x80 | 62)]);
    const heapBefore = process.memoryUsage().heapUsed;
    const attack = flood(attacker, (i) => headersFrame(2 * i + 3, Flag.END_HEADERS | Flag.END_STREAM, bomb), 10_000);
    const slowest = await slowestBeside(attack);
    await attacker.waitClosed();
    expect(attacker.goaway()?.code).toBe(ErrorCode.ENHANCE_YOUR_CALM);
    expect(attackerOpened).toBe(0);
    expect(process.memoryUsage().heapUsed - heapBefore).toBeLessThan(64 * 1024 * 1024);
    expect(slowest).toBeLessThan(LEGIT_MAX_MS);
  });

  it('request bodies: a stream window reopens only as the body is consumed, so unfinished bodies pin at most the connection window', async () => {
    await start({ initialWindowSize: 65_536, connectionWindowSize: 256 * 1024 });
    const attacker = await RawClient.connect(port);
    // Ten streams, each sent its whole window of body and never ended: the server may hold 640 KiB...
    const chunk = Buffer.alloc(16_000, 0x61);
    for (let s = 0; s < 10; s++) {
      const id = 2 * s + 1;
      attacker.send(headersFrame(id, Flag.END_HEADERS, HOLD));
      for (let k = 0; k < 4; k++) attacker.send(dataFrame(id, chunk, 0));
      await pause(5);
    }
    // ...but the connection window is 256 KiB: past it, FLOW_CONTROL_ERROR; no window came back
    // beyond the first one that opened the connection window to 256 KiB.
    await attacker.waitClosed();
    expect(attacker.goaway()?.code).toBe(ErrorCode.FLOW_CONTROL_ERROR);
    expect(attacker.frames.filter((f) => f.type === FrameType.WINDOW_UPDATE).map((f) => [f.streamId, f.payload.readUInt32BE(0)])).toEqual([
      [0, 256 * 1024 - 65_535],
    ]);
    expect(await legitRoundTrip(port)).toBeLessThan(LEGIT_MAX_MS);
  });

  it('request bodies: connections share one window budget, so many connections pin at most 65,535 bytes each beyond it', async () => {
    const windowBudget = new WindowBudget(600_000);
    await start({ initialWindowSize: 65_536, connectionWindowSize: 65_535 + 400_000, windowBudget });
    const connectionWindow = (c: RawClient): number =>
      65_535 + c.frames.filter(isType(FrameType.WINDOW_UPDATE, 0)).reduce((sum, f) => sum + f.payload.readUInt32BE(0), 0);
    const settled = async (c: RawClient): Promise<void> => void (await c.waitFor((f) => f.type === FrameType.SETTINGS && f.flags === Flag.ACK));
    // The first connection gets its whole window, the second what is left, the third the protocol's own.
    const first = await RawClient.connect(port);
    await settled(first);
    const second = await RawClient.connect(port);
    await settled(second);
    const third = await RawClient.connect(port);
    await settled(third);
    expect([connectionWindow(first), connectionWindow(second), connectionWindow(third)]).toEqual([465_535, 265_535, 65_535]);
    expect(windowBudget.lentBytes).toBe(600_000);
    // The third may not send past its 65,535 bytes: held bodies of 80,000 bytes end it.
    third.send(headersFrame(1, Flag.END_HEADERS, HOLD), dataFrame(1, Buffer.alloc(16_000), 0), dataFrame(1, Buffer.alloc(16_000), 0));
    third.send(headersFrame(3, Flag.END_HEADERS, HOLD), dataFrame(3, Buffer.alloc(16_000), 0), dataFrame(3, Buffer.alloc(16_000), 0));
    third.send(headersFrame(5, Flag.END_HEADERS, HOLD), dataFrame(5, Buffer.alloc(16_000), 0));
    await third.waitClosed();
    expect(third.goaway()?.code).toBe(ErrorCode.FLOW_CONTROL_ERROR);
    // A closed connection gives its share back; a starved one takes it as soon as it releases bytes.
    const starved = await RawClient.connect(port);
    await settled(starved);
    expect(connectionWindow(starved)).toBe(65_535);
    first.close();
    await first.waitClosed();
    for (let i = 0; i < 50 && windowBudget.lentBytes > 200_000; i++) await pause(10);
    expect(windowBudget.lentBytes).toBe(200_000);
    // 48,000 bytes: past half its window, so their release is returned (with what it now borrows).
    starved.send(
      headersFrame(1, Flag.END_HEADERS),
      dataFrame(1, Buffer.alloc(16_000), 0),
      dataFrame(1, Buffer.alloc(16_000), 0),
      dataFrame(1, Buffer.alloc(16_000)),
    );
    await starved.waitFor(isType(FrameType.WINDOW_UPDATE, 0));
    expect(connectionWindow(starved)).toBe(465_535 + 48_000);
    expect(windowBudget.lentBytes).toBe(600_000);
    second.close();
    starved.close();
  });

  it('request bodies: one stream sending past its window is reset with FLOW_CONTROL_ERROR', async () => {
    await start({ initialWindowSize: 16_384 });
    const client = await RawClient.connect(port);
    client.send(frame(FrameType.SETTINGS, Flag.ACK, 0));
    client.send(headersFrame(1, Flag.END_HEADERS, HOLD), dataFrame(1, Buffer.alloc(16_000), 0), dataFrame(1, Buffer.alloc(1000), 0));
    const rst = await client.waitFor(isType(FrameType.RST_STREAM, 1));
    expect(rst?.payload.readUInt32BE(0)).toBe(ErrorCode.FLOW_CONTROL_ERROR);
    client.close();
  });

  it('request bodies: ended requests give their bytes back, so a client keeping to the windows is never stalled', async () => {
    await start({ initialWindowSize: 65_536, connectionWindowSize: 65_535 });
    // This client reads whatever the server sends (the echoed bodies): its own windows are wide open.
    const client = await RawClient.connect(port, [[Setting.INITIAL_WINDOW_SIZE, 0x7fff_ffff]]);
    client.send(wordFrame(FrameType.WINDOW_UPDATE, 0, 0x7fff_ffff - 65_535));
    const body = Buffer.alloc(15_000, 0x61);
    // 40 requests of 15 kB on a 64 kB connection window: only possible if the window comes back.
    let windowLeft = 65_535;
    for (let i = 0; i < 40; i++) {
      const id = 2 * i + 1;
      while (windowLeft < body.length) {
        const updates = client.frames.filter(isType(FrameType.WINDOW_UPDATE, 0));
        windowLeft = 65_535 - 15_000 * i + updates.reduce((sum, f) => sum + f.payload.readUInt32BE(0), 0);
        if (windowLeft < body.length) await client.waitFor(() => client.frames.filter(isType(FrameType.WINDOW_UPDATE, 0)).length > updates.length, 2000);
      }
      client.send(headersFrame(id, Flag.END_HEADERS), dataFrame(id, body));
      windowLeft -= body.length;
    }
    expect(await client.waitFor((f) => f.type === FrameType.HEADERS && f.streamId === 79 && (f.flags & Flag.END_STREAM) !== 0, 5000)).toBeDefined();
    expect(client.goaway()).toBeUndefined();
    client.close();
  });

  it('request bodies: consume() reopens the stream window by what the application has read', async () => {
    let stream: H2Stream | undefined;
    await start({
      initialWindowSize: 16_384,
      onStream: (s) => {
        stream = s;
        s.onData = (chunk) => s.consume(chunk.length);
      },
    });
    const client = await RawClient.connect(port);
    client.send(headersFrame(1, Flag.END_HEADERS), dataFrame(1, Buffer.alloc(10_000), 0));
    const update = await client.waitFor(isType(FrameType.WINDOW_UPDATE, 1));
    expect(update?.payload.readUInt32BE(0)).toBe(10_000);
    expect(stream).toBeDefined();
    client.close();
  });

  it('closes a connection idle past the idle timeout with GOAWAY NO_ERROR, and keeps one with a stream open', async () => {
    await start({ idleTimeoutMs: 400 });
    const idle = await RawClient.connect(port);
    const busy = await RawClient.connect(port);
    busy.send(headersFrame(1, Flag.END_HEADERS | Flag.END_STREAM, HOLD));
    const started = performance.now();
    await idle.waitClosed(3000);
    const after = performance.now() - started;
    expect(idle.goaway()).toEqual({ lastStreamId: 0, code: ErrorCode.NO_ERROR });
    expect(after).toBeGreaterThanOrEqual(300);
    await pause(600);
    expect(busy.closed).toBe(false);
    expect(busy.goaway()).toBeUndefined();
    busy.close();
  });

  it.each([
    ['sends nothing at all', (s: net.Socket): void => void s],
    [
      'sends its preface one byte at a time',
      (s: net.Socket): void => {
        let i = 0;
        const timer: NodeJS.Timeout = setInterval((): void => {
          if (i < CONNECTION_PREFACE.length && !s.destroyed) s.write(CONNECTION_PREFACE.subarray(i, ++i));
          else clearInterval(timer);
        }, 100);
      },
    ],
    ['sends the preface but no SETTINGS', (s: net.Socket): void => void s.write(CONNECTION_PREFACE)],
  ] as const)('cuts a connection that %s within the handshake timeout', async (_name, behave) => {
    await start({ handshakeTimeoutMs: 300 });
    const socket = net.connect(port, '127.0.0.1');
    await new Promise((r) => socket.once('connect', r));
    const client = new RawClient(socket);
    const started = performance.now();
    behave(socket);
    await client.waitClosed(3000);
    expect(performance.now() - started).toBeGreaterThanOrEqual(250);
    expect(await legitRoundTrip(port)).toBeLessThan(LEGIT_MAX_MS);
  });

  it('cuts a TLS connection that never finishes its handshake within the handshake timeout', async () => {
    const certs = makeTestCerts();
    await start({ handshakeTimeoutMs: 300, tls: { cert: fs.readFileSync(certs.serverCert), key: fs.readFileSync(certs.serverKey) } });
    // Timed from before the connect: the server's timer starts when it accepts, which a loaded machine
    // may report to this client long after; a timer may fire up to a millisecond early.
    const started = performance.now();
    const socket = net.connect(port, '127.0.0.1');
    await new Promise((r) => socket.once('connect', r));
    const closed = await Promise.race([new Promise((r) => socket.once('close', () => r(true))), pause(3000).then(() => false)]);
    socket.destroy();
    certs.remove();
    expect(closed).toBe(true);
    expect(performance.now() - started).toBeGreaterThanOrEqual(299);
  });

  it('HEADERS on a stream id below one already used is a connection error (PROTOCOL_ERROR)', async () => {
    await start();
    const client = await RawClient.connect(port);
    client.send(headersFrame(7), headersFrame(3));
    await client.waitClosed();
    expect(client.goaway()).toEqual({ lastStreamId: 7, code: ErrorCode.PROTOCOL_ERROR });
  });
});
