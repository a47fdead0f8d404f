import cluster, { type Worker } from 'node:cluster';
import { AggregatorRegistry, type Registry } from 'prom-client';
import type { Logger } from '../log';
import type { MetricsExposition } from '../metrics/sinks';

/**
 * WORKERS=N: N processes share the gRPC, HTTP and debug ports through node:cluster, so a Redis-backed
 * service uses every core (counters live in Redis, so workers agree on every limit). The primary
 * only supervises: it serves nothing, restarts a worker that crashes, forwards SIGTERM/SIGINT, and
 * exits 0 once every worker has exited. It also gathers metrics: whichever worker accepts a scrape
 * of /metrics asks it, and it sums every worker's series (prom-client's AggregatorRegistry), so
 * each scrape sees the whole service and counters never appear to go back between scrapes.
 *
 * A worker that exits on its own before it ever became ready means the service cannot start (bad
 * config of a port, TLS files, ...): restarting it would only loop, so the primary stops everything
 * and exits 1. A worker killed by a signal before it was ready (the OOM killer, an operator's kill)
 * says nothing about the config: it is restarted like any crash.
 */

/** Message a worker sends the primary once its servers listen. */
export const WORKER_READY = 'slidegate:ready';

export interface SupervisorOptions {
  readonly workers: number;
  readonly logger: Logger;
  /** How long workers get to finish in-flight calls after SIGTERM; they are killed after this plus a margin. */
  readonly shutdownGraceMs: number;
  /** Called instead of process.exit (tests). */
  readonly exit?: (code: number) => void;
  /** Called instead of cluster.fork (tests), with the worker's environment (WORKER_INDEX_ENV). */
  readonly fork?: (env: Readonly<Record<string, string>>) => Worker;
  /** Stop on SIGTERM/SIGINT of this process; default true (tests turn it off). */
  readonly handleSignals?: boolean;
}

/**
 * Metrics across workers, over the cluster's IPC channel: a worker that is scraped asks the primary
 * (REQUEST); the primary asks every ready worker for its registry as JSON (COLLECT, answered with
 * SERIES), sums them with prom-client's AggregatorRegistry.aggregate, and sends the text back (REPLY).
 */
const METRICS_REQUEST = 'slidegate:metrics-request';
const METRICS_COLLECT = 'slidegate:metrics-collect';
const METRICS_SERIES = 'slidegate:metrics-series';
const METRICS_REPLY = 'slidegate:metrics-reply';
/** How long the primary waits for every worker's series; the scraped worker waits a little longer. */
const COLLECT_TIMEOUT_MS = 5_000;
const REPLY_TIMEOUT_MS = COLLECT_TIMEOUT_MS + 1_000;

type MetricsJson = Awaited<ReturnType<Registry['getMetricsAsJSON']>>;

interface IdMessage {
  readonly type: string;
  readonly id: number;
  /** Which registry (clusterMetrics' `name`): the service's own, or USE_PROMETHEUS's mapped one. */
  readonly registry?: string;
}

interface SeriesMessage extends IdMessage {
  readonly metrics?: MetricsJson;
  readonly error?: string;
}

interface ReplyMessage extends IdMessage {
  readonly text?: string;
  readonly error?: string;
}

function isMessage(message: unknown, type: string): message is IdMessage {
  return typeof message === 'object' && message !== null && (message as { type?: unknown }).type === type;
}

const errorMessage = (err: unknown): string => (err instanceof Error ? err.message : String(err));

/**
 * In a node:cluster worker: answers the primary's collections with `registry`, and returns the
 * exposition of every worker summed (what /metrics should serve). Undefined outside a cluster,
 * where the registry speaks for the whole process.
 */
export function clusterMetrics(registry: Registry, name = 'service'): MetricsExposition | undefined {
  if (!cluster.isWorker) return undefined;
  const send = (message: IdMessage & Record<string, unknown>): void => {
    process.send?.(message);
  };
  const pending = new Map<number, (reply: ReplyMessage) => void>();
  let nextId = 0;
  process.on('message', (message: unknown) => {
    if (isMessage(message, METRICS_COLLECT) && (message.registry ?? 'service') === name) {
      const id = message.id;
      registry.getMetricsAsJSON().then(
        (metrics) => send({ type: METRICS_SERIES, id, metrics }),
        (err: unknown) => send({ type: METRICS_SERIES, id, error: errorMessage(err) }),
      );
    } else if (isMessage(message, METRICS_REPLY) && (message.registry ?? 'service') === name) {
      pending.get(message.id)?.(message as ReplyMessage);
    }
  });
  return {
    contentType: registry.contentType,
    text: () =>
      new Promise<string>((resolve, reject) => {
        const id = nextId++;
        const timer = setTimeout(
          () => settle({ type: METRICS_REPLY, id, error: `no answer from the primary process within ${REPLY_TIMEOUT_MS} ms` }),
          REPLY_TIMEOUT_MS,
        );
        const settle = (reply: ReplyMessage): void => {
          clearTimeout(timer);
          pending.delete(id);
          if (reply.text !== undefined) resolve(reply.text);
          else reject(new Error(`cannot gather the workers' metrics: ${reply.error ?? 'no text'}`));
        };
        pending.set(id, settle);
        send({ type: METRICS_REQUEST, id, registry: name });
      }),
  };
}

let nextCollection = 0;

/**
 * The primary's side: gathers the series of `workers` and sums them. Fails (rather than answering
 * with part of the service) when a worker does not answer in time: a sum that drops a worker would
 * look like a counter reset to Prometheus.
 */
