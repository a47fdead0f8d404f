import * as net from 'node:net';
import type * as http2 from 'node:http2';
import * as grpc from '@grpc/grpc-js';
import { ResetBudget } from '../http2/reset-budget';

/**
 * The gRPC port of the grpc-js transport, listened on by the service itself and handed to grpc-js
 * connection by connection (`Server.createConnectionInjector`), for the limits grpc-js has no option
 * for and the own HTTP/2 layer enforces: at most `maxConnections` open at once (further ones closed as
 * they arrive), `handshakeTimeoutMs` for the TLS handshake and the peer's first SETTINGS, and a budget
 * of PINGs per connection (past it, GOAWAY ENHANCE_YOUR_CALM): grpc-js answers every PING it gets.
 * The limits it has options for (concurrent streams, session memory, idle time, keepalive) are set
 * on the grpc.Server by ./grpc-js-server.ts.
 */

export interface GrpcJsListenerOptions {
  readonly server: grpc.Server;
  readonly credentials: grpc.ServerCredentials;
  readonly maxConnections: number;
  readonly handshakeTimeoutMs: number;
  /** PINGs a connection may send at once, and per second beyond that. */
  readonly pingBurst: number;
  readonly pingsPerSecond: number;
  /** A listener error after the bind. */
  readonly onError: (err: Error) => void;
}

/** What the listener keeps on each accepted socket, found again from the HTTP/2 session grpc-js makes of it. */
interface Guard {
  handshake: NodeJS.Timeout | undefined;
  /** Once grpc-js has made one: the socket then belongs to it, and only the session can close it. */
  session?: http2.ServerHttp2Session;
}

const GUARD = Symbol('grpc-js-listener guard');
type GuardedSocket = net.Socket & { [GUARD]?: Guard };

/** The accepted socket behind a session: the socket itself in plaintext, its parent under TLS. */
function guardOf(session: http2.ServerHttp2Session): Guard | undefined {
  const socket = session.socket as GuardedSocket & { _parent?: GuardedSocket | null };
  return socket[GUARD] ?? socket._parent?.[GUARD];
}

export class GrpcJsListener {
  private readonly listener: net.Server;
  private readonly injector: grpc.ConnectionInjector;
  private readonly sockets = new Set<net.Socket>();

  constructor(private readonly options: GrpcJsListenerOptions) {
    this.injector = options.server.createConnectionInjector(options.credentials);
    sessionsOf(options.server).on('session', (session: http2.ServerHttp2Session) => this.onSession(session));
    this.listener = net.createServer((socket) => this.accept(socket));
  }

  /** Binds host:port (port 0: any); resolves to the bound port. */
  listen(host: string, port: number): Promise<number> {
    return this.bind((done) => this.listener.listen(port, host, done)).then(() => (this.listener.address() as net.AddressInfo).port);
  }

  /** Binds a Unix socket. */
  listenPath(path: string): Promise<void> {
    return this.bind((done) => this.listener.listen(path, done));
  }

  /** Stops accepting; what is open stays with grpc-js (its shutdown closes it). */
  close(): void {
    this.listener.close();
  }

  /** Closes every accepted connection at once. */
  destroyAll(): void {
    for (const socket of this.sockets) cut(socket, (socket as GuardedSocket)[GUARD]);
  }

  private bind(listen: (done: () => void) => void): Promise<void> {
    return new Promise((resolve, reject) => {
      this.listener.once('error', reject);
      listen(() => {
        this.listener.off('error', reject);
        this.listener.on('error', this.options.onError);
        resolve();
      });
    });
  }

  private accept(socket: GuardedSocket): void {
    if (this.sockets.size >= this.options.maxConnections) {
      socket.destroy();
      return;
    }
    this.sockets.add(socket);
    const guard: Guard = { handshake: undefined };
    guard.handshake = setTimeout(() => cut(socket, guard), this.options.handshakeTimeoutMs);
    guard.handshake.unref();
    socket[GUARD] = guard;
    socket.once('close', () => {
      clearTimeout(guard.handshake);
      this.sockets.delete(socket);
    });
    this.injector.injectConnection(socket);
  }

  private onSession(session: http2.ServerHttp2Session): void {
    const guard = guardOf(session);
    if (guard !== undefined) guard.session = session;
    session.once('remoteSettings', () => {
      if (guard !== undefined) clearTimeout(guard.handshake);
    });
    const pings = new ResetBudget(this.options.pingBurst, this.options.pingsPerSecond, performance.now());
    let cut = false;
    session.on('ping', () => {
      if (cut || pings.spend(1, performance.now()) || session.destroyed) return;
      cut = true;
      // node:http2's destroy() sends a GOAWAY of its own choosing: ours goes first, and the connection
      // ends once it has had time to reach the socket.
      session.goaway(ENHANCE_YOUR_CALM);
      setTimeout(() => session.destroy(), CLOSE_FLUSH_MS).unref();
    });
  }
}

/**
 * Ends a connection at once. Once node:http2 reads the socket, destroying it (or its session) closes
 * nothing the peer sees until it writes; a reset does. A reset is TCP's: a Unix socket (GRPC_UDS)
 * throws at one, and is destroyed instead (its peer sees the end at once).
 */
function cut(socket: net.Socket, guard: Guard | undefined): void {
  if (!socket.destroyed) {
    try {
      socket.resetAndDestroy();
    } catch {
      socket.destroy();
    }
  }
  guard?.session?.destroy();
}

/** Time for a GOAWAY to reach the socket before the connection is cut. */
const CLOSE_FLUSH_MS = 50;
/** RFC 9113 error code 0xb. */
const ENHANCE_YOUR_CALM = 0xb;

/**
 * The node:http2 server grpc-js made for the connection injector just created: its sessions are where
 * PINGs and SETTINGS are seen. grpc-js keeps it in a private map; without that map (another grpc-js)
 * the transport does not start rather than run without its limits.
 */
function sessionsOf(server: grpc.Server): http2.Http2Server {
  const servers = (server as unknown as { http2Servers?: Map<http2.Http2Server, unknown> }).http2Servers;
  const newest = servers === undefined ? undefined : [...servers.keys()].pop();
  if (newest === undefined || typeof newest.on !== 'function') {
    throw new Error('GRPC_TRANSPORT=grpc-js: this @grpc/grpc-js keeps no http2Servers map; its connection limits cannot be enforced');
  }
  return newest;
}
