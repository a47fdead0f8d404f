import * as net from 'node:net';
import type { Duplex } from 'node:stream';
import { GrpcStatus, unaryMessage } from '../wire/grpc-framing';
import {
  CONNECTION_PREFACE,
  DEFAULT_MAX_FRAME_SIZE,
  DEFAULT_WINDOW,
  Flag,
  FRAME_HEADER_BYTES,
  FrameReader,
  frame,
  FrameType,
  MAX_WINDOW,
  Setting,
  settingsFrame,
  wordFrame,
  writeFrameHeader,
} from '../http2/frames';
import { encodeHeaderBlock, HpackDecoder } from '../http2/hpack';
import { OK_TRAILERS, RESPONSE_HEADERS } from './header-blocks';

/**
 * A small gRPC client for unary calls on one cleartext HTTP/2 connection (h2c with prior knowledge),
 * written for the start-up warm-up and the tests: it keeps up to `maxInFlight` calls open, pulling
 * their framed request messages from `next` as earlier calls end, and tells `onEnd` how each call
 * ended. It leaves little garbage and nothing long-lived: one header block for every request, the
 * frames of all calls sent at once in one buffer, received frames read in place, no object per
 * call (node:http2's and grpc-js's client objects outlive young-generation collections, and a
 * client of theirs leaves a full collection due just as traffic starts).
 *
 * What it speaks: SETTINGS (and their ACK), PING ACK, WINDOW_UPDATE both ways, GOAWAY (calls the
 * server did not take end CALL_LOST, the others run to their end, then the connection closes),
 * RST_STREAM, CONTINUATION and padding. Request messages go out in one DATA frame each, split at
 * the server's frame size; each must fit the server's initial stream window.
 */

/** A call's end when the server reset its stream. */
export const CALL_RESET = -1;
/** A call's end when the connection went (or the server declined it in GOAWAY) before its answer. */
export const CALL_LOST = -2;

export interface Http2GrpcClientOptions {
  /** The method's path: `/package.Service/Method`. */
  readonly path: string;
  /** Calls kept open at most (fewer when the server allows fewer concurrent streams). */
  readonly maxInFlight: number;
  /**
   * The next call's request, framed (grpc-framing's frameMessage), or undefined when there are no
   * more: the connection then ends once the open calls have.
   */
  readonly next: () => Buffer | undefined;
  /**
   * Told of each call's end: its place in the order `next` gave it (0 first) and its grpc-status
   * (from the trailers or a trailers-only answer; UNKNOWN when the server sent none), CALL_RESET or
   * CALL_LOST; with `keepMessages`, the response message without its prefix, when there was one.
   */
  readonly onEnd?: (call: number, status: number, message: Buffer | undefined) => void;
  /** Whether onEnd gets the response messages (otherwise their bytes are only counted). */
  readonly keepMessages?: boolean;
}

/** A header list longer than this is not read: its call ends UNKNOWN. */
const MAX_HEADER_LIST_BYTES = 1 << 20;
const HPACK_TABLE_SIZE = 4096;

/** One connection's calls; the connection opens at construction and closes on its own once `next` has no more. */
export class Http2GrpcClient {
  /** Resolves once the socket has closed; rejects when it closed on a socket error. */
  readonly done: Promise<void>;
  private readonly requestHeaders: Buffer;
  private readonly reader: FrameReader;
  private readonly decoder = new HpackDecoder({ maxTableSize: HPACK_TABLE_SIZE, maxHeaderListSize: MAX_HEADER_LIST_BYTES });
  private readonly open = new Set<number>();
  private readonly messages: Map<number, Buffer> | undefined;
  private readonly batch: Buffer[] = [];
  private nextStreamId = 1;
  private answeredCalls = 0;
  private exhausted = false;
  private held: Buffer | undefined = undefined;
  /** No call starts any more (GOAWAY, or the stream identifiers are used up). */
  private isDraining = false;
  private peerMaxStreams = Number.MAX_SAFE_INTEGER;
  private peerInitialWindow = DEFAULT_WINDOW;
  private peerMaxFrameSize = DEFAULT_MAX_FRAME_SIZE;
  private sendWindow = DEFAULT_WINDOW;
  private received = 0;
  private continuing: { streamId: number; endStream: boolean; fragments: Buffer[] } | undefined = undefined;
  private closed = false;
  private error: unknown = undefined;

