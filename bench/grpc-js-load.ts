import * as grpc from '@grpc/grpc-js';
import { arg, commonLoadArgs, printLoadResult } from './load-command';
import type { LoadResult } from './load-result';
import { DRAIN_MS, LoadRun, paceAtRate } from './load-run';
import { overallCode, splitGrpcFrames, SHOULD_RATE_LIMIT_PATH } from './rls-codec';

/**
 * A grpc-js load generator for ShouldRateLimit: a second, independent client (grpc-js's own framing,
 * status and deadline handling) that cross-checks the numbers of h2load and http2-load, and the
 * fallback when neither suits. It costs several times more CPU per call than http2-load, so on a
 * small machine it saturates before the server does.
 */

export interface NodeLoadOptions {
  /** host:port */
  readonly target: string;
  /** Encoded RateLimitRequest messages, sent round-robin. */
  readonly bodies: readonly Buffer[];
  /** Calls in flight (closed loop); ignored when rps is set. */
  readonly concurrency: number;
  /** HTTP/2 connections the calls are spread over. */
  readonly connections: number;
  readonly durationS: number;
  /** Open loop at this rate; latency is then measured from each call's scheduled time. */
  readonly rps?: number;
}

const identity = (b: Buffer): Buffer => b;

/** Drives load for durationS and resolves with throughput and latency. */
export async function runNodeLoad(opts: NodeLoadOptions): Promise<LoadResult> {
  if (opts.bodies.length === 0) throw new Error('no request bodies');
  const clients = Array.from(
    { length: Math.max(1, opts.connections) },
    () => new grpc.Client(opts.target, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 }),
  );
  const deadlineAt = Date.now() + 10_000;
  await Promise.all(clients.map((c) => new Promise<void>((resolve, reject) => c.waitForReady(deadlineAt, (e) => (e ? reject(e) : resolve())))));
  const run = new LoadRun(opts.durationS);
  let next = 0;

  const send = (from: number, done: () => void): void => {
    const body = opts.bodies[next++ % opts.bodies.length];
    const client = clients[next % clients.length];
    run.sent();
    client.makeUnaryRequest(SHOULD_RATE_LIMIT_PATH, identity, identity, body, { deadline: Date.now() + 2000 }, (err, reply) => {
      run.answered(from, err ? { error: `${err.code} ${err.details}` } : { overLimit: reply !== undefined && overallCode(reply) === 2 });
      done();
    });
  };

  if (opts.rps === undefined) {
    await new Promise<void>((resolve) => {
      let workers = Math.max(1, opts.concurrency);
      const loop = (): void => {
        if (performance.now() >= run.endAt) {
          if (--workers === 0) resolve();
          return;
        }
        send(performance.now(), loop);
      };
      for (let i = 0, n = workers; i < n; i++) loop();
    });
  } else {
    await paceAtRate(run, opts.rps, (at) => send(at, () => undefined));
  }
  const durationS = Math.max((Math.min(performance.now(), run.endAt + DRAIN_MS) - run.start) / 1000, 1e-3);
  for (const c of clients) c.close();
  return run.result('grpc-js-load', Math.min(durationS, opts.durationS + DRAIN_MS / 1000));
}

// `node dist/bench/grpc-js-load.js --target H:P --bodies FILE --concurrency N --connections K --duration S [--rps R]`
// FILE holds concatenated gRPC frames; prints one JSON LoadResult.
if (require.main === module) {
  const args = process.argv.slice(2);
  const target = arg(args, '--target');
  const usage = 'usage: grpc-js-load --target host:port --bodies FILE [--concurrency N] [--connections K] [--duration S] [--rps R]';
  if (!target) throw new Error(usage);
  const { data, ...run } = commonLoadArgs(args, '--bodies', 1, usage);
  printLoadResult(runNodeLoad({ target, bodies: splitGrpcFrames(data), concurrency: Number(arg(args, '--concurrency') ?? 50), ...run }));
}
