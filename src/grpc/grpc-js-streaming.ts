import * as grpc from '@grpc/grpc-js';
import type * as http2 from 'node:http2';
import {
  STREAMING_HIGH_WATER_BYTES,
  STREAMING_MAX_PENDING_BYTES,
  StreamingCallBase,
  type StreamingCloseReason,
  type StreamingMethod,
} from '../service/streaming';
import { GrpcStatus } from '../wire/grpc-framing';

/**
 * A bidirectional streaming call (src/service/streaming.ts) on grpc-js (GRPC_TRANSPORT=grpc-js):
 * messages pass as bytes (identity serializers), the input is paused while the handler is busy with
 * a message (grpc-js then stops reading the stream, and its window closes), write() counts the
 * bytes grpc-js has not yet handed on (a write's callback comes once node:http2 has sent it, flow
 * control permitting), and grpc-js enforces grpc-timeout and GRPC_MAX_MESSAGE_BYTES itself.
 *
 * A call's connection is its node:http2 session. grpc-js tells a call only the socket's addresses
 * (getPeer(), and getConnectionInfo() to interceptors), which a Unix socket does not have: every peer
 * there is "unknown", and per-connection caps keyed on it would hold every connection at once. The
 * session is read from the call's private fields (the surface call's `call`, through interceptors'
 * `nextCall`, to the base call's `stream`); a grpc-js without them has its streaming calls refused
 * with INTERNAL and a log line rather than served without those caps.
 */

/** The node:http2 stream under a grpc-js call (see above), or undefined in a grpc-js that keeps it elsewhere. */
export function http2StreamOf(call: object): http2.ServerHttp2Stream | undefined {
  let inner = (call as { call?: unknown }).call;
  for (let depth = 0; depth < 32 && typeof inner === 'object' && inner !== null; depth++) {
    const stream = (inner as { stream?: { session?: unknown; close?: unknown } | null }).stream;
    if (typeof stream?.close === 'function' && typeof stream.session === 'object' && stream.session !== null)
      return stream as unknown as http2.ServerHttp2Stream;
    inner = (inner as { nextCall?: unknown }).nextCall;
  }
  return undefined;
}

/** RFC 9113 error code 0xb: gRPC clients read a stream reset with it as RESOURCE_EXHAUSTED. */
const ENHANCE_YOUR_CALM = 0xb;

const identity = (bytes: Buffer): Buffer => bytes;

/** The grpc-js definition of one streaming method, by its path, with byte messages. */
export function streamingDefinition(method: StreamingMethod): grpc.ServiceDefinition {
  const name = method.path.slice(method.path.lastIndexOf('/') + 1);
  const definition: grpc.MethodDefinition<Buffer, Buffer> = {
    path: method.path,
    requestStream: true,
    responseStream: true,
    requestSerialize: identity,
    requestDeserialize: identity,
    responseSerialize: identity,
    responseDeserialize: identity,
  };
  return { [name]: definition } as grpc.ServiceDefinition;
}

/** Open calls, so that shutdown can end them. */
export interface StreamingRegistry {
  add(call: GrpcJsStreamingCall): void;
  delete(call: GrpcJsStreamingCall): void;
}

export interface GrpcJsStreamingOptions {
  readonly method: StreamingMethod;
  /** Largest request message, bytes (grpc-js itself refuses past GRPC_MAX_MESSAGE_BYTES). */
  readonly maxMessageBytes: number;
  readonly registry: StreamingRegistry;
  readonly onError: (err: unknown) => void;
}

export class GrpcJsStreamingCall extends StreamingCallBase {
  private readonly stream: http2.ServerHttp2Stream | undefined;
  /** The session, read once: node:http2 forgets it when the stream closes. */
  private readonly session: http2.Http2Session | undefined;
  /** Bytes written and not yet handed on by grpc-js (their write callbacks pending). */
  private held = 0;
  /** write() returned false: onWritable is due once nothing is held. */
  private needDrain = false;

  constructor(
    private readonly call: grpc.ServerDuplexStream<Buffer, Buffer>,
    private readonly options: GrpcJsStreamingOptions,
  ) {
    super();
    this.stream = http2StreamOf(call);
    this.session = this.stream?.session;
  }

  open(): void {
    const call = this.call;
    if (this.session === undefined) {
      this.options.onError(new Error('GRPC_TRANSPORT=grpc-js: this @grpc/grpc-js keeps no http2 stream on its calls; per-connection caps cannot be enforced'));
      call.emit('error', { code: GrpcStatus.INTERNAL, details: 'internal error' });
      return;
    }
    this.options.registry.add(this);
    call.on('data', (message: Buffer) => {
      if (message.length > this.options.maxMessageBytes) {
        this.finish(GrpcStatus.RESOURCE_EXHAUSTED, `received message larger than max (${message.length} vs. ${this.options.maxMessageBytes})`, 'failed');
      } else this.received(message);
    });
    call.on('end', () => this.receivedEnd());
    call.on('cancelled', () => this.abandon('cancelled'));
    this.start(this.options.method);
  }

  /** Shutdown: the call ends with UNAVAILABLE so that the client reconnects elsewhere. */
  goAway(): void {
    this.finish(GrpcStatus.UNAVAILABLE, 'the server is going away; reconnect', 'going-away');
  }

  /** The HTTP/2 session: one object per connection, on TCP and on a Unix socket alike. */
  get connection(): unknown {
    return this.session;
  }

  get pendingBytes(): number {
    return this.held;
  }

  header(name: string): string | undefined {
    const value = this.call.metadata.get(name)[0];
    return typeof value === 'string' ? value : undefined;
  }

  protected sendMessage(message: Uint8Array): boolean {
    const size = message.byteLength;
    this.held += size;
    this.call.write(Buffer.from(message.buffer, message.byteOffset, size), () => {
      this.held -= size;
      if (this.held === 0 && this.needDrain) {
        this.needDrain = false;
        this.writable();
      }
    });
    if (this.held > STREAMING_MAX_PENDING_BYTES) {
      // The peer has stopped reading and the service kept writing: no more is taken for it.
      this.cut(GrpcStatus.RESOURCE_EXHAUSTED, 'the client is not reading its messages');
      return false;
    }
    if (this.held <= STREAMING_HIGH_WATER_BYTES) return true;
    this.needDrain = true;
    return false;
  }

  protected sendStatus(code: number, details: string): void {
    // grpc-js ends a call with an error status through an 'error' event on it (its own listener sends the status).
    if (code === GrpcStatus.OK) this.call.end();
    else this.call.emit('error', { code, details });
  }

  protected sendStatusNow(code: number, details: string): void {
    // node:http2 sends trailers only after the DATA ahead of them, which a peer that does not read
    // never takes: the stream is reset instead, and what it held goes with it.
    if (this.held === 0 || this.stream === undefined) this.sendStatus(code, details);
    else this.stream.close(ENHANCE_YOUR_CALM);
  }

  protected consumed(): void {
    // grpc-js's window follows what its stream delivers; pauseInput/resumeInput steer it.
  }

  protected override pauseInput(): void {
    this.call.pause();
  }

  protected override resumeInput(): void {
    this.call.resume();
  }

  protected reportError(err: unknown): void {
    this.options.onError(err);
  }

  protected override abandon(reason: StreamingCloseReason): void {
    this.options.registry.delete(this);
    super.abandon(reason);
  }
}
