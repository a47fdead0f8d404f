import { createServer, Socket, type Server } from 'node:net';

/**
 * A TCP proxy on 127.0.0.1 in front of a server that answers late: what a client sends goes through
 * at once, what the server sends back is held `replyDelayMs` before it is passed on (in order). A
 * store behind it writes when asked, and its answers arrive later than the client's sync interval.
 */
export interface DelayProxy {
  readonly port: number;
  close(): Promise<void>;
}

export async function startDelayProxy(options: { readonly targetPort: number; readonly replyDelayMs: number }): Promise<DelayProxy> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    const upstream = new Socket();
    sockets.add(client);
    sockets.add(upstream);
    const end = (): void => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
    client.on('data', (chunk) => upstream.write(chunk));
    // Equal delays keep the chunks in order.
    upstream.on('data', (chunk) => void setTimeout(() => client.writable && client.write(chunk), options.replyDelayMs));
    upstream.connect(options.targetPort, '127.0.0.1');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  return {
    port: (server.address() as { port: number }).port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
