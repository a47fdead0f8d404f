import * as grpc from '@grpc/grpc-js';
import { grpcServiceDefinitions } from '../wire/grpc-definitions';
import type { GrpcServerOptions } from './edge';
import { MESSAGE_PREFIX_BYTES } from '../wire/grpc-framing';
import { RlsService, type CallSink } from '../service/rls-service';
import { GrpcJsStreamingCall, streamingDefinition } from './grpc-js-streaming';
import { grpcServerCredentials, loadTlsMaterial, type TlsMaterial } from './tls';
import { GrpcJsListener } from './grpc-js-listener';

/**
 * The gRPC transport on grpc-js (GRPC_TRANSPORT=grpc-js): a thin adapter between grpc-js calls and
 * the RlsService (src/service/rls-service.ts), the same service the own HTTP/2 transport serves. ShouldRateLimit
 * passes the message bytes through untouched (identity serializers), so both transports share one
 * decoder and one encoder; health messages are grpc-js's own (proto-loader).
 *
 * It holds peers to the own HTTP/2 layer's limits, from the same settings: streams per connection
 * (H2_MAX_CONCURRENT_STREAMS, refused past it), a connection without calls closed after
 * H2_IDLE_TIMEOUT_MS, idle connections pinged every minute and closed when a ping goes unanswered for
 * as long, a session's memory in node:http2 (past it, new streams are refused), and through the
 * listener of ./grpc-js-listener.ts the connection cap (GRPC_MAX_CONNECTIONS), the handshake deadline
 * (H2_HANDSHAKE_TIMEOUT_MS) and a PING budget.
 */

/** Idle connections are pinged this often, and closed when a ping goes unanswered for as long (as the own layer). */
const KEEPALIVE_MS = 60_000;
/** PINGs a peer may send at once, then one a second: keepalives never come close; a flood is cut. */
const PING_BURST = 10;
const PINGS_PER_SECOND = 1;
const MIB = 1024 * 1024;
/** node:http2's default session memory, MiB; raised for a larger H2_CONNECTION_BUFFER_BYTES. */
const DEFAULT_SESSION_MEMORY_MIB = 10;

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
  private readonly listener: GrpcJsListener;

  constructor(private readonly options: GrpcServerOptions) {
    this.service = new RlsService(options);
    this.tls = loadTlsMaterial(options.settings.grpcTls);
    const { grpcMaxMessageBytes, grpcMaxConnectionAgeMs, grpcMaxConnectionAgeGraceMs } = options.settings;
    const h2 = options.settings.h2;
    this.server = new grpc.Server({
      'grpc.max_receive_message_length': grpcMaxMessageBytes,
      'grpc.max_concurrent_streams': h2.maxConcurrentStreams,
      // Counts what node:http2 holds for the session both ways (its default, unless the receive window needs more).
      'grpc-node.max_session_memory': Math.max(DEFAULT_SESSION_MEMORY_MIB, Math.ceil((2 * h2.connectionBufferBytes) / MIB)),
      ...(h2.idleTimeoutMs > 0 ? { 'grpc.max_connection_idle_ms': h2.idleTimeoutMs } : {}),
      'grpc.keepalive_time_ms': KEEPALIVE_MS,
      'grpc.keepalive_timeout_ms': KEEPALIVE_MS,
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
    this.listener = new GrpcJsListener({
      server: this.server,
      credentials: grpcServerCredentials(this.tls),
      maxConnections: options.settings.grpcMaxConnections,
      handshakeTimeoutMs: h2.handshakeTimeoutMs,
      pingBurst: PING_BURST,
      pingsPerSecond: PINGS_PER_SECOND,
      onError: (err) => options.logger.error({ err }, 'gRPC listener error'),
    });
  }

  /** Binds GRPC_HOST:GRPC_PORT, or the Unix socket GRPC_UDS, and starts serving; resolves to the bound port (0 on a socket). */
  async start(): Promise<number> {
    const { grpcHost, grpcPort, grpcUds } = this.options.settings;
    if (grpcUds !== undefined) {
      await this.listener.listenPath(grpcUds);
      return 0;
    }
    return this.listener.listen(grpcHost.replace(/^\[(.*)\]$/, '$1'), grpcPort);
  }

  /**
   * Graceful stop: health goes NOT_SERVING, Watch streams are told and closed, new calls are refused,
   * in-flight calls finish; whatever is still open after `graceMs` is cut. Idempotent.
   */
  stop(graceMs: number): Promise<void> {
    this.stopping ??= new Promise<void>((resolve) => {
      this.service.shutdown();
      this.listener.close();
      for (const call of [...this.streamingCalls]) call.goAway();
      const forceShutdown = (): void => {
        this.server.forceShutdown();
        // Connections grpc-js never made a session of (a handshake under way) are the listener's.
        this.listener.destroyAll();
      };
      const timer = setTimeout(() => {
        forceShutdown();
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
          forceShutdown();
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
