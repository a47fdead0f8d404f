import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Stretched } from './deadline';
import { descriptor, grpc, rlsClient, type DecodedRateLimitResponse, type RlsClient, type RlsRequestInput } from './grpc-client';
import { request } from './http-request';
import { LOOPBACK_ANY_PORT } from './service';
import { MAIN, spawnService, waitForServing, type Running } from './service-process';

/**
 * Replicas of the built service (dist/src/main.js), each a process of its own on one shared Redis,
 * driven by RLS clients at set rates: the times of every call are kept, so tests can count what
 * was admitted in any span, and each replica's /metrics read.
 */

/** One replica: its process, an RLS client on it, its config directory and its log lines. */
export interface Replica {
  readonly name: string;
  readonly run: Running;
  readonly client: RlsClient;
  readonly configDir: string;
  /** Every JSON log line it wrote. */
  readonly lines: readonly Record<string, unknown>[];
  /** The value of one sample of /metrics (0 when absent): `name{labels}`, labels in the order printed. */
  metric(name: string, labels?: Readonly<Record<string, string>>): Promise<number>;
  /** SIGTERM (SIGKILL after 5 s), the client closed, the config directory removed. */
  stop(): Promise<void>;
}

export interface ReplicaOptions {
  readonly name: string;
  /** Config files by name. */
  readonly config: Readonly<Record<string, string>>;
  readonly env: Readonly<Record<string, string>>;
}

