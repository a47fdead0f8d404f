import * as fs from 'node:fs';
import * as http2 from 'node:http2';
import { performance } from 'node:perf_hooks';
import type { Type } from 'protobufjs';
import { InvalidRequestError } from '../errors';
import type { RateLimitRequest, RateLimitResponse } from '../limiter/types';
import { SettingsError } from '../settings';
import { checkPrefix, encodeGrpcMessage, frameMessage, GrpcStatus, MESSAGE_PREFIX_BYTES, parseGrpcTimeout, unaryMessage } from './grpc-framing';
import { classifyError, type GrpcServerOptions } from './grpc-edge';
import type { ServingStatus } from './health';
import { HEALTH_SERVICE, protoRoot, RLS_SERVICE, ServingStatusNumber } from './proto';
import { decodeRateLimitRequest, ResponseEncoder } from './rls-wire-codec';

/**
 * The gRPC edge directly on node:http2, with the hand-written RLS codec (./rls-wire-codec) and
 * protobufjs for health: the same services, errors and
 * lifecycle as GrpcServer (grpc-js), at a fraction of the per-call cost. Only what the two services
 * need is implemented: unary calls and one server stream (health Watch), identity encoding only.
 *
 * Protocol handling, after the gRPC HTTP/2 spec:
 * - non-POST -> HTTP 405; a content-type other than application/grpc[+proto] -> HTTP 415;
 * - unknown path -> UNIMPLEMENTED; compressed message -> UNIMPLEMENTED (or INTERNAL without grpc-encoding);
 * - message over GRPC_MAX_MESSAGE_BYTES -> RESOURCE_EXHAUSTED, refused from its prefix, before buffering;
 * - truncated frame, trailing bytes, or undecodable protobuf -> INTERNAL;
 * - `grpc-timeout`: a decision that finishes past the deadline is answered DEADLINE_EXCEEDED
 *   (the client has given up by then; no timer is armed per call);
 * - errors are trailers-only responses with a percent-encoded grpc-message.
 * Shutdown sends GOAWAY on every connection (session.close) and lets in-flight calls finish.
 */

const RLS_PATH = `/${RLS_SERVICE}/ShouldRateLimit`;
const CHECK_PATH = `/${HEALTH_SERVICE}/Check`;
const WATCH_PATH = `/${HEALTH_SERVICE}/Watch`;

/** Idle connections are pinged this often; one unanswered for a whole period is closed. */
const KEEPALIVE_MS = 60_000;

/** Connection settings: many concurrent streams per proxy connection, windows sized for small messages at high rates. */
const HTTP2_OPTIONS: http2.ServerOptions = {
  settings: {
    maxConcurrentStreams: 10_000,
    initialWindowSize: 1 << 20,
    maxHeaderListSize: 64 * 1024,
  },
  // Many small streams in flight per connection: node's 10 MB default refuses streams under load.
  maxSessionMemory: 64,
};

// As few header fields as a client needs: each one is converted and HPACK-encoded on every call.
const RESPONSE_HEADERS: http2.OutgoingHttpHeaders = Object.freeze({
  ':status': 200,
  'content-type': 'application/grpc',
}) as http2.OutgoingHttpHeaders;
const OK_TRAILERS: http2.OutgoingHttpHeaders = Object.freeze({ 'grpc-status': '0' }) as http2.OutgoingHttpHeaders;
// No `date` header: gRPC clients ignore it, and it costs a header field per call.
const RESPOND_WITH_TRAILERS = Object.freeze({ waitForTrailers: true, sendDate: false }) as http2.ServerStreamResponseOptions;
const END_STREAM = Object.freeze({ endStream: true, sendDate: false }) as http2.ServerStreamResponseOptions;

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

// `this` is the stream: one shared listener instead of a closure per call.
function sendOkTrailers(this: http2.ServerHttp2Stream): void {
  this.sendTrailers(OK_TRAILERS);
}

function ignoreError(): void {
  // A reset or broken stream is the client's business; the session reports real failures.
}

