import { GrpcStatus } from '../errors';

/**
 * A bidirectional streaming gRPC method as a service writes it, whatever transport serves it
 * (GRPC_TRANSPORT: src/grpc/http2-server.ts on the own HTTP/2 layer, src/grpc/grpc-js-server.ts on
 * grpc-js): protobuf message bytes in, protobuf message bytes out, and a status at the end. The
 * transport owns framing, flow control, message size caps, deadlines and shutdown; the service owns
 * what the messages mean. One StreamingMethod object serves both transports.
 *
 * Flow control, both ways: a request message is taken out of the call's receive window only once
 * onMessage has returned (or the promise it returned has settled), so a service that is slow to
 * handle messages makes the client wait instead of the process buffering; messages are delivered
 * one at a time, in order. write() returns false once the peer has stopped taking messages (the
 * transport holds them): the service should then wait for onWritable before writing more; a call
 * whose held output grows past STREAMING_MAX_PENDING_BYTES is cancelled.
 */

/** Why a call is over (StreamingHandlers.onClose). */
export type StreamingCloseReason =
  /** The service ended it with end(). */
  | 'ended'
  /** The client cancelled it, its connection was lost or cut, or its deadline passed. */
  | 'cancelled'
  /** The server is shutting down or closing the connection (GOAWAY): the transport ended the call with UNAVAILABLE, so that the client reconnects elsewhere. */
  | 'going-away'
  /** The transport ended it with an error status: a request message over the size cap, bad framing, or a handler that threw. */
  | 'failed';

/** One call, as the service drives it. Every method is a no-op once the call is over. */
export interface StreamingCall {
  /** A request header (gRPC metadata) as text, or undefined. Names are lower-case. */
  header(name: string): string | undefined;
  /** The connection the call is on: equal (===) for the calls of one connection, for per-connection caps. */
  readonly connection: unknown;
  /**
   * Sends one response message (its protobuf bytes, without the gRPC prefix). Returns false when
   * the peer is not taking messages as fast as they are written: wait for onWritable.
   */
  write(message: Uint8Array): boolean;
  /** Response bytes written and not yet taken by the transport towards the peer (held back by flow control). */
  readonly pendingBytes: number;
  /** Ends the call with a status (0 is OK) and message, after what is held for the peer; onClose('ended') follows. */
  end(code: number, details?: string): void;
  /**
   * Ends the call at once with a status, discarding what is held for the peer (one that does not
   * read): the own HTTP/2 layer sends the status ahead of it; node:http2 cannot, so on grpc-js the
   * stream is reset with ENHANCE_YOUR_CALM, which gRPC clients read as RESOURCE_EXHAUSTED.
   */
  cut(code: number, details: string): void;
  /** True once the call is over, from either side. */
  readonly closed: boolean;
}

/** What a service does with one call: the transport calls these. */
export interface StreamingHandlers {
  /**
   * One request message (protobuf bytes, unframed). The next one is not delivered, and the call's
   * receive window not reopened for this one, before this returns or the promise it returns settles.
   * A handler that throws (or a promise that rejects) ends the call with INTERNAL.
   */
  onMessage(message: Buffer): void | Promise<void>;
  /** The client will send no more messages (after the last onMessage has settled). */
  onHalfClose?(): void;
  /** The peer takes messages again after write() returned false. */
  onWritable?(): void;
  /** The call is over; called exactly once, whatever ended it. */
  onClose?(reason: StreamingCloseReason): void;
}

/** A bidirectional streaming method: its path and what to do with each call. */
export interface StreamingMethod {
  /** `/package.Service/Method`. */
  readonly path: string;
  /** Largest request message, bytes; the transport's own cap (GRPC_MAX_MESSAGE_BYTES and the HTTP/2 stream window) when smaller or absent. */
  readonly maxMessageBytes?: number;
  /** A new call: returns its handlers. The call may be written to and ended from here on. */
  open(call: StreamingCall): StreamingHandlers;
}

/** Output a call may hold for a peer that does not read before it is cancelled, bytes. */
export const STREAMING_MAX_PENDING_BYTES = 4 * 1024 * 1024;
/** write() returns false past this much held output, bytes. */
export const STREAMING_HIGH_WATER_BYTES = 64 * 1024;

