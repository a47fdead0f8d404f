import { register as globalRegistry } from 'prom-client';
import { InvalidRequestError, NotReadyError } from '../../../src/limiter/errors';
import type { Limit, RateLimitResponse } from '../../../src/limiter/types';
import {
  cutLabel,
  instrumentDecider,
  instrumentReplays,
  LATENCY_BUCKETS_SECONDS,
  Metrics,
  type DescriptorEvent,
  type StatsdSink,
} from '../../../src/metrics/metrics';
import { StoreUnavailableError } from '../../../src/limiter/store';

class RecordingStatsd implements StatsdSink {
  readonly counts = new Map<string, number>();
  readonly timings: [string, number][] = [];
  closed = false;
  increment(stat: string, value: number): void {
    this.counts.set(stat, (this.counts.get(stat) ?? 0) + value);
  }
  timing(stat: string, ms: number): void {
    this.timings.push([stat, ms]);
  }
  close(callback?: (error?: Error) => void): void {
    this.closed = true;
    callback?.();
  }
}

const LIMIT: Limit = {
  requestsPerUnit: 1,
  unit: 'second',
  unitMultiplier: 1,
  windowMs: 1000,
  algorithm: 'sliding_window',
  burst: 1,
  subWindows: 1,
  strict: false,
  unlimited: false,
};

const event = (domain: string, statKey: string, counts: Partial<DescriptorEvent>): DescriptorEvent => ({
  domain,
  statKey,
  hits: 0,
  overLimit: 0,
  nearLimit: 0,
  withinLimit: 0,
  shadowMode: 0,
  overLimitWithLocalCache: 0,
  rule: { statKey, limit: LIMIT, shadowMode: false },
  key: `${domain}|sw1000|${statKey}`,
  ...counts,
});

/** The value of one sample of the registry, 0 when absent. */
async function sample(metrics: Metrics, name: string, labels: Record<string, string> = {}): Promise<number> {
  const all = await metrics.registry.getMetricsAsJSON();
  for (const m of all) {
    for (const v of m.values as { metricName?: string; labels: Record<string, string | number>; value: number }[]) {
      const metricName = v.metricName ?? m.name;
      if (metricName !== name) continue;
      if (Object.entries(labels).every(([k, want]) => String(v.labels[k]) === want)) return v.value;
    }
  }
  return 0;
}

