import { EventEmitter } from 'node:events';
import type { Duplex } from 'node:stream';
import { frameMessage } from '../../../src/wire/grpc-framing';
import {
  CONNECTION_PREFACE,
  DEFAULT_WINDOW,
  ErrorCode,
  Flag,
  frame,
  FrameReader,
  FrameType,
  goawayFrame,
  MAX_WINDOW,
  Setting,
  settingsFrame,
  wordFrame,
} from '../../../src/http2/frames';
import { encodeHeaderBlock, HpackDecoder } from '../../../src/http2/hpack';
import { CALL_LOST, CALL_RESET, Http2GrpcClient, type Http2GrpcClientOptions } from '../../../src/grpc/http2-client';

/**
 * The HTTP/2 gRPC client's frame handling, against a socket the test plays the server on: what it
 * writes is read back frame by frame, what the "server" sends is handed in chunk by chunk.
 */

const PATH = '/test.Service/Call';
const RESPONSE_HEADERS = encodeHeaderBlock([
  [':status', '200'],
  ['content-type', 'application/grpc'],
]);
const trailers = (status: number, message?: string): Buffer =>
  encodeHeaderBlock(
    message === undefined
      ? [['grpc-status', String(status)]]
      : [
          ['grpc-status', String(status)],
          ['grpc-message', message],
        ],
  );

interface Written {
  type: number;
  flags: number;
  streamId: number;
  payload: Buffer;
}

/** A socket that records writes and delivers what the test sends, synchronously. */
class FakeSocket extends EventEmitter {
  readonly frames: Written[] = [];
  preface: Buffer | undefined;
  ended = false;
  destroyed = false;
  private readonly reader = new FrameReader((type, flags, streamId, payload) => this.frames.push({ type, flags, streamId, payload: Buffer.from(payload) }));

  write(chunk: Buffer): boolean {
    let rest = chunk;
    if (this.preface === undefined) {
      this.preface = chunk.subarray(0, CONNECTION_PREFACE.length);
      rest = chunk.subarray(CONNECTION_PREFACE.length);
    }
    this.reader.push(rest);
    this.writes++;
    return true;
  }
  writes = 0;

  end(): void {
    this.ended = true;
  }

  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    this.emit('close');
  }

  /** Hands `bytes` to the client, in chunks of `size` octets (all at once by default). */
  receive(bytes: Buffer, size = bytes.length): void {
    for (let at = 0; at < bytes.length; at += size) this.emit('data', bytes.subarray(at, at + size));
  }

  of(type: FrameType, streamId?: number): Written[] {
    return this.frames.filter((f) => f.type === type && (streamId === undefined || f.streamId === streamId));
  }
}

interface Ended {
  call: number;
  status: number;
  message: string | undefined;
}

/** A client on a fake socket making `count` calls (request i's message is `req-i`); records every end. */
function start(count: number, options: Partial<Http2GrpcClientOptions> = {}) {
  const socket = new FakeSocket();
  const ends: Ended[] = [];
  let sent = 0;
  const client = new Http2GrpcClient(socket as unknown as Duplex, {
    path: PATH,
    maxInFlight: 3,
    keepMessages: true,
    next: () => (sent < count ? frameMessage(Buffer.from(`req-${sent++}`)) : undefined),
    onEnd: (call, status, message) => ends.push({ call, status, message: message?.toString() }),
    ...options,
  });
  return { socket, client, ends };
}

/** The frames of a whole answer: headers, one framed message, trailers. */
function answer(streamId: number, text: string, status = 0): Buffer {
  return Buffer.concat([
    frame(FrameType.HEADERS, Flag.END_HEADERS, streamId, RESPONSE_HEADERS),
    frame(FrameType.DATA, 0, streamId, frameMessage(Buffer.from(text))),
    frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, streamId, trailers(status)),
  ]);
}

const openedStreams = (socket: FakeSocket): number[] => socket.of(FrameType.HEADERS).map((f) => f.streamId);

