import { createServer, Socket, type Server } from 'node:net';

/**
 * A TCP proxy on 127.0.0.1 that puts distance between a client and a server: what the client sends
 * reaches the server `requestDelayMs` later, what the server sends back reaches the client
 * `replyDelayMs` later, each direction's bytes in the order they were sent. It can also cut the
 * path as a network partition does: connections stay open, nothing passes either way until
 * heal(), then what was sent meanwhile goes through in order (as TCP retransmits it once the
 * route is back). Used by the region tests (a global store far from every region) and the
 * accuracy runs; test/integration/bench/delay-proxy.test.ts measures it.
 */

export interface DelayProxyOptions {
  /** The server's port (on `targetHost`). */
  readonly targetPort: number;
  /** Default 127.0.0.1. */
  readonly targetHost?: string;
  /** Both directions' delay, ms, where the two below are not given; default 0. */
  readonly delayMs?: number;
  /** Client to server, ms. */
  readonly requestDelayMs?: number;
  /** Server to client, ms. */
  readonly replyDelayMs?: number;
  /**
   * Bytes one connection may hold (waiting out its delay, or a partition) in each direction; past
   * it the connection is reset, as a peer whose buffers are full would be. Default 64 MiB.
   */
  readonly maxHeldBytes?: number;
}

export interface DelayProxy {
  readonly port: number;
  /** `127.0.0.1:<port>`: the address clients dial instead of the server's. */
  readonly address: string;
  /** Changes the delays for bytes sent from now on (earlier ones keep theirs; order is kept either way). */
  setDelay(delays: { readonly requestDelayMs?: number; readonly replyDelayMs?: number }): void;
  /** Stops every byte in both directions; connections stay open, new ones are accepted and held alike. */
  partition(): void;
  /** Ends the partition: what was held goes on, in order, each chunk no earlier than its own delay. */
  heal(): void;
  readonly partitioned: boolean;
  /** Connections open through the proxy now. */
  connections(): number;
  /** Resets every open connection (the clients see them closed); new ones are taken as before. */
  disconnect(): void;
  /** Resets every connection and stops listening. */
  close(): Promise<void>;
}

const DEFAULT_MAX_HELD_BYTES = 64 * 1024 * 1024;

/**
 * One direction of one connection: chunks written to `to` once both their due time has come and no
 * partition holds them. A chunk is due at its arrival plus the delay then in force, and never
 * before the chunk ahead of it, so a delay made shorter keeps the order.
 */
class DelayedPipe {
  private readonly queue: { readonly due: number; readonly chunk: Buffer }[] = [];
  private held = 0;
  private lastDue = 0;
  private timer: NodeJS.Timeout | undefined;
  private ending = false;

  constructor(
    private readonly to: Socket,
    private readonly delayMs: () => number,
    private readonly blocked: () => boolean,
    private readonly maxHeldBytes: number,
    private readonly overflow: () => void,
  ) {}

  push(chunk: Buffer): void {
    const due = Math.max(performance.now() + this.delayMs(), this.lastDue);
    this.lastDue = due;
    this.queue.push({ due, chunk });
    this.held += chunk.length;
    if (this.held > this.maxHeldBytes) {
      this.overflow();
      return;
    }
    this.pump();
  }

  /** The sender half-closed: end the other side once every byte before it has gone. */
  end(): void {
    this.ending = true;
    this.pump();
  }

  /** Writes what is due, and waits for the next chunk's due time. */
  pump(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (this.blocked() || this.to.destroyed) return;
    const now = performance.now();
    while (this.queue.length > 0 && this.queue[0].due <= now) {
      const { chunk } = this.queue.shift()!;
      this.held -= chunk.length;
      this.to.write(chunk);
    }
    if (this.queue.length > 0) {
      this.timer = setTimeout(() => this.pump(), Math.max(1, Math.ceil(this.queue[0].due - now)));
    } else if (this.ending) {
      this.to.end();
    }
  }

  stop(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    this.queue.length = 0;
    this.held = 0;
  }
}

/** Starts the proxy on a free port of 127.0.0.1. */
export async function startDelayProxy(options: DelayProxyOptions): Promise<DelayProxy> {
  let requestDelayMs = options.requestDelayMs ?? options.delayMs ?? 0;
  let replyDelayMs = options.replyDelayMs ?? options.delayMs ?? 0;
  const maxHeldBytes = options.maxHeldBytes ?? DEFAULT_MAX_HELD_BYTES;
  let partitioned = false;
  const open = new Set<{ readonly reset: () => void; readonly pumps: readonly DelayedPipe[] }>();

  const server: Server = createServer({ allowHalfOpen: true }, (client) => {
    const upstream = new Socket({ allowHalfOpen: true });
    const reset = (): void => {
      toServer.stop();
      toClient.stop();
      client.resetAndDestroy();
      upstream.resetAndDestroy();
      open.delete(connection);
    };
    const toServer = new DelayedPipe(
      upstream,
      () => requestDelayMs,
      () => partitioned || upstream.connecting,
      maxHeldBytes,
      reset,
    );
    const toClient = new DelayedPipe(
      client,
      () => replyDelayMs,
      () => partitioned,
      maxHeldBytes,
      reset,
    );
    const connection = { reset, pumps: [toServer, toClient] };
    open.add(connection);
    const gone = (): void => {
      // One side gone for good: the other is reset, as a path that lost its far end would be.
      if (!open.has(connection)) return;
      reset();
    };
    client.on('data', (chunk: Buffer) => toServer.push(chunk));
    upstream.on('data', (chunk: Buffer) => toClient.push(chunk));
    client.on('end', () => toServer.end());
    upstream.on('end', () => toClient.end());
    client.on('error', gone).on('close', gone);
    upstream.on('error', gone).on('close', gone);
    upstream.on('connect', () => toServer.pump());
    upstream.connect(options.targetPort, options.targetHost ?? '127.0.0.1');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as { port: number }).port;
  const resetAll = (): void => {
    for (const c of [...open]) c.reset();
  };
  return {
    port,
    address: `127.0.0.1:${port}`,
    setDelay: (delays) => {
      requestDelayMs = delays.requestDelayMs ?? requestDelayMs;
      replyDelayMs = delays.replyDelayMs ?? replyDelayMs;
    },
    partition: () => {
      partitioned = true;
    },
    heal: () => {
      partitioned = false;
      for (const c of open) for (const p of c.pumps) p.pump();
    },
    get partitioned() {
      return partitioned;
    },
    connections: () => open.size,
    disconnect: resetAll,
    close: () =>
      new Promise<void>((resolve) => {
        resetAll();
        server.close(() => resolve());
      }),
  };
}
