import fc from 'fast-check';
import * as net from 'node:net';
import type { H2Stream } from '../../../src/http2/connection';
import { ErrorCode, Flag, frame, FrameType, Setting, settingsFrame, wordFrame } from '../../../src/http2/frames';
import { encodeHeaderBlock } from '../../../src/http2/hpack';
import { H2Server, type H2ServerOptions } from '../../../src/http2/server';
import { dataFrame, headersFrame, isType, legitRoundTrip, RawClient, REQUEST, RESPONSE, TRAILERS } from '../../helpers/h2-raw-client';

/**
 * The HTTP/2 connection layer from a raw socket: the frame-level behaviour no well-behaved client
 * shows (CONTINUATION, padding, small windows, resets, protocol errors) and graceful GOAWAY.
 */

describe('the HTTP/2 connection layer', () => {
  let server: H2Server;
  let port: number;
  const seen: Array<{ stream: H2Stream; headers: readonly string[] }> = [];
  // What the handler answers: by default the request body echoed back with trailers.
  let reply: (stream: H2Stream, body: Buffer) => void;
  const aborted: number[] = [];

  async function start(options: Partial<H2ServerOptions> = {}): Promise<void> {
    server = new H2Server({
      maxConcurrentStreams: 100,
      initialWindowSize: 1 << 20,
      connectionWindowSize: 1 << 20,
      maxHeaderListSize: 16 * 1024,
      ...options,
      onStream: (stream, headers) => {
        seen.push({ stream, headers });
        const chunks: Buffer[] = [];
        stream.onData = (c) => chunks.push(Buffer.from(c));
        stream.onEnd = () => reply(stream, Buffer.concat(chunks));
        stream.onAbort = () => aborted.push(stream.id);
      },
    });
    port = await server.listen('127.0.0.1', 0);
  }

  beforeEach(() => {
    seen.length = 0;
    aborted.length = 0;
    reply = (stream, body) => {
      stream.respond(RESPONSE, false);
      stream.write(body);
      stream.end(TRAILERS);
    };
  });

  afterEach(async () => {
    await server.close(100);
  });

  it('acknowledges SETTINGS and answers PING with the same payload', async () => {
    await start();
    const client = await RawClient.connect(port);
    client.send(frame(FrameType.PING, 0, 0, Buffer.from('12345678')));
    expect(await client.waitFor((f) => f.type === FrameType.SETTINGS && f.flags === 0)).toBeDefined();
    expect(await client.waitFor((f) => f.type === FrameType.SETTINGS && f.flags === Flag.ACK)).toBeDefined();
    const pong = await client.waitFor((f) => f.type === FrameType.PING && f.flags === Flag.ACK);
    expect(pong?.payload.toString()).toBe('12345678');
    client.close();
  });

  it('answers a request split over HEADERS and CONTINUATION, with padding and priority, and a padded DATA', async () => {
    await start();
    const client = await RawClient.connect(port);
    const padding = Buffer.alloc(3);
    const priority = Buffer.from([0, 0, 0, 0, 16]);
    const head = Buffer.concat([Buffer.from([padding.length]), priority, REQUEST.subarray(0, 4), padding]);
    client.send(
      frame(FrameType.HEADERS, Flag.PADDED | Flag.PRIORITY, 1, head),
      frame(FrameType.CONTINUATION, 0, 1, REQUEST.subarray(4, 8)),
      frame(FrameType.CONTINUATION, Flag.END_HEADERS, 1, REQUEST.subarray(8)),
      frame(FrameType.DATA, Flag.PADDED | Flag.END_STREAM, 1, Buffer.concat([Buffer.from([2]), Buffer.from('hello'), Buffer.alloc(2)])),
    );
    const trailers = await client.waitFor((f) => f.type === FrameType.HEADERS && (f.flags & Flag.END_STREAM) !== 0);
    expect(trailers).toBeDefined();
    expect(seen[0].headers).toEqual([':method', 'POST', ':scheme', 'http', ':path', '/echo', ':authority', 'localhost', 'content-type', 'application/grpc']);
    const data = client.frames.filter(isType(FrameType.DATA, 1));
    expect(Buffer.concat(data.map((f) => f.payload)).toString()).toBe('hello');
    const headers = client.frames.filter(isType(FrameType.HEADERS, 1));
    expect(client.decode(headers[0])).toEqual([':status', '200']);
    expect(client.decode(headers[1])).toEqual(['grpc-status', '0']);
    client.close();
  });

  it('holds DATA back until the client opens its window, and sends the trailers after it', async () => {
    await start();
    const client = await RawClient.connect(port, [[Setting.INITIAL_WINDOW_SIZE, 10]]);
    client.send(headersFrame(1, Flag.END_HEADERS), dataFrame(1, Buffer.from('0123456789abcdefghijklmnopqrstuvwxy')));
    await client.waitFor(isType(FrameType.DATA, 1));
    await new Promise((r) => setTimeout(r, 100));
    expect(client.frames.filter(isType(FrameType.DATA, 1)).map((f) => f.payload.toString())).toEqual(['0123456789']);
    expect(client.frames.filter(isType(FrameType.HEADERS, 1))).toHaveLength(1);
    client.send(wordFrame(FrameType.WINDOW_UPDATE, 1, 10));
    await new Promise((r) => setTimeout(r, 100));
    expect(client.frames.filter(isType(FrameType.DATA, 1)).map((f) => f.payload.toString())).toEqual(['0123456789', 'abcdefghij']);
    client.send(wordFrame(FrameType.WINDOW_UPDATE, 1, 100));
    const end = await client.waitFor((f) => f.type === FrameType.HEADERS && (f.flags & Flag.END_STREAM) !== 0);
    expect(end).toBeDefined();
    expect(Buffer.concat(client.frames.filter(isType(FrameType.DATA, 1)).map((f) => f.payload)).toString()).toBe('0123456789abcdefghijklmnopqrstuvwxy');
    client.close();
  });

  /** A connection with stream 1 open and its request ended, the answer left to the test. */
  async function holdOneStream(): Promise<{ client: RawClient; held: H2Stream }> {
    let held: H2Stream | undefined;
    reply = (stream) => (held = stream);
    await start();
    const client = await RawClient.connect(port);
    client.send(headersFrame(1));
    while (held === undefined) await new Promise((r) => setTimeout(r, 10));
    return { client, held };
  }

  it('tells the handler when the client resets a stream, and sends nothing more on it', async () => {
    const { client, held } = await holdOneStream();
    client.send(wordFrame(FrameType.RST_STREAM, 1, ErrorCode.CANCEL));
    while (aborted.length === 0) await new Promise((r) => setTimeout(r, 10));
    expect(aborted).toEqual([1]);
    held.respond(RESPONSE, true);
    client.send(frame(FrameType.PING, 0, 0, Buffer.alloc(8)));
    await client.waitFor((f) => f.type === FrameType.PING && f.flags === Flag.ACK);
    expect(client.frames.filter((f) => f.streamId === 1)).toEqual([]);
    client.close();
  });

  it('resets only the stream whose handler throws, and reports the error', async () => {
    const errors: unknown[] = [];
    reply = (stream, body) => {
      if (body.toString() === 'boom') throw new Error('handler bug');
      stream.respond(RESPONSE, true);
    };
    await start({ onError: (err) => errors.push(err) });
    const client = await RawClient.connect(port);
    client.send(headersFrame(1, Flag.END_HEADERS), dataFrame(1, Buffer.from('boom')), headersFrame(3));
    const rst = await client.waitFor(isType(FrameType.RST_STREAM, 1));
    expect(rst?.payload.readUInt32BE(0)).toBe(ErrorCode.INTERNAL_ERROR);
    expect(await client.waitFor(isType(FrameType.HEADERS, 3))).toBeDefined();
    expect(errors).toEqual([new Error('handler bug')]);
    client.close();
  });

  it('refuses streams beyond SETTINGS_MAX_CONCURRENT_STREAMS', async () => {
    reply = () => undefined;
    await start({ maxConcurrentStreams: 2 });
    const client = await RawClient.connect(port);
    client.send(headersFrame(1), headersFrame(3), headersFrame(5));
    const rst = await client.waitFor(isType(FrameType.RST_STREAM, 5));
    expect(rst?.payload.readUInt32BE(0)).toBe(ErrorCode.REFUSED_STREAM);
    expect(seen.map((s) => s.stream.id)).toEqual([1, 3]);
    client.close();
  });

  it('closes gracefully: GOAWAY names the last stream, which still gets its answer, then the socket ends', async () => {
    const { client, held } = await holdOneStream();
    const closing = server.close(2000);
    await client.waitFor(isType(FrameType.GOAWAY));
    expect(client.goaway()).toEqual({ lastStreamId: 1, code: ErrorCode.NO_ERROR });
    expect(client.closed).toBe(false);
    held.respond(RESPONSE, true);
    await client.waitClosed();
    await closing;
    expect(client.frames.filter(isType(FrameType.HEADERS, 1))).toHaveLength(1);
  });

  it.each([
    ['a bad connection preface', (c: RawClient) => c.send(Buffer.from('GET / HTTP/1.1\r\n\r\n')), ErrorCode.PROTOCOL_ERROR, false],
    [
      'a DATA frame in the middle of a header block',
      (c: RawClient) => c.send(headersFrame(1, 0), dataFrame(1, Buffer.from('x'))),
      ErrorCode.PROTOCOL_ERROR,
      true,
    ],
    [
      'a header block HPACK cannot decode',
      (c: RawClient) => c.send(headersFrame(1, Flag.END_HEADERS, Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]))),
      ErrorCode.COMPRESSION_ERROR,
      true,
    ],
    ['DATA on a stream never opened', (c: RawClient) => c.send(dataFrame(7, Buffer.from('x'))), ErrorCode.PROTOCOL_ERROR, true],
    ['a PING of the wrong size', (c: RawClient) => c.send(frame(FrameType.PING, 0, 0, Buffer.alloc(4))), ErrorCode.FRAME_SIZE_ERROR, true],
    [
      'a window update that overflows the connection window',
      (c: RawClient) => c.send(wordFrame(FrameType.WINDOW_UPDATE, 0, 0x7fffffff)),
      ErrorCode.FLOW_CONTROL_ERROR,
      true,
    ],
  ] as const)('ends the connection with GOAWAY on %s', async (_name, misbehave, code, withPreface) => {
    reply = () => undefined;
    await start();
    let client: RawClient;
    if (withPreface) {
      client = await RawClient.connect(port);
    } else {
      const socket = net.connect(port, '127.0.0.1');
      await new Promise((r) => socket.once('connect', r));
      client = new RawClient(socket);
    }
    misbehave(client);
    await client.waitClosed();
    expect(client.goaway()?.code).toBe(code);
  });

  /** Writes `chunk` until the server closes the socket (or `maxBytes` are out); bytes written. */
  async function flood(client: RawClient, chunk: Buffer, maxBytes: number): Promise<number> {
    let written = 0;
    while (!client.closed && written < maxBytes) {
      if (!client.socket.write(chunk)) await new Promise((r) => client.socket.once('drain', r).once('close', r));
      written += chunk.length;
    }
    return written;
  }

  it('cuts a connection that sends endless empty CONTINUATION frames (GOAWAY ENHANCE_YOUR_CALM), keeping memory bounded and others served', async () => {
    await start();
    const attacker = await RawClient.connect(port);
    attacker.send(headersFrame(1, 0, REQUEST.subarray(0, 4)));
    const emptyContinuations = Buffer.concat(Array.from({ length: 1000 }, () => frame(FrameType.CONTINUATION, 0, 1)));
    const heapBefore = process.memoryUsage().heapUsed;
    const written = await flood(attacker, emptyContinuations, 32 * 1024 * 1024);
    await attacker.waitClosed();
    expect(attacker.goaway()).toEqual({ lastStreamId: 0, code: ErrorCode.ENHANCE_YOUR_CALM });
    // Cut within its first frames: what it wrote after is never read.
    expect(written).toBeLessThan(32 * 1024 * 1024);
    expect(process.memoryUsage().heapUsed - heapBefore).toBeLessThan(64 * 1024 * 1024);
    expect(await legitRoundTrip(port)).toBeLessThan(1000);
  });

  it('cuts a connection whose header block stays open past the header block timeout', async () => {
    await start({ handshakeTimeoutMs: 200 });
    const attacker = await RawClient.connect(port);
    attacker.send(headersFrame(1, 0, REQUEST.subarray(0, 4)), frame(FrameType.CONTINUATION, 0, 1, REQUEST.subarray(4, 6)));
    const started = Date.now();
    await attacker.waitClosed(3000);
    expect(Date.now() - started).toBeGreaterThanOrEqual(150);
    expect(attacker.goaway()).toEqual({ lastStreamId: 0, code: ErrorCode.ENHANCE_YOUR_CALM });
    expect(await legitRoundTrip(port)).toBeLessThan(1000);
  });

  it('survives any sequence of frames: it answers a PING afterwards or ends the connection with GOAWAY, and keeps serving others', async () => {
    reply = (stream, body) => {
      stream.respond(RESPONSE, false);
      stream.write(body);
      stream.end(TRAILERS);
    };
    const internal: unknown[] = [];
    await start({ maxConcurrentStreams: 8, onError: (err) => internal.push(err) });
    const anyFrame = fc.record({
      type: fc.integer({ min: 0, max: 10 }),
      flags: fc.constantFrom(0, 0x1, 0x4, 0x5, 0x8, 0x20, 0x2d, 0xff),
      streamId: fc.constantFrom(0, 1, 2, 3, 5, 7, 0x7fffffff),
      payload: fc.oneof(fc.uint8Array({ maxLength: 40 }), fc.constant(REQUEST), fc.constant(new Uint8Array(8))),
    });
    await fc.assert(
      fc.asyncProperty(fc.array(anyFrame, { maxLength: 12 }), async (frames) => {
        const client = await RawClient.connect(port);
        client.send(...frames.map((f) => frame(f.type, f.flags, f.streamId, Buffer.from(f.payload))));
        client.send(frame(FrameType.PING, 0, 0, Buffer.from('survived')));
        const pong = await client.waitFor((f) => f.type === FrameType.PING && f.flags === Flag.ACK && f.payload.toString() === 'survived', 3000);
        // Either it answered the PING, or it said why it ended the connection.
        if (pong === undefined) expect(client.goaway()).toBeDefined();
        client.close();
      }),
      { numRuns: 150, seed: 20261122 },
    );
    // Protocol errors are the client's; nothing may have failed inside the layer.
    expect(internal).toEqual([]);
    // A well-behaved client is still served.
    expect(await legitRoundTrip(port)).toBeLessThan(5000);
  });

  it('keeps the stream state machine over any sequence of stream frames: nothing on idle streams, nothing after a stream ends, an answer or a GOAWAY', async () => {
    // Half the streams are answered at once, half after a moment (a handler still deciding).
    let toggle = false;
    reply = (stream, body) => {
      toggle = !toggle;
      const answer = (): void => {
        stream.respond(RESPONSE, false);
        stream.write(body);
        stream.end(TRAILERS);
      };
      if (toggle) answer();
      else setTimeout(answer, 5);
    };
    const internal: unknown[] = [];
    await start({ maxConcurrentStreams: 3, resetBurst: 20, onError: (err) => internal.push(err) });
    const streamId = fc.constantFrom(1, 3, 5, 7, 9);
    const malformed = encodeHeaderBlock([
      [':method', 'POST'],
      [':path', '/echo'],
    ]);
    const trailers = encodeHeaderBlock([['x-trailer', '1']]);
    const action = fc.oneof(
      fc.record({
        kind: fc.constant('headers' as const),
        id: streamId,
        end: fc.boolean(),
        block: fc.constantFrom(REQUEST, malformed, trailers),
        split: fc.boolean(),
        priority: fc.constantFrom(-1, 0, 1, 3),
      }),
      fc.record({ kind: fc.constant('data' as const), id: streamId, end: fc.boolean(), size: fc.constantFrom(0, 1, 100, 16_384), padded: fc.boolean() }),
      fc.record({ kind: fc.constant('rst' as const), id: streamId, code: fc.constantFrom(ErrorCode.CANCEL, ErrorCode.NO_ERROR, 0xff) }),
      fc.record({ kind: fc.constant('window' as const), id: fc.constantFrom(0, 1, 3, 5), increment: fc.constantFrom(0, 1, 1000, 0x7fff_ffff) }),
      fc.record({ kind: fc.constant('priority' as const), id: streamId, dependency: fc.constantFrom(0, 1, 3), length: fc.constantFrom(5, 4) }),
      fc.record({ kind: fc.constant('settings' as const), window: fc.constantFrom(0, 10, 65_535) }),
    );
    type Action = typeof action extends fc.Arbitrary<infer A> ? A : never;
    const encode = (a: Action): Buffer[] => {
      switch (a.kind) {
        case 'headers': {
          const flags = (a.end ? Flag.END_STREAM : 0) | (a.priority >= 0 ? Flag.PRIORITY : 0);
          const head = a.priority >= 0 ? Buffer.concat([Buffer.from([0, 0, 0, a.priority === 1 ? a.id : a.priority, 16]), a.block]) : a.block;
          if (!a.split) return [frame(FrameType.HEADERS, flags | Flag.END_HEADERS, a.id, head)];
          const cut = head.length - 2;
          return [
            frame(FrameType.HEADERS, flags, a.id, head.subarray(0, cut)),
            frame(FrameType.CONTINUATION, 0, a.id),
            frame(FrameType.CONTINUATION, Flag.END_HEADERS, a.id, head.subarray(cut)),
          ];
        }
        case 'data': {
          const data = Buffer.alloc(a.size, 0x61);
          const payload = a.padded ? Buffer.concat([Buffer.from([3]), data, Buffer.alloc(3)]) : data;
          return [frame(FrameType.DATA, (a.end ? Flag.END_STREAM : 0) | (a.padded ? Flag.PADDED : 0), a.id, payload)];
        }
        case 'rst':
          return [wordFrame(FrameType.RST_STREAM, a.id, a.code)];
        case 'window':
          return [wordFrame(FrameType.WINDOW_UPDATE, a.id, a.increment)];
        case 'priority':
          return [frame(FrameType.PRIORITY, 0, a.id, Buffer.from([0, 0, 0, a.dependency === 1 ? a.id : a.dependency, 16]).subarray(0, a.length))];
        case 'settings':
          return [settingsFrame([[Setting.INITIAL_WINDOW_SIZE, a.window]])];
      }
    };
    await fc.assert(
      fc.asyncProperty(fc.array(action, { minLength: 1, maxLength: 16 }), async (actions) => {
        const client = await RawClient.connect(port);
        const opened = new Set<number>();
        for (const a of actions) {
          if (a.kind === 'headers') opened.add(a.id);
          client.send(...encode(a));
        }
        client.send(frame(FrameType.PING, 0, 0, Buffer.from('survived')));
        const pong = await client.waitFor((f) => f.type === FrameType.PING && f.flags === Flag.ACK && f.payload.toString() === 'survived', 3000);
        if (pong === undefined) expect(client.goaway()).toBeDefined();
        else await new Promise((r) => setTimeout(r, 20));
        const goawayAt = client.frames.findIndex((f) => f.type === FrameType.GOAWAY);
        const ended = new Set<number>();
        const reset = new Set<number>();
        client.frames.forEach((f, i) => {
          if (f.streamId === 0) return;
          // Nothing on an idle stream (RFC 9113 5.1); only RST_STREAM on one closed without being opened.
          if (f.type === FrameType.RST_STREAM) expect(f.streamId).toBeLessThanOrEqual(Math.max(...opened));
          else expect(opened.has(f.streamId)).toBe(true);
          // Nothing at all after RST_STREAM, no HEADERS or DATA after END_STREAM, nothing after a connection error.
          expect(reset.has(f.streamId)).toBe(false);
          if (f.type !== FrameType.RST_STREAM) expect(ended.has(f.streamId)).toBe(false);
          if (goawayAt >= 0 && client.goaway()!.code !== ErrorCode.NO_ERROR) expect(i).toBeLessThan(goawayAt);
          if (f.type === FrameType.RST_STREAM) reset.add(f.streamId);
          if ((f.flags & Flag.END_STREAM) !== 0 && (f.type === FrameType.HEADERS || f.type === FrameType.DATA)) ended.add(f.streamId);
        });
        client.close();
      }),
      { numRuns: 200, seed: 20261125 },
    );
    expect(internal).toEqual([]);
    // A well-behaved client is still served.
    expect(await legitRoundTrip(port)).toBeLessThan(5000);
  });
});
