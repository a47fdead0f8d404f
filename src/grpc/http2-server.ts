import { performance } from 'node:perf_hooks';
import type { Type } from 'protobufjs';
import type { Settings } from '../settings/settings';
import { checkPrefix, frameMessage, GrpcStatus, MESSAGE_PREFIX_BYTES, parseGrpcTimeout, unaryMessage } from '../wire/grpc-framing';
import type { GrpcServerOptions } from './edge';
import type { H2Stream } from '../http2/connection';
import { encodeHeaderBlock } from '../http2/hpack';
import { watchCertificateFiles } from './certificate-files';
import { OK_TRAILERS, RESPONSE_HEADERS, trailersOnly } from './header-blocks';
import { H2Server, type H2ServerOptions } from '../http2/server';
import { WindowBudget } from '../http2/window-budget';
import { HEALTH_SERVICE, protoRoot, RLS_SERVICE } from '../wire/proto';
import { RlsService, type CallSink } from '../service/rls-service';
import type { StreamingMethod } from '../service/streaming';
import { serveStreaming } from './http2-streaming';
import { loadTlsMaterial, tlsServerOptions, type TlsMaterial } from './tls';

/**
 * The gRPC transport on the project's own HTTP/2 connection layer (src/http2): a thin adapter that moves
 * bytes between HTTP/2 streams and the RlsService (src/service/rls-service.ts: the codec, the decision, health,
 * shutdown), the same service GrpcServer (grpc-js) serves, at a fraction of the per-call cost. node:http2 is not used: its streams
 * survive young-generation GCs and its header values are external strings, so at a few thousand
 * calls/s it needs a full GC every second, which sets the tail latency (docs/performance.md).
 * Implemented: unary calls, one server stream (health Watch), and the bidirectional streaming
 * methods of GrpcServerOptions.streamingMethods (./http2-streaming.ts); identity encoding only.
 *
 * Protocol handling, after the gRPC HTTP/2 spec:
 * - non-POST -> HTTP 405; a content-type other than application/grpc[+proto] -> HTTP 415;
 * - unknown path -> UNIMPLEMENTED; compressed message -> UNIMPLEMENTED (or INTERNAL without grpc-encoding);
 * - message over GRPC_MAX_MESSAGE_BYTES -> RESOURCE_EXHAUSTED, refused from its prefix, before buffering;
 * - truncated frame, trailing bytes, or undecodable protobuf -> INTERNAL;
 * - `grpc-timeout`: a decision that finishes past the deadline is answered DEADLINE_EXCEEDED
 *   (the client has given up by then; no timer is armed per call);
 * - errors are trailers-only responses with a percent-encoded grpc-message.
 * Shutdown sends GOAWAY on every connection and lets in-flight calls finish; streaming calls end
 * with UNAVAILABLE at the GOAWAY (their clients reconnect elsewhere).
 */

/** How often the TLS certificate files are checked for a rotation. */
const CERTIFICATE_POLL_MS = 1_000;
const RLS_PATH = `/${RLS_SERVICE}/ShouldRateLimit`;
const CHECK_PATH = `/${HEALTH_SERVICE}/Check`;
const WATCH_PATH = `/${HEALTH_SERVICE}/Watch`;

/** Idle connections are pinged this often; one unanswered for a whole period is closed. */
const KEEPALIVE_MS = 60_000;

/** The HTTP/2 layer's limits, from the H2_* settings. */
export function connectionLimits(h2: Settings['h2']): Omit<H2ServerOptions, 'onStream'> {
  return {
    maxConcurrentStreams: h2.maxConcurrentStreams,
    initialWindowSize: h2.streamBufferBytes,
    connectionWindowSize: h2.connectionBufferBytes,
    windowBudget: new WindowBudget(h2.totalBufferBytes),
    maxHeaderListSize: h2.maxHeaderListBytes,
    resetBurst: h2.resetBurst,
    resetsPerSecond: h2.resetsPerSecond,
    idleTimeoutMs: h2.idleTimeoutMs,
    handshakeTimeoutMs: h2.handshakeTimeoutMs,
  };
}

