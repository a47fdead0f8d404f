import * as grpc from '@grpc/grpc-js';
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
 * a message (grpc-js then stops reading the stream, and its window closes), write() follows
 * grpc-js's own backpressure ('drain'), and grpc-js enforces grpc-timeout and
 * GRPC_MAX_MESSAGE_BYTES itself.
 */

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
  constructor(
    private readonly call: grpc.ServerDuplexStream<Buffer, Buffer>,
    private readonly options: GrpcJsStreamingOptions,
  ) {
    super();
  }

  open(): void {
    const call = this.call;
    this.options.registry.add(this);
    call.on('data', (message: Buffer) => {
      if (message.length > this.options.maxMessageBytes) {
        this.finish(GrpcStatus.RESOURCE_EXHAUSTED, `received message larger than max (${message.length} vs. ${this.options.maxMessageBytes})`, 'failed');
      } else this.received(message);
    });
    call.on('end', () => this.receivedEnd());
    call.on('drain', () => this.writable());
    call.on('cancelled', () => this.abandon('cancelled'));
    this.start(this.options.method);
  }

  /** Shutdown: the call ends with UNAVAILABLE so that the client reconnects elsewhere. */
  goAway(): void {
    this.finish(GrpcStatus.UNAVAILABLE, 'the server is going away; reconnect', 'going-away');
  }

  /** The peer's address and port: one connection's. */
  get connection(): unknown {
    return this.call.getPeer();
  }

  header(name: string): string | undefined {
    const value = this.call.metadata.get(name)[0];
    return typeof value === 'string' ? value : undefined;
  }

  protected sendMessage(message: Uint8Array): boolean {
    const call = this.call;
    const ready = call.write(Buffer.from(message.buffer, message.byteOffset, message.byteLength));
    if (call.writableLength > STREAMING_MAX_PENDING_BYTES) {
      // The peer has stopped reading and the service kept writing: no more is taken for it.
      this.finish(GrpcStatus.RESOURCE_EXHAUSTED, 'the client is not reading its messages', 'cancelled');
      return false;
    }
    return ready && call.writableLength <= STREAMING_HIGH_WATER_BYTES;
  }

  protected sendStatus(code: number, details: string): void {
    // grpc-js ends a call with an error status through an 'error' event on it (its own listener sends the status).
    if (code === GrpcStatus.OK) this.call.end();
    else this.call.emit('error', { code, details });
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
