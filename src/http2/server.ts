import * as fs from 'node:fs';
import * as net from 'node:net';
import * as tls from 'node:tls';
import { type ConnectionOptions, H2Connection } from './connection';

/**
 * A listening HTTP/2 server: cleartext with prior knowledge (h2c, what Envoy and gRPC clients speak
 * to a plaintext gRPC port) or TLS with ALPN `h2`. Each accepted socket becomes one H2Connection.
 */
export interface H2ServerOptions extends ConnectionOptions {
  /** TLS options (certificate, key, client CA); cleartext when absent. */
  readonly tls?: tls.TlsOptions;
  /** With TLS: a client certificate must be valid for this name (DNS or IP SAN), or the connection is cut. */
  readonly clientSan?: string;
  /** A connection gets a graceful GOAWAY after this long, ±10% (spreads reconnects); 0 or absent: never. */
  readonly maxConnectionAgeMs?: number;
  /** ... and is cut this long after that GOAWAY if streams are still open. */
  readonly maxConnectionAgeGraceMs?: number;
  /** A connection without a stream for this long is closed with GOAWAY, ms; 0 never (default 0). */
  readonly idleTimeoutMs?: number;
  /** Connections open at once; further ones are closed as they arrive (default: no cap). */
  readonly maxConnections?: number;
}

// Node timers hold at most 2^31-1 ms (24.8 days); a longer age is "never".
const MAX_TIMER_MS = 2 ** 31 - 1;
// Idle connections are looked for this often, as a share of the idle timeout (see H2Connection.checkIdle).
const IDLE_CHECKS_PER_TIMEOUT = 4;

export class H2Server {
  private readonly server: net.Server;
  private readonly connections = new Set<H2Connection>();
  private closing = false;
  private idleSweep: NodeJS.Timeout | undefined;

  constructor(private readonly options: H2ServerOptions) {
    if (options.tls === undefined) {
      this.server = net.createServer(this.accept);
    } else {
      const handshakeTimeout = options.handshakeTimeoutMs;
      const secure = tls.createServer({ ...options.tls, ALPNProtocols: ['h2'], ...(handshakeTimeout === undefined ? {} : { handshakeTimeout }) });
      const san = options.clientSan;
      secure.on('secureConnection', (socket: tls.TLSSocket) => {
        // Without ALPN h2 the peer would speak HTTP/1.1 or nothing this server understands.
        if (socket.alpnProtocol !== 'h2') socket.destroy();
        // The name check Go's x509 VerifyOptions.DNSName makes, before any frame is read.
        else if (san !== undefined && tls.checkServerIdentity(san, socket.getPeerCertificate()) !== undefined) socket.destroy();
        else this.accept(socket);
      });
      // A failed handshake is the client's failure, not the server's.
      // Node does not close the socket itself on every such error (a handshake timeout leaves it open).
      secure.on('tlsClientError', (_err: Error, socket: tls.TLSSocket) => socket.destroy());
      this.server = secure;
    }
    if (options.maxConnections !== undefined) this.server.maxConnections = options.maxConnections;
  }

  // An error after the bind (accept failing, say) goes to onError: without a listener node would throw it and end the process.
  private listening(): void {
    this.server.on('error', (err) => this.options.onError?.(err));
  }

  /**
   * Binds and listens; resolves to the bound port (useful with port 0). `exclusive`: in a
   * node:cluster worker, a port of this process alone rather than one shared through the primary.
   */
  listen(host: string, port: number, exclusive = false): Promise<number> {
    return new Promise((resolve, reject) => {
      const onError = (err: Error): void => reject(err);
      this.server.once('error', onError);
      this.server.listen({ host, port, exclusive }, () => {
        this.server.off('error', onError);
        this.listening();
        const idleTimeoutMs = this.options.idleTimeoutMs ?? 0;
        if (idleTimeoutMs > 0) {
          this.idleSweep = setInterval(() => {
            for (const connection of this.connections) connection.checkIdle();
          }, idleTimeoutMs / IDLE_CHECKS_PER_TIMEOUT);
          this.idleSweep.unref();
        }
        const address = this.server.address();
        resolve(typeof address === 'object' && address !== null ? address.port : port);
      });
    });
  }

  /** Binds a Unix domain socket at `path` (a stale socket file left there is replaced) and listens. */
  listenPath(path: string): Promise<void> {
    return new Promise((resolve, reject) => {
      const onError = (err: Error): void => reject(err);
      this.server.once('error', onError);
      try {
        if (fs.statSync(path, { throwIfNoEntry: false })?.isSocket()) fs.unlinkSync(path);
      } catch (err) {
        reject(err as Error);
        return;
      }
      this.server.listen({ path }, () => {
        this.server.off('error', onError);
        this.listening();
        resolve();
      });
    });
  }

  /** Replaces the TLS certificate and key for connections accepted from now on (certificate rotation). */
  setSecureContext(options: tls.SecureContextOptions): void {
    (this.server as tls.Server).setSecureContext(options);
  }

  /** Pings every connection; one whose previous ping went unanswered is cut. */
  pingAll(): void {
    for (const connection of this.connections) {
      if (!connection.ping()) connection.destroy();
    }
  }

  /**
   * Stops accepting connections and sends GOAWAY on every open one; streams in flight finish.
   * Whatever is still open after `graceMs` is cut. Resolves once every connection has closed.
   */
  close(graceMs: number): Promise<void> {
    this.closing = true;
    if (this.idleSweep !== undefined) clearInterval(this.idleSweep);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        for (const connection of this.connections) connection.destroy();
      }, graceMs);
      timer.unref();
      this.server.close(() => {
        clearTimeout(timer);
        resolve();
      });
      for (const connection of this.connections) connection.close();
    });
  }

  private readonly accept = (socket: net.Socket): void => {
    const connection = new H2Connection(socket, this.options);
    this.connections.add(connection);
    const stopAgeing = this.ageing(connection);
    connection.onClose = () => {
      stopAgeing();
      this.connections.delete(connection);
    };
    if (this.closing) connection.close();
  };

  // GRPC_MAX_CONNECTION_AGE as grpc-go applies it: GOAWAY after the age with ±10% jitter, cut after the grace.
  private ageing(connection: H2Connection): () => void {
    const age = this.options.maxConnectionAgeMs ?? 0;
    if (age <= 0) return () => undefined;
    const jittered = age + (Math.random() * 2 - 1) * (age / 10);
    if (jittered > MAX_TIMER_MS) return () => undefined;
    let cut: NodeJS.Timeout | undefined;
    const goaway = setTimeout(() => {
      connection.close();
      const grace = this.options.maxConnectionAgeGraceMs ?? 0;
      if (grace <= MAX_TIMER_MS) {
        cut = setTimeout(() => connection.destroy(), grace);
        cut.unref();
      }
    }, jittered);
    goaway.unref();
    return () => {
      clearTimeout(goaway);
      if (cut !== undefined) clearTimeout(cut);
    };
  }
}