/** Starts a replica and waits until it is SERVING. */
export async function startReplica(options: ReplicaOptions): Promise<Replica> {
  if (!fs.existsSync(MAIN)) throw new Error(`${MAIN} is missing: build first (npx tsc -p tsconfig.json, or make test)`);
  const configDir = fs.mkdtempSync(path.join(os.tmpdir(), `slidegate-${options.name}-`));
  for (const [file, text] of Object.entries(options.config)) fs.writeFileSync(path.join(configDir, file), text);
  let run: Running;
  try {
    run = await spawnService({
      CONFIG_PATH: configDir,
      ...LOOPBACK_ANY_PORT,
      LOG_LEVEL: 'info',
      LOG_FORMAT: 'json',
      USE_STATSD: 'false',
      WARM_UP_CALLS: '0',
      SHUTDOWN_GRACE_MS: '1000',
      ...options.env,
    });
  } catch (err) {
    fs.rmSync(configDir, { recursive: true, force: true });
    throw err;
  }
  const lines: Record<string, unknown>[] = [];
  let buffered = '';
  run.child.stdout!.on('data', (chunk: Buffer) => {
    buffered += chunk.toString();
    let nl: number;
    while ((nl = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      try {
        lines.push(JSON.parse(line) as Record<string, unknown>);
      } catch {
        // Not a log line.
      }
    }
  });
  const client = rlsClient(`127.0.0.1:${run.grpcPort}`);
  await waitForServing(client);
  return {
    name: options.name,
    run,
    client,
    configDir,
    lines,
    metric: async (name, labels = {}) => {
      const { text } = await request(run.httpPort, 'GET', '/metrics');
      const wanted =
        Object.keys(labels).length === 0
          ? name
          : `${name}{${Object.entries(labels)
              .map(([k, v]) => `${k}="${v}"`)
              .join(',')}}`;
      const line = text.split('\n').find((l) => l.startsWith(`${wanted} `));
      return line === undefined ? 0 : Number(line.slice(wanted.length + 1));
    },
    stop: async () => {
      client.close();
      const child = run.child;
      if (child.exitCode === null && child.signalCode === null) {
        const kill = setTimeout(() => child.kill('SIGKILL'), 5_000);
        child.kill('SIGTERM');
        await run.exited;
        clearTimeout(kill);
      }
      fs.rmSync(configDir, { recursive: true, force: true });
    },
  };
}

/** One call's fate: when it was sent and answered (ms since the load began), and how. */
export interface CallRecord {
  readonly sentMs: number;
  readonly doneMs: number;
  /** overall_code OK. */
  readonly allowed: boolean;
  /** The gRPC status of a failed call. */
  readonly error?: grpc.status;
}

/** Calls of one request on one replica at `rate(elapsedMs)` calls per second (open loop, 10 ms steps). */
export interface Offer {
  readonly client: RlsClient;
  readonly request: RlsRequestInput;
  readonly rate: (elapsedMs: number) => number;
}

export interface LoadLog {
  /** performance.now() when the load began. */
  readonly startMs: number;
  /** The wall clock (ms since the epoch) when the load began: the service's windows are aligned to it. */
  readonly epochMs: number;
  /** Per offer, its calls in the order sent. */
  readonly calls: readonly (readonly CallRecord[])[];
}

const STEP_MS = 10;
const CALL_DEADLINE_MS = 5_000;

/**
 * Drives every offer for `durationMs` and resolves once every call is answered. `during` runs once
 * the load has begun (it may signal processes; the load goes on meanwhile).
 */
export async function drive(offers: readonly Offer[], durationMs: number, during?: (elapsedMs: () => number) => Promise<void>): Promise<LoadLog> {
  const startMs = performance.now();
  const epochMs = Date.now();
  const elapsed = (): number => performance.now() - startMs;
  const calls = offers.map(() => [] as CallRecord[]);
  const due = offers.map(() => 0);
  const inFlight = new Set<Promise<void>>();
  const send = (i: number): void => {
    const sentMs = elapsed();
    const p = offers[i].client.shouldRateLimit(offers[i].request, { deadlineMs: CALL_DEADLINE_MS }).then(
      (res) => void calls[i].push({ sentMs, doneMs: elapsed(), allowed: res.overallCode === 'OK' }),
      (err: grpc.ServiceError) => void calls[i].push({ sentMs, doneMs: elapsed(), allowed: false, error: err.code }),
    );
    inFlight.add(p);
    void p.finally(() => inFlight.delete(p));
  };
  const side = during?.(elapsed);
  await new Promise<void>((resolve) => {
    let last = 0;
    const timer = setInterval(() => {
      const now = Math.min(elapsed(), durationMs);
      offers.forEach((o, i) => {
        due[i] += (o.rate(now) * (now - last)) / 1000;
        for (; due[i] >= 1; due[i]--) send(i);
      });
      last = now;
      if (now >= durationMs) {
        clearInterval(timer);
        resolve();
      }
    }, STEP_MS);
  });
  await side;
  await Promise.all(inFlight);
  for (const c of calls) c.sort((a, b) => a.sentMs - b.sentMs);
  return { startMs, epochMs, calls };
}

/** The admitted calls of the offers named (all by default), in the order sent. */
export function admittedCalls(log: LoadLog, which: readonly number[] = log.calls.map((_, i) => i)): CallRecord[] {
  const calls: CallRecord[] = [];
  for (const i of which) for (const c of log.calls[i]) if (c.allowed) calls.push(c);
  return calls.sort((x, y) => x.sentMs - y.sentMs);
}

/** How many of `calls` were answered in [fromMs, toMs). */
export function countBetween(calls: readonly CallRecord[], fromMs: number, toMs: number): number {
  let n = 0;
  for (const c of calls) if (c.doneMs >= fromMs && c.doneMs < toMs) n++;
  return n;
}

/*
 * A call was decided somewhere between its sending and its answer. The two measures below count
 * a call in a span or a window only when both lie in it: a stall of this process (answers read
 * late, calls sent in a bunch) can make them count less than the service admitted, never more.
 * With answers within milliseconds, as on a quiet machine, they count what it admitted.
 */

/** The most of `calls` surely decided within one span [t, t + spanMs) lying within [fromMs, toMs], any alignment. */
export function worstSpan(calls: readonly CallRecord[], spanMs: number, fromMs: number, toMs: number): number {
  return worstSpanAt(calls, spanMs, fromMs, toMs).count;
}

/** worstSpan, and where the first span that admits that many starts (ms from the log's start). */
export function worstSpanAt(calls: readonly CallRecord[], spanMs: number, fromMs: number, toMs: number): { count: number; atMs: number } {
  // The best spans start at a sending or end just after an answer.
  const starts = [...calls.map((c) => c.sentMs), ...calls.map((c) => c.doneMs + 1e-6 - spanMs)].filter((t) => t >= fromMs && t + spanMs <= toMs);
  let worst = { count: 0, atMs: NaN };
  for (const t of starts) {
    let n = 0;
    for (const c of calls) if (c.sentMs >= t && c.doneMs < t + spanMs) n++;
    if (n > worst.count || (n === worst.count && t < worst.atMs)) worst = { count: n, atMs: t };
  }
  return worst;
}

/**
 * The highest sliding-window estimate of `calls` (what the sliding_window algorithm holds under its
 * limit: the previous window's count weighted by the part of it still to come, plus the current
 * window's), windows aligned to the wall clock as the service's are, at each answer within
 * [fromMs, toMs]; each call counted only in a window it surely was decided in, by then.
 */
export function worstEstimate(log: LoadLog, calls: readonly CallRecord[], windowMs: number, fromMs: number, toMs: number): number {
  let worst = 0;
  for (const at of calls) {
    const t = at.doneMs;
    if (t < fromMs || t > toMs) continue;
    const start = Math.floor((log.epochMs + t) / windowMs) * windowMs - log.epochMs;
    let current = 0;
    let previous = 0;
    for (const c of calls) {
      if (c.sentMs >= start && c.doneMs <= t) current++;
      else if (c.sentMs >= start - windowMs && c.doneMs < start) previous++;
    }
    worst = Math.max(worst, previous * (1 - (t - start) / windowMs) + current);
  }
  return Math.round(worst * 10) / 10;
}

/** Polls `read` until `done` holds of its value or `timeoutMs` passes; returns the last value read. */
export async function pollUntil<T>(read: () => Promise<T>, done: (value: T) => boolean, timeoutMs: number, everyMs = 50): Promise<T> {
  const until = performance.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value) || performance.now() >= until) return value;
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** Resolves once `elapsed()` reaches `atMs`. */
export async function untilElapsed(elapsed: () => number, atMs: number): Promise<void> {
  for (let left = atMs - elapsed(); left > 0; left = atMs - elapsed()) await new Promise((r) => setTimeout(r, Math.min(left, 10)));
}