/**
 * What both transports do for a call, over their own primitives: open the method, hand it the
 * messages one at a time (waiting for a returned promise), tell it of the half-close after the last
 * one, end the call once, and call onClose exactly once. A transport implements the abstract members
 * and calls received / receivedEnd / finish / closed as its stream reports.
 */
export abstract class StreamingCallBase implements StreamingCall {
  private handlers: StreamingHandlers | undefined = undefined;
  private over = false;
  private reason: StreamingCloseReason | undefined = undefined;
  private notified = false;
  private readonly queue: Buffer[] = [];
  private busy = false;
  private remoteEnded = false;
  private halfCloseTold = false;

  abstract header(name: string): string | undefined;
  abstract readonly connection: unknown;
  abstract readonly pendingBytes: number;
  /** Sends one message; false when the peer is not keeping up. */
  protected abstract sendMessage(message: Uint8Array): boolean;
  /** Sends the status that ends the call (the stream is still open). */
  protected abstract sendStatus(code: number, details: string): void;
  /** Ends the stream at once, dropping the output held for the peer, with the status if the transport can send it ahead. */
  protected abstract sendStatusNow(code: number, details: string): void;
  /** The handler is done with `message`: its bytes may leave the receive window. */
  protected abstract consumed(message: Buffer): void;
  /** A handler threw or rejected. */
  protected abstract reportError(err: unknown): void;
  /** The handler is busy with a message (a promise): the transport may stop reading. */
  protected pauseInput(): void {}
  protected resumeInput(): void {}

  get closed(): boolean {
    return this.over;
  }

  /** Opens the method on this call. */
  start(method: StreamingMethod): void {
    try {
      this.handlers = method.open(this);
    } catch (err) {
      this.failHandler(err);
      return;
    }
    // open() may have ended the call already: its handlers hear of it now that they exist.
    this.notify();
    this.deliver();
  }

  write(message: Uint8Array): boolean {
    return this.over ? false : this.sendMessage(message);
  }

  end(code: number, details = ''): void {
    this.finish(code, details, 'ended');
  }

  cut(code: number, details: string): void {
    if (this.over) return;
    this.sendStatusNow(code, details);
    this.abandon('ended');
  }

  /** A complete request message arrived. */
  protected received(message: Buffer): void {
    if (this.over) return;
    this.queue.push(message);
    this.deliver();
  }

  /** The client sent its last message. */
  protected receivedEnd(): void {
    this.remoteEnded = true;
    this.deliver();
  }

  /** The peer takes messages again. */
  protected writable(): void {
    if (!this.over) this.handlers?.onWritable?.();
  }

  /** Ends the call with a status, unless it is over already. */
  protected finish(code: number, details: string, reason: StreamingCloseReason): void {
    if (this.over) return;
    this.sendStatus(code, details);
    this.abandon(reason);
  }

  /** The call is over without a status from here (cancelled, lost). */
  protected abandon(reason: StreamingCloseReason): void {
    if (this.over) return;
    this.over = true;
    this.reason = reason;
    this.queue.length = 0;
    this.notify();
  }

  private deliver(): void {
    const handlers = this.handlers;
    if (handlers === undefined) return;
    while (!this.busy && !this.over && this.queue.length > 0) {
      const message = this.queue.shift()!;
      let result: void | Promise<void>;
      try {
        result = handlers.onMessage(message);
      } catch (err) {
        this.failHandler(err);
        return;
      }
      if (result instanceof Promise) {
        this.busy = true;
        this.pauseInput();
        result.then(
          () => {
            this.busy = false;
            if (this.over) return;
            this.consumed(message);
            this.resumeInput();
            this.deliver();
          },
          (err: unknown) => this.failHandler(err),
        );
        return;
      }
      if (!this.over) this.consumed(message);
    }
    if (!this.busy && !this.over && this.queue.length === 0 && this.remoteEnded && !this.halfCloseTold) {
      this.halfCloseTold = true;
      try {
        handlers.onHalfClose?.();
      } catch (err) {
        this.failHandler(err);
      }
    }
  }

  private failHandler(err: unknown): void {
    this.reportError(err);
    this.finish(GrpcStatus.INTERNAL, 'internal error', 'failed');
  }

  private notify(): void {
    const handlers = this.handlers;
    if (this.notified || handlers === undefined || this.reason === undefined) return;
    this.notified = true;
    try {
      handlers.onClose?.(this.reason);
    } catch (err) {
      this.reportError(err);
    }
  }
}
