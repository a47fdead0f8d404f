import { StatsD } from 'hot-shots';
import type { StatsdDrops, StatsdSink } from './metrics';
import { TcpStatsdClient } from './statsd-tcp';

/**
 * Where the service's statsd-named metrics go, as the reference sends them:
 * - USE_STATSD (default on): plain statsd over TCP to STATSD_HOST:STATSD_PORT (./statsd-tcp.ts: at most
 *   STATSD_MAX_QUEUED_BYTES held for the agent); EXTRA_TAGS are part of each name as the reference's
 *   stats library writes them (`name.__key=value`, keys sorted);
 * - USE_DOG_STATSD: DogStatsD over UDP to the same address, EXTRA_TAGS as `|#key:value` tags;
 * - USE_PROMETHEUS: the mapped registry (./mapped-metrics.ts), beside either.
 * Counters are summed in the process and sent every STATS_FLUSH_INTERVAL, as the reference's
 * stats library does, so the request path only adds to a number; timings are sent as they come.
 * Send errors never reach a request (`onError` hears them).
 */

export interface StatsdOptions {
  readonly host: string;
  readonly port: number;
  /** DogStatsD (UDP, tags) rather than plain statsd (TCP, tags in the name). */
  readonly dogStatsd: boolean;
  readonly extraTags: Readonly<Record<string, string>>;
  readonly flushIntervalMs: number;
  /** Plain statsd only: bytes held for a slow agent before lines are dropped. */
  readonly maxQueuedBytes: number;
  readonly onError?: (error: Error) => void;
}

/** The statsd or DogStatsD client of the settings, with counters summed between flushes; `drops` counts what plain statsd dropped. */
export function createStatsdSink(options: StatsdOptions): { sink: StatsdSink; drops?: () => StatsdDrops } {
  const tags = Object.entries(options.extraTags).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  if (!options.dogStatsd) {
    const client = new TcpStatsdClient({ host: options.host, port: options.port, maxQueuedBytes: options.maxQueuedBytes, onError: options.onError });
    const suffix = tags.map(([k, v]) => `.__${k}=${v}`).join('');
    return { sink: new SummingStatsdSink(client, suffix, options.flushIntervalMs), drops: () => client.drops() };
  }
  // DogStatsD goes over UDP: a datagram the agent does not take is dropped by the kernel, never held.
  const client = new StatsD({
    host: options.host,
    port: options.port,
    protocol: 'udp',
    cacheDns: true,
    maxBufferSize: 1400,
    // Summed counters arrive once per interval; timings may wait up to a second.
    bufferFlushInterval: 1000,
    globalTags: Object.fromEntries(tags),
    errorHandler: options.onError ?? (() => undefined),
  });
  return { sink: new SummingStatsdSink(client, '', options.flushIntervalMs) };
}

/** Most names summed, and their estimated bytes: the names come from the bounded metric series, this bounds the sums anyway. */
export const SUMMED_NAMES_MAX = 100_000;
export const SUMMED_NAMES_MAX_BYTES = 16 * 1024 * 1024;
/** What one summed name costs besides its characters (the map's slot, the string's header, the number). */
const SUMMED_NAME_OVERHEAD_BYTES = 64;

/**
 * Sums counter increments per name and sends each sum once per interval; timings pass through. The
 * names summed are bounded in count and bytes: an increment of a name beyond them is sent as it comes.
 */
export class SummingStatsdSink implements StatsdSink {
  private readonly sums = new Map<string, number>();
  private readonly timer: NodeJS.Timeout;
  private namesBytes = 0;

  constructor(
    private readonly client: StatsdSink,
    private readonly nameSuffix: string,
    flushIntervalMs: number,
    private readonly bounds: { readonly maxNames: number; readonly maxBytes: number } = { maxNames: SUMMED_NAMES_MAX, maxBytes: SUMMED_NAMES_MAX_BYTES },
  ) {
    this.timer = setInterval(() => this.flush(), flushIntervalMs);
    this.timer.unref();
  }

  increment(stat: string, value: number): void {
    const sum = this.sums.get(stat);
    if (sum !== undefined) {
      this.sums.set(stat, sum + value);
      return;
    }
    const bytes = SUMMED_NAME_OVERHEAD_BYTES + stat.length;
    if (this.sums.size >= this.bounds.maxNames || this.namesBytes + bytes > this.bounds.maxBytes) {
      this.client.increment(stat + this.nameSuffix, value);
      return;
    }
    this.sums.set(stat, value);
    this.namesBytes += bytes;
  }

  timing(stat: string, milliseconds: number): void {
    this.client.timing(stat + this.nameSuffix, milliseconds);
  }

  /** Sends every sum gathered since the last flush. */
  flush(): void {
    // Names stay in the map (as many as the metrics keep series): the next interval adds without allocating.
    for (const [stat, sum] of this.sums) {
      if (sum === 0) continue;
      this.client.increment(stat + this.nameSuffix, sum);
      this.sums.set(stat, 0);
    }
  }

  close(callback?: (error?: Error) => void): void {
    clearInterval(this.timer);
    this.flush();
    this.client.close(callback);
  }
}

/** Every sink at once (statsd and the mapped Prometheus registry). */
export function fanOut(sinks: readonly StatsdSink[]): StatsdSink | undefined {
  if (sinks.length <= 1) return sinks[0];
  return {
    increment: (stat, value) => {
      for (const s of sinks) s.increment(stat, value);
    },
    timing: (stat, ms) => {
      for (const s of sinks) s.timing(stat, ms);
    },
    close: (callback) => {
      let left = sinks.length;
      for (const s of sinks) s.close(() => --left === 0 && callback?.());
    },
  };
}