/**
 * Mixed calls on one replica, every reply kept: `both()` pairs the descriptor `leased` of the leased
 * rule `mixed` (with `leasedHits` when given) and the descriptor `other` of the plain rule `plain`.
 */
export function mixedCalls(
  replica: Replica,
  leased: string,
  plain: string,
): {
  readonly replies: DecodedRateLimitResponse[];
  call(req: RlsRequestInput): Promise<DecodedRateLimitResponse>;
  both(leasedHits?: number, other?: string): RlsRequestInput;
} {
  const replies: DecodedRateLimitResponse[] = [];
  return {
    replies,
    call: async (req) => {
      const reply = await replica.client.shouldRateLimit(req);
      replies.push(reply);
      return reply;
    },
    both: (leasedHits, other = plain) => ({
      domain: 'lease',
      descriptors: [descriptor([['mixed', leased]], leasedHits === undefined ? {} : { hitsAddend: { value: leasedHits } }), descriptor([['plain', other]])],
    }),
  };
}

/** One call of a burst: its reply, or the gRPC status it failed with. */
export type BurstReply = { readonly reply: DecodedRateLimitResponse } | { readonly error: grpc.status };

/**
 * Sends `n` calls at once, `request(i)` over `clients[i % clients.length]` (each client one
 * connection), and resolves with every outcome in order once all are answered.
 */
export function burst(clients: readonly RlsClient[], n: number, request: (i: number) => RlsRequestInput): Promise<BurstReply[]> {
  return Promise.all(
    Array.from({ length: n }, (_, i) =>
      clients[i % clients.length].shouldRateLimit(request(i), { deadlineMs: 20_000 }).then(
        (reply): BurstReply => ({ reply }),
        (err: grpc.ServiceError): BurstReply => ({ error: err.code }),
      ),
    ),
  );
}

/**
 * Throws Stretched (./deadline.ts) when the load of `log` was not steady: a gap of more than
 * `maxGapMs` between two sendings of one offer (this process stalled, then sent in a bunch), or more
 * than 1% of its calls answered after more than `maxLatencyMs` (the service stalled, then decided in
 * a bunch). Calls bunched so are admitted in bunches, and a sliding window (exact or not) can then
 * admit more than its limit in a span of one window while its estimate stays within it: what such a
 * run measures of spans says nothing about the service.
 */
export function requireSteady(log: LoadLog, maxGapMs: number, maxLatencyMs: number): void {
  for (const calls of log.calls) {
    for (let i = 1; i < calls.length; i++) {
      const gap = calls[i].sentMs - calls[i - 1].sentMs;
      if (gap > maxGapMs) throw new Stretched(`no call sent for ${Math.round(gap)} ms at ${Math.round(calls[i - 1].sentMs)} ms`);
    }
  }
  const all = log.calls.flat();
  const late = all.filter((c) => c.doneMs - c.sentMs > maxLatencyMs).length;
  if (late > all.length / 100) throw new Stretched(`${late} of ${all.length} calls answered after more than ${maxLatencyMs} ms`);
}

/** The run's steadiness as requireSteady() judges it: the longest gap between two sendings of an offer, and the calls answered late. */
export function steadiness(log: LoadLog, maxLatencyMs: number): { readonly maxGapMs: number; readonly late: number } {
  let maxGapMs = 0;
  for (const calls of log.calls) for (let i = 1; i < calls.length; i++) maxGapMs = Math.max(maxGapMs, calls[i].sentMs - calls[i - 1].sentMs);
  return { maxGapMs: Math.round(maxGapMs), late: log.calls.flat().filter((c) => c.doneMs - c.sentMs > maxLatencyMs).length };
}
