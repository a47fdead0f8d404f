import * as net from 'node:net';
import { performance } from 'node:perf_hooks';
import { CONNECTION_PREFACE, Flag, frame, FrameReader, FrameType, Setting, settingsFrame } from '../../src/http2/frames';
import { encodeHeaderBlock, HpackDecoder } from '../../src/http2/hpack';

/**
 * A raw HTTP/2 client for tests of the connection layer: it writes whatever frames it is given,
 * valid or not, and records every frame the server sends (cut by the FrameReader Http2GrpcClient
 * reads with). Well-formed gRPC calls are Http2GrpcClient's (src/grpc/http2-client.ts).
 */

export interface Frame {
  type: number;
  flags: number;
  streamId: number;
  payload: Buffer;
}

export class RawClient {
  readonly frames: Frame[] = [];
  closed = false;
  private readonly reader = new FrameReader((type, flags, streamId, payload) => this.frames.push({ type, flags, streamId, payload }));
  private waiters: Array<() => void> = [];
  private readonly decoder = new HpackDecoder({ maxTableSize: 4096, maxHeaderListSize: 1 << 20 });

  constructor(readonly socket: net.Socket) {
    socket.on('data', (chunk: Buffer) => {
      this.reader.push(chunk);
      this.wake();
    });
    socket.on('close', () => {
      this.closed = true;
      this.wake();
    });
    socket.on('error', () => undefined);
  }

  static async connect(port: number, settings: ReadonlyArray<readonly [Setting, number]> = []): Promise<RawClient> {
    const socket = net.connect(port, '127.0.0.1');
    await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
    const client = new RawClient(socket);
    socket.write(Buffer.concat([CONNECTION_PREFACE, settingsFrame(settings)]));
    return client;
  }

  send(...frames: Buffer[]): void {
    this.socket.write(Buffer.concat(frames));
  }

  /** Waits until a received frame matches (or the socket closes); returns it. */
  async waitFor(match: (f: Frame) => boolean, timeoutMs = 2000): Promise<Frame | undefined> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.frames.find(match);
      if (found !== undefined || this.closed) return found;
      if (Date.now() > deadline) throw new Error('timed out waiting for a frame');
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, 50);
      });
    }
  }

  async waitClosed(timeoutMs = 2000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!this.closed) {
      if (Date.now() > deadline) throw new Error('socket still open');
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  /** Header fields of a HEADERS frame this client received, decoded in arrival order. */
  decode(f: Frame): string[] {
    return this.decoder.decode(f.payload) ?? [];
  }

  goaway(): { lastStreamId: number; code: number } | undefined {
    const f = this.frames.find((x) => x.type === FrameType.GOAWAY);
    return f === undefined ? undefined : { lastStreamId: f.payload.readUInt32BE(0), code: f.payload.readUInt32BE(4) };
  }

  close(): void {
    this.socket.destroy();
  }

  private wake(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }
}

export const REQUEST = encodeHeaderBlock([
  [':method', 'POST'],
  [':scheme', 'http'],
  [':path', '/echo'],
  [':authority', 'localhost'],
  ['content-type', 'application/grpc'],
]);
export const RESPONSE = encodeHeaderBlock([[':status', '200']]);
export const TRAILERS = encodeHeaderBlock([['grpc-status', '0']]);

export const headersFrame = (streamId: number, flags: number = Flag.END_HEADERS | Flag.END_STREAM, block = REQUEST): Buffer =>
  frame(FrameType.HEADERS, flags, streamId, block);
export const dataFrame = (streamId: number, data: Buffer, flags: number = Flag.END_STREAM): Buffer => frame(FrameType.DATA, flags, streamId, data);
export const isType = (type: FrameType, streamId?: number) => (f: Frame) => f.type === type && (streamId === undefined || f.streamId === streamId);

/** One request (the echo server's REQUEST with a body) on a fresh connection; its round-trip time in ms. */
export async function legitRoundTrip(port: number): Promise<number> {
  const client = await RawClient.connect(port);
  const started = performance.now();
  client.send(headersFrame(1, Flag.END_HEADERS), dataFrame(1, Buffer.from('legit')));
  const end = await client.waitFor((f) => f.type === FrameType.HEADERS && f.streamId === 1 && (f.flags & Flag.END_STREAM) !== 0, 5000);
  client.close();
  if (end === undefined) throw new Error('the legit request went unanswered');
  return performance.now() - started;
}
