import * as grpc from '@grpc/grpc-js';
import { grpcServiceDefinitions } from '../wire/grpc-definitions';
import type { GrpcServerOptions } from './edge';
import { MESSAGE_PREFIX_BYTES } from '../wire/grpc-framing';
import { RlsService, type CallSink } from '../service/rls-service';
import { GrpcJsStreamingCall, streamingDefinition } from './grpc-js-streaming';
import { grpcServerCredentials, loadTlsMaterial, type TlsMaterial } from './tls';

/**
 * The gRPC transport on grpc-js (GRPC_TRANSPORT=grpc-js): a thin adapter between grpc-js calls and
 * the RlsService (./rls-service), the same service the own HTTP/2 transport serves. ShouldRateLimit
 * passes the message bytes through untouched (identity serializers), so both transports share one
 * decoder and one encoder; health messages are grpc-js's own (proto-loader).
 */

type HealthRequest = { service: string };

/** Time for the last answers (and the ended Watch streams) to reach the socket before the cut. */
const DRAIN_FLUSH_MS = 50;
type HealthResponse = { status: number };

/** Builds the listening address, bracketing IPv6 literals. */
export function bindAddress(host: string, port: number): string {
  return host.includes(':') && !host.startsWith('[') ? `[${host}]:${port}` : `${host}:${port}`;
}

const identity = (bytes: Buffer): Buffer => bytes;

/** RateLimitService with its messages as bytes: the service decodes and encodes them itself. */
function rawRlsDefinition(): grpc.ServiceDefinition {
  const definition: Record<string, grpc.MethodDefinition<Buffer, Buffer>> = {};
  for (const [name, method] of Object.entries(grpcServiceDefinitions().rls)) {
    definition[name] = { ...method, requestDeserialize: identity, responseSerialize: identity };
  }
  return definition as grpc.ServiceDefinition;
}

export class GrpcServer {
  private readonly server: grpc.Server;
  private readonly service: RlsService;
  private readonly tls: TlsMaterial | undefined;
  private stopping: Promise<void> | undefined;
  /** Unary calls not yet answered; stop() waits for them, then cuts what is left (idle connections). */
  private inFlight = 0;
  private onDrained: (() => void) | undefined;
  /** Streaming calls open now; shutdown ends them. */
  private readonly streamingCalls = new Set<GrpcJsStreamingCall>();

  constructor(private readonly options: GrpcServerOptions) {
    this.service = new RlsService(options);
    this.tls = loadTlsMaterial(options.settings.grpcTls);
    const { grpcMaxMessageBytes, grpcMaxConnectionAgeMs, grpcMaxConnectionAgeGraceMs } = options.settings;
    this.server = new grpc.Server({
      'grpc.max_receive_message_length': grpcMaxMessageBytes,
      // grpc-js adds the same ±10% jitter to the age as grpc-go; 0 means never, as there.
      ...(grpcMaxConnectionAgeMs ? { 'grpc.max_connection_age_ms': grpcMaxConnectionAgeMs } : {}),
      ...(grpcMaxConnectionAgeMs && grpcMaxConnectionAgeGraceMs !== undefined ? { 'grpc.max_connection_age_grace_ms': grpcMaxConnectionAgeGraceMs } : {}),
    });
    this.server.addService(rawRlsDefinition(), { shouldRateLimit: this.shouldRateLimit });
    this.server.addService(grpcServiceDefinitions().health, { check: this.check, watch: this.watch });
    for (const method of options.streamingMethods ?? []) {
      const [name] = Object.keys(streamingDefinition(method));
      this.server.addService(streamingDefinition(method), {
        [name]: (call: grpc.ServerDuplexStream<Buffer, Buffer>) => {
          if (this.stopping !== undefined) {
            call.emit('error', { code: grpc.status.UNAVAILABLE, details: 'server is shutting down' });
            return;
          }
          new GrpcJsStreamingCall(call, {
            method,
            maxMessageBytes: Math.min(grpcMaxMessageBytes, method.maxMessageBytes ?? Infinity),
            registry: this.streamingCalls,
            onError: (err) => options.logger.error({ err, path: method.path }, 'streaming call handler failed'),
          }).open();
        },
      });
    }
  }

