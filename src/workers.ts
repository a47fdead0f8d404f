import cluster, { type Worker } from 'node:cluster';
import type { Logger } from './log';

/**
 * WORKERS=N: N processes share the gRPC, HTTP and debug ports through node:cluster, so a Redis-backed
 * service uses every core (counters live in Redis, so workers agree on every limit). The primary
 * only supervises: it serves nothing, restarts a worker that crashes, forwards SIGTERM/SIGINT, and
 * exits 0 once every worker has exited. Metrics (/metrics) are per worker: each scrape is
 * answered by the worker that accepted the connection.
 *
 * A worker that exits before it ever became ready means the service cannot start (bad config of
 * a port, TLS files, ...): restarting it would only loop, so the primary stops everything and exits 1.
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
}

/** True in a process that should supervise workers rather than serve. */
export function isSupervisor(workers: number): boolean {
  return workers > 1 && cluster.isPrimary;
}

/** Tells the primary (if any) that this worker serves. No-op outside a cluster. */
export function reportReady(): void {
  if (cluster.isWorker) process.send?.(WORKER_READY);
}

/** Forks the workers and supervises them until they have all exited after a signal. */
export function superviseWorkers(options: SupervisorOptions): void {
  const { logger } = options;
  const exit = options.exit ?? ((code: number) => process.exit(code));
  const ready = new WeakSet<Worker>();
  // Own bookkeeping: cluster.workers drops a worker on disconnect, which may come after its exit.
  const live = new Set<Worker>();
  let stopping = false;
  let exitCode = 0;
  // Consecutive crashes shortly after start back off, so a crash loop does not burn a core.
  let recentCrashes = 0;

  const fork = (): void => {
    const worker = cluster.fork();
    live.add(worker);
    const forkedAt = Date.now();
    worker.on('message', (message: unknown) => {
      if (message === WORKER_READY) ready.add(worker);
    });
    worker.once('exit', (code, signal) => {
      live.delete(worker);
      if (stopping) {
        if (live.size === 0) exit(exitCode);
        return;
      }
      if (!ready.has(worker)) {
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
        if (!stopping) fork();
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

  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));
  logger.info({ workers: options.workers }, 'starting workers');
  for (let i = 0; i < options.workers; i++) fork();
}
