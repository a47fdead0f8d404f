import * as http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { Logger } from '../log';
import type { MetricsExposition } from '../metrics/sinks';

/**
 * Plumbing shared by the HTTP edges (src/http/http-server.ts, src/http/debug-server.ts):
 * a routed node:http server with graceful close, and small response helpers.
 */

/** What one HTTP listener lets its peers hold (the HTTP_* settings). */
export interface HttpLimits {
  /** Connections open at once; further ones are closed as they arrive. */
  readonly maxConnections: number;
  /** Time for a request's header block, ms; 408 and the connection closed past it. */
  readonly headersTimeoutMs: number;
  /** Time for a whole request, body included, ms; 408 and the connection closed past it. */
  readonly requestTimeoutMs: number;
}

/** Built-in limits, for servers made without settings (tests, tools); the settings' defaults. */
export const DEFAULT_HTTP_LIMITS: HttpLimits = Object.freeze({ maxConnections: 1_000, headersTimeoutMs: 10_000, requestTimeoutMs: 10_000 });

/** How often node:http looks for requests past their deadline (its default, 30 s, would stretch a 10 s deadline to 40). */
const DEADLINE_CHECK_MS = 500;

/** Where a RoutedHttpServer listens, what it lets a peer hold, and where its failures are told. */
export interface HttpListenerOptions {
  readonly host: string;
  /** 0 picks a free port; start() resolves to the bound one. */
  readonly port: number;
  /** DEFAULT_HTTP_LIMITS when absent. */
  readonly limits?: HttpLimits;
  readonly logger?: Logger;
}

/** A node:http server whose subclass routes requests; start() binds, close() stops gracefully. */
export abstract class RoutedHttpServer {
  protected readonly server: http.Server;
  private closing: Promise<void> | undefined;

  constructor(private readonly listener: HttpListenerOptions) {
    const limits = listener.limits ?? DEFAULT_HTTP_LIMITS;
    this.server = http.createServer(
      { headersTimeout: limits.headersTimeoutMs, requestTimeout: limits.requestTimeoutMs, connectionsCheckingInterval: DEADLINE_CHECK_MS },
      (req, res) => this.route(req, res),
    );
    this.server.maxConnections = limits.maxConnections;
    trackInFlight(this.server);
  }

  /** Binds host:port (0 picks a free port); resolves to the bound port. */
  async start(): Promise<number> {
    const port = await listen(this.server, this.listener.host, this.listener.port);
    // An error after the bind (accept failing, say) is the listener's, not the process's: without a
    // listener node would throw it and end the process.
    this.server.on('error', (err) => this.listener.logger?.error({ err, port }, 'HTTP listener error'));
    return port;
  }

  /**
   * Graceful stop: no new connections, idle keep-alive connections closed, in-flight requests
   * finish (their responses close the connection); whatever is still open after `graceMs` is cut. Idempotent.
   */
  close(graceMs = 5_000): Promise<void> {
    this.closing ??= closeGracefully(this.server, graceMs);
    return this.closing;
  }

  protected abstract route(req: http.IncomingMessage, res: http.ServerResponse): void;
}

/** Answers GET/HEAD /metrics from `metrics` (500 and a log line when rendering fails). */
export function sendMetrics(req: http.IncomingMessage, res: http.ServerResponse, metrics: MetricsExposition, logger?: Logger): void {
  if (!allow(req, res, 'GET, HEAD')) return;
  metrics.text().then(
    (text) => send(res, 200, text, metrics.contentType),
    (err: unknown) => {
      logger?.error({ err }, 'cannot render metrics');
      send(res, 500, 'cannot render metrics\n');
    },
  );
}

/** The path of a request URL, without query string. */
export function pathOf(url: string | undefined): string {
  if (url === undefined) return '/';
  const q = url.indexOf('?');
  return q === -1 ? url : url.slice(0, q);
}

/** Answers 405 (with Allow) unless the method is one of `methods`. */
export function allow(req: http.IncomingMessage, res: http.ServerResponse, methods: string): boolean {
  if (methods.split(', ').includes(req.method ?? '')) return true;
  res.setHeader('Allow', methods);
  send(res, 405, 'method not allowed\n');
  return false;
}

/** Writes a complete response (no body for HEAD). */
export function send(res: http.ServerResponse, status: number, body: string, contentType = 'text/plain; charset=utf-8'): void {
  if (res.headersSent) return;
  res.statusCode = status;
  res.setHeader('Content-Type', contentType);
  res.setHeader('Content-Length', Buffer.byteLength(body));
  res.end(res.req?.method === 'HEAD' ? undefined : body);
}

/** Listens on host:port; resolves to the bound port. */
export function listen(server: http.Server, host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error): void => reject(err);
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      resolve((server.address() as AddressInfo).port);
    });
  });
}

/** Per server: the responses not yet sent, and each open connection with its count of them. */
interface Tracked {
  readonly pending: Set<http.ServerResponse>;
  readonly connections: Map<Socket, number>;
  closing: boolean;
}

const tracked = new WeakMap<http.Server, Tracked>();

/**
 * Remembers every connection and the responses it still owes, so that closeGracefully can end each
 * connection as soon as it owes nothing. Node's own closeIdleConnections() leaves out connections
 * that never completed a request (a proxy's preconnect, a half-sent request): those would hold
 * server.close() for the whole grace period.
 */
export function trackInFlight(server: http.Server): void {
  const state: Tracked = { pending: new Set(), connections: new Map(), closing: false };
  tracked.set(server, state);
  server.on('connection', (socket: Socket) => {
    state.connections.set(socket, 0);
    socket.once('close', () => state.connections.delete(socket));
  });
  server.on('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
    const socket = req.socket;
    state.pending.add(res);
    state.connections.set(socket, (state.connections.get(socket) ?? 0) + 1);
    res.once('close', () => {
      state.pending.delete(res);
      const owed = (state.connections.get(socket) ?? 1) - 1;
      state.connections.set(socket, owed);
      if (state.closing && owed === 0) socket.destroy();
    });
  });
}

/**
 * Stops accepting, closes idle keep-alive connections, lets in-flight requests finish (their
 * responses close the connection), cuts whatever is still open after graceMs.
 */
export function closeGracefully(server: http.Server, graceMs: number): Promise<void> {
  return new Promise((resolve) => {
    if (!server.listening) {
      resolve();
      return;
    }
    const state = tracked.get(server);
    for (const res of state?.pending ?? []) if (!res.headersSent) res.setHeader('Connection', 'close');
    const timer = setTimeout(() => server.closeAllConnections(), graceMs);
    timer.unref();
    server.close(() => {
      clearTimeout(timer);
      resolve();
    });
    server.closeIdleConnections();
    if (state !== undefined) {
      state.closing = true;
      for (const [socket, owed] of state.connections) if (owed === 0) socket.destroy();
    }
  });
}