  /** Opens a cleartext connection to `host:port` and starts calling. */
  static connect(port: number, options: Http2GrpcClientOptions, host = '127.0.0.1'): Http2GrpcClient {
    const socket = net.connect({ host, port });
    socket.setNoDelay(true);
    return new Http2GrpcClient(socket, options);
  }

  /** Calls over `socket` (connected or connecting; writes wait for the connection). */
  constructor(
    private readonly socket: Duplex,
    private readonly options: Http2GrpcClientOptions,
  ) {
    this.requestHeaders = encodeHeaderBlock([
      [':method', 'POST'],
      [':scheme', 'http'],
      [':path', options.path],
      [':authority', 'localhost'],
      ['content-type', 'application/grpc'],
      ['te', 'trailers'],
    ]);
    this.messages = options.keepMessages === true ? new Map() : undefined;
    this.reader = new FrameReader(this.onFrame);
    this.done = new Promise((resolve, reject) => {
      socket.on('close', () => {
        this.closed = true;
        this.loseOpenCalls();
        if (this.error === undefined) resolve();
        else reject(this.error);
      });
    });
    // No unhandled rejection when nobody waits on `done`.
    this.done.catch(() => undefined);
    socket.on('error', (err) => {
      this.error ??= err;
      socket.destroy();
    });
    socket.on('data', this.onData);
    // Stream windows as large as the protocol allows, and the connection window too: answers are never held back.
    socket.write(
      Buffer.concat([
        CONNECTION_PREFACE,
        settingsFrame([[Setting.INITIAL_WINDOW_SIZE, MAX_WINDOW]]),
        wordFrame(FrameType.WINDOW_UPDATE, 0, MAX_WINDOW - DEFAULT_WINDOW),
      ]),
    );
    this.send();
  }

  /** Calls that ended with an answer or a reset (not those lost with the connection). */
  get answered(): number {
    return this.answeredCalls;
  }

  /** Whether calls have stopped starting: the server sent GOAWAY (or the stream identifiers are used up). */
  get draining(): boolean {
    return this.isDraining;
  }

  /** Calls open now. */
  get inFlight(): number {
    return this.open.size;
  }

  /** Cuts the connection at once; open calls end CALL_LOST. */
  close(): void {
    this.socket.destroy();
  }

  /** Starts as many calls as the limits allow, all their frames in one write; ends the connection when none are left. */
  private send(): void {
    if (this.closed) return;
    const limit = Math.min(this.options.maxInFlight, this.peerMaxStreams);
    const headerBytes = this.requestHeaders.length;
    const batch = this.batch;
    let bytes = 0;
    while (!this.isDraining && !this.exhausted && this.open.size + batch.length < limit) {
      if (this.nextStreamId + 2 * batch.length > MAX_WINDOW) {
        this.isDraining = true;
        break;
      }
      const body = this.held ?? this.options.next();
      this.held = undefined;
      if (body === undefined) {
        this.exhausted = true;
        break;
      }
      if (body.length > this.peerInitialWindow) {
        batch.length = 0;
        this.fail(new Error(`a request of ${body.length} bytes exceeds the server's stream window (${this.peerInitialWindow})`));
        return;
      }
      if (body.length > this.sendWindow) {
        // Waits for the server's WINDOW_UPDATE.
        this.held = body;
        break;
      }
      this.sendWindow -= body.length;
      batch.push(body);
      const dataFrames = Math.max(1, Math.ceil(body.length / this.peerMaxFrameSize));
      bytes += FRAME_HEADER_BYTES + headerBytes + dataFrames * FRAME_HEADER_BYTES + body.length;
    }
    if (batch.length > 0) {
      const out = Buffer.allocUnsafe(bytes);
      let at = 0;
      for (let i = 0; i < batch.length; i++) {
        const streamId = this.nextStreamId;
        this.nextStreamId += 2;
        this.open.add(streamId);
        writeFrameHeader(out, at, headerBytes, FrameType.HEADERS, Flag.END_HEADERS, streamId);
        at += FRAME_HEADER_BYTES + this.requestHeaders.copy(out, at + FRAME_HEADER_BYTES);
        const body = batch[i];
        let offset = 0;
        do {
          const length = Math.min(this.peerMaxFrameSize, body.length - offset);
          const last = offset + length === body.length;
          writeFrameHeader(out, at, length, FrameType.DATA, last ? Flag.END_STREAM : 0, streamId);
          at += FRAME_HEADER_BYTES + body.copy(out, at + FRAME_HEADER_BYTES, offset, offset + length);
          offset += length;
        } while (offset < body.length);
      }
      batch.length = 0;
      this.socket.write(out);
    } else if (this.open.size === 0 && (this.exhausted || this.isDraining)) {
      this.socket.end();
    }
  }

