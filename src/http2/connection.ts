import type { Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { HpackDecoder } from './hpack';
import { HpackError } from './hpack-error';
import {
  CONNECTION_PREFACE,
  DEFAULT_MAX_FRAME_SIZE,
  DEFAULT_WINDOW,
  ErrorCode,
  Flag,
  FRAME_HEADER_BYTES,
  FrameType,
  goawayFrame,
  MAX_ALLOWED_FRAME_SIZE,
  MAX_WINDOW,
  Setting,
  settingsFrame,
  writeFrameHeader,
} from './frames';
import { checkRequestHeaders, checkTrailers, MALFORMED } from './request-headers';
import { ResetBudget } from './reset-budget';
import type { WindowBudget } from './window-budget';

/**
 * The server side of one HTTP/2 connection (RFC 9113), written for many small request/response
 * exchanges: no object per stream beyond one small record, header blocks decoded to a flat string
 * list, output frames gathered and written once per tick. What a gRPC server needs, and only that:
 * client-initiated streams, flow control both ways, SETTINGS, PING, RST_STREAM, GOAWAY (graceful
 * and on error), CONTINUATION, padding, the stream states and request header rules of RFC 9113.
 * PRIORITY is checked and otherwise ignored; PUSH_PROMISE from a client is a protocol error.
 *
 * Everything a peer can make it hold is bounded: open streams (maxConcurrentStreams), a header
 * block (bytes, frames and time), request body bytes (the receive windows reopen only as the
 * application consumes what it was given), streams reset or refused (a ResetBudget; past it,
 * GOAWAY ENHANCE_YOUR_CALM), the time to the first SETTINGS, and output (a peer that does not
 * read stops being read).
 */

export interface ConnectionOptions {
  /** Streams a client may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS). */
  readonly maxConcurrentStreams: number;
  /**
   * Receive window of each stream (SETTINGS_INITIAL_WINDOW_SIZE): the most request body bytes one
   * stream may have buffered, since it reopens only as the application consumes them.
   */
  readonly initialWindowSize: number;
  /** Receive window of the connection: the most request body bytes all its streams may have buffered (at least 65,535). */
  readonly connectionWindowSize: number;
  /**
   * Where the connection borrows its receive window beyond the protocol's 65,535 bytes, shared with
   * the server's other connections; absent: connectionWindowSize is granted in full.
   */
  readonly windowBudget?: WindowBudget;
  /** Largest decoded header list accepted (SETTINGS_MAX_HEADER_LIST_SIZE). */
  readonly maxHeaderListSize: number;
  /** Streams a connection may have reset or refused at once (default 1,000); see ResetBudget. */
  readonly resetBurst?: number;
  /** ...and per second beyond that (default 33). */
  readonly resetsPerSecond?: number;
  /**
   * How long the client may take to send its preface and first SETTINGS, and a header block split
   * over CONTINUATION frames may stay open, ms (default 5,000).
   */
  readonly handshakeTimeoutMs?: number;
  /** Monotonic clock in ms (performance.now by default); read only when a stream is reset or refused. */
  readonly now?: () => number;
  /** A new stream, with its request header fields as a flat `[name, value, ...]` list. */
  readonly onStream: (stream: H2Stream, headers: readonly string[]) => void;
  /**
   * Something threw: a stream handler (that stream is reset with INTERNAL_ERROR, the connection
   * goes on), or this layer itself on a frame it did not expect (that connection ends with GOAWAY
   * INTERNAL_ERROR; the process and its other connections go on).
   */
  readonly onError?: (err: unknown) => void;
}

const HPACK_TABLE_SIZE = 4096;
// A header block may be split over frames; more than this is refused before it is decoded.
const MAX_HEADER_BLOCK_FACTOR = 2;
// Frames (HEADERS and its CONTINUATIONs) one header block may span. Counted, not just their bytes:
// empty CONTINUATION frames carry nothing yet cost a frame each (the CVE-2024-27316 class).
// Real clients fill frames up to SETTINGS_MAX_FRAME_SIZE, so a block of the largest accepted
// size takes a handful.
const MAX_HEADER_BLOCK_FRAMES = 32;
const DEFAULT_HANDSHAKE_TIMEOUT_MS = 5_000;
const DEFAULT_RESET_BURST = 1_000;
const DEFAULT_RESETS_PER_SECOND = 33;
// A header list over the limit costs its decoding in full: it weighs as this many resets.
const HEADER_LIST_REFUSAL_COST = 100;
// Streams this layer reset lately: frames the client sent before it learnt of the reset are
// dropped, not answered (RFC 9113 5.1, "closed"). Older ones are forgotten.
const RECENT_RESETS = 256;
// A connection is idle after this many idle checks in a row with no stream (see checkIdle).
const IDLE_CHECKS = 4;
// After GOAWAY for a connection error, the socket is cut if it has not closed within this time.
const FAIL_LINGER_MS = 1_000;

const EMPTY = Buffer.alloc(0);
const PING_PAYLOAD = Buffer.alloc(8);
// First size of a flush's output buffer: small enough to come from node's shared Buffer pool.
const OUTPUT_CHUNK = 2048;

/** One request stream: what the application reads and writes. */
export class H2Stream {
  /** Called with each DATA payload (not padding), in order. */
  onData: ((chunk: Buffer) => void) | undefined = undefined;
  /** Called once when the client has sent END_STREAM. */
  onEnd: (() => void) | undefined = undefined;
  /** Called once when the stream is gone before the response ended (reset, or connection lost). */
  onAbort: (() => void) | undefined = undefined;
  /** Called when DATA held back by flow control has all been sent (see bufferedBytes). */
  onWritable: (() => void) | undefined = undefined;
  /**
   * Called once when the connection begins a graceful close (GOAWAY: shutdown, its age limit, or the
   * client's own GOAWAY) while this stream is still being answered; a long-lived stream ends itself
   * here, since the connection closes only once every answer has ended.
   */
  onGoingAway: (() => void) | undefined = undefined;
  /** Response HEADERS have been queued. */
  headersSent = false;
  /** Nothing more can be sent: the response ended, or the stream was reset or lost. */
  closed = false;
  /** @internal */ remoteEnded = false;
  /** @internal */ sendWindow: number;
  /** @internal Received bytes (padding included) not yet returned to the client's window. */
  recvUnacked = 0;
  /** @internal The request's content-length, or -1. */
  expectedLength = -1;
  /** @internal DATA bytes received (padding excluded). */
  receivedLength = 0;
  /** @internal Frames held back by flow control (DATA) and what must follow them. */
  pending: Array<{ data: Buffer; endStream: boolean } | { trailers: Buffer }> | undefined = undefined;

  constructor(
    readonly id: number,
    private readonly connection: H2Connection,
    sendWindow: number,
  ) {
    this.sendWindow = sendWindow;
  }

  /** The connection it is on: the same object for every stream of one connection (for per-connection caps). */
  get owner(): object {
    return this.connection;
  }

  /**
   * Sends the response header block (HPACK-encoded, at least `:status`); `endStream` makes it a
   * headers-only response. An empty block is refused: the stream is reset with INTERNAL_ERROR.
   */
  respond(block: Buffer, endStream: boolean): void {
    if (this.closed || this.headersSent) return;
    this.headersSent = true;
    this.connection.sendHeaders(this, block, endStream);
  }

  /**
   * Sends message bytes as DATA, flow control permitting (queued otherwise); `endStream` ends the
   * response on the last of those DATA frames, without trailers.
   */
  write(data: Buffer, endStream = false): void {
    if (this.closed || !this.headersSent) return;
    this.connection.sendData(this, data, endStream);
  }

  /** DATA bytes written but held back by flow control (the peer's windows). */
  get bufferedBytes(): number {
    let bytes = 0;
    if (this.pending !== undefined) for (const item of this.pending) if ('data' in item) bytes += item.data.length;
    return bytes;
  }

  /**
   * Ends the response after any queued DATA: with `trailers` when the block holds fields, otherwise
   * (absent or empty) on a DATA frame carrying END_STREAM.
   */
  end(trailers: Buffer = EMPTY): void {
    if (this.closed || !this.headersSent) return;
    this.connection.sendTrailers(this, trailers);
  }

  /** Abandons the stream with RST_STREAM. */
  reset(code: ErrorCode = ErrorCode.CANCEL): void {
    if (this.closed) return;
    this.connection.resetStream(this, code);
  }

  /**
   * The application is done with `bytes` of the DATA it was given: the windows reopen by that
   * much. Not needed for a request read whole: when the client ends the stream (after onEnd) or
   * the stream closes, whatever it sent is released.
   */
  consume(bytes: number): void {
    this.connection.consume(this, bytes);
  }

  /**
   * Drops the DATA held back by flow control (see bufferedBytes), so that what is sent next (the
   * trailers that end a call for a peer that does not read) goes out at once: HEADERS are not flow
   * controlled. A message cut short by it is the peer's to discard.
   */
  discardHeld(): void {
    this.connection.discardHeld(this);
  }
}

/** The protocol state of one connection; errors end it with GOAWAY. */
export class H2Connection {
  private buffered: Buffer = EMPTY;
  private prefaceSeen = false;
  private settingsSeen = false;
  // Streams open or half-closed (either side); activeStreams counts those the application still answers.
  private readonly streams = new Map<number, H2Stream>();
  private activeStreams = 0;
  private lastStreamId = 0;
  private readonly decoder: HpackDecoder;
  // A header block being continued: its stream, flags and fragments.
  private continuing: { streamId: number; endStream: boolean; selfDependent: boolean; fragments: Buffer[]; bytes: number; frames: number } | undefined =
    undefined;
  // Armed while a header block is open: a peer may not hold the connection's HPACK state hostage.
  private headerBlockTimer: NodeJS.Timeout | undefined = undefined;

  private peerInitialWindow = DEFAULT_WINDOW;
  private peerMaxFrameSize = DEFAULT_MAX_FRAME_SIZE;
  private sendWindow = DEFAULT_WINDOW;
  // Received DATA bytes not yet returned by WINDOW_UPDATE, and of those, the ones released.
  private recvUnacked = 0;
  private recvReleased = 0;
  // The connection's receive window: the protocol's 65,535 bytes and what is borrowed from the
  // WindowBudget toward connectionWindowSize (given back when the socket closes).
  private recvWindow = DEFAULT_WINDOW;
  private borrowed = 0;
  // Until the client acknowledges our SETTINGS it may use the protocol's default stream window.
  private settingsAcked = false;
  private readonly budget: ResetBudget;
  private readonly now: () => number;
  private recentResets: Set<number> | undefined = undefined;
  private handshakeTimer: NodeJS.Timeout | undefined;
  private streamOpened = false;
  private idleChecks = 0;
  private readonly blocked = new Set<H2Stream>();

  private out: Buffer = EMPTY;
  private outLength = 0;
  private flushScheduled = false;
  private goawaySent = false;
  private closed = false;
  private pingOutstanding = false;
  /** Called once when the socket has closed. */
  onClose: (() => void) | undefined = undefined;

  constructor(
    private readonly socket: Socket,
    private readonly options: ConnectionOptions,
  ) {
    this.decoder = new HpackDecoder({ maxTableSize: HPACK_TABLE_SIZE, maxHeaderListSize: options.maxHeaderListSize });
    this.now = options.now ?? performance.now.bind(performance);
    this.budget = new ResetBudget(options.resetBurst ?? DEFAULT_RESET_BURST, options.resetsPerSecond ?? DEFAULT_RESETS_PER_SECOND, this.now());
    this.handshakeTimer = setTimeout(this.onHandshakeTimeout, options.handshakeTimeoutMs ?? DEFAULT_HANDSHAKE_TIMEOUT_MS);
    socket.setNoDelay(true);
    this.putRaw(
      settingsFrame([
        [Setting.MAX_CONCURRENT_STREAMS, options.maxConcurrentStreams],
        [Setting.INITIAL_WINDOW_SIZE, options.initialWindowSize],
        [Setting.MAX_HEADER_LIST_SIZE, options.maxHeaderListSize],
      ]),
    );
    const extra = this.borrowWindow();
    if (extra > 0) this.putWord(FrameType.WINDOW_UPDATE, 0, extra);
    socket.on('data', this.onSocketData);
    socket.on('drain', this.onDrain);
    socket.on('error', () => socket.destroy());
    socket.on('close', this.onSocketClose);
  }

  /**
   * Graceful close (shutdown, a connection age limit, idleness): GOAWAY NO_ERROR naming the last
   * stream taken; the streams it names still get their answers, and the socket ends once they have.
   */
  close(): void {
    if (this.closed) return;
    if (!this.goawaySent) {
      this.goawaySent = true;
      this.putRaw(goawayFrame(this.lastStreamId, ErrorCode.NO_ERROR));
      for (const stream of [...this.streams.values()]) {
        const onGoingAway = stream.onGoingAway;
        stream.onGoingAway = undefined;
        if (!stream.closed && onGoingAway !== undefined) this.guard(stream, onGoingAway, undefined);
      }
    }
    this.maybeEnd();
  }

  /** Cuts the connection at once. */
  destroy(): void {
    this.socket.destroy();
  }

  /**
   * Called by the server every quarter of its idle timeout: the connection is closed gracefully at
   * the fourth call in a row without a stream open or opened in between, and cut at the fifth.
   */
  checkIdle(): void {
    if (this.closed) return;
    if (this.activeStreams > 0 || this.streamOpened) {
      this.streamOpened = false;
      this.idleChecks = 0;
      return;
    }
    this.idleChecks++;
    if (this.idleChecks > IDLE_CHECKS) this.destroy();
    else if (this.idleChecks === IDLE_CHECKS) this.close();
  }

  /**
   * Sends a PING unless one is still unanswered; returns false when the previous one was never
   * acknowledged (the peer is gone without a FIN).
   */
  ping(): boolean {
    if (this.pingOutstanding) return false;
    this.pingOutstanding = true;
    this.putFrame(FrameType.PING, 0, 0, PING_PAYLOAD, 0, PING_PAYLOAD.length);
    return true;
  }

  // ---- sending (called by H2Stream) ----

  // No header block without fields is ever sent. An empty block is legal HPACK, but clients on
  // golang.org/x/net before September 2021 (h2spec 2.6.0 built at its pinned dependencies among
  // them) reset a stream whose HEADERS frame has an empty fragment with PROTOCOL_ERROR. A response
  // block always carries `:status`, so an empty one is the application's bug and is refused here;
  // empty trailers become END_STREAM on DATA.

  sendHeaders(stream: H2Stream, block: Buffer, endStream: boolean): void {
    if (block.length === 0) {
      this.resetStream(stream, ErrorCode.INTERNAL_ERROR);
      this.options.onError?.(new Error(`stream ${stream.id}: an empty response header block was refused (a response carries :status)`));
      return;
    }
    this.queueHeaderBlock(stream.id, block, endStream);
    if (endStream) this.finishLocal(stream);
  }

  sendData(stream: H2Stream, data: Buffer, endStream: boolean): void {
    const pending = stream.pending;
    if (pending !== undefined) {
      const last = pending[pending.length - 1];
      // Nothing more to send but the end: it rides on the DATA already waiting.
      if (data.length === 0 && endStream && last !== undefined && 'data' in last) last.endStream = true;
      else pending.push({ data, endStream });
    } else if (!this.trySendData(stream, data, endStream)) return;
    if (endStream && stream.pending === undefined) this.finishLocal(stream);
  }

  sendTrailers(stream: H2Stream, trailers: Buffer): void {
    if (trailers.length === 0) {
      this.sendData(stream, EMPTY, true);
      return;
    }
    if (stream.pending !== undefined) {
      stream.pending.push({ trailers });
      return;
    }
    this.queueHeaderBlock(stream.id, trailers, true);
    this.finishLocal(stream);
  }

  resetStream(stream: H2Stream, code: ErrorCode): void {
    this.putWord(FrameType.RST_STREAM, stream.id, code);
    this.rememberReset(stream.id);
    this.closeStream(stream, false);
  }

  discardHeld(stream: H2Stream): void {
    stream.pending = undefined;
    this.blocked.delete(stream);
  }

  consume(stream: H2Stream, bytes: number): void {
    const n = Math.min(bytes, stream.recvUnacked);
    if (n <= 0 || this.closed) return;
    stream.recvUnacked -= n;
    if (!stream.remoteEnded && !stream.closed) this.putWord(FrameType.WINDOW_UPDATE, stream.id, n);
    this.release(n);
  }

  /** Sends what the windows allow of `data`; queues the rest. False when some was held back. */
  private trySendData(stream: H2Stream, data: Buffer, endStream: boolean): boolean {
    let offset = 0;
    while (offset < data.length) {
      const room = Math.min(stream.sendWindow, this.sendWindow, this.peerMaxFrameSize);
      if (room <= 0) break;
      const n = Math.min(room, data.length - offset);
      const last = offset + n === data.length;
      this.putFrame(FrameType.DATA, last && endStream ? Flag.END_STREAM : 0, stream.id, data, offset, offset + n);
      stream.sendWindow -= n;
      this.sendWindow -= n;
      offset += n;
    }
    if (offset === data.length) {
      if (data.length === 0) this.putFrame(FrameType.DATA, endStream ? Flag.END_STREAM : 0, stream.id);
      return true;
    }
    stream.pending = [{ data: data.subarray(offset), endStream }];
    this.blocked.add(stream);
    return false;
  }

  /** Sends a blocked stream's queue as far as the windows now allow. */
  private resume(stream: H2Stream): void {
    const pending = stream.pending;
    if (pending === undefined) return;
    stream.pending = undefined;
    this.blocked.delete(stream);
    for (let i = 0; i < pending.length; i++) {
      const item = pending[i];
      if ('trailers' in item) {
        this.queueHeaderBlock(stream.id, item.trailers, true);
        this.finishLocal(stream);
        return;
      }
      if (!this.trySendData(stream, item.data, item.endStream)) {
        stream.pending!.push(...pending.slice(i + 1));
        return;
      }
      if (item.endStream) {
        this.finishLocal(stream);
        return;
      }
    }
    if (stream.onWritable !== undefined) this.guard(stream, stream.onWritable, undefined);
  }

  /** HEADERS (and CONTINUATIONs) carrying `block`, never empty (see sendHeaders). */
  private queueHeaderBlock(streamId: number, block: Buffer, endStream: boolean): void {
    const max = this.peerMaxFrameSize;
    const endFlag = endStream ? Flag.END_STREAM : 0;
    if (block.length <= max) {
      this.putFrame(FrameType.HEADERS, Flag.END_HEADERS | endFlag, streamId, block, 0, block.length);
      return;
    }
    for (let offset = 0; offset < block.length; offset += max) {
      const last = offset + max >= block.length;
      const type = offset === 0 ? FrameType.HEADERS : FrameType.CONTINUATION;
      const flags = (last ? Flag.END_HEADERS : 0) | (offset === 0 ? endFlag : 0);
      this.putFrame(type, flags, streamId, block, offset, Math.min(block.length, offset + max));
    }
  }

  /**
   * Our END_STREAM is out: the application is done with the stream. When the client has not ended
   * its side yet (an answer before the whole request, which RFC 9113 8.1 allows), the stream stays
   * half-closed (local) until it does or resets it, rather than being reset with NO_ERROR: its frames
   * are still checked as on any open stream (flow control, content-length, trailers), and the DATA
   * it still sends is dropped with its windows reopened. Once a stream has left the map, the client
   * has ended or reset it too, so any later frame on it but PRIORITY is an error (STREAM_CLOSED);
   * only the streams this layer reset (recentResets) get their frames in flight ignored.
   */
  private finishLocal(stream: H2Stream): void {
    if (stream.remoteEnded) this.closeStream(stream, true);
    else this.detach(stream, true);
  }

  private closeStream(stream: H2Stream, completed: boolean): void {
    this.detach(stream, completed);
    this.streams.delete(stream.id);
  }

  /** The application is done with the stream (it may stay in the map, half-closed (local)). */
  private detach(stream: H2Stream, completed: boolean): void {
    if (stream.closed) return;
    stream.closed = true;
    this.activeStreams--;
    stream.pending = undefined;
    this.blocked.delete(stream);
    this.releaseStream(stream);
    const onAbort = stream.onAbort;
    stream.onData = stream.onEnd = stream.onAbort = stream.onWritable = stream.onGoingAway = undefined;
    if (!completed && onAbort !== undefined) onAbort();
    if (this.goawaySent) this.maybeEnd();
  }

  private maybeEnd(): void {
    // Half-closed (local) streams have their answers: they do not hold the connection open.
    if (this.goawaySent && this.activeStreams === 0 && !this.closed) {
      this.flush();
      // Closed once the GOAWAY is written, not half-closed: a peer that never answers with its own
      // FIN (one that never sent the preface, say) would otherwise hold the server's close.
      this.socket.destroySoon();
    }
  }

  // Output frames are written straight into one buffer per flush: one copy, few allocations.
  private reserve(bytes: number): number {
    const at = this.outLength;
    if (at + bytes > this.out.length) {
      const next = Buffer.allocUnsafe(Math.max(OUTPUT_CHUNK, (at + bytes) * 2));
      this.out.copy(next, 0, 0, at);
      this.out = next;
    }
    this.outLength = at + bytes;
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      // One write per event-loop turn, whatever number of answers completed in it.
      setImmediate(this.flush);
    }
    return at;
  }

  private putFrame(type: FrameType, flags: number, streamId: number, payload?: Buffer, start = 0, end = 0): void {
    if (this.closed) return;
    const length = end - start;
    const at = this.reserve(FRAME_HEADER_BYTES + length);
    writeFrameHeader(this.out, at, length, type, flags, streamId);
    if (payload !== undefined && length > 0) payload.copy(this.out, at + FRAME_HEADER_BYTES, start, end);
  }

  /** RST_STREAM or WINDOW_UPDATE: one 32-bit word. */
  private putWord(type: FrameType.RST_STREAM | FrameType.WINDOW_UPDATE, streamId: number, word: number): void {
    if (this.closed) return;
    const at = this.reserve(FRAME_HEADER_BYTES + 4);
    writeFrameHeader(this.out, at, 4, type, 0, streamId);
    this.out.writeUInt32BE(word >>> 0, at + FRAME_HEADER_BYTES);
  }

  /** A frame built elsewhere (SETTINGS, GOAWAY). */
  private putRaw(frameBytes: Buffer): void {
    if (this.closed) return;
    const at = this.reserve(frameBytes.length);
    frameBytes.copy(this.out, at);
  }

  private readonly flush = (): void => {
    this.flushScheduled = false;
    if (this.outLength === 0 || this.closed) return;
    const chunk = this.out.subarray(0, this.outLength);
    // The socket owns what it was given; the next frames go into a new buffer.
    this.out = EMPTY;
    this.outLength = 0;
    // A peer that does not read its answers stops being read: no unbounded buffering.
    if (!this.socket.write(chunk)) this.socket.pause();
  };

  private readonly onDrain = (): void => {
    if (!this.closed) this.socket.resume();
  };

  private readonly onSocketClose = (): void => {
    this.closed = true;
    this.options.windowBudget?.giveBack(this.borrowed);
    this.borrowed = 0;
    this.endHeaderBlock();
    this.clearHandshakeTimer();
    this.out = EMPTY;
    this.outLength = 0;
    for (const stream of [...this.streams.values()]) this.closeStream(stream, false);
    const onClose = this.onClose;
    this.onClose = undefined;
    onClose?.();
  };

  /** A connection error: GOAWAY with the code, then the socket ends. */
  private fail(code: ErrorCode, debug: string): void {
    if (this.closed) return;
    this.endHeaderBlock();
    this.clearHandshakeTimer();
    this.putRaw(goawayFrame(this.lastStreamId, code, debug));
    this.goawaySent = true;
    this.flush();
    this.closed = true;
    // Lingering close: the socket's write side ends after GOAWAY, and what the peer still sends is
    // read and dropped, since closing with unread input would reset the connection and could lose
    // the GOAWAY on its way. The peer gets a moment to close, not more.
    this.socket.end();
    this.socket.resume();
    setTimeout(() => this.socket.destroy(), FAIL_LINGER_MS).unref();
    for (const stream of [...this.streams.values()]) this.closeStream(stream, false);
  }

  private readonly onHandshakeTimeout = (): void => {
    this.handshakeTimer = undefined;
    this.fail(ErrorCode.ENHANCE_YOUR_CALM, 'no connection preface and SETTINGS in time');
  };

  private clearHandshakeTimer(): void {
    if (this.handshakeTimer !== undefined) clearTimeout(this.handshakeTimer);
    this.handshakeTimer = undefined;
  }

  /** Charges the reset budget; past it, the connection ends with ENHANCE_YOUR_CALM (false). */
  private spend(cost: number): boolean {
    if (this.budget.spend(cost, this.now())) return true;
    this.fail(ErrorCode.ENHANCE_YOUR_CALM, 'too many streams reset or refused');
    return false;
  }

  /** A stream error (RFC 9113 5.4.2): RST_STREAM with `code`, charged to the reset budget. */
  private streamError(streamId: number, code: ErrorCode, cost = 1): void {
    const stream = this.streams.get(streamId);
    if (stream !== undefined) this.resetStream(stream, code);
    else if (!this.resetLately(streamId)) {
      // A stream already reset is not reset again: one RST_STREAM per stream.
      this.putWord(FrameType.RST_STREAM, streamId, code);
      this.rememberReset(streamId);
    }
    this.spend(cost);
  }

  private rememberReset(streamId: number): void {
    const recent = (this.recentResets ??= new Set());
    recent.add(streamId);
    if (recent.size > RECENT_RESETS) recent.delete(recent.values().next().value as number);
  }

  /** Whether frames on `streamId` may be in flight from before our RST_STREAM reached the client. */
  private resetLately(streamId: number): boolean {
    return this.recentResets !== undefined && this.recentResets.has(streamId);
  }

  /** A stream id the client has not opened yet (and even ids: this server never opens streams). */
  private isIdle(streamId: number): boolean {
    return streamId > this.lastStreamId || streamId % 2 === 0;
  }

  /** Received bytes no longer held: the connection window reopens (in batches). */
  private release(bytes: number): void {
    this.recvReleased += bytes;
    const window = this.recvWindow;
    // Batched at half the window; sooner when what stays held has left the client little room.
    if (this.recvReleased >= window / 2 || window - this.recvUnacked < window / 4) {
      // A connection opened while the budget was spent grows its window as the budget allows.
      this.putWord(FrameType.WINDOW_UPDATE, 0, this.recvReleased + this.borrowWindow());
      this.recvUnacked -= this.recvReleased;
      this.recvReleased = 0;
    }
  }

  /** Borrows what the window still lacks toward connectionWindowSize; returns the bytes added to it. */
  private borrowWindow(): number {
    const wanted = this.options.connectionWindowSize - DEFAULT_WINDOW - this.borrowed;
    if (wanted <= 0) return 0;
    const granted = this.options.windowBudget === undefined ? wanted : this.options.windowBudget.borrow(wanted);
    this.borrowed += granted;
    this.recvWindow += granted;
    return granted;
  }

  /** Whatever a stream still holds goes back to the connection window. */
  private releaseStream(stream: H2Stream): void {
    const held = stream.recvUnacked;
    if (held === 0) return;
    stream.recvUnacked = 0;
    if (!this.closed) this.release(held);
  }

  // ---- receiving ----

  private readonly onSocketData = (chunk: Buffer): void => {
    try {
      this.receive(chunk);
    } catch (err) {
      this.options.onError?.(err);
      this.fail(ErrorCode.INTERNAL_ERROR, 'internal error');
    }
  };

  private receive(chunk: Buffer): void {
    if (this.closed) return;
    const buf = this.buffered.length === 0 ? chunk : Buffer.concat([this.buffered, chunk]);
    let offset = 0;
    if (!this.prefaceSeen) {
      const n = Math.min(buf.length, CONNECTION_PREFACE.length);
      if (buf.compare(CONNECTION_PREFACE, 0, n, 0, n) !== 0) {
        this.fail(ErrorCode.PROTOCOL_ERROR, 'bad connection preface');
        return;
      }
      if (buf.length < CONNECTION_PREFACE.length) {
        this.buffered = buf;
        return;
      }
      this.prefaceSeen = true;
      offset = CONNECTION_PREFACE.length;
    }
    while (!this.closed && buf.length - offset >= FRAME_HEADER_BYTES) {
      const length = (buf[offset] << 16) | (buf[offset + 1] << 8) | buf[offset + 2];
      if (length > DEFAULT_MAX_FRAME_SIZE) {
        this.fail(ErrorCode.FRAME_SIZE_ERROR, 'frame larger than SETTINGS_MAX_FRAME_SIZE');
        return;
      }
      if (buf.length - offset < FRAME_HEADER_BYTES + length) break;
      const type = buf[offset + 3];
      const flags = buf[offset + 4];
      const streamId = buf.readUInt32BE(offset + 5) & MAX_WINDOW;
      const payload = buf.subarray(offset + FRAME_HEADER_BYTES, offset + FRAME_HEADER_BYTES + length);
      offset += FRAME_HEADER_BYTES + length;
      this.onFrame(type, flags, streamId, payload);
    }
    if (this.closed) return;
    // Leftover bytes are copied: `payload` subarrays handed out above must not pin the whole chunk.
    this.buffered = offset === buf.length ? EMPTY : Buffer.from(buf.subarray(offset));
  }

  private onFrame(type: number, flags: number, streamId: number, payload: Buffer): void {
    if (!this.settingsSeen) {
      if (type !== FrameType.SETTINGS || (flags & Flag.ACK) !== 0) {
        this.fail(ErrorCode.PROTOCOL_ERROR, 'the first frame must be SETTINGS');
        return;
      }
      this.settingsSeen = true;
      this.clearHandshakeTimer();
    }
    if (this.continuing !== undefined && type !== FrameType.CONTINUATION) {
      this.fail(ErrorCode.PROTOCOL_ERROR, 'expected CONTINUATION');
      return;
    }
    switch (type) {
      case FrameType.DATA:
        this.onData(flags, streamId, payload);
        return;
      case FrameType.HEADERS:
        this.onHeaders(flags, streamId, payload);
        return;
      case FrameType.CONTINUATION:
        this.onContinuation(flags, streamId, payload);
        return;
      case FrameType.PRIORITY:
        this.onPriority(streamId, payload);
        return;
      case FrameType.RST_STREAM:
        this.onRstStream(streamId, payload);
        return;
      case FrameType.SETTINGS:
        this.onSettings(flags, streamId, payload);
        return;
      case FrameType.PUSH_PROMISE:
        this.fail(ErrorCode.PROTOCOL_ERROR, 'PUSH_PROMISE from a client');
        return;
      case FrameType.PING:
        this.onPing(flags, streamId, payload);
        return;
      case FrameType.GOAWAY:
        if (streamId !== 0) this.fail(ErrorCode.PROTOCOL_ERROR, 'GOAWAY on a stream');
        else this.close();
        return;
      case FrameType.WINDOW_UPDATE:
        this.onWindowUpdate(streamId, payload);
        return;
      default:
      // Unknown frame types are ignored (RFC 9113 section 4.1).
    }
  }

  /** The payload without its padding, or undefined after a protocol error. */
  private unpad(flags: number, payload: Buffer, extra: number): Buffer | undefined {
    const padded = (flags & Flag.PADDED) !== 0 ? 1 : 0;
    if (payload.length < padded + extra) {
      this.fail(ErrorCode.FRAME_SIZE_ERROR, 'padded frame too short');
      return undefined;
    }
    if (padded === 0) return extra === 0 ? payload : payload.subarray(extra);
    const pad = payload[0];
    if (pad > payload.length - 1 - extra) {
      this.fail(ErrorCode.PROTOCOL_ERROR, 'padding longer than the frame');
      return undefined;
    }
    return payload.subarray(1 + extra, payload.length - pad);
  }

  private onData(flags: number, streamId: number, payload: Buffer): void {
    if (streamId === 0 || this.isIdle(streamId)) {
      this.fail(ErrorCode.PROTOCOL_ERROR, 'DATA on an idle stream');
      return;
    }
    // Flow control counts the whole frame, padding included, whatever happens to the stream.
    this.recvUnacked += payload.length;
    if (this.recvUnacked > this.recvWindow) {
      this.fail(ErrorCode.FLOW_CONTROL_ERROR, 'connection window exceeded');
      return;
    }
    const data = this.unpad(flags, payload, 0);
    if (data === undefined) return;
    const stream = this.streams.get(streamId);
    if (stream === undefined || stream.remoteEnded) {
      this.release(payload.length);
      // Half-closed (remote) or closed: STREAM_CLOSED, unless our reset is still on its way.
      if (stream !== undefined || !this.resetLately(streamId)) this.streamError(streamId, ErrorCode.STREAM_CLOSED);
      return;
    }
    stream.recvUnacked += payload.length;
    const window = this.settingsAcked ? this.options.initialWindowSize : Math.max(this.options.initialWindowSize, DEFAULT_WINDOW);
    if (stream.recvUnacked > window) {
      this.streamError(streamId, ErrorCode.FLOW_CONTROL_ERROR);
      return;
    }
    stream.receivedLength += data.length;
    if (stream.expectedLength >= 0 && stream.receivedLength > stream.expectedLength) {
      this.streamError(streamId, ErrorCode.PROTOCOL_ERROR);
      return;
    }
    const endStream = (flags & Flag.END_STREAM) !== 0;
    if (stream.closed) {
      // Answered already (half-closed (local)): dropped, and the windows reopen so the client can finish.
      stream.recvUnacked = 0;
      if (!endStream && payload.length > 0) this.putWord(FrameType.WINDOW_UPDATE, streamId, payload.length);
      this.release(payload.length);
    } else if (data.length > 0 && stream.onData !== undefined) this.guard(stream, stream.onData, data);
    if (endStream) this.endRemote(stream);
  }

  /** The client has ended its side: the handler hears of it, and the body it sent is released. */
  private endRemote(stream: H2Stream): void {
    if (stream.remoteEnded) return;
    if (stream.expectedLength >= 0 && stream.receivedLength !== stream.expectedLength) {
      this.streamError(stream.id, ErrorCode.PROTOCOL_ERROR);
      return;
    }
    stream.remoteEnded = true;
    if (stream.closed) {
      // Both sides have ended: the stream is closed.
      this.streams.delete(stream.id);
      return;
    }
    if (stream.onEnd !== undefined) this.guard(stream, stream.onEnd, undefined);
    this.releaseStream(stream);
  }

  /** Runs a handler; one that throws costs its own stream, not the connection. */
  private guard<T>(stream: H2Stream, handler: (arg: T) => void, arg: T): void {
    try {
      handler(arg);
    } catch (err) {
      if (!stream.closed) this.resetStream(stream, ErrorCode.INTERNAL_ERROR);
      this.options.onError?.(err);
    }
  }

  private onHeaders(flags: number, streamId: number, payload: Buffer): void {
    if (streamId === 0 || streamId % 2 === 0) {
      this.fail(ErrorCode.PROTOCOL_ERROR, 'HEADERS on stream 0 or a server stream id');
      return;
    }
    const prioritized = (flags & Flag.PRIORITY) !== 0;
    const fragment = this.unpad(flags, payload, prioritized ? 5 : 0);
    if (fragment === undefined) return;
    // A stream may not depend on itself (RFC 9113 5.3.1): a stream error, once its block is decoded.
    const selfDependent = prioritized && (payload.readUInt32BE((flags & Flag.PADDED) !== 0 ? 1 : 0) & MAX_WINDOW) === streamId;
    const endStream = (flags & Flag.END_STREAM) !== 0;
    if ((flags & Flag.END_HEADERS) !== 0) {
      this.onHeaderBlock(streamId, endStream, selfDependent, fragment);
      return;
    }
    if (fragment.length > this.options.maxHeaderListSize * MAX_HEADER_BLOCK_FACTOR) {
      this.fail(ErrorCode.ENHANCE_YOUR_CALM, 'header block too large');
      return;
    }
    const fragments = fragment.length === 0 ? [] : [Buffer.from(fragment)];
    this.continuing = { streamId, endStream, selfDependent, fragments, bytes: fragment.length, frames: 1 };
    this.headerBlockTimer = setTimeout(this.onHeaderBlockTimeout, this.options.handshakeTimeoutMs ?? DEFAULT_HANDSHAKE_TIMEOUT_MS);
  }

  private readonly onHeaderBlockTimeout = (): void => {
    this.headerBlockTimer = undefined;
    this.fail(ErrorCode.ENHANCE_YOUR_CALM, 'header block not completed in time');
  };

  /** The open header block (if any) is finished or abandoned. */
  private endHeaderBlock(): void {
    this.continuing = undefined;
    if (this.headerBlockTimer !== undefined) clearTimeout(this.headerBlockTimer);
    this.headerBlockTimer = undefined;
  }

  private onContinuation(flags: number, streamId: number, payload: Buffer): void {
    const c = this.continuing;
    if (c === undefined || c.streamId !== streamId) {
      this.fail(ErrorCode.PROTOCOL_ERROR, 'unexpected CONTINUATION');
      return;
    }
    c.bytes += payload.length;
    c.frames++;
    if (c.bytes > this.options.maxHeaderListSize * MAX_HEADER_BLOCK_FACTOR || c.frames > MAX_HEADER_BLOCK_FRAMES) {
      this.fail(ErrorCode.ENHANCE_YOUR_CALM, 'header block too large');
      return;
    }
    if (payload.length > 0) c.fragments.push(Buffer.from(payload));
    if ((flags & Flag.END_HEADERS) === 0) return;
    this.endHeaderBlock();
    this.onHeaderBlock(streamId, c.endStream, c.selfDependent, Buffer.concat(c.fragments, c.bytes));
  }

  private onHeaderBlock(streamId: number, endStream: boolean, selfDependent: boolean, block: Buffer): void {
    let headers: string[] | undefined;
    try {
      headers = this.decoder.decode(block);
    } catch (err) {
      if (err instanceof HpackError) {
        this.fail(ErrorCode.COMPRESSION_ERROR, 'bad header block');
        return;
      }
      throw err;
    }
    // Decoded above whatever follows, so that the HPACK contexts stay in step.
    if (streamId <= this.lastStreamId) {
      this.onTrailers(streamId, endStream, selfDependent, headers);
      return;
    }
    this.lastStreamId = streamId;
    if (this.goawaySent) return;
    if (headers === undefined) {
      this.streamError(streamId, ErrorCode.ENHANCE_YOUR_CALM, HEADER_LIST_REFUSAL_COST);
      return;
    }
    if (selfDependent) {
      this.streamError(streamId, ErrorCode.PROTOCOL_ERROR);
      return;
    }
    if (this.streams.size >= this.options.maxConcurrentStreams) {
      this.streamError(streamId, ErrorCode.REFUSED_STREAM);
      return;
    }
    const expectedLength = this.decoder.lastBlockForbidden ? MALFORMED : checkRequestHeaders(headers, true);
    if (expectedLength === MALFORMED) {
      this.streamError(streamId, ErrorCode.PROTOCOL_ERROR);
      return;
    }
    const stream = new H2Stream(streamId, this, this.peerInitialWindow);
    stream.expectedLength = expectedLength;
    this.streams.set(streamId, stream);
    this.activeStreams++;
    this.streamOpened = true;
    this.guard(stream, (h: readonly string[]) => this.options.onStream(stream, h), headers);
    if (endStream) this.endRemote(stream);
  }

  /** A header block on a stream already opened: the request's trailers, or an error. */
  private onTrailers(streamId: number, endStream: boolean, selfDependent: boolean, headers: string[] | undefined): void {
    const stream = this.streams.get(streamId);
    if (stream === undefined) {
      if (this.resetLately(streamId)) return;
      // Closed after the client ended it, or an id below one already used (RFC 9113 5.1, 5.1.1).
      if (streamId === this.lastStreamId) this.fail(ErrorCode.STREAM_CLOSED, 'HEADERS on a closed stream');
      else this.fail(ErrorCode.PROTOCOL_ERROR, 'HEADERS on a stream id lower than one already used');
      return;
    }
    if (stream.remoteEnded) {
      this.streamError(streamId, ErrorCode.STREAM_CLOSED);
      return;
    }
    // Trailers end the stream and carry no pseudo-header fields (RFC 9113 8.1).
    if (!endStream || selfDependent || headers === undefined || this.decoder.lastBlockForbidden || !checkTrailers(headers, true)) {
      this.streamError(streamId, ErrorCode.PROTOCOL_ERROR);
      return;
    }
    this.endRemote(stream);
  }

  private onRstStream(streamId: number, payload: Buffer): void {
    if (payload.length !== 4) {
      this.fail(ErrorCode.FRAME_SIZE_ERROR, 'RST_STREAM length');
      return;
    }
    if (streamId === 0 || this.isIdle(streamId)) {
      this.fail(ErrorCode.PROTOCOL_ERROR, 'RST_STREAM on an idle stream');
      return;
    }
    // Every reset is charged: a stream opened and reset at once is the rapid-reset attack.
    if (!this.spend(1)) return;
    const stream = this.streams.get(streamId);
    if (stream !== undefined) this.closeStream(stream, false);
  }

  private onPriority(streamId: number, payload: Buffer): void {
    if (streamId === 0) {
      this.fail(ErrorCode.PROTOCOL_ERROR, 'PRIORITY on stream 0');
      return;
    }
    const code =
      payload.length !== 5 ? ErrorCode.FRAME_SIZE_ERROR : (payload.readUInt32BE(0) & MAX_WINDOW) === streamId ? ErrorCode.PROTOCOL_ERROR : ErrorCode.NO_ERROR;
    if (code === ErrorCode.NO_ERROR) return;
    // No RST_STREAM may name an idle stream: there the stream error becomes a connection error.
    if (this.isIdle(streamId)) this.fail(code, 'bad PRIORITY on an idle stream');
    else this.streamError(streamId, code);
  }

  private onSettings(flags: number, streamId: number, payload: Buffer): void {
    if (streamId !== 0) {
      this.fail(ErrorCode.PROTOCOL_ERROR, 'SETTINGS on a stream');
      return;
    }
    if ((flags & Flag.ACK) !== 0) {
      if (payload.length !== 0) this.fail(ErrorCode.FRAME_SIZE_ERROR, 'SETTINGS ACK with a payload');
      else this.settingsAcked = true;
      return;
    }
    if (payload.length % 6 !== 0) {
      this.fail(ErrorCode.FRAME_SIZE_ERROR, 'SETTINGS length');
      return;
    }
    for (let i = 0; i < payload.length; i += 6) {
      const id = payload.readUInt16BE(i);
      const value = payload.readUInt32BE(i + 2);
      if (id === Setting.INITIAL_WINDOW_SIZE) {
        if (value > MAX_WINDOW) {
          this.fail(ErrorCode.FLOW_CONTROL_ERROR, 'SETTINGS_INITIAL_WINDOW_SIZE too large');
          return;
        }
        const delta = value - this.peerInitialWindow;
        this.peerInitialWindow = value;
        for (const stream of this.streams.values()) stream.sendWindow += delta;
      } else if (id === Setting.MAX_FRAME_SIZE) {
        if (value < DEFAULT_MAX_FRAME_SIZE || value > MAX_ALLOWED_FRAME_SIZE) {
          this.fail(ErrorCode.PROTOCOL_ERROR, 'SETTINGS_MAX_FRAME_SIZE out of range');
          return;
        }
        this.peerMaxFrameSize = value;
      } else if (id === Setting.ENABLE_PUSH && value > 1) {
        this.fail(ErrorCode.PROTOCOL_ERROR, 'SETTINGS_ENABLE_PUSH out of range');
        return;
      }
      // HEADER_TABLE_SIZE: responses never use the dynamic table, so any size suits them.
    }
    this.putFrame(FrameType.SETTINGS, Flag.ACK, 0);
    this.resumeBlocked();
  }

  private onPing(flags: number, streamId: number, payload: Buffer): void {
    if (streamId !== 0) {
      this.fail(ErrorCode.PROTOCOL_ERROR, 'PING on a stream');
      return;
    }
    if (payload.length !== 8) {
      this.fail(ErrorCode.FRAME_SIZE_ERROR, 'PING length');
      return;
    }
    if ((flags & Flag.ACK) !== 0) this.pingOutstanding = false;
    else this.putFrame(FrameType.PING, Flag.ACK, 0, payload, 0, payload.length);
  }

  private onWindowUpdate(streamId: number, payload: Buffer): void {
    if (payload.length !== 4) {
      this.fail(ErrorCode.FRAME_SIZE_ERROR, 'WINDOW_UPDATE length');
      return;
    }
    const increment = payload.readUInt32BE(0) & MAX_WINDOW;
    if (streamId === 0) {
      if (increment === 0) {
        this.fail(ErrorCode.PROTOCOL_ERROR, 'WINDOW_UPDATE of 0');
        return;
      }
      this.sendWindow += increment;
      if (this.sendWindow > MAX_WINDOW) {
        this.fail(ErrorCode.FLOW_CONTROL_ERROR, 'connection window overflow');
        return;
      }
      this.resumeBlocked();
      return;
    }
    if (this.isIdle(streamId)) {
      this.fail(ErrorCode.PROTOCOL_ERROR, 'WINDOW_UPDATE on an idle stream');
      return;
    }
    const stream = this.streams.get(streamId);
    // Closed: a late update is harmless.
    if (stream === undefined) return;
    if (increment === 0) {
      this.streamError(streamId, ErrorCode.PROTOCOL_ERROR);
      return;
    }
    stream.sendWindow += increment;
    if (stream.sendWindow > MAX_WINDOW) {
      this.streamError(streamId, ErrorCode.FLOW_CONTROL_ERROR);
      return;
    }
    this.resume(stream);
  }

  private resumeBlocked(): void {
    if (this.blocked.size === 0) return;
    for (const stream of [...this.blocked]) {
      if (this.sendWindow <= 0) return;
      this.resume(stream);
    }
  }
}
