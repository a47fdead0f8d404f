import * as http2 from 'node:http2';
import { arg, commonLoadArgs, printLoadResult } from './load-command';
import type { LoadResult } from './load-result';
import { LoadRun, paceAtRate } from './load-run';
import { SHOULD_RATE_LIMIT_PATH, splitGrpcFrames } from './rls-codec';

/**
 * A raw node:http2 gRPC load generator for ShouldRateLimit. h2load posts one fixed body and cannot
 * read gRPC trailers; this client cycles through prebuilt frames (10,000 distinct keys, mixed
 * traffic), counts a call as OK only when its trailers say grpc-status 0, and reads overall_code
 * from the answer. It skips everything grpc-js does per call (metadata objects, serialisers,
 * interceptors, deadline timers), so it drives a server several times harder than the grpc-js
 * generator from the same core.
 */

export interface Http2LoadOptions {
  readonly port: number;
  readonly host?: string;
  /** gRPC frames (5-byte prefix included), sent in turn. */
  readonly frames: readonly Buffer[];
  /** HTTP/2 connections. */
  readonly connections: number;
  /** Calls in flight per connection (closed loop); with `rps`, a cap on the backlog instead. */
  readonly streams: number;
  readonly durationS: number;
  /** Open loop at this total rate; latency is then measured from each call's scheduled time. */
  readonly rps?: number;
}

/** The answer to one call: its grpc-status (undefined when the stream failed) and the DATA bytes. */
export interface CallAnswer {
  readonly status?: number;
  readonly data: Buffer;
}

const REQUEST_HEADERS: http2.OutgoingHttpHeaders = Object.freeze({
  ':method': 'POST',
  ':path': SHOULD_RATE_LIMIT_PATH,
  'content-type': 'application/grpc',
  te: 'trailers',
}) as http2.OutgoingHttpHeaders;

const SESSION_OPTIONS: http2.SecureClientSessionOptions = {
  settings: { initialWindowSize: 1 << 20, enablePush: false },
  // Many concurrent small streams per session: node's default session memory refuses some under load.
  maxSessionMemory: 64,
};

/** Opens a session to 127.0.0.1:port (or host) and resolves once it is connected. */
export function connectSession(port: number, host = '127.0.0.1'): Promise<http2.ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const s = http2.connect(`http://${host}:${port}`, SESSION_OPTIONS);
    s.once('connect', () => {
      s.removeListener('error', reject);
      s.on('error', () => undefined); // stream-level handlers report failures
      resolve(s);
    });
    s.once('error', reject);
  });
}

type CallDone = (status: number | undefined, first: Buffer | undefined, bytes: number) => void;

/** Per-call state, kept on the stream so the handlers below are shared rather than four closures per call. */
interface CallState {
  status?: number;
  first?: Buffer;
  bytes: number;
  readonly done: CallDone;
}

const STATE = Symbol('call');
type TrackedStream = http2.ClientHttp2Stream & { [STATE]: CallState };

// A trailers-only answer (every gRPC error) carries grpc-status in its only HEADERS frame.
function onResponse(this: TrackedStream, h: http2.IncomingHttpHeaders): void {
  const s = h['grpc-status'];
  if (s !== undefined) this[STATE].status = Number(s);
}
function onTrailers(this: TrackedStream, t: http2.IncomingHttpHeaders): void {
  this[STATE].status = Number(t['grpc-status']);
}
function onData(this: TrackedStream, chunk: Buffer): void {
  const st = this[STATE];
  st.first ??= chunk;
  st.bytes += chunk.length;
}
function onClose(this: TrackedStream): void {
  const st = this[STATE];
  st.done(st.status, st.first, st.bytes);
}
function ignore(): void {
  // 'close' follows a stream error and reports the call as failed
}

/** Sends one call on a session; `done` gets the grpc-status (undefined on a stream failure), the first DATA chunk and the DATA bytes. */
function call(session: http2.ClientHttp2Session, frame: Buffer, done: CallDone): void {
  let req: TrackedStream;
  try {
    req = session.request(REQUEST_HEADERS, { endStream: false }) as TrackedStream;
  } catch {
    done(undefined, undefined, 0);
    return;
  }
  req[STATE] = { status: undefined, first: undefined, bytes: 0, done };
  req.on('response', onResponse);
  req.on('trailers', onTrailers);
  req.on('data', onData);
  req.on('error', ignore);
  req.on('close', onClose);
  req.end(frame);
}

