import * as fs from 'node:fs';
import { MappedPrometheus, defaultMappingYaml } from './mapped-metrics';
import type { StatsdDrops, StatsdSink } from './metrics';
import { SettingsError, type Settings } from '../settings/settings';
import { MappingError, StatsdMapper } from './statsd-mapping';
import { createStatsdSink, fanOut } from './statsd-sink';

/**
 * The metric outlets the settings ask for, besides /metrics on PORT: statsd or DogStatsD
 * (USE_STATSD, USE_DOG_STATSD) and the reference-named Prometheus registry (USE_PROMETHEUS).
 * DISABLE_STATS turns them all off. A PROMETHEUS_MAPPER_YAML that cannot be read or parsed stops
 * the start, naming the variable.
 */

export interface MetricSinks {
  /** What Metrics sends its statsd-named counters and timings to; undefined: nothing. */
  readonly statsd?: StatsdSink;
  /** The mapped registry to serve on PROMETHEUS_ADDR; undefined without USE_PROMETHEUS. */
  readonly prometheus?: MappedPrometheus;
  /** What plain statsd (USE_STATSD) dropped for an agent not taking lines; undefined without it. */
  readonly statsdDrops?: () => StatsdDrops;
}

type SinkSettings = Pick<
  Settings,
  | 'disableStats'
  | 'useStatsd'
  | 'useDogStatsd'
  | 'statsdHost'
  | 'statsdPort'
  | 'statsdMaxQueuedBytes'
  | 'extraTags'
  | 'statsFlushIntervalMs'
  | 'usePrometheus'
  | 'prometheus'
>;

export function createMetricSinks(settings: SinkSettings, onStatsdError?: (error: Error) => void): MetricSinks {
  if (settings.disableStats) return {};
  const sinks: StatsdSink[] = [];
  let statsdDrops: (() => StatsdDrops) | undefined;
  if (settings.useStatsd || settings.useDogStatsd) {
    const statsd = createStatsdSink({
      host: settings.statsdHost,
      port: settings.statsdPort,
      dogStatsd: settings.useDogStatsd,
      extraTags: settings.extraTags,
      flushIntervalMs: settings.statsFlushIntervalMs,
      maxQueuedBytes: settings.statsdMaxQueuedBytes,
      onError: onStatsdError,
    });
    sinks.push(statsd.sink);
    statsdDrops = statsd.drops;
  }
  let prometheus: MappedPrometheus | undefined;
  if (settings.usePrometheus) {
    prometheus = new MappedPrometheus({ mapper: mapperOf(settings.prometheus), extraLabels: settings.extraTags });
    sinks.push(prometheus);
  }
  return { statsd: fanOut(sinks), prometheus, statsdDrops };
}

function mapperOf(prometheus: Settings['prometheus']): StatsdMapper {
  const file = prometheus.mapperYamlPath;
  if (file === undefined) return new StatsdMapper(defaultMappingYaml({ inMilliseconds: prometheus.responseTimeInMilliseconds }));
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    throw new SettingsError('PROMETHEUS_MAPPER_YAML', `cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
  }
  try {
    return new StatsdMapper(text);
  } catch (err) {
    if (err instanceof MappingError) throw new SettingsError('PROMETHEUS_MAPPER_YAML', `${file}: ${err.message}`);
    throw err;
  }
}

/** A registry's exposition (what the HTTP edges serve). */
/** Anything that renders the Prometheus exposition (Metrics, a registry, the workers' merged view). */
export interface MetricsExposition {
  text(): Promise<string>;
  readonly contentType: string;
}

export function registryExposition(registry: MappedPrometheus['registry']): MetricsExposition {
  return { text: () => registry.metrics(), contentType: registry.contentType };
}