describe('Http2GrpcClient', () => {
  it('opens with the preface, its SETTINGS and the largest connection window, then starts maxInFlight calls in one write', () => {
    const { socket } = start(5);
    expect(socket.preface).toEqual(CONNECTION_PREFACE);
    const [settings, window] = socket.frames;
    expect(settings).toMatchObject({ type: FrameType.SETTINGS, flags: 0, streamId: 0 });
    expect(settings.payload.readUInt16BE(0)).toBe(Setting.INITIAL_WINDOW_SIZE);
    expect(settings.payload.readUInt32BE(2)).toBe(MAX_WINDOW);
    expect(window).toMatchObject({ type: FrameType.WINDOW_UPDATE, streamId: 0 });
    expect(window.payload.readUInt32BE(0)).toBe(MAX_WINDOW - DEFAULT_WINDOW);
    expect(socket.writes).toBe(2);
    expect(openedStreams(socket)).toEqual([1, 3, 5]);
    const decoder = new HpackDecoder({ maxTableSize: 4096, maxHeaderListSize: 1 << 16 });
    expect(decoder.decode(socket.of(FrameType.HEADERS, 1)[0].payload)).toEqual([
      ':method',
      'POST',
      ':scheme',
      'http',
      ':path',
      PATH,
      ':authority',
      'localhost',
      'content-type',
      'application/grpc',
      'te',
      'trailers',
    ]);
    expect(socket.of(FrameType.HEADERS).every((f) => f.flags === Flag.END_HEADERS)).toBe(true);
    const data = socket.of(FrameType.DATA);
    expect(data.map((f) => [f.streamId, f.flags, f.payload.subarray(5).toString()])).toEqual([
      [1, Flag.END_STREAM, 'req-0'],
      [3, Flag.END_STREAM, 'req-1'],
      [5, Flag.END_STREAM, 'req-2'],
    ]);
  });

  it('reads an answer split across chunks, down to one octet each, and starts the next call when it ends', () => {
    const { socket, client, ends } = start(5);
    const bytes = Buffer.concat([settingsFrame([]), answer(3, 'resp-1')]);
    for (let at = 0; at < bytes.length - 1; at++) socket.receive(bytes.subarray(at, at + 1));
    expect(ends).toEqual([]);
    expect(openedStreams(socket)).toEqual([1, 3, 5]);
    socket.receive(bytes.subarray(bytes.length - 1));
    expect(ends).toEqual([{ call: 1, status: 0, message: 'resp-1' }]);
    expect(client.answered).toBe(1);
    expect(openedStreams(socket)).toEqual([1, 3, 5, 7]);
    expect(socket.of(FrameType.SETTINGS).filter((f) => f.flags === Flag.ACK)).toHaveLength(1);
  });

  it('reads several frames of several calls from one chunk, and refills the freed places in one write', () => {
    const { socket, ends } = start(5);
    const writes = socket.writes;
    socket.receive(Buffer.concat([settingsFrame([[Setting.MAX_CONCURRENT_STREAMS, 100]]), answer(1, 'a'), answer(5, 'c', 5), answer(3, 'b')]));
    expect(ends).toEqual([
      { call: 0, status: 0, message: 'a' },
      { call: 2, status: 5, message: 'c' },
      { call: 1, status: 0, message: 'b' },
    ]);
    // The SETTINGS ACK, then both remaining calls in one buffer.
    expect(socket.writes - writes).toBe(2);
    expect(openedStreams(socket)).toEqual([1, 3, 5, 7, 9]);
  });

  it("reads a trailers-only answer's status, an answer without one as UNKNOWN, and a padded, continued header block", () => {
    const { socket, ends } = start(3);
    const block = encodeHeaderBlock([
      [':status', '200'],
      ['content-type', 'application/grpc'],
      ['grpc-status', '8'],
      ['grpc-message', 'too big'],
    ]);
    const padded = Buffer.concat([Buffer.from([4]), block.subarray(0, 10), Buffer.alloc(4)]);
    socket.receive(
      Buffer.concat([
        frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 1, block),
        frame(FrameType.HEADERS, Flag.END_HEADERS, 3, RESPONSE_HEADERS),
        frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 3, encodeHeaderBlock([])),
        frame(FrameType.HEADERS, Flag.END_STREAM | Flag.PADDED, 5, padded),
        frame(FrameType.CONTINUATION, Flag.END_HEADERS, 5, block.subarray(10)),
      ]),
    );
    expect(ends).toEqual([
      { call: 0, status: 8, message: undefined },
      { call: 1, status: 2, message: undefined },
      { call: 2, status: 8, message: undefined },
    ]);
  });

  it("keeps its HPACK table in step with the server's: a field the server indexed is read back from the table", () => {
    const { socket, ends } = start(2);
    const literal = (text: string): number[] => [text.length, ...Buffer.from(text, 'latin1')];
    // grpc-status: 7, "with incremental indexing" (it becomes dynamic entry 62), then the same field by index.
    const indexing = Buffer.from([0x40, ...literal('grpc-status'), ...literal('7')]);
    socket.receive(
      Buffer.concat([
        frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 1, indexing),
        frame(FrameType.HEADERS, Flag.END_HEADERS, 3, RESPONSE_HEADERS),
        frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 3, Buffer.from([0x80 | 62])),
      ]),
    );
    expect(ends.map((e) => [e.call, e.status])).toEqual([
      [0, 7],
      [1, 7],
    ]);
  });

  it('ends a reset call CALL_RESET, counted as answered, and ignores frames of streams that are not open', () => {
    const { socket, client, ends } = start(3);
    socket.receive(Buffer.concat([wordFrame(FrameType.RST_STREAM, 3, ErrorCode.REFUSED_STREAM), answer(3, 'late'), wordFrame(FrameType.RST_STREAM, 9, 0)]));
    expect(ends).toEqual([{ call: 1, status: CALL_RESET, message: undefined }]);
    expect(client.answered).toBe(1);
    expect(client.inFlight).toBe(2);
  });

  it('on GOAWAY, loses the calls after its last stream, starts no more, lets the others finish, then ends the connection', () => {
    const { socket, client, ends } = start(10);
    socket.receive(goawayFrame(3, ErrorCode.NO_ERROR));
    expect(ends).toEqual([{ call: 2, status: CALL_LOST, message: undefined }]);
    expect(client.inFlight).toBe(2);
    socket.receive(answer(1, 'a'));
    expect(openedStreams(socket)).toEqual([1, 3, 5]);
    expect(socket.ended).toBe(false);
    socket.receive(answer(3, 'b'));
    expect(ends.map((e) => [e.call, e.status])).toEqual([
      [2, CALL_LOST],
      [0, 0],
      [1, 0],
    ]);
    expect(client.answered).toBe(2);
    expect(socket.ended).toBe(true);
  });

  it('answers PING with its payload and leaves PING ACKs, PRIORITY and unknown frame types alone', () => {
    const { socket, ends } = start(1);
    const opaque = Buffer.from('12345678');
    socket.receive(
      Buffer.concat([
        frame(FrameType.PING, 0, 0, opaque),
        frame(FrameType.PING, Flag.ACK, 0, opaque),
        frame(FrameType.PRIORITY, 0, 1, Buffer.alloc(5)),
        frame(0xfa as FrameType, 0, 0),
      ]),
    );
    expect(socket.of(FrameType.PING)).toEqual([{ type: FrameType.PING, flags: Flag.ACK, streamId: 0, payload: opaque }]);
    expect(ends).toEqual([]);
  });

  it("keeps to the server's concurrent streams and frame size, and holds a call until the connection window has room", () => {
    const { socket, ends } = start(4, {
      maxInFlight: 10,
      next: (() => {
        let i = 0;
        return () => (i++ < 4 ? frameMessage(Buffer.alloc(30_000, i)) : undefined);
      })(),
    });
    // The protocol's initial window (65,535) lets two 30,005-octet messages through.
    expect(openedStreams(socket)).toEqual([1, 3]);
    expect(socket.of(FrameType.DATA, 1).map((f) => [f.payload.length, f.flags])).toEqual([
      [16_384, 0],
      [30_005 - 16_384, Flag.END_STREAM],
    ]);
    socket.receive(
      Buffer.concat([
        settingsFrame([
          [Setting.MAX_CONCURRENT_STREAMS, 1],
          [Setting.MAX_FRAME_SIZE, 20_000],
        ]),
        answer(1, 'a'),
      ]),
    );
    // One call may be open now, and none is answered yet.
    expect(openedStreams(socket)).toEqual([1, 3]);
    socket.receive(answer(3, 'b'));
    // A free place, but the window (65,535 - 60,010) is too small for the third call.
    expect(openedStreams(socket)).toEqual([1, 3]);
    socket.receive(wordFrame(FrameType.WINDOW_UPDATE, 0, 30_000));
    expect(openedStreams(socket)).toEqual([1, 3, 5]);
    expect(socket.of(FrameType.DATA, 5).map((f) => f.payload.length)).toEqual([20_000, 10_005]);
    socket.receive(answer(5, 'c'));
    // The window is too small again: the waiting call is lost with the connection, under its own number.
    socket.destroy();
    expect(ends.map((e) => [e.call, e.status])).toEqual([
      [0, 0],
      [1, 0],
      [2, 0],
      [3, CALL_LOST],
    ]);
  });

  it('ends the connection once there are no more calls and none is open', () => {
    const { socket, ends } = start(2);
    expect(socket.ended).toBe(false);
    socket.receive(Buffer.concat([answer(1, 'a'), answer(3, 'b')]));
    expect(ends).toHaveLength(2);
    expect(socket.ended).toBe(true);
  });

  it('loses the open calls when closed, and resolves done', async () => {
    const { socket, client, ends } = start(5);
    socket.receive(answer(3, 'b'));
    client.close();
    await expect(client.done).resolves.toBeUndefined();
    expect(ends.map((e) => [e.call, e.status])).toEqual([
      [1, 0],
      [0, CALL_LOST],
      [2, CALL_LOST],
      [3, CALL_LOST],
    ]);
    expect(client.answered).toBe(1);
  });

  it('rejects done when the connection fails: a socket error, a header block it cannot decode, a request larger than a stream window', async () => {
    const broken = start(1);
    broken.socket.emit('error', new Error('connection refused'));
    await expect(broken.client.done).rejects.toThrow('connection refused');
    const garbled = start(1);
    garbled.socket.receive(frame(FrameType.HEADERS, Flag.END_HEADERS | Flag.END_STREAM, 1, Buffer.from([0x80])));
    await expect(garbled.client.done).rejects.toThrow(/index 0/);
    expect(garbled.ends).toEqual([{ call: 0, status: CALL_LOST, message: undefined }]);
    const sizes = [10, 2_000];
    const oversized = start(2, { maxInFlight: 1, next: () => (sizes.length > 0 ? frameMessage(Buffer.alloc(sizes.shift()!)) : undefined) });
    oversized.socket.receive(Buffer.concat([settingsFrame([[Setting.INITIAL_WINDOW_SIZE, 1_024]]), answer(1, 'a')]));
    await expect(oversized.client.done).rejects.toThrow("a request of 2005 bytes exceeds the server's stream window (1024)");
    expect(openedStreams(oversized.socket)).toEqual([1]);
  });
});

describe('FrameReader', () => {
  it('hands out whole frames only, holding an incomplete tail for the next chunk', () => {
    const seen: Array<[number, number, number, string]> = [];
    const reader = new FrameReader((type, flags, streamId, payload) => seen.push([type, flags, streamId, payload.toString()]));
    const bytes = Buffer.concat([frame(FrameType.DATA, 1, 0x7fff_ffff, Buffer.from('abc')), frame(FrameType.PING, 0, 0, Buffer.from('12345678'))]);
    const reserved = Buffer.from(bytes);
    reserved[5] |= 0x80; // the reserved bit is not part of the stream id
    reader.push(reserved.subarray(0, 11));
    expect(seen).toEqual([]);
    expect(reader.pendingBytes).toBe(11);
    reader.push(reserved.subarray(11, 20));
    expect(seen).toEqual([[FrameType.DATA, 1, 0x7fff_ffff, 'abc']]);
    expect(reader.pendingBytes).toBe(8);
    reader.push(reserved.subarray(20));
    expect(seen.map((s) => s[3])).toEqual(['abc', '12345678']);
    expect(reader.pendingBytes).toBe(0);
  });
});