  private readonly onData = (chunk: Buffer): void => {
    try {
      this.reader.push(chunk);
    } catch (err) {
      // An undecodable header block: the connection's HPACK state is lost with it.
      this.fail(err);
      return;
    }
    this.send();
  };

  private readonly onFrame = (type: number, flags: number, streamId: number, payload: Buffer): void => {
    if (this.closed) return;
    const continuing = this.continuing;
    if (continuing !== undefined) {
      if (type !== FrameType.CONTINUATION || streamId !== continuing.streamId) {
        this.fail(new Error('expected CONTINUATION'));
        return;
      }
      continuing.fragments.push(payload);
      if ((flags & Flag.END_HEADERS) !== 0) {
        this.continuing = undefined;
        this.onHeaderBlock(streamId, continuing.endStream, Buffer.concat(continuing.fragments));
      }
      return;
    }
    switch (type) {
      case FrameType.DATA:
        this.onDataFrame(flags, streamId, payload);
        return;
      case FrameType.HEADERS: {
        const block = unpad(flags, payload, (flags & Flag.PRIORITY) !== 0 ? 5 : 0);
        const endStream = (flags & Flag.END_STREAM) !== 0;
        if ((flags & Flag.END_HEADERS) !== 0) this.onHeaderBlock(streamId, endStream, block);
        else this.continuing = { streamId, endStream, fragments: [Buffer.from(block)] };
        return;
      }
      case FrameType.RST_STREAM:
        this.end(streamId, CALL_RESET, undefined);
        return;
      case FrameType.SETTINGS:
        if ((flags & Flag.ACK) === 0) this.onSettings(payload);
        return;
      case FrameType.PING:
        if ((flags & Flag.ACK) === 0) {
          const ack = Buffer.allocUnsafe(FRAME_HEADER_BYTES + 8);
          writeFrameHeader(ack, 0, 8, FrameType.PING, Flag.ACK, 0);
          payload.copy(ack, FRAME_HEADER_BYTES);
          this.socket.write(ack);
        }
        return;
      case FrameType.GOAWAY:
        this.onGoaway(payload.readUInt32BE(0) & MAX_WINDOW);
        return;
      case FrameType.WINDOW_UPDATE:
        if (streamId === 0) this.sendWindow += payload.readUInt32BE(0) & MAX_WINDOW;
        return;
      default:
      // PRIORITY, and unknown types (RFC 9113 section 4.1), are ignored.
    }
  };

  private onDataFrame(flags: number, streamId: number, payload: Buffer): void {
    // The whole payload counts against the connection window, padding included; it is handed back
    // in one WINDOW_UPDATE once half the window is used.
    this.received += payload.length;
    if (this.received >= MAX_WINDOW / 2) {
      this.socket.write(wordFrame(FrameType.WINDOW_UPDATE, 0, this.received));
      this.received = 0;
    }
    const messages = this.messages;
    if (messages !== undefined && this.open.has(streamId)) {
      const data = unpad(flags, payload, 0);
      const before = messages.get(streamId);
      messages.set(streamId, before === undefined ? Buffer.from(data) : Buffer.concat([before, data]));
    }
    // A server ends a gRPC answer with trailers; END_STREAM on DATA is an answer without them.
    if ((flags & Flag.END_STREAM) !== 0) this.end(streamId, GrpcStatus.UNKNOWN, this.messages?.get(streamId));
  }

