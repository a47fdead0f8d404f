import * as grpc from '@grpc/grpc-js';
import cluster from 'node:cluster';
import * as http2 from 'node:http2';
import { encodeHeaderBlock } from '../src/http2/hpack';
import { H2Server } from '../src/http2/server';
import { connectionLimits } from '../src/grpc/http2-server';
import { OK_TRAILERS, RESPONSE_HEADERS } from '../src/grpc/header-blocks';
import { loadSettings } from '../src/settings/settings';
import { countDescriptors, encodeOkResponse, grpcFrame, SHOULD_RATE_LIMIT_PATH } from './rls-codec';

/**
 * A ShouldRateLimit server that decides nothing: it parses the request, answers OK for every
 * descriptor, and so measures the ceiling a transport allows on this machine. The service's two
 * transports (its own HTTP/2 layer, and grpc-js), and node:http2 with hand-written gRPC framing, the
 * machine-speed figure the reference server's numbers were quoted beside. With `--workers N` it runs as
 * the service does with WORKERS=N: a primary that only supervises, and N node:cluster workers
 * sharing the port, so a ceiling and the service it bounds use the same number of processes.
 */

export type NoopTransport = 'grpc-js' | 'http2' | 'node-http2';

export interface NoopServer {
  readonly port: number;
  close(): Promise<void>;
}

/** Starts a no-op server on 127.0.0.1 (port 0 picks a free one). */
export async function startNoopServer(opts: { transport: NoopTransport; port?: number }): Promise<NoopServer> {
  if (opts.transport === 'grpc-js') return startGrpcJs(opts.port ?? 0);
  return opts.transport === 'http2' ? startH2(opts.port ?? 0) : startNodeHttp2(opts.port ?? 0);
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

const INVALID_ARGUMENT = encodeHeaderBlock([
  [':status', '200'],
  ['content-type', 'application/grpc'],
  ['grpc-status', '3'],
]);

/** The service's own HTTP/2 layer (src/http2) with the same connection settings. */
async function startH2(port: number): Promise<NoopServer> {
  const server = new H2Server({
    ...connectionLimits(loadSettings({}).h2),
    onStream: (stream) => {
      const chunks: Buffer[] = [];
      stream.onData = (c) => chunks.push(c);
      stream.onEnd = () => {
        const body = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
        let reply: Buffer;
        try {
          reply = grpcFrame(encodeOkResponse(countDescriptors(body.subarray(5))));
        } catch {
          stream.respond(INVALID_ARGUMENT, true);
          return;
        }
        stream.respond(RESPONSE_HEADERS, false);
        stream.write(reply);
        stream.end(OK_TRAILERS);
      };
    },
  });
  const bound = await server.listen('127.0.0.1', port);
  return { port: bound, close: () => server.close(1000) };
}

async function startNodeHttp2(port: number): Promise<NoopServer> {
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

// `node dist/bench/noop-server.js --transport grpc-js|http2 [--port N] [--workers N]`: runs until
// SIGTERM. Every serving process prints `listening <port>` once it listens.
function main(): void {
  const args = process.argv.slice(2);
  const flag = (name: string): string | undefined => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);
  const transport = (flag('--transport') ?? 'grpc-js') as NoopTransport;
  const port = Number(flag('--port') ?? 0);
  const workers = Number(flag('--workers') ?? 1);
  if (transport !== 'grpc-js' && transport !== 'http2' && transport !== 'node-http2') throw new Error(`unknown transport ${transport}`);
  if (!Number.isInteger(workers) || workers < 1 || workers > 64) throw new Error('--workers must be 1..64');
  if (workers > 1 && port === 0) throw new Error('--workers needs a fixed --port (workers must share one)');
  if (workers > 1 && cluster.isPrimary) {
    superviseNoop(workers);
    return;
  }
  void startNoopServer({ transport, port }).then((s) => {
    process.stdout.write(`listening ${s.port}\n`);
    const stop = (): void => void s.close().then(() => process.exit(0));
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
  });
}

// The primary serves nothing: it forks the workers (they inherit its stdout), passes a stop signal
// on, and exits once they have all gone. A worker that dies otherwise ends the whole server, so a
// run never goes on measuring fewer processes than it reports.
function superviseNoop(workers: number): void {
  let stopping = false;
  let failed = false;
  let live = workers;
  const stop = (): void => {
    if (stopping) return;
    stopping = true;
    for (const w of Object.values(cluster.workers ?? {})) w?.process.kill('SIGTERM');
  };
  cluster.on('exit', () => {
    live--;
    if (!stopping) {
      failed = true;
      process.stderr.write('a no-op worker exited; stopping\n');
      stop();
    }
    if (live === 0) process.exit(failed ? 1 : 0);
  });
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  for (let i = 0; i < workers; i++) cluster.fork();
}

if (require.main === module) main();