function gatherMetrics(workers: readonly Worker[], registry: string): Promise<string> {
  const id = nextCollection++;
  return new Promise<MetricsJson[]>((resolve, reject) => {
    const series: MetricsJson[] = [];
    let waiting = workers.length;
    const listeners = new Map<Worker, (message: unknown) => void>();
    const done = (err?: Error): void => {
      clearTimeout(timer);
      for (const [worker, listener] of listeners) worker.off('message', listener);
      if (err !== undefined) reject(err);
      else resolve(series);
    };
    const timer = setTimeout(
      () => done(new Error(`${waiting} of ${workers.length} workers did not answer within ${COLLECT_TIMEOUT_MS} ms`)),
      COLLECT_TIMEOUT_MS,
    );
    for (const worker of workers) {
      const listener = (message: unknown): void => {
        if (!isMessage(message, METRICS_SERIES) || message.id !== id) return;
        const answer = message as SeriesMessage;
        if (answer.metrics === undefined) return done(new Error(`worker ${worker.process.pid}: ${answer.error ?? 'no series'}`));
        series.push(answer.metrics);
        if (--waiting === 0) done();
      };
      listeners.set(worker, listener);
      worker.on('message', listener);
      worker.send({ type: METRICS_COLLECT, id, registry });
    }
    if (workers.length === 0) done();
  }).then((series) => AggregatorRegistry.aggregate(series).metrics());
}

/** True in a process that should supervise workers rather than serve. */
export function isSupervisor(workers: number): boolean {
  return workers > 1 && cluster.isPrimary;
}

/**
 * The environment variable telling a worker its index (0..WORKERS - 1): a worker started again in
 * place of one that exited takes its index, so that its name among the replicas (REPLICA_ID plus
 * the index) is its predecessor's.
 */
export const WORKER_INDEX_ENV = 'SLIDEGATE_WORKER_INDEX';

/** This worker's index, or undefined outside a cluster (or when the primary did not set it). */
export function workerIndex(): number | undefined {
  if (!cluster.isWorker) return undefined;
  const index = Number(process.env[WORKER_INDEX_ENV]);
  return Number.isSafeInteger(index) && index >= 0 ? index : undefined;
}

/** Tells the primary (if any) that this worker serves. No-op outside a cluster. */
export function reportReady(): void {
  if (cluster.isWorker) process.send?.(WORKER_READY);
}

/** Forks the workers and supervises them until they have all exited after a signal. */
export function superviseWorkers(options: SupervisorOptions): void {
  const { logger } = options;
  const exit = options.exit ?? ((code: number) => process.exit(code));
  const forkWorker = options.fork ?? ((env) => cluster.fork(env));
  const ready = new WeakSet<Worker>();
  // Own bookkeeping: cluster.workers drops a worker on disconnect, which may come after its exit.
  const live = new Set<Worker>();
  let stopping = false;
  let exitCode = 0;
  // Consecutive crashes shortly after start back off, so a crash loop does not burn a core.
  let recentCrashes = 0;
  const answerMetrics = (worker: Worker, id: number, registry: string): void => {
    const reply = (answer: Omit<ReplyMessage, 'type' | 'id'>): void => {
      if (worker.isConnected()) worker.send({ type: METRICS_REPLY, id, registry, ...answer });
    };
    const serving = [...live].filter((w) => ready.has(w) && w.isConnected());
    gatherMetrics(serving, registry).then(
      (text) => reply({ text }),
      (err: unknown) => reply({ error: errorMessage(err) }),
    );
  };

  const fork = (index: number): void => {
    const worker = forkWorker({ [WORKER_INDEX_ENV]: String(index) });
    live.add(worker);
    const forkedAt = Date.now();
    worker.on('message', (message: unknown) => {
      if (message === WORKER_READY) ready.add(worker);
      else if (isMessage(message, METRICS_REQUEST)) answerMetrics(worker, message.id, message.registry ?? 'service');
    });
    worker.once('exit', (code, signal) => {
      live.delete(worker);
      if (stopping) {
        if (live.size === 0) exit(exitCode);
        return;
      }
      if (!ready.has(worker) && !signal) {
        logger.fatal({ pid: worker.process.pid, code, signal }, 'worker exited before it could serve; stopping');
        exitCode = 1;
        stop('SIGTERM');
        if (live.size === 0) exit(exitCode);
        return;
      }
      recentCrashes = Date.now() - forkedAt < 10_000 ? recentCrashes + 1 : 0;
      const delayMs = Math.min(5_000, recentCrashes === 0 ? 0 : 100 * 2 ** recentCrashes);
      logger.error({ pid: worker.process.pid, code, signal, restartInMs: delayMs }, 'worker exited; starting a new one');
      setTimeout(() => {
        if (!stopping) fork(index);
      }, delayMs);
    });
  };

  const stop = (signal: NodeJS.Signals): void => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, 'stopping workers');
    for (const worker of live) worker.process.kill('SIGTERM');
    // Workers bound their own shutdown by the grace period; this is the last resort.
    setTimeout(() => {
      for (const worker of live) worker.process.kill('SIGKILL');
      exit(exitCode);
    }, options.shutdownGraceMs + 2_000).unref();
  };

  if (options.handleSignals !== false) {
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  }
  logger.info({ workers: options.workers }, 'starting workers');
  for (let i = 0; i < options.workers; i++) fork(i);
}
