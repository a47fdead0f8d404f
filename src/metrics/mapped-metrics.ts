import { Counter, Registry } from 'prom-client';
import { TalliedCounter, TalliedHistogram } from './tallies';
import { StatsdMapper, type StatsdMetricType } from './statsd-mapping';

/**
 * USE_PROMETHEUS as the reference serves it: the service's statsd metrics go through a statsd_exporter
 * mapping (PROMETHEUS_MAPPER_YAML, or the default below) into their own registry, served on
 * PROMETHEUS_ADDR at PROMETHEUS_PATH. So the names and labels are the ones dashboards built on the
 * reference know: `ratelimit_service_rate_limit_total_hits{domain, key1}` for a one-level rule,
 * `{domain, key1, key2}` for deeper ones, and so on.
 *
 * Each statsd name is mapped once, when first seen; after that a counter costs one map lookup and an
 * addition.
 * The statsd names mapped are bounded in count and bytes (their source, the metric series, is bounded
 * too); an event of a new name beyond them, or of a name longer than the mapper matches, is dropped and
 * counted in `statsd_exporter_events_dropped_total`.
 * EXTRA_TAGS become labels of every series. Two mappings giving one name different label sets share
 * it (a sample carries only its own labels); a name already used with another metric type, a label
 * the first mapping did not declare, or a second label set of a histogram is dropped and counted in
 * `statsd_exporter_events_conflict_total`.
 */

const COUNTERS = ['near_limit', 'over_limit', 'total_hits', 'within_limit', 'shadow_mode'];

/**
 * The default mapping, the reference's statsd_exporter configuration: rule counters with `domain` and
 * `key1` (glob) or `domain`, `key1`, `key2` (regex, for deeper keys), call errors by `err_type`,
 * requests and response times by `grpc_method` (times in seconds unless `inMilliseconds`), config loads.
 */
export function defaultMappingYaml(options: { inMilliseconds?: boolean } = {}): string {
  const lines = ['mappings:'];
  for (const c of COUNTERS) {
    lines.push(`  - match: "ratelimit.service.rate_limit.*.*.${c}"`, `    name: "ratelimit_service_rate_limit_${c}"`, '    labels: {domain: "$1", key1: "$2"}');
  }
  for (const c of COUNTERS) {
    lines.push(
      `  - match: 'ratelimit\\.service\\.rate_limit\\.([^\\.]*)\\.([^\\.]*)\\.([^\\.]*)(\\..*)?\\.${c}'`,
      '    match_type: regex',
      `    name: "ratelimit_service_rate_limit_${c}"`,
      '    labels: {domain: "$1", key1: "$2", key2: "$3"}',
    );
  }
  lines.push(
    '  - match: "ratelimit.service.call.should_rate_limit.*"',
    '    name: "ratelimit_service_should_rate_limit_error"',
    '    match_metric_type: counter',
    '    labels: {err_type: "$1"}',
    '  - match: "ratelimit_server.*.total_requests"',
    '    name: "ratelimit_service_total_requests"',
    '    match_metric_type: counter',
    '    labels: {grpc_method: "$1"}',
    '  - match: "ratelimit_server.*.response_time"',
    '    name: "ratelimit_service_response_time_seconds"',
    '    observer_type: histogram',
    ...(options.inMilliseconds ? [] : ['    scale: 0.001']),
    '    labels: {grpc_method: "$1"}',
    '  - match: "ratelimit.service.config_load_success"',
    '    name: "ratelimit_service_config_load_success"',
    '    match_metric_type: counter',
    '  - match: "ratelimit.service.config_load_error"',
    '    name: "ratelimit_service_config_load_error"',
    '    match_metric_type: counter',
  );
  return lines.join('\n') + '\n';
}

interface Inc {
  inc(value: number): void;
}
interface Observe {
  observe(value: number): void;
}

const NOOP: Inc & Observe = { inc: () => undefined, observe: () => undefined };

interface Family {
  readonly type: StatsdMetricType;
  readonly labelNames: ReadonlySet<string>;
  readonly counter?: TalliedCounter<string>;
  /** A histogram holds the one label set it was made with (statsd timers have none of their own). */
  readonly histogram?: { readonly metric: TalliedHistogram<string>; readonly labelKey: string; readonly scale: number };
}

export interface MappedPrometheusOptions {
  readonly mapper: StatsdMapper;
  /** Labels added to every series (EXTRA_TAGS). */
  readonly extraLabels?: Readonly<Record<string, string>>;
  /** Most statsd names mapped (counters and timers together); default 100,000. */
  readonly maxNames?: number;
  /** Most estimated bytes of the names mapped; default 16 MiB. */
  readonly maxBytes?: number;
}