describe('Metrics', () => {
  it('counts reservation calls per rule and outcome, and shows what the last decided descriptor holds, bounded in series', async () => {
    const metrics = new Metrics({ defaultMetrics: false, maxSeries: 1 });
    const rule = { statKey: 'api_key', limit: LIMIT, shadowMode: false };
    metrics.onReservation({ domain: 'llm', rule, kind: 'reserve', entries: [], outcome: 'held', held: 1, lapsed: 0 });
    metrics.onReservation({ domain: 'llm', rule, kind: 'reserve', entries: [], outcome: 'held', held: 2, lapsed: 0 });
    metrics.onReservation({ domain: 'llm', rule, kind: 'commit', entries: [], outcome: 'committed', held: 0, lapsed: 1 });
    metrics.onReservation({ domain: 'llm', rule: { ...rule, statKey: 'tenant' }, kind: 'reserve', entries: [], outcome: 'denied', held: 5, lapsed: 0 });
    const key = { domain: 'llm', descriptor: 'api_key' };
    expect(await sample(metrics, 'ratelimit_service_reservations_total', { ...key, outcome: 'held' })).toBe(2);
    expect(await sample(metrics, 'ratelimit_service_reservations_total', { ...key, outcome: 'committed' })).toBe(1);
    expect(await sample(metrics, 'ratelimit_service_reservations_total', { ...key, outcome: 'lapsed' })).toBe(1);
    expect(await sample(metrics, 'ratelimit_service_reservations_held', key)).toBe(0);
    // Past METRICS_MAX_SERIES a rule is counted under "overflow", and has no held gauge.
    expect(await sample(metrics, 'ratelimit_service_reservations_total', { domain: 'llm', descriptor: 'overflow', outcome: 'denied' })).toBe(1);
    expect((await metrics.text()).includes('ratelimit_service_reservations_held{domain="llm",descriptor="overflow"}')).toBe(false);
  });

  it('counts hits per rule under the reference names with domain and descriptor labels', async () => {
    const metrics = new Metrics({ defaultMetrics: false });
    metrics.onDescriptor(event('edge', 'api_key', { hits: 1, withinLimit: 1 }));
    metrics.onDescriptor(event('edge', 'api_key', { hits: 1, withinLimit: 1, nearLimit: 1 }));
    metrics.onDescriptor(event('edge', 'api_key', { hits: 3, overLimit: 3 }));
    metrics.onDescriptor(event('edge', 'tenant_acme.path', { hits: 2, shadowMode: 2, withinLimit: 2 }));

    const key = { domain: 'edge', descriptor: 'api_key' };
    expect(await sample(metrics, 'ratelimit_service_rate_limit_total_hits', key)).toBe(5);
    expect(await sample(metrics, 'ratelimit_service_rate_limit_within_limit', key)).toBe(2);
    expect(await sample(metrics, 'ratelimit_service_rate_limit_near_limit', key)).toBe(1);
    expect(await sample(metrics, 'ratelimit_service_rate_limit_over_limit', key)).toBe(3);
    const nested = { domain: 'edge', descriptor: 'tenant_acme.path' };
    expect(await sample(metrics, 'ratelimit_service_rate_limit_shadow_mode', nested)).toBe(2);
    expect(await sample(metrics, 'ratelimit_service_rate_limit_total_hits', nested)).toBe(2);

    const text = await metrics.text();
    expect(text).toContain('ratelimit_service_rate_limit_total_hits{domain="edge",descriptor="api_key"} 5');
  });

  it('sends the same counters to statsd with the reference names', () => {
    const statsd = new RecordingStatsd();
    const metrics = new Metrics({ defaultMetrics: false, statsd });
    metrics.onDescriptor(event('edge', 'tenant_acme.path', { hits: 2, withinLimit: 2 }));
    metrics.onDescriptor(event('edge', 'tenant_acme.path', { hits: 1, overLimit: 1, overLimitWithLocalCache: 1 }));

    expect(Object.fromEntries(statsd.counts)).toEqual({
      'ratelimit.service.rate_limit.edge.tenant_acme.path.total_hits': 3,
      'ratelimit.service.rate_limit.edge.tenant_acme.path.within_limit': 2,
      'ratelimit.service.rate_limit.edge.tenant_acme.path.over_limit': 1,
      'ratelimit.service.rate_limit.edge.tenant_acme.path.over_limit_with_local_cache': 1,
    });
  });

  it('keeps statsd names parseable when a detailed value holds statsd separators', () => {
    const statsd = new RecordingStatsd();
    const metrics = new Metrics({ defaultMetrics: false, statsd });
    metrics.onDescriptor(event('edge', 'ip_10.0.0.1:80|x@y#z', { hits: 1 }));
    expect([...statsd.counts.keys()]).toEqual(['ratelimit.service.rate_limit.edge.ip_10.0.0.1_80_x_y_z.total_hits']);
  });

  it('folds label sets beyond the cap into an overflow series of their domain', async () => {
    const metrics = new Metrics({ defaultMetrics: false, maxSeries: 3 });
    for (let i = 0; i < 100; i++) metrics.onDescriptor(event('edge', `user_${i}`, { hits: 1, withinLimit: 1 }));
    metrics.onDescriptor(event('other', 'x', { hits: 1 }));

    expect(metrics.seriesSize).toBe(3);
    expect(await sample(metrics, 'ratelimit_service_rate_limit_total_hits', { domain: 'edge', descriptor: 'user_0' })).toBe(1);
    expect(await sample(metrics, 'ratelimit_service_rate_limit_total_hits', { domain: 'edge', descriptor: 'user_2' })).toBe(1);
    expect(await sample(metrics, 'ratelimit_service_rate_limit_total_hits', { domain: 'edge', descriptor: 'overflow' })).toBe(97);
    expect(await sample(metrics, 'ratelimit_service_rate_limit_total_hits', { domain: 'overflow', descriptor: 'overflow' })).toBe(1);
    const series = (await metrics.registry.getMetricsAsJSON()).find((m) => m.name === 'ratelimit_service_rate_limit_total_hits')!;
    expect(series.values).toHaveLength(5);
  });

  it('folds label sets beyond maxSeriesBytes into overflow, however few they are', async () => {
    const metrics = new Metrics({ defaultMetrics: false, maxSeriesBytes: 64 * 1024, maxLabelLength: 10_000 });
    for (let i = 0; i < 100; i++) metrics.onDescriptor(event('edge', `page_${i}_${'x'.repeat(2_000)}`, { hits: 1 }));
    expect(metrics.seriesBytes).toBeLessThanOrEqual(64 * 1024);
    expect(metrics.seriesSize).toBe(3);
    expect(await sample(metrics, 'ratelimit_service_rate_limit_total_hits', { domain: 'edge', descriptor: 'overflow' })).toBe(97);
  });

  it('cuts a descriptor label past maxLabelLength, ending it in a hash of the whole, in Prometheus and statsd alike', async () => {
    const statsd = new RecordingStatsd();
    const metrics = new Metrics({ defaultMetrics: false, statsd, maxLabelLength: 40 });
    const long = (tail: string) => `page_${'x'.repeat(100)}${tail}`;
    metrics.onDescriptor(event('edge', long('a'), { hits: 1 }));
    metrics.onDescriptor(event('edge', long('b'), { hits: 2 }));
    metrics.onDescriptor(event('edge', long('a'), { hits: 4 }));
    metrics.onDescriptor(event('edge', 'short', { hits: 8 }));
    const a = cutLabel(long('a'), 40);
    const b = cutLabel(long('b'), 40);
    expect(a).toMatch(/^page_x{18}~[0-9a-f]{16}$/);
    expect(a).not.toBe(b);
    expect(await sample(metrics, 'ratelimit_service_rate_limit_total_hits', { domain: 'edge', descriptor: a })).toBe(5);
    expect(await sample(metrics, 'ratelimit_service_rate_limit_total_hits', { domain: 'edge', descriptor: b })).toBe(2);
    expect(await sample(metrics, 'ratelimit_service_rate_limit_total_hits', { domain: 'edge', descriptor: 'short' })).toBe(8);
    expect(statsd.counts.get(`ratelimit.service.rate_limit.edge.${a}.total_hits`)).toBe(5);
    // A cut never splits a surrogate pair.
    expect(cutLabel(`${'x'.repeat(22)}😀${'y'.repeat(50)}`, 40)).toMatch(/^x{22}~[0-9a-f]{16}$/);
  });

  it('still counts known label sets exactly after the cap is reached', async () => {
    const metrics = new Metrics({ defaultMetrics: false, maxSeries: 1 });
    metrics.onDescriptor(event('edge', 'api_key', { hits: 1 }));
    metrics.onDescriptor(event('edge', 'random_1', { hits: 1 }));
    metrics.onDescriptor(event('edge', 'api_key', { hits: 1 }));
    expect(await sample(metrics, 'ratelimit_service_rate_limit_total_hits', { domain: 'edge', descriptor: 'api_key' })).toBe(2);
  });

  it('records call latency in a histogram with buckets from 0.1 ms to 50 ms', async () => {
    const statsd = new RecordingStatsd();
    const metrics = new Metrics({ defaultMetrics: false, statsd });
    metrics.recordCall(0.05);
    metrics.recordCall(1.5);
    metrics.recordCall(30);

    const method = { grpc_method: 'ShouldRateLimit' };
    expect(await sample(metrics, 'ratelimit_service_total_requests', method)).toBe(3);
    expect(await sample(metrics, 'ratelimit_service_response_time_seconds_count', method)).toBe(3);
    expect(await sample(metrics, 'ratelimit_service_response_time_seconds_bucket', { ...method, le: '0.0001' })).toBe(1);
    expect(await sample(metrics, 'ratelimit_service_response_time_seconds_bucket', { ...method, le: '0.002' })).toBe(2);
    expect(await sample(metrics, 'ratelimit_service_response_time_seconds_bucket', { ...method, le: '0.05' })).toBe(3);
    expect(LATENCY_BUCKETS_SECONDS[0]).toBe(0.0001);
    expect(LATENCY_BUCKETS_SECONDS[LATENCY_BUCKETS_SECONDS.length - 1]).toBe(0.05);
    expect(statsd.timings).toEqual([
      ['ratelimit_server.ShouldRateLimit.response_time', 0.05],
      ['ratelimit_server.ShouldRateLimit.response_time', 1.5],
      ['ratelimit_server.ShouldRateLimit.response_time', 30],
    ]);
  });

  it('counts store errors under the store name and other failures as service errors', async () => {
    const statsd = new RecordingStatsd();
    const metrics = new Metrics({ defaultMetrics: false, storeName: 'redis', statsd });
    metrics.recordError('store');
    metrics.recordError('store');
    metrics.recordError('service');

    expect(await sample(metrics, 'ratelimit_service_should_rate_limit_error', { err_type: 'redis_error' })).toBe(2);
    expect(await sample(metrics, 'ratelimit_service_should_rate_limit_error', { err_type: 'service_error' })).toBe(1);
    expect(statsd.counts.get('ratelimit.service.call.should_rate_limit.redis_error')).toBe(2);
    expect(statsd.counts.get('ratelimit.service.call.should_rate_limit.service_error')).toBe(1);
  });

  it('counts config loads, local cache hits and global shadow mode answers', async () => {
    const statsd = new RecordingStatsd();
    const metrics = new Metrics({ defaultMetrics: false, statsd });
    metrics.recordConfigLoad(true);
    metrics.recordConfigLoad(true);
    metrics.recordConfigLoad(false);
    metrics.recordLocalCacheHit();
    metrics.onGlobalShadowMode('edge');

    expect(await sample(metrics, 'ratelimit_service_config_load_success')).toBe(2);
    expect(await sample(metrics, 'ratelimit_service_config_load_error')).toBe(1);
    expect(await sample(metrics, 'ratelimit_service_local_cache_hits')).toBe(1);
    expect(await sample(metrics, 'ratelimit_service_global_shadow_mode')).toBe(1);
    expect(statsd.counts.get('ratelimit.service.config_load_success')).toBe(2);
    expect(statsd.counts.get('ratelimit.service.config_load_error')).toBe(1);
  });

  it('keeps its own registry apart from the global one, with process metrics when asked', async () => {
    const a = new Metrics();
    const b = new Metrics({ defaultMetrics: false });
    expect(await a.text()).toContain('process_cpu_user_seconds_total');
    expect(await b.text()).not.toContain('process_cpu_user_seconds_total');
    expect(await globalRegistry.metrics()).not.toContain('ratelimit_service');
    expect(a.contentType).toMatch(/^text\/plain/);
  });

  it('closes its statsd client', async () => {
    const statsd = new RecordingStatsd();
    await new Metrics({ defaultMetrics: false, statsd }).close();
    expect(statsd.closed).toBe(true);
    await expect(new Metrics({ defaultMetrics: false }).close()).resolves.toBeUndefined();
  });

  it('times every call through an instrumented decider and classifies its failures', async () => {
    const metrics = new Metrics({ defaultMetrics: false, storeName: 'redis' });
    const ok: RateLimitResponse = { overallCode: 'OK', statuses: [], responseHeaders: [] };
    const outcomes: (RateLimitResponse | Error)[] = [
      ok,
      new StoreUnavailableError('down'),
      new NotReadyError('no config'),
      new InvalidRequestError('bad'),
      new Error('boom'),
    ];
    const decider = instrumentDecider(
      {
        shouldRateLimit: () => {
          const next = outcomes.shift()!;
          return next instanceof Error ? Promise.reject(next) : Promise.resolve(next);
        },
      },
      metrics,
    );
    const request = { domain: 'd', descriptors: [], hitsAddend: 1 };
    await expect(decider.shouldRateLimit(request)).resolves.toBe(ok);
    await expect(decider.shouldRateLimit(request)).rejects.toBeInstanceOf(StoreUnavailableError);
    await expect(decider.shouldRateLimit(request)).rejects.toBeInstanceOf(NotReadyError);
    await expect(decider.shouldRateLimit(request)).rejects.toBeInstanceOf(InvalidRequestError);
    await expect(decider.shouldRateLimit(request)).rejects.toThrow('boom');

    expect(await sample(metrics, 'ratelimit_service_total_requests', { grpc_method: 'ShouldRateLimit' })).toBe(5);
    // A missing config is the service's failure, not the store's.
    expect(await sample(metrics, 'ratelimit_service_should_rate_limit_error', { err_type: 'redis_error' })).toBe(1);
    expect(await sample(metrics, 'ratelimit_service_should_rate_limit_error', { err_type: 'service_error' })).toBe(3);
  });

  it('counts answers by overall_code, a replayed denial as OVER_LIMIT, and failed calls under neither', async () => {
    const metrics = new Metrics({ defaultMetrics: false });
    const answers: (RateLimitResponse | Error)[] = [
      { overallCode: 'OK', statuses: [], responseHeaders: [] },
      { overallCode: 'OVER_LIMIT', statuses: [], responseHeaders: [] },
      { overallCode: 'OK', statuses: [], responseHeaders: [] },
      new StoreUnavailableError('down'),
    ];
    const decider = instrumentDecider(
      {
        shouldRateLimit: () => {
          const next = answers.shift()!;
          return next instanceof Error ? Promise.reject(next) : Promise.resolve(next);
        },
      },
      metrics,
    );
    const request = { domain: 'd', descriptors: [], hitsAddend: 1 };
    for (let i = 0; i < 4; i++) await decider.shouldRateLimit(request).catch(() => undefined);
    const replays = instrumentReplays({ answer: (key) => (key === 'denied' ? Buffer.from('x') : undefined), remembering: () => () => undefined }, metrics);
    replays.answer('denied');
    replays.answer('unknown');
    expect(await sample(metrics, 'ratelimit_service_responses_total', { overall_code: 'OK' })).toBe(2);
    expect(await sample(metrics, 'ratelimit_service_responses_total', { overall_code: 'OVER_LIMIT' })).toBe(2);
    expect(await sample(metrics, 'ratelimit_service_total_requests', { grpc_method: 'ShouldRateLimit' })).toBe(5);
  });

  it('turns a decider that throws synchronously into a rejected call', async () => {
    const metrics = new Metrics({ defaultMetrics: false });
    const decider = instrumentDecider(
      {
        shouldRateLimit: () => {
          throw new InvalidRequestError('sync');
        },
      },
      metrics,
    );
    await expect(decider.shouldRateLimit({ domain: 'd', descriptors: [], hitsAddend: 1 })).rejects.toThrow('sync');
    expect(await sample(metrics, 'ratelimit_service_should_rate_limit_error', { err_type: 'service_error' })).toBe(1);
  });
});
