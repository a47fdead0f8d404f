import * as http2 from 'node:http2';
import { LatencyHistogram } from './latency';
import { arg, commonLoadArgs, printLoadResult } from './load-command';
import type { LoadResult } from './load-result';
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

// Open-loop runs never queue more than this many calls, so an overloaded server cannot exhaust memory.
const MAX_BACKLOG = 20_000;
// How long in-flight calls get to finish after the run, before they are abandoned.
const DRAIN_MS = 3000;

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
  const hist = new LatencyHistogram();
  let requests = 0;
  let ok = 0;
  let overLimit = 0;
  let errors = 0;
  let firstError: string | undefined;
  let next = 0;
  let inFlight = 0;
  const start = performance.now();
  const endAt = start + opts.durationS * 1000;

  const send = (session: http2.ClientHttp2Session, from: number, after: () => void): void => {
    const frame = opts.frames[next];
    next = next + 1 === opts.frames.length ? 0 : next + 1;
    inFlight++;
    call(session, frame, (status, first, bytes) => {
      inFlight--;
      requests++;
      hist.record(performance.now() - from);
      if (status === 0 && bytes > 0) {
        ok++;
        // The answer's first field is overall_code (tag 0x08) right after the 5-byte prefix.
        if (first !== undefined && first.length > 6 && first[5] === 0x08 && first[6] === 2) overLimit++;
      } else {
        errors++;
        firstError ??= status === undefined ? 'stream failed without grpc-status' : `grpc-status ${status}`;
      }
      after();
    });
  };

  await new Promise<void>((resolve) => {
    if (opts.rps === undefined) {
      const perSession = Math.max(1, opts.streams);
      let loops = sessions.length * perSession;
      const loop = (session: http2.ClientHttp2Session): void => {
        if (performance.now() >= endAt || session.closed || session.destroyed) {
          if (--loops === 0) resolve();
          return;
        }
        send(session, performance.now(), () => loop(session));
      };
      for (const s of sessions) for (let i = 0; i < perSession; i++) loop(s);
      return;
    }
    const interval = 1000 / opts.rps;
    let scheduled = 0;
    let turn = 0;
    const tick = (): void => {
      const now = performance.now();
      const until = Math.min(now, endAt);
      while (start + scheduled * interval <= until && inFlight < MAX_BACKLOG) {
        turn = turn + 1 === sessions.length ? 0 : turn + 1;
        send(sessions[turn], start + scheduled * interval, () => undefined);
        scheduled++;
      }
      if (now < endAt) setTimeout(tick, 1);
      else {
        const drain = (): void => (inFlight === 0 || performance.now() > endAt + DRAIN_MS ? resolve() : void setTimeout(drain, 5));
        drain();
      }
    };
    tick();
  });
  for (const s of sessions) s.destroy();
  return {
    generator: 'http2-load',
    requests,
    ok,
    errors,
    overLimit,
    durationS: opts.durationS,
    rps: ok / opts.durationS,
    latencyMs: hist.summary(),
    firstError,
  };
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
