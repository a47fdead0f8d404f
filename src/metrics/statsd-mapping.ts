import { setFlagsFromString } from 'node:v8';
import { parse } from 'yaml';

/**
 * statsd-to-Prometheus mappings in the statsd_exporter format (PROMETHEUS_MAPPER_YAML), as the
 * reference server applies them to its own statsd names: `mappings` of `match` (a glob where `*`
 * stands for one dot-separated part, or with `match_type: regex` a regular expression matched against
 * the whole name), `name` and `labels` with `$1`/`${1}` for the captures, `action: drop`,
 * `match_metric_type` (counter, gauge, observer), `observer_type`/`timer_type` (histogram, summary:
 * both served as histograms), `histogram_options.buckets` or `buckets`, `scale`; and `defaults` for
 * `match_type`, `observer_type` and buckets. Globs are tried before regular expressions, each in
 * file order, as statsd_exporter does. A name no mapping matches keeps its own name with every
 * character outside `[a-zA-Z0-9_]` turned into `_`, and no labels.
 *
 * The names carry request values (rules with `detailed_metric`), so matching is bounded: a name longer
 * than `maxNameLength` is dropped without being matched, and regular expressions are anchored at both
 * ends (statsd_exporter's are not: a pattern that should match inside a name says `.*` itself), which
 * spares the engine a try at every start position and keeps `...\.over_limit` off the
 * `over_limit_with_local_cache` counters. A pattern that still backtracks without end on some name
 * (`(a+)+b`) is run by V8's linear-time engine once it has backtracked 50,000 times.
 */

/** Longest statsd name matched: a long domain and a detailed_metric label cut at METRICS_MAX_LABEL_LENGTH stay under it. */
export const MAX_MAPPED_NAME_LENGTH = 1024;

export type StatsdMetricType = 'counter' | 'gauge' | 'observer';

/** Where one statsd name goes: a Prometheus name and labels, or nowhere. */
export type MappedMetric =
  | { readonly drop: true }
  | {
      readonly drop: false;
      readonly name: string;
      readonly labels: Readonly<Record<string, string>>;
      /** Observers only: multiply each value by this (ms timers to seconds: 0.001). */
      readonly scale: number;
      /** Observers only: histogram buckets. */
      readonly buckets: readonly number[];
    };

/** The Prometheus client's default buckets, which statsd_exporter uses for histograms. */
export const DEFAULT_BUCKETS: readonly number[] = Object.freeze([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]);

interface Mapping {
  readonly pattern: RegExp;
  readonly glob: boolean;
  readonly name: string;
  readonly labels: readonly (readonly [string, string])[];
  readonly drop: boolean;
  readonly metricType?: StatsdMetricType;
  readonly scale: number;
  readonly buckets: readonly number[];
}

/** A mapping file that cannot be used, with the path inside it. */
export class MappingError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'MappingError';
  }
}

const DROP: MappedMetric = Object.freeze({ drop: true });
const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

/** Parsed mappings: `map()` tells where a statsd name goes. */
export class StatsdMapper {
  private readonly globs: readonly Mapping[];
  private readonly regexes: readonly Mapping[];

  /** Longest name `map` matches; a longer one is dropped. */
  readonly maxNameLength: number;