// HTTP errors carry a line of text, as HTTP servers' do (HTTP/2 conformance suites expect a body).
const METHOD_NOT_ALLOWED = encodeHeaderBlock([
  [':status', '405'],
  ['allow', 'POST'],
  ['content-type', 'text/plain'],
]);
const METHOD_NOT_ALLOWED_TEXT = Buffer.from('gRPC calls are POST requests\n');
const UNSUPPORTED_MEDIA_TYPE = encodeHeaderBlock([
  [':status', '415'],
  ['content-type', 'text/plain'],
]);
const UNSUPPORTED_MEDIA_TYPE_TEXT = Buffer.from('gRPC calls have content-type application/grpc\n');

/** The protobufjs message types of the health service, resolved once. */
interface Codecs {
  readonly healthRequest: Type;
  readonly healthResponse: Type;
}

function loadCodecs(): Codecs {
  const root = protoRoot();
  return {
    healthRequest: root.lookupType('grpc.health.v1.HealthCheckRequest'),
    healthResponse: root.lookupType('grpc.health.v1.HealthCheckResponse'),
  };
}

/** A trailers-only error answer (or nothing when the stream is already answered or gone). */
function respondStatus(stream: H2Stream, code: number, message: string): void {
  if (stream.closed || stream.headersSent) return;
  stream.respond(trailersOnly(code, message), true);
}

/** An HTTP error answer with a text body, ended by its last DATA frame (no trailers). */
function respondText(stream: H2Stream, headers: Buffer, text: Buffer): void {
  stream.respond(headers, false);
  stream.write(text, true);
}

/** One framed message and OK trailers. */
function respondMessage(stream: H2Stream, frame: Buffer): void {
  if (stream.closed || stream.headersSent) return;
  stream.respond(RESPONSE_HEADERS, false);
  stream.write(frame);
  stream.end(OK_TRAILERS);
}

/** The value of a request header field (names arrive lower-case in HTTP/2), or undefined. */
function field(headers: readonly string[], name: string): string | undefined {
  for (let i = 0; i < headers.length; i += 2) if (headers[i] === name) return headers[i + 1];
  return undefined;
}

/**
 * Options of Http2GrpcServer: GrpcServer's, the HTTP/2 layer's limits (the H2_* settings' defaults
 * when absent), and `exclusive` (see H2Server.listen; the warm-up's private port).
 */
export interface Http2GrpcServerOptions extends GrpcServerOptions {
  readonly settings: GrpcServerOptions['settings'];
  readonly exclusive?: boolean;
}

/** The RLS and health services over HTTP/2. Same options and lifecycle as GrpcServer. */
export class Http2GrpcServer {
  private readonly server: H2Server;
  private readonly service: RlsService;
  private readonly codecs: Codecs;
  private readonly tls: TlsMaterial | undefined;
  private readonly maxMessageBytes: number;
  private readonly streamingMethods: ReadonlyMap<string, StreamingMethod>;
  private keepalive: NodeJS.Timeout | undefined;
  private stopping: Promise<void> | undefined;
  private stopCertificateWatch: () => void = () => undefined;

  constructor(private readonly options: Http2GrpcServerOptions) {
    this.service = new RlsService(options);
    this.codecs = loadCodecs();
    const settings = options.settings;
    // A request must fit the stream's receive window, which reopens only once the request has ended.
    const h2 = settings.h2;
    this.maxMessageBytes = Math.min(settings.grpcMaxMessageBytes, h2.streamBufferBytes - MESSAGE_PREFIX_BYTES);
    this.streamingMethods = new Map((options.streamingMethods ?? []).map((method) => [method.path, method]));
    const grpcTls = settings.grpcTls;
    this.tls = loadTlsMaterial(grpcTls);
    this.server = new H2Server({
      ...connectionLimits(h2),
      tls: this.tls === undefined ? undefined : tlsServerOptions(this.tls),
      // As the reference: the SAN is checked on client certificates, which only GRPC_CLIENT_TLS_CACERT asks for.
      clientSan: grpcTls.enabled && grpcTls.clientCaPath !== undefined ? grpcTls.clientSan : undefined,
      maxConnectionAgeMs: settings.grpcMaxConnectionAgeMs,
      maxConnectionAgeGraceMs: settings.grpcMaxConnectionAgeGraceMs,
      maxConnections: settings.grpcMaxConnections,
      onStream: this.onStream,
      onError: (err) => this.options.logger.error({ err }, 'gRPC connection or stream handler failed'),
    });
  }