/** One call over a new session, for probes; rejects only when no connection can be made. */
export async function callOnce(port: number, frame: Buffer, timeoutMs = 2000): Promise<CallAnswer> {
  const session = await connectSession(port);
  try {
    return await callOn(session, frame, timeoutMs);
  } finally {
    session.close();
  }
}

/** One call on an open session, answering status undefined after timeoutMs. */
export function callOn(session: http2.ClientHttp2Session, frame: Buffer, timeoutMs = 2000): Promise<CallAnswer> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let settled = false;
    const timer = setTimeout(() => {
      settled = true;
      resolve({ status: undefined, data: Buffer.alloc(0) });
    }, timeoutMs);
    const req = session.request(REQUEST_HEADERS, { endStream: false });
    let status: number | undefined;
    req.on('response', (h) => {
      if (h['grpc-status'] !== undefined) status = Number(h['grpc-status']);
    });
    req.on('trailers', (t) => (status = Number(t['grpc-status'])));
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('error', () => undefined);
    req.on('close', () => {
      clearTimeout(timer);
      if (!settled) resolve({ status, data: Buffer.concat(chunks) });
    });
    req.end(frame);
  });
}

/** Drives load for durationS and resolves with throughput and latency. */
export async function runHttp2Load(opts: Http2LoadOptions): Promise<LoadResult> {
  if (opts.frames.length === 0) throw new Error('no request frames');
  const sessions = await Promise.all(Array.from({ length: Math.max(1, opts.connections) }, () => connectSession(opts.port, opts.host)));
  const run = new LoadRun(opts.durationS);
  let next = 0;

  const send = (session: http2.ClientHttp2Session, from: number, after: () => void): void => {
    const frame = opts.frames[next];
    next = next + 1 === opts.frames.length ? 0 : next + 1;
    run.sent();
    call(session, frame, (status, first, bytes) => {
      if (status === 0 && bytes > 0) {
        // The answer's first field is overall_code (tag 0x08) right after the 5-byte prefix.
        run.answered(from, { overLimit: first !== undefined && first.length > 6 && first[5] === 0x08 && first[6] === 2 });
      } else {
        run.answered(from, { error: status === undefined ? 'stream failed without grpc-status' : `grpc-status ${status}` });
      }
      after();
    });
  };

  if (opts.rps === undefined) {
    await new Promise<void>((resolve) => {
      const perSession = Math.max(1, opts.streams);
      let loops = sessions.length * perSession;
      const loop = (session: http2.ClientHttp2Session): void => {
        if (performance.now() >= run.endAt || session.closed || session.destroyed) {
          if (--loops === 0) resolve();
          return;
        }
        send(session, performance.now(), () => loop(session));
      };
      for (const s of sessions) for (let i = 0; i < perSession; i++) loop(s);
    });
  } else {
    let turn = 0;
    await paceAtRate(run, opts.rps, (at) => {
      turn = turn + 1 === sessions.length ? 0 : turn + 1;
      send(sessions[turn], at, () => undefined);
    });
  }
  for (const s of sessions) s.destroy();
  return run.result('http2-load');
}

/** Splits concatenated gRPC frames into frames (prefix kept). */
export function framesOf(data: Buffer): Buffer[] {
  return splitGrpcFrames(data, { keepPrefix: true });
}

// `node dist/bench/http2-load.js --port P --frames FILE --connections K --streams M --duration S [--rps R]`
// FILE holds concatenated gRPC frames; prints one JSON LoadResult.
if (require.main === module) {
  const args = process.argv.slice(2);
  const port = Number(arg(args, '--port'));
  const usage = 'usage: http2-load --port P --frames FILE [--connections K] [--streams M] [--duration S] [--rps R]';
  if (!port) throw new Error(usage);
  const { data, ...run } = commonLoadArgs(args, '--frames', 4, usage);
  printLoadResult(runHttp2Load({ port, frames: framesOf(data), streams: Number(arg(args, '--streams') ?? 50), ...run }));
}