const DEFAULT_MAX_NAMES = 100_000;
const DEFAULT_MAX_BYTES = 16 * 1024 * 1024;
/** What one mapped name costs besides its characters, which it holds twice (the name, and the series' labels): the slots, the child, its label set. */
const MAPPED_NAME_OVERHEAD_BYTES = 400;

/** A statsd sink (increment, timing) that keeps the mapped Prometheus series; `registry` serves them. */
export class MappedPrometheus {
  readonly registry = new Registry();
  private readonly counters = new Map<string, Inc>();
  private readonly timers = new Map<string, Observe>();
  private readonly families = new Map<string, Family>();
  private readonly conflicts: Counter<'type'>;
  private readonly dropped: Inc;
  private readonly maxNames: number;
  private readonly maxBytes: number;
  private namesBytes = 0;

  constructor(private readonly options: MappedPrometheusOptions) {
    this.conflicts = new Counter({
      name: 'statsd_exporter_events_conflict_total',
      help: 'Statsd events dropped because their mapped name is used with another type or label set.',
      labelNames: ['type'],
      registers: [this.registry],
    });
    this.dropped = new Counter({
      name: 'statsd_exporter_events_dropped_total',
      help: 'Statsd events of new names dropped because the names mapped reached their bound, or of names too long to map.',
      registers: [this.registry],
    });
    this.maxNames = options.maxNames ?? DEFAULT_MAX_NAMES;
    this.maxBytes = options.maxBytes ?? DEFAULT_MAX_BYTES;
  }

  /** A statsd counter increment. */
  increment(stat: string, value: number): void {
    this.childOf(this.counters, stat, 'counter')?.inc(value);
  }

  /** A statsd timer value, in milliseconds (scaled by its mapping). */
  timing(stat: string, milliseconds: number): void {
    this.childOf(this.timers, stat, 'observer')?.observe(milliseconds);
  }

  /** The child of `stat` in `children`, made when first seen; undefined (the event dropped and counted) when no more names fit. */
  private childOf<C extends Inc | Observe>(children: Map<string, C>, stat: string, type: StatsdMetricType): C | undefined {
    let c = children.get(stat);
    if (c === undefined) {
      if (this.full(stat)) {
        this.dropped.inc(1);
        return undefined;
      }
      c = this.child(stat, type) as C;
      children.set(stat, c);
    }
    return c;
  }

  /** Whether a new name would go beyond the bounds (or is too long to match); when not, it is counted in. */
  private full(stat: string): boolean {
    if (stat.length > this.options.mapper.maxNameLength) return true;
    const bytes = MAPPED_NAME_OVERHEAD_BYTES + 2 * stat.length;
    if (this.counters.size + this.timers.size >= this.maxNames || this.namesBytes + bytes > this.maxBytes) return true;
    this.namesBytes += bytes;
    return false;
  }

  /** Nothing to flush: the registry is read at each scrape. */
  close(callback?: (error?: Error) => void): void {
    callback?.();
  }

  private child(stat: string, type: StatsdMetricType): Inc | Observe {
    const mapped = this.options.mapper.map(stat, type);
    if (mapped.drop) return NOOP;
    const labels = { ...mapped.labels, ...this.options.extraLabels };
    const labelKey = JSON.stringify(labels);
    let family = this.families.get(mapped.name);
    if (family === undefined) {
      const labelNames = [...new Set([...this.options.mapper.labelNamesOf(mapped.name), ...Object.keys(labels)])];
      const common = { name: mapped.name, help: `${mapped.name} (statsd ${type} mapped)`, labelNames, registers: [this.registry] };
      family =
        type === 'observer'
          ? {
              type,
              labelNames: new Set(labelNames),
              histogram: { metric: new TalliedHistogram({ ...common, buckets: mapped.buckets, labelSet: labels }), labelKey, scale: mapped.scale },
            }
          : { type, labelNames: new Set(labelNames), counter: new TalliedCounter(common) };
      this.families.set(mapped.name, family);
    }
    const conflicting =
      family.type !== type ||
      Object.keys(labels).some((l) => !family.labelNames.has(l)) ||
      (family.histogram !== undefined && family.histogram.labelKey !== labelKey);
    if (conflicting) {
      const conflict = this.conflicts.labels({ type });
      return { inc: () => conflict.inc(), observe: () => conflict.inc() };
    }
    // Tallies: the request path adds to numbers; prom-client reads them at each scrape (./tallies.ts).
    if (family.histogram !== undefined) {
      const { metric, scale } = family.histogram;
      return { observe: scale === 1 ? (v: number) => metric.record(v) : (v: number) => metric.record(v * scale) };
    }
    return family.counter!.tally(labels);
  }
}