  /** Parses a mapping file's text; throws MappingError naming the bad entry. */
  constructor(yamlText: string, options: { readonly maxNameLength?: number } = {}) {
    this.maxNameLength = options.maxNameLength ?? MAX_MAPPED_NAME_LENGTH;
    // Before the patterns are compiled: the fallback is chosen when a regular expression is compiled.
    setFlagsFromString('--enable-experimental-regexp-engine-on-excessive-backtracks');
    let doc: unknown;
    try {
      doc = parse(yamlText);
    } catch (err) {
      throw new MappingError(`not YAML: ${(err as Error).message.split('\n')[0]}`);
    }
    const root = (doc ?? {}) as { mappings?: unknown; defaults?: Record<string, unknown> };
    if (typeof root !== 'object' || Array.isArray(root)) throw new MappingError('expected a map with "mappings"');
    const defaults = root.defaults ?? {};
    const defaultRegex = defaults.match_type === 'regex';
    const defaultBuckets = bucketsOf(defaults, 'defaults') ?? DEFAULT_BUCKETS;
    const mappings = root.mappings ?? [];
    if (!Array.isArray(mappings)) throw new MappingError('mappings: expected a list');
    const globs: Mapping[] = [];
    const regexes: Mapping[] = [];
    mappings.forEach((raw: unknown, i: number) => {
      const at = `mappings[${i}]`;
      if (typeof raw !== 'object' || raw === null) throw new MappingError(`${at}: expected a map`);
      const m = raw as Record<string, unknown>;
      if (typeof m.match !== 'string' || m.match === '') throw new MappingError(`${at}.match: expected a string`);
      const regex = m.match_type === undefined ? defaultRegex : m.match_type === 'regex';
      if (m.match_type !== undefined && m.match_type !== 'regex' && m.match_type !== 'glob') {
        throw new MappingError(`${at}.match_type: expected glob or regex`);
      }
      const drop = m.action === 'drop';
      if (!drop && (typeof m.name !== 'string' || m.name === '')) throw new MappingError(`${at}.name: expected a string`);
      const labels = Object.entries((m.labels ?? {}) as Record<string, unknown>).map(([k, v]): [string, string] => {
        if (!LABEL_NAME.test(k)) throw new MappingError(`${at}.labels.${k}: not a Prometheus label name`);
        return [k, String(v)];
      });
      let pattern: RegExp;
      try {
        pattern = regex ? new RegExp(`^(?:${m.match})$`) : globPattern(m.match);
      } catch (err) {
        throw new MappingError(`${at}.match: ${(err as Error).message}`);
      }
      const metricType = m.match_metric_type as StatsdMetricType | undefined;
      if (metricType !== undefined && !['counter', 'gauge', 'observer'].includes(metricType)) {
        throw new MappingError(`${at}.match_metric_type: expected counter, gauge or observer`);
      }
      const mapping: Mapping = {
        pattern,
        glob: !regex,
        name: drop ? '' : String(m.name),
        labels,
        drop,
        metricType,
        scale: typeof m.scale === 'number' ? m.scale : 1,
        buckets: bucketsOf(m, at) ?? defaultBuckets,
      };
      (regex ? regexes : globs).push(mapping);
    });
    this.globs = globs;
    this.regexes = regexes;
  }

  /** Every label any mapping gives the Prometheus name `name` (one-level and deeper rules share a name with different labels). */
  labelNamesOf(name: string): readonly string[] {
    const names = new Set<string>();
    for (const m of [...this.globs, ...this.regexes]) if (m.name === name) for (const [k] of m.labels) names.add(k);
    return [...names];
  }

  /** Where the statsd metric `name` of `type` goes; nowhere when it is longer than `maxNameLength`. */
  map(name: string, type: StatsdMetricType): MappedMetric {
    if (name.length > this.maxNameLength) return DROP;
    for (const list of [this.globs, this.regexes]) {
      for (const m of list) {
        if (m.metricType !== undefined && m.metricType !== type) continue;
        const match = m.pattern.exec(name);
        if (match === null) continue;
        if (m.drop) return DROP;
        const mappedName = expand(m.name, match);
        if (!METRIC_NAME.test(mappedName)) return DROP;
        const labels: Record<string, string> = {};
        for (const [k, v] of m.labels) labels[k] = expand(v, match);
        return { drop: false, name: mappedName, labels, scale: m.scale, buckets: m.buckets };
      }
    }
    return { drop: false, name: escapeMetricName(name), labels: {}, scale: 1, buckets: DEFAULT_BUCKETS };
  }
}

/** statsd_exporter's name for an unmapped metric: every character outside [a-zA-Z0-9_] becomes `_`. */
export function escapeMetricName(name: string): string {
  const escaped = name.replace(/[^a-zA-Z0-9_]/g, '_');
  return /^[0-9]/.test(escaped) ? `_${escaped}` : escaped;
}

// A glob: `*` is one dot-separated part (possibly with a literal prefix or suffix), the rest literal.
function globPattern(glob: string): RegExp {
  const source = glob
    .split('*')
    .map((part) => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
    .join('([^.]*)');
  return new RegExp(`^${source}$`);
}

// `$1`, `${1}` (and `${name}` for named groups) replaced by the captures; unknown ones become empty.
function expand(template: string, match: RegExpExecArray): string {
  return template.replace(/\$\{(\w+)\}|\$(\d+)/g, (_all, braced: string | undefined, bare: string | undefined) => {
    const key = braced ?? bare!;
    const value = /^\d+$/.test(key) ? match[Number(key)] : match.groups?.[key];
    return value ?? '';
  });
}

function bucketsOf(m: Record<string, unknown>, at: string): readonly number[] | undefined {
  const options = m.histogram_options as { buckets?: unknown } | undefined;
  const raw = options?.buckets ?? m.buckets;
  if (raw === undefined) return undefined;
  if (!Array.isArray(raw) || raw.some((b) => typeof b !== 'number')) throw new MappingError(`${at}: buckets must be a list of numbers`);
  return [...(raw as number[])].sort((a, b) => a - b);
}
