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
}

export class H2Server {
  private readonly server: net.Server;
  private readonly connections = new Set<H2Connection>();
  private closing = false;

  constructor(private readonly options: H2ServerOptions) {
    if (options.tls === undefined) {
      this.server = net.createServer(this.accept);
    } else {
      const secure = tls.createServer({ ...options.tls, ALPNProtocols: ['h2'] });
      secure.on('secureConnection', (socket: tls.TLSSocket) => {
        // Without ALPN h2 the peer would speak HTTP/1.1 or nothing this server understands.
        if (socket.alpnProtocol !== 'h2') socket.destroy();
        else this.accept(socket);
      });
      // A failed handshake is the client's failure, not the server's.
      secure.on('tlsClientError', () => undefined);
      this.server = secure;
    }
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
        const address = this.server.address();
        resolve(typeof address === 'object' && address !== null ? address.port : port);
      });
    });
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
    connection.onClose = () => this.connections.delete(connection);
    if (this.closing) connection.close();
  };
}