  private onHeaderBlock(streamId: number, endStream: boolean, block: Buffer): void {
    // The service's own answer headers and OK trailers are known by their bytes, without a list of
    // fields per call: they only name static-table entries and literals the table does not keep, so
    // the decoder's table stays in step without them. Every other block goes through the decoder, in order.
    let status: number = GrpcStatus.OK;
    if (!block.equals(OK_TRAILERS)) status = block.equals(RESPONSE_HEADERS) ? GrpcStatus.UNKNOWN : this.statusOf(block);
    if (endStream) this.end(streamId, status, this.messages?.get(streamId));
  }

  /** The grpc-status a header block carries; UNKNOWN when it has none. */
  private statusOf(block: Buffer): number {
    const fields = this.decoder.decode(block);
    if (fields === undefined) return GrpcStatus.UNKNOWN;
    for (let i = 0; i < fields.length; i += 2) {
      if (fields[i] === 'grpc-status') {
        const value = Number(fields[i + 1]);
        return Number.isInteger(value) && value >= 0 ? value : GrpcStatus.UNKNOWN;
      }
    }
    return GrpcStatus.UNKNOWN;
  }

  private onSettings(payload: Buffer): void {
    for (let at = 0; at + 6 <= payload.length; at += 6) {
      const value = payload.readUInt32BE(at + 2);
      switch (payload.readUInt16BE(at)) {
        case Setting.MAX_CONCURRENT_STREAMS:
          this.peerMaxStreams = value;
          break;
        case Setting.INITIAL_WINDOW_SIZE:
          this.peerInitialWindow = value;
          break;
        case Setting.MAX_FRAME_SIZE:
          this.peerMaxFrameSize = value;
          break;
        default:
      }
    }
    this.socket.write(frame(FrameType.SETTINGS, Flag.ACK, 0));
  }

  /** Calls on streams after `lastStreamId` were never taken: they end lost; no call starts from now on. */
  private onGoaway(lastStreamId: number): void {
    this.isDraining = true;
    this.dropHeld();
    for (const streamId of this.open) if (streamId > lastStreamId) this.end(streamId, CALL_LOST, undefined);
  }

  /** A request waiting for window that will never be sent ends lost, under the number it would have had. */
  private dropHeld(): void {
    if (this.held === undefined) return;
    this.held = undefined;
    this.options.onEnd?.((this.nextStreamId - 1) / 2, CALL_LOST, undefined);
  }

  private end(streamId: number, status: number, message: Buffer | undefined): void {
    if (!this.open.delete(streamId)) return;
    if (status !== CALL_LOST) this.answeredCalls++;
    const messages = this.messages;
    let body: Buffer | undefined;
    if (messages !== undefined) {
      messages.delete(streamId);
      const unwrapped = message === undefined ? undefined : unaryMessage(message);
      body = unwrapped instanceof Buffer ? unwrapped : undefined;
    }
    this.options.onEnd?.((streamId - 1) / 2, status, body);
  }

  private loseOpenCalls(): void {
    this.dropHeld();
    for (const streamId of this.open) this.end(streamId, CALL_LOST, undefined);
  }

  private fail(err: unknown): void {
    this.error ??= err;
    this.closed = true;
    this.socket.destroy();
  }
}

/** A HEADERS or DATA payload without its padding (and `extra` leading octets: HEADERS' priority fields). */
function unpad(flags: number, payload: Buffer, extra: number): Buffer {
  if ((flags & Flag.PADDED) === 0) return extra === 0 ? payload : payload.subarray(extra);
  const pad = payload[0];
  return payload.subarray(1 + extra, Math.max(1 + extra, payload.length - pad));
}