  /** Binds GRPC_HOST:GRPC_PORT, or the Unix socket GRPC_UDS, and starts serving; resolves to the bound port (0 on a socket). */
  start(): Promise<number> {
    const { grpcHost, grpcPort, grpcUds } = this.options.settings;
    const address = grpcUds !== undefined ? `unix:${grpcUds}` : bindAddress(grpcHost, grpcPort);
    return new Promise((resolve, reject) => {
      this.server.bindAsync(address, grpcServerCredentials(this.tls), (err, port) => {
        if (err) reject(err);
        else resolve(grpcUds !== undefined ? 0 : port);
      });
    });
  }

  /**
   * Graceful stop: health goes NOT_SERVING, Watch streams are told and closed, new calls are refused,
   * in-flight calls finish; whatever is still open after `graceMs` is cut. Idempotent.
   */
  stop(graceMs: number): Promise<void> {
    this.stopping ??= new Promise<void>((resolve) => {
      this.service.shutdown();
      for (const call of [...this.streamingCalls]) call.goAway();
      const timer = setTimeout(() => {
        this.server.forceShutdown();
        resolve();
      }, graceMs);
      this.server.tryShutdown(() => {
        clearTimeout(timer);
        resolve();
      });
      // tryShutdown also waits for connections with nothing in flight, some of which (one that never
      // sent the HTTP/2 preface) never close on their own: once every call is answered, cut them.
      this.whenDrained(() =>
        setTimeout(() => {
          this.server.forceShutdown();
          clearTimeout(timer);
          resolve();
        }, DRAIN_FLUSH_MS).unref(),
      );
    });
    return this.stopping;
  }

  private whenDrained(then: () => void): void {
    if (this.inFlight === 0) then();
    else this.onDrained = then;
  }

  /** Counts a unary call until its callback runs. */
  private track<T>(callback: grpc.sendUnaryData<T>): grpc.sendUnaryData<T> {
    this.inFlight++;
    return (err, value) => {
      callback(err, value);
      if (--this.inFlight === 0 && this.onDrained !== undefined) {
        const drained = this.onDrained;
        this.onDrained = undefined;
        drained();
      }
    };
  }

  private readonly shouldRateLimit = (call: grpc.ServerUnaryCall<Buffer, Buffer>, untracked: grpc.sendUnaryData<Buffer>): void => {
    const callback = this.track(untracked);
    const sink: CallSink = {
      answer: (frame) => callback(null, frame.subarray(MESSAGE_PREFIX_BYTES)),
      fail: (err) => callback(this.service.failure(err)),
    };
    const service = this.service;
    if (service.traced) service.shouldRateLimitTraced(call.request, sink, (name) => metadataText(call.metadata, name));
    else service.shouldRateLimit(call.request, sink);
  };

  private readonly check = (call: grpc.ServerUnaryCall<HealthRequest, HealthResponse>, callback: grpc.sendUnaryData<HealthResponse>): void => {
    const answer = this.service.check(call.request.service);
    if ('code' in answer) callback(answer);
    else callback(null, answer);
  };

  private readonly watch = (call: grpc.ServerWritableStream<HealthRequest, HealthResponse>): void => {
    const forget = this.service.watch(call.request.service, {
      write: (status) => call.write({ status }),
      end: () => call.end(),
    });
    call.on('cancelled', forget);
    call.on('close', forget);
    call.on('error', forget);
  };
}

/** The first value of a metadata key as text (trace context headers are text). */
function metadataText(metadata: grpc.Metadata, name: string): string | undefined {
  const value = metadata.get(name)[0];
  return typeof value === 'string' ? value : undefined;
}