/** A trailers-only error answer (or nothing when the stream is already gone). */
function respondStatus(stream: http2.ServerHttp2Stream, code: number, message: string): void {
  if (stream.destroyed || stream.headersSent) return;
  stream.respond(
    {
      ':status': 200,
      'content-type': 'application/grpc',
      'grpc-accept-encoding': 'identity',
      'grpc-status': String(code),
      'grpc-message': encodeGrpcMessage(message),
    },
    END_STREAM,
  );
}

/** One framed message and OK trailers. */
function respondMessage(stream: http2.ServerHttp2Stream, frame: Buffer): void {
  if (stream.destroyed || stream.headersSent) return;
  stream.respond(RESPONSE_HEADERS, RESPOND_WITH_TRAILERS);
  stream.once('wantTrailers', sendOkTrailers);
  stream.end(frame);
}

/** TLS material from the same variables as the grpc-js transport; read once, at construction. */
function secureOptions(tls: GrpcServerOptions['settings']['grpcTls']): http2.SecureServerOptions {
  const read = (variable: string, file: string | undefined): Buffer => {
    if (file === undefined) throw new SettingsError(variable, 'required when GRPC_SERVER_USE_TLS=true');
    try {
      return fs.readFileSync(file);
    } catch (err) {
      throw new SettingsError(variable, `cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
    }
  };
  const cert = read('GRPC_SERVER_TLS_CERT', tls.certPath);
  const key = read('GRPC_SERVER_TLS_KEY', tls.keyPath);
  const ca = tls.clientCaPath === undefined ? undefined : read('GRPC_CLIENT_TLS_CACERT', tls.clientCaPath);
  return {
    ...HTTP2_OPTIONS,
    cert,
    key,
    ca,
    // mTLS: a client without a certificate signed by the CA fails the handshake.
    requestCert: ca !== undefined,
    rejectUnauthorized: ca !== undefined,
    ALPNProtocols: ['h2'],
    allowHTTP1: false,
  };
}

/** The RLS and health services on node:http2. Same options and lifecycle as GrpcServer. */
export class Http2GrpcServer {
  private readonly server: http2.Http2Server | http2.Http2SecureServer;
  private readonly codecs: Codecs;
  private readonly encoder = new ResponseEncoder();
  private readonly maxMessageBytes: number;
  private readonly sessions = new Map<http2.ServerHttp2Session, { pinging: boolean }>();
  private readonly watchers = new Set<http2.ServerHttp2Stream>();
  private keepalive: NodeJS.Timeout | undefined;
  private stopping: Promise<void> | undefined;

  constructor(private readonly options: GrpcServerOptions) {
    this.codecs = loadCodecs();
    this.maxMessageBytes = options.settings.grpcMaxMessageBytes;
    const tls = options.settings.grpcTls;
    this.server = tls.enabled ? http2.createSecureServer(secureOptions(tls)) : http2.createServer(HTTP2_OPTIONS);
    this.server.on('stream', this.onStream);
    this.server.on('session', this.onSession);
    // Failed handshakes and protocol errors of one client are not the server's failures.
    this.server.on('sessionError', ignoreError);
    this.server.on('tlsClientError', ignoreError);
  }

  /** Binds GRPC_HOST:GRPC_PORT and starts serving; resolves to the bound port (useful with port 0). */
  start(): Promise<number> {
    const { grpcHost, grpcPort } = this.options.settings;
    return new Promise((resolve, reject) => {
      const onError = (err: Error): void => reject(err);
      this.server.once('error', onError);
      this.server.listen({ host: grpcHost.replace(/^\[(.*)\]$/, '$1'), port: grpcPort }, () => {
        this.server.off('error', onError);
        const address = this.server.address();
        this.keepalive = setInterval(this.pingSessions, KEEPALIVE_MS);
        this.keepalive.unref();
        resolve(typeof address === 'object' && address !== null ? address.port : grpcPort);
      });
    });
  }

  /**
   * Graceful stop: health goes NOT_SERVING, Watch streams are told and closed, every connection gets
   * GOAWAY and new connections are refused; in-flight calls finish, and whatever is still open after
   * `graceMs` is cut. Idempotent.
   */
  stop(graceMs: number): Promise<void> {
    this.stopping ??= new Promise<void>((resolve) => {
      this.options.health.beginShutdown();
      for (const stream of this.watchers) this.endWatch(stream);
      this.watchers.clear();
      if (this.keepalive !== undefined) clearInterval(this.keepalive);
      const timer = setTimeout(() => {
        for (const session of this.sessions.keys()) session.destroy();
      }, graceMs);
      this.server.close(() => {
        clearTimeout(timer);
        resolve();
      });
      for (const session of this.sessions.keys()) session.close();
    });
    return this.stopping;
  }

  private readonly onSession = (session: http2.ServerHttp2Session): void => {
    if (this.stopping !== undefined) {
      session.close();
      return;
    }
    this.sessions.set(session, { pinging: false });
    session.once('close', () => this.sessions.delete(session));
    session.on('error', ignoreError);
  };

  private readonly pingSessions = (): void => {
    for (const [session, state] of this.sessions) {
      if (state.pinging) {
        // No answer for a whole period: the peer is gone without a FIN.
        session.destroy();
        continue;
      }
      state.pinging = true;
      try {
        session.ping((err) => {
          if (!err) state.pinging = false;
        });
      } catch {
        session.destroy();
      }
    }
  };

  private readonly onStream = (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders): void => {
    stream.on('error', ignoreError);
    if (headers[':method'] !== 'POST') {
      stream.respond({ ':status': 405, allow: 'POST' }, END_STREAM);
      return;
    }
    const contentType = headers['content-type'];
    if (contentType !== 'application/grpc' && contentType !== 'application/grpc+proto' && !isGrpcContentType(contentType)) {
      stream.respond({ ':status': 415, 'content-type': 'text/plain' }, END_STREAM);
      return;
    }
    const path = headers[':path'];
    if (path !== RLS_PATH && path !== CHECK_PATH && path !== WATCH_PATH) {
      respondStatus(stream, GrpcStatus.UNIMPLEMENTED, `unknown method ${path ?? ''}`);
      stream.resume();
      return;
    }
    if (this.stopping !== undefined) {
      respondStatus(stream, GrpcStatus.UNAVAILABLE, 'server is shutting down');
      stream.resume();
      return;
    }
    const encoding = headers['grpc-encoding'];
    const timeoutMs = parseGrpcTimeout(headers['grpc-timeout']);
    const deadline = timeoutMs === undefined ? Infinity : performance.now() + timeoutMs;
    this.readUnary(stream, encoding === undefined || encoding === 'identity', (message) => {
      if (path === RLS_PATH) this.shouldRateLimit(stream, message, deadline);
      else if (path === CHECK_PATH) this.check(stream, message);
      else this.watch(stream, message);
    });
  };

  /** Buffers the single request message; answers the framing error itself when there is one. */
  private readUnary(stream: http2.ServerHttp2Stream, identityOnly: boolean, onMessage: (message: Buffer) => void): void {
    let first: Buffer | undefined;
    let chunks: Buffer[] | undefined;
    let length = 0;
    let failed = false;
    const onData = (chunk: Buffer): void => {
      if (failed) return;
      const before = length;
      length += chunk.length;
      if (first === undefined) first = chunk;
      else (chunks ??= [first]).push(chunk);
      if (before < MESSAGE_PREFIX_BYTES && length >= MESSAGE_PREFIX_BYTES) {
        const prefix = chunks === undefined ? first : Buffer.concat(chunks, length);
        const error = checkPrefix(prefix, this.maxMessageBytes, identityOnly);
        if (error !== undefined) {
          failed = true;
          first = undefined;
          chunks = undefined;
          respondStatus(stream, error.code, error.message);
          return;
        }
      }
      if (length > this.maxMessageBytes + MESSAGE_PREFIX_BYTES) {
        failed = true;
        first = undefined;
        chunks = undefined;
        respondStatus(stream, GrpcStatus.RESOURCE_EXHAUSTED, 'request larger than the message size limit');
      }
    };
    stream.on('data', onData);
    stream.once('end', () => {
      if (failed) return;
      const body = chunks !== undefined ? Buffer.concat(chunks, length) : (first ?? Buffer.alloc(0));
      const message = unaryMessage(body);
      if ('code' in message) respondStatus(stream, message.code, message.message);
      else onMessage(message);
    });
  }

  private shouldRateLimit(stream: http2.ServerHttp2Stream, message: Buffer, deadline: number): void {
    let request: RateLimitRequest;
    try {
      request = decodeRateLimitRequest(message);
    } catch (err) {
      if (err instanceof InvalidRequestError) this.fail(stream, err);
      else respondStatus(stream, GrpcStatus.INTERNAL, 'cannot decode RateLimitRequest');
      return;
    }
    let pending: Promise<RateLimitResponse>;
    try {
      pending = this.options.limiter.shouldRateLimit(request);
    } catch (err) {
      this.fail(stream, err);
      return;
    }
    pending.then(
      (response) => {
        if (deadline !== Infinity && performance.now() > deadline) {
          respondStatus(stream, GrpcStatus.DEADLINE_EXCEEDED, 'deadline exceeded');
          return;
        }
        respondMessage(stream, this.encoder.frame(response));
      },
      (err: unknown) => this.fail(stream, err),
    );
  }

  private fail(stream: http2.ServerHttp2Stream, err: unknown): void {
    const classified = classifyError(err);
    if (classified.code === GrpcStatus.INTERNAL) this.options.logger.error({ err }, 'ShouldRateLimit failed');
    respondStatus(stream, classified.code, classified.details);
  }

  private decodeService(stream: http2.ServerHttp2Stream, message: Buffer): string | undefined {
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

  private check(stream: http2.ServerHttp2Stream, message: Buffer): void {
    const service = this.decodeService(stream, message);
    if (service === undefined) return;
    const status = this.options.health.status(service);
    if (status === undefined) {
      respondStatus(stream, GrpcStatus.NOT_FOUND, `unknown service "${service}"`);
      return;
    }
    respondMessage(stream, this.healthFrame(ServingStatusNumber[status]));
  }

  private watch(stream: http2.ServerHttp2Stream, message: Buffer): void {
    const service = this.decodeService(stream, message);
    if (service === undefined || stream.destroyed) return;
    const health = this.options.health;
    stream.respond(RESPONSE_HEADERS, RESPOND_WITH_TRAILERS);
    stream.once('wantTrailers', sendOkTrailers);
    if (this.stopping !== undefined) {
      stream.end(this.healthFrame(ServingStatusNumber.NOT_SERVING));
      return;
    }
    const status = health.status(service);
    // An unknown service keeps its stream open: the protocol lets it appear later.
    stream.write(this.healthFrame(status === undefined ? ServingStatusNumber.SERVICE_UNKNOWN : ServingStatusNumber[status]));
    const unsubscribe =
      status === undefined
        ? () => undefined
        : health.subscribe((next: ServingStatus) => {
            if (!stream.destroyed && stream.writable) stream.write(this.healthFrame(ServingStatusNumber[next]));
          });
    this.watchers.add(stream);
    stream.once('close', () => {
      unsubscribe();
      this.watchers.delete(stream);
    });
  }

  private endWatch(stream: http2.ServerHttp2Stream): void {
    if (!stream.destroyed && stream.writable) stream.end();
  }
}

function isGrpcContentType(value: string | undefined): boolean {
  // application/grpc;charset=... and application/grpc+proto;... are the same wire format.
  return value !== undefined && /^application\/grpc(\+proto)?(;|$)/.test(value);
}
