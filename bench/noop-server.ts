import * as grpc from '@grpc/grpc-js';
import * as http2 from 'node:http2';
import { countDescriptors, encodeOkResponse, grpcFrame, SHOULD_RATE_LIMIT_PATH } from './rls-codec';

/**
 * A ShouldRateLimit server that decides nothing: it parses the request, answers OK for every
 * descriptor, and so measures the ceiling a transport allows on this machine. Two transports, as the
 * service has: grpc-js, and raw node:http2 with hand-written framing.
 */

export type NoopTransport = 'grpc-js' | 'http2';

export interface NoopServer {
  readonly port: number;
  close(): Promise<void>;
}

/** Starts a no-op server on 127.0.0.1 (port 0 picks a free one). */
export async function startNoopServer(opts: { transport: NoopTransport; port?: number }): Promise<NoopServer> {
  return opts.transport === 'grpc-js' ? startGrpcJs(opts.port ?? 0) : startHttp2(opts.port ?? 0);
}

async function startGrpcJs(port: number): Promise<NoopServer> {
  const server = new grpc.Server();
  const identity = (b: Buffer): Buffer => b;
  server.addService(
    {
      ShouldRateLimit: {
        path: SHOULD_RATE_LIMIT_PATH,
        requestStream: false,
        responseStream: false,
        requestSerialize: identity,
        requestDeserialize: identity,
        responseSerialize: identity,
        responseDeserialize: identity,
      },
    },
    {
      ShouldRateLimit: (call: grpc.ServerUnaryCall<Buffer, Buffer>, callback: grpc.sendUnaryData<Buffer>) => {
        callback(null, encodeOkResponse(countDescriptors(call.request)));
      },
    },
  );
  const bound = await new Promise<number>((resolve, reject) =>
    server.bindAsync(`127.0.0.1:${port}`, grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return {
    port: bound,
    close: () => new Promise<void>((resolve) => server.tryShutdown(() => resolve())),
  };
}

async function startHttp2(port: number): Promise<NoopServer> {
  const server = http2.createServer();
  server.on('stream', (stream, headers) => {
    if (headers[':path'] !== SHOULD_RATE_LIMIT_PATH) {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': '12' }, { endStream: true });
      return;
    }
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => {
      const body = Buffer.concat(chunks);
      let reply: Buffer;
      try {
        reply = grpcFrame(encodeOkResponse(countDescriptors(body.subarray(5))));
      } catch {
        stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': '3' }, { endStream: true });
        return;
      }
      stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      stream.once('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
      stream.end(reply);
    });
    stream.on('error', () => undefined);
  });
  const bound = await new Promise<number>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      const a = server.address();
      resolve(typeof a === 'object' && a ? a.port : port);
    });
  });
  return {
    port: bound,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

// `node dist/bench/noop-server.js --transport grpc-js|http2 [--port N]`: runs until SIGTERM.
if (require.main === module) {
  const args = process.argv.slice(2);
  const transport = (args[args.indexOf('--transport') + 1] ?? 'grpc-js') as NoopTransport;
  const port = args.includes('--port') ? Number(args[args.indexOf('--port') + 1]) : 0;
  if (transport !== 'grpc-js' && transport !== 'http2') throw new Error(`unknown transport ${transport}`);
  void startNoopServer({ transport, port }).then((s) => {
    process.stdout.write(`listening ${s.port}\n`);
    const stop = (): void => void s.close().then(() => process.exit(0));
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
  });
}
