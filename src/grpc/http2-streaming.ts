import type { H2Stream } from '../http2/connection';
import { ErrorCode } from '../http2/frames';
import {
  STREAMING_HIGH_WATER_BYTES,
  STREAMING_MAX_PENDING_BYTES,
  StreamingCallBase,
  type StreamingCloseReason,
  type StreamingMethod,
} from '../service/streaming';
import { checkPrefix, frameMessage, GrpcStatus, MESSAGE_PREFIX_BYTES } from '../wire/grpc-framing';
import { RESPONSE_HEADERS, statusTrailers, trailersOnly } from './header-blocks';

/**
 * A bidirectional streaming call (src/service/streaming.ts) on one stream of the own HTTP/2 layer.
 * Request bytes are cut into messages as they arrive; each message leaves the stream's receive
 * window only once the handler is done with it (H2Stream.consume), so a client has at most one
 * stream window of messages (H2_STREAM_BUFFER_BYTES) buffered here, and a message must fit in it.
 * Response messages go out as the client's windows allow; what those hold back is the call's
 * backpressure (write() false, then onWritable). GOAWAY on the connection (shutdown, its age limit)
 * ends the call with UNAVAILABLE; an open call keeps its connection from counting as idle.
 */

export interface Http2StreamingOptions {
  readonly method: StreamingMethod;
  /** The request's header fields, a flat `[name, value, ...]` list. */
  readonly headers: readonly string[];
  /** Largest request message, bytes (already the smallest of every cap). */
  readonly maxMessageBytes: number;
  /** The client declared no (or identity) grpc-encoding. */
  readonly identityOnly: boolean;
  /** grpc-timeout, ms; undefined: no deadline. */
  readonly timeoutMs: number | undefined;
  /** A handler threw or rejected (the call ends with INTERNAL). */
  readonly onError: (err: unknown) => void;
}

const EMPTY = Buffer.alloc(0);
// Node timers hold at most 2^31-1 ms; a longer grpc-timeout is no deadline.
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Serves `options.method` on `stream` (whose request headers have been checked). */
export function serveStreaming(stream: H2Stream, options: Http2StreamingOptions): void {
  new Http2StreamingCall(stream, options).open();
}

class Http2StreamingCall extends StreamingCallBase {
  // Bytes of a request message not complete yet.
  private input: Buffer = EMPTY;
  private deadline: NodeJS.Timeout | undefined = undefined;

  constructor(
    private readonly stream: H2Stream,
    private readonly options: Http2StreamingOptions,
  ) {
    super();
  }

  open(): void {
    const stream = this.stream;
    stream.onData = this.onData;
    stream.onEnd = this.onEnd;
    stream.onAbort = () => this.abandon('cancelled');
    stream.onWritable = () => this.writable();
    stream.onGoingAway = () => this.finish(GrpcStatus.UNAVAILABLE, 'the server is going away; reconnect', 'going-away');
    const timeoutMs = this.options.timeoutMs;
    if (timeoutMs !== undefined && timeoutMs <= MAX_TIMER_MS) {
      this.deadline = setTimeout(() => this.finish(GrpcStatus.DEADLINE_EXCEEDED, 'deadline exceeded', 'cancelled'), timeoutMs);
    }
    this.start(this.options.method);
  }

  get connection(): unknown {
    return this.stream.owner;
  }

  get pendingBytes(): number {
    return this.stream.bufferedBytes;
  }

  header(name: string): string | undefined {
    const headers = this.options.headers;
    for (let i = 0; i < headers.length; i += 2) if (headers[i] === name) return headers[i + 1];
    return undefined;
  }

  protected sendMessage(message: Uint8Array): boolean {
    const stream = this.stream;
    if (!stream.headersSent) stream.respond(RESPONSE_HEADERS, false);
    stream.write(frameMessage(message));
    const held = stream.bufferedBytes;
    if (held > STREAMING_MAX_PENDING_BYTES) {
      // The peer has stopped reading and the service kept writing: the call goes, not the memory.
      stream.reset(ErrorCode.CANCEL);
      return false;
    }
    return held <= STREAMING_HIGH_WATER_BYTES;
  }

  protected sendStatus(code: number, details: string): void {
    const stream = this.stream;
    if (stream.closed) return;
    if (stream.headersSent) stream.end(statusTrailers(code, details));
    else stream.respond(trailersOnly(code, details), true);
  }

  protected sendStatusNow(code: number, details: string): void {
    // Trailers are not flow controlled: without the held DATA ahead of them, they leave at once.
    this.stream.discardHeld();
    this.sendStatus(code, details);
  }

  protected consumed(message: Buffer): void {
    this.stream.consume(MESSAGE_PREFIX_BYTES + message.length);
  }

  protected reportError(err: unknown): void {
    this.options.onError(err);
  }

  protected override abandon(reason: StreamingCloseReason): void {
    if (this.deadline !== undefined) clearTimeout(this.deadline);
    this.input = EMPTY;
    super.abandon(reason);
  }

  private readonly onData = (chunk: Buffer): void => {
    // Copied: the chunk is a view of the connection's receive buffer.
    let input = this.input.length === 0 ? Buffer.from(chunk) : Buffer.concat([this.input, chunk]);
    while (input.length >= MESSAGE_PREFIX_BYTES) {
      const error = checkPrefix(input, this.options.maxMessageBytes, this.options.identityOnly);
      if (error !== undefined) {
        this.finish(error.code, error.message, 'failed');
        return;
      }
      const end = MESSAGE_PREFIX_BYTES + input.readUInt32BE(1);
      if (input.length < end) break;
      const message = input.subarray(MESSAGE_PREFIX_BYTES, end);
      input = input.subarray(end);
      this.received(message);
      if (this.closed) return;
    }
    this.input = input.length === 0 ? EMPTY : input;
  };

  private readonly onEnd = (): void => {
    const left = this.input.length;
    if (left > 0) this.finish(GrpcStatus.INTERNAL, left < MESSAGE_PREFIX_BYTES ? 'truncated message prefix' : 'truncated message', 'failed');
    else this.receivedEnd();
  };
}
