import { Counter, Histogram, type CounterConfiguration, type HistogramConfiguration, type LabelValues } from 'prom-client';

/**
 * prom-client metrics whose request-path updates are plain additions.
 *
 * A labelled prom-client child hashes and validates its labels on every inc() or observe() (about
 * 0.5 and 0.9 µs here), and a denied call touches six of them. Here the request path adds to
 * numbers it holds directly, and prom-client reads them when /metrics is scraped: the exposition
 * (names, labels, types, help) is prom-client's own.
 */

/** One labelled series of a TalliedCounter: what the request path holds and adds to. */
export class Tally {
  value = 0;
  constructor(readonly labels: Readonly<LabelValues<string>>) {}

  inc(by: number): void {
    this.value += by;
  }
}

/** A Counter whose series are Tallies, copied into it each time it is collected. */
export class TalliedCounter<T extends string> extends Counter<T> {
  private readonly tallies: Tally[] = [];

  constructor(configuration: Omit<CounterConfiguration<T>, 'collect'>) {
    super({
      ...configuration,
      collect(this: Counter<T>) {
        // `this` is the TalliedCounter (prom-client calls collect on the metric itself).
        (this as TalliedCounter<T>).copyTallies();
      },
    });
  }

  /** A new series with these labels (call once per label set and keep it). */
  tally(labels: LabelValues<T>): Tally {
    const t = new Tally(labels);
    this.tallies.push(t);
    return t;
  }

  private copyTallies(): void {
    this.reset();
    for (const t of this.tallies) if (t.value > 0) this.inc(t.labels as LabelValues<T>, t.value);
  }
}

/**
 * A Histogram with one fixed label set, counted in an array. prom-client's exposition reads the
 * counts through get(), in the same shape its own histograms produce (cumulative `_bucket` series
 * with `le`, then `_sum` and `_count`).
 */
export class TalliedHistogram<T extends string> extends Histogram<T> {
  private readonly bounds: readonly number[];
  private readonly labelSet: Readonly<LabelValues<T>>;
  private readonly counts: Float64Array;
  private sum = 0;
  private count = 0;

  constructor(
    configuration: Omit<HistogramConfiguration<T>, 'collect' | 'buckets'> & { readonly buckets: readonly number[]; readonly labelSet: LabelValues<T> },
  ) {
    const { labelSet, ...rest } = configuration;
    super({ ...rest, buckets: [...configuration.buckets] });
    this.bounds = [...configuration.buckets].sort((a, b) => a - b);
    this.labelSet = Object.freeze({ ...labelSet });
    this.counts = new Float64Array(this.bounds.length);
  }

  /** One observation of the fixed label set. */
  record(value: number): void {
    const b = this.bounds;
    let i = 0;
    while (i < b.length && value > b[i]) i++;
    if (i < b.length) this.counts[i]++;
    this.sum += value;
    this.count++;
  }

  override reset(): void {
    super.reset();
    // prom-client's constructor calls reset() too, before this class's fields exist.
    if ((this.counts as Float64Array | undefined) === undefined) return;
    this.counts.fill(0);
    this.sum = 0;
    this.count = 0;
  }

  override get(): ReturnType<Histogram<T>['get']> {
    type Result = Awaited<ReturnType<Histogram<T>['get']>>;
    type Value = Result['values'][number];
    // Fields every prom-client metric sets in its constructor (not all of them are in its typings).
    const self = this as unknown as { name: string; help: string; type: Result['type']; aggregator: Result['aggregator'] };
    const values: Value[] = [];
    let cumulative = 0;
    for (let i = 0; i < this.bounds.length; i++) {
      cumulative += this.counts[i];
      values.push({ labels: { le: this.bounds[i], ...this.labelSet } as LabelValues<T>, value: cumulative, metricName: `${self.name}_bucket` });
    }
    values.push(
      { labels: { le: '+Inf', ...this.labelSet } as LabelValues<T>, value: this.count, metricName: `${self.name}_bucket` },
      { labels: this.labelSet, value: this.sum, metricName: `${self.name}_sum` },
      { labels: this.labelSet, value: this.count, metricName: `${self.name}_count` },
    );
    // prom-client's typings ask for `collect` here; its histograms return none, and neither does this.
    return Promise.resolve({ name: self.name, help: self.help, type: self.type, aggregator: self.aggregator, values } as Omit<Result, 'collect'> as Result);
  }

  /** The registry's text exposition prefers this to get() when a metric has it (prom-client's histograms do). */
  getForPromString(): ReturnType<Histogram<T>['get']> {
    return this.get();
  }
}