  /**
   * Binds GRPC_HOST:GRPC_PORT, or the Unix socket GRPC_UDS, and starts serving; resolves to the bound
   * port (useful with port 0; 0 on a Unix socket). With TLS, rotated certificate files are picked up.
   */
  async start(): Promise<number> {
    const { grpcHost, grpcPort, grpcUds, grpcTls } = this.options.settings;
    let port = 0;
    if (grpcUds !== undefined) await this.server.listenPath(grpcUds);
    else port = await this.server.listen(grpcHost.replace(/^\[(.*)\]$/, '$1'), grpcPort, this.options.exclusive);
    this.keepalive = setInterval(() => this.server.pingAll(), KEEPALIVE_MS);
    this.keepalive.unref();
    if (grpcTls.enabled && grpcTls.certPath !== undefined && grpcTls.keyPath !== undefined) {
      const logger = this.options.logger;
      const ca = this.tls?.clientCa;
      this.stopCertificateWatch = watchCertificateFiles({
        certPath: grpcTls.certPath,
        keyPath: grpcTls.keyPath,
        intervalMs: CERTIFICATE_POLL_MS,
        onChange: (pair) => {
          this.server.setSecureContext({ ...pair, ca });
          logger.info({ cert: grpcTls.certPath }, 'gRPC TLS certificate reloaded; new connections use it');
        },
        onError: (err) => logger.error({ cert: grpcTls.certPath, err: err.message }, 'changed gRPC TLS certificate not usable; keeping the previous one'),
      });
    }
    return port;
  }

  /**
   * Graceful stop: health goes NOT_SERVING, Watch streams are told and closed, every connection gets
   * GOAWAY and new connections are refused; in-flight calls finish, and whatever is still open after
   * `graceMs` is cut. Idempotent.
   */
  stop(graceMs: number): Promise<void> {
    this.stopping ??= (() => {
      this.service.shutdown();
      if (this.keepalive !== undefined) clearInterval(this.keepalive);
      this.stopCertificateWatch();
      return this.server.close(graceMs);
    })();
    return this.stopping;
  }

  private readonly onStream = (stream: H2Stream, headers: readonly string[]): void => {
    if (field(headers, ':method') !== 'POST') {
      respondText(stream, METHOD_NOT_ALLOWED, METHOD_NOT_ALLOWED_TEXT);
      return;
    }
    const contentType = field(headers, 'content-type');
    if (contentType !== 'application/grpc' && contentType !== 'application/grpc+proto' && !isGrpcContentType(contentType)) {
      respondText(stream, UNSUPPORTED_MEDIA_TYPE, UNSUPPORTED_MEDIA_TYPE_TEXT);
      return;
    }
    const path = field(headers, ':path');
    const streaming = path === undefined ? undefined : this.streamingMethods.get(path);
    if (path !== RLS_PATH && path !== CHECK_PATH && path !== WATCH_PATH && streaming === undefined) {
      respondStatus(stream, GrpcStatus.UNIMPLEMENTED, `unknown method ${path ?? ''}`);
      return;
    }
    if (this.stopping !== undefined) {
      respondStatus(stream, GrpcStatus.UNAVAILABLE, 'server is shutting down');
      return;
    }
    const encoding = field(headers, 'grpc-encoding');
    const timeoutMs = parseGrpcTimeout(field(headers, 'grpc-timeout'));
    if (streaming !== undefined) {
      serveStreaming(stream, {
        method: streaming,
        headers,
        maxMessageBytes: Math.min(this.maxMessageBytes, streaming.maxMessageBytes ?? Infinity),
        identityOnly: encoding === undefined || encoding === 'identity',
        timeoutMs,
        onError: (err) => this.options.logger.error({ err, path }, 'streaming call handler failed'),
      });
      return;
    }
    const deadline = timeoutMs === undefined ? Infinity : performance.now() + timeoutMs;
    this.readUnary(stream, encoding === undefined || encoding === 'identity', (message) => {
      if (path === RLS_PATH) this.shouldRateLimit(stream, message, deadline, headers);
      else if (path === CHECK_PATH) this.check(stream, message);
      else this.watch(stream, message);
    });
  };

