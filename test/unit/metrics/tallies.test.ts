import fc from 'fast-check';
import { Counter, Histogram, Registry } from 'prom-client';
import { TalliedCounter, TalliedHistogram } from '../../../src/metrics/tallies';

const BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05];

/** A tallied metric and prom-client's own, fed the same updates, must expose the same text. */
function pair(): {
  tallied: Registry;
  plain: Registry;
  counter: TalliedCounter<'domain' | 'descriptor'>;
  reference: Counter<'domain' | 'descriptor'>;
  histogram: TalliedHistogram<'grpc_method'>;
  referenceHistogram: Histogram<'grpc_method'>;
} {
  const tallied = new Registry();
  const plain = new Registry();
  const counterConfig = { name: 'hits', help: 'Hits.', labelNames: ['domain', 'descriptor'] as const };
  const histogramConfig = { name: 'latency_seconds', help: 'Latency.', labelNames: ['grpc_method'] as const };
  return {
    tallied,
    plain,
    counter: new TalliedCounter({ ...counterConfig, registers: [tallied] }),
    reference: new Counter({ ...counterConfig, registers: [plain] }),
    histogram: new TalliedHistogram({ ...histogramConfig, buckets: BUCKETS, labelSet: { grpc_method: 'ShouldRateLimit' }, registers: [tallied] }),
    referenceHistogram: new Histogram({ ...histogramConfig, buckets: BUCKETS, registers: [plain] }),
  };
}

describe('TalliedCounter and TalliedHistogram', () => {
  it('expose exactly what prom-client exposes for the same updates, scrape after scrape', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(fc.constantFrom('a', 'b', 'c'), fc.integer({ min: 1, max: 5 })), { maxLength: 40 }),
        // Values on the bucket bounds included: `le` is inclusive.
        fc.array(fc.oneof(fc.constantFrom(...BUCKETS, 0, 0.1, 7), fc.double({ min: 0, max: 0.1, noNaN: true })), { maxLength: 40 }),
        async (incs, observations) => {
          const p = pair();
          // Series appear in the order they were first counted, in both.
          const series = new Map<string, ReturnType<typeof p.counter.tally>>();
          for (const [descriptor, by] of incs) {
            if (!series.has(descriptor)) series.set(descriptor, p.counter.tally({ domain: 'edge', descriptor }));
            series.get(descriptor)!.inc(by);
            p.reference.inc({ domain: 'edge', descriptor }, by);
          }
          for (const v of observations) {
            p.histogram.record(v);
            p.referenceHistogram.observe({ grpc_method: 'ShouldRateLimit' }, v);
          }
          if (observations.length === 0) p.referenceHistogram.zero({ grpc_method: 'ShouldRateLimit' });
          const expected = await p.plain.metrics();
          expect(await p.tallied.metrics()).toBe(expected);
          // Collecting copies the totals: a second scrape shows the same, not twice as much.
          expect(await p.tallied.metrics()).toBe(expected);
          // The JSON form too, but for prom-client's empty exemplar fields (exemplars are off).
          const noExemplars = (json: unknown): unknown => JSON.parse(JSON.stringify(json, (k, v: unknown) => (k === 'exemplar' ? undefined : v)));
          expect(noExemplars(await p.tallied.getMetricsAsJSON())).toEqual(noExemplars(await p.plain.getMetricsAsJSON()));
        },
      ),
      { numRuns: 200 },
    );
  });

  it('go on counting after a scrape, and reset to zero', async () => {
    const p = pair();
    const t = p.counter.tally({ domain: 'edge', descriptor: 'a' });
    t.inc(2);
    p.histogram.record(0.003);
    await p.tallied.metrics();
    t.inc(3);
    p.histogram.record(0.5);
    const text = await p.tallied.metrics();
    expect(text).toContain('hits{domain="edge",descriptor="a"} 5');
    expect(text).toContain('latency_seconds_bucket{le="0.005",grpc_method="ShouldRateLimit"} 1');
    expect(text).toContain('latency_seconds_bucket{le="+Inf",grpc_method="ShouldRateLimit"} 2');
    expect(text).toContain('latency_seconds_count{grpc_method="ShouldRateLimit"} 2');

    p.histogram.reset();
    expect(await p.tallied.metrics()).toContain('latency_seconds_count{grpc_method="ShouldRateLimit"} 0');
  });
});