  /** Buffers the single request message; answers the framing error itself when there is one. */
  private readUnary(stream: H2Stream, identityOnly: boolean, onMessage: (message: Buffer) => void): void {
    let first: Buffer | undefined;
    let chunks: Buffer[] | undefined;
    let length = 0;
    stream.onData = (chunk: Buffer): void => {
      const before = length;
      length += chunk.length;
      if (first === undefined) first = chunk;
      else (chunks ??= [first]).push(chunk);
      if (before < MESSAGE_PREFIX_BYTES && length >= MESSAGE_PREFIX_BYTES) {
        const prefix = chunks === undefined ? first : Buffer.concat(chunks, length);
        const error = checkPrefix(prefix, this.maxMessageBytes, identityOnly);
        if (error !== undefined) {
          respondStatus(stream, error.code, error.message);
          return;
        }
      }
      if (length > this.maxMessageBytes + MESSAGE_PREFIX_BYTES) {
        respondStatus(stream, GrpcStatus.RESOURCE_EXHAUSTED, 'request larger than the message size limit');
      }
    };
    stream.onEnd = (): void => {
      const body = chunks !== undefined ? Buffer.concat(chunks, length) : (first ?? Buffer.alloc(0));
      const message = unaryMessage(body);
      if ('code' in message) respondStatus(stream, message.code, message.message);
      else onMessage(message);
    };
  }

  private shouldRateLimit(stream: H2Stream, message: Buffer, deadline: number, headers: readonly string[]): void {
    const sink: CallSink = {
      answer: (frame) => {
        if (deadline !== Infinity && performance.now() > deadline) respondStatus(stream, GrpcStatus.DEADLINE_EXCEEDED, 'deadline exceeded');
        else respondMessage(stream, frame);
      },
      fail: (err) => this.fail(stream, err),
    };
    const service = this.service;
    if (service.traced) service.shouldRateLimitTraced(message, sink, (name) => field(headers, name));
    else service.shouldRateLimit(message, sink);
  }

  private fail(stream: H2Stream, err: unknown): void {
    const failure = this.service.failure(err);
    respondStatus(stream, failure.code, failure.details);
  }

  private decodeService(stream: H2Stream, message: Buffer): string | undefined {
    try {
      return (this.codecs.healthRequest.decode(message) as unknown as { service: string }).service;
    } catch {
      respondStatus(stream, GrpcStatus.INTERNAL, 'cannot decode HealthCheckRequest');
      return undefined;
    }
  }

  private healthFrame(status: number): Buffer {
    return frameMessage(this.codecs.healthResponse.encode({ status }).finish());
  }

  private check(stream: H2Stream, message: Buffer): void {
    const service = this.decodeService(stream, message);
    if (service === undefined) return;
    const answer = this.service.check(service);
    if ('code' in answer) respondStatus(stream, answer.code, answer.details);
    else respondMessage(stream, this.healthFrame(answer.status));
  }

  private watch(stream: H2Stream, message: Buffer): void {
    const service = this.decodeService(stream, message);
    if (service === undefined || stream.closed) return;
    stream.respond(RESPONSE_HEADERS, false);
    const forget = this.service.watch(service, {
      write: (status) => stream.write(this.healthFrame(status)),
      end: () => stream.end(OK_TRAILERS),
    });
    stream.onAbort = forget;
  }
}

function isGrpcContentType(value: string | undefined): boolean {
  // application/grpc;charset=... and application/grpc+proto;... are the same wire format.
  return value !== undefined && /^application\/grpc(\+proto)?(;|$)/.test(value);
}
