import { performance } from 'node:perf_hooks';
import { defaultMappingYaml, MappedPrometheus } from '../../../src/metrics/mapped-metrics';
import { escapeMetricName, MappingError, StatsdMapper } from '../../../src/metrics/statsd-mapping';

/** The statsd_exporter mapping format and the default mapping of the reference's statsd names. */

describe('StatsdMapper with the default mapping', () => {
  const mapper = new StatsdMapper(defaultMappingYaml());

  it('maps a one-level rule counter to domain and key1', () => {
    expect(mapper.map('ratelimit.service.rate_limit.edge.api_key.total_hits', 'counter')).toEqual({
      drop: false,
      name: 'ratelimit_service_rate_limit_total_hits',
      labels: { domain: 'edge', key1: 'api_key' },
      scale: 1,
      buckets: expect.any(Array),
    });
  });

  it('maps deeper rule counters to domain, key1 and key2 (the rest of the key is not a label)', () => {
    expect(mapper.map('ratelimit.service.rate_limit.edge.tenant_acme.path.over_limit', 'counter')).toMatchObject({
      name: 'ratelimit_service_rate_limit_over_limit',
      labels: { domain: 'edge', key1: 'tenant_acme', key2: 'path' },
    });
    expect(mapper.map('ratelimit.service.rate_limit.edge.a.b.c.near_limit', 'counter')).toMatchObject({
      name: 'ratelimit_service_rate_limit_near_limit',
      labels: { domain: 'edge', key1: 'a', key2: 'b' },
    });
  });

  it('maps call errors, requests, response time in seconds and config loads', () => {
    expect(mapper.map('ratelimit.service.call.should_rate_limit.redis_error', 'counter')).toMatchObject({
      name: 'ratelimit_service_should_rate_limit_error',
      labels: { err_type: 'redis_error' },
    });
    expect(mapper.map('ratelimit_server.ShouldRateLimit.total_requests', 'counter')).toMatchObject({
      name: 'ratelimit_service_total_requests',
      labels: { grpc_method: 'ShouldRateLimit' },
    });
    expect(mapper.map('ratelimit_server.ShouldRateLimit.response_time', 'observer')).toMatchObject({
      name: 'ratelimit_service_response_time_seconds',
      scale: 0.001,
    });
    expect(new StatsdMapper(defaultMappingYaml({ inMilliseconds: true })).map('ratelimit_server.ShouldRateLimit.response_time', 'observer')).toMatchObject({
      scale: 1,
    });
    expect(mapper.map('ratelimit.service.config_load_success', 'counter')).toMatchObject({ name: 'ratelimit_service_config_load_success', labels: {} });
  });

  it('keeps an unmapped name, escaped, without labels', () => {
    expect(mapper.map('ratelimit.service.rate_limit.edge.api_key.over_limit_with_local_cache', 'counter')).toMatchObject({
      name: 'ratelimit_service_rate_limit_edge_api_key_over_limit_with_local_cache',
      labels: {},
    });
    expect(escapeMetricName('9.lives-x')).toBe('_9_lives_x');
  });

  it('keeps the over_limit_with_local_cache counter of a deeper rule off over_limit (its patterns match whole names)', () => {
    expect(mapper.map('ratelimit.service.rate_limit.edge.tenant_acme.path.over_limit_with_local_cache', 'counter')).toMatchObject({
      name: 'ratelimit_service_rate_limit_edge_tenant_acme_path_over_limit_with_local_cache',
      labels: {},
    });
  });

  it('declares every label a name gets from any mapping', () => {
    expect([...mapper.labelNamesOf('ratelimit_service_rate_limit_total_hits')].sort()).toEqual(['domain', 'key1', 'key2']);
  });
});

describe('StatsdMapper with a custom mapping', () => {
  it('honours drop, match_metric_type, ${n} captures, defaults and bucket options', () => {
    const mapper = new StatsdMapper(`
defaults:
  buckets: [0.1, 1]
mappings:
  - match: "noise.*"
    action: drop
  - match: "svc.*.calls"
    match_metric_type: counter
    name: "svc_\${1}_calls"
    labels: {where: "x-\${1}"}
  - match: "svc.*.calls"
    name: "svc_calls_observed"
    histogram_options: {buckets: [5, 1]}
`);
    expect(mapper.map('noise.a', 'counter')).toEqual({ drop: true });
    expect(mapper.map('svc.eu.calls', 'counter')).toMatchObject({ name: 'svc_eu_calls', labels: { where: 'x-eu' } });
    expect(mapper.map('svc.eu.calls', 'observer')).toMatchObject({ name: 'svc_calls_observed', buckets: [1, 5] });
    expect(new StatsdMapper('mappings:\n  - match: "a.*"\n    name: "a"\n').map('a.b', 'observer')).toMatchObject({
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    });
  });

  it('rejects a mapping without name, a bad match type and bad label names, naming the entry', () => {
    expect(() => new StatsdMapper('mappings:\n  - match: "a.*"\n')).toThrow(new MappingError('mappings[0].name: expected a string'));
    expect(() => new StatsdMapper('mappings:\n  - match: "a"\n    name: a\n    match_type: fuzzy\n')).toThrow(/mappings\[0\].match_type/);
    expect(() => new StatsdMapper('mappings:\n  - match: "a"\n    name: a\n    labels: {"bad-label": x}\n')).toThrow(/mappings\[0\].labels.bad-label/);
    expect(() => new StatsdMapper('mappings:\n  - match: "(a"\n    match_type: regex\n    name: a\n')).toThrow(/mappings\[0\].match/);
    expect(() => new StatsdMapper(': : :')).toThrow(MappingError);
  });
});

describe('StatsdMapper bounds what a name can cost', () => {
  const regex = (match: string): StatsdMapper => new StatsdMapper(`mappings:\n  - match: '${match}'\n    match_type: regex\n    name: "hit"\n`);
  const timed = (mapper: StatsdMapper, name: string): { name: string | undefined; ms: number } => {
    const start = performance.now();
    const mapped = mapper.map(name, 'counter');
    return { name: mapped.drop ? undefined : mapped.name, ms: performance.now() - start };
  };

  it('matches a regular expression against the whole name, as globs are', () => {
    expect(regex('b\\.c').map('a.b.c.d', 'counter')).toMatchObject({ name: 'a_b_c_d' });
    expect(regex('.*b\\.c.*').map('a.b.c.d', 'counter')).toMatchObject({ name: 'hit' });
    expect(regex('a|b').map('ab', 'counter')).toMatchObject({ name: 'ab' });
  });

  it('drops a name longer than 1,024 characters without matching it', () => {
    const mapper = regex('x.*');
    expect(mapper.map(`x${'y'.repeat(1023)}`, 'counter')).toMatchObject({ name: 'hit' });
    expect(mapper.map(`x${'y'.repeat(1024)}`, 'counter')).toEqual({ drop: true });
  });

  it('answers at once for a pattern that backtracks exponentially, on a name within the bound and on a longer one', () => {
    // (x+x+)+y on n x's and no y backtracks about 2^n times: 30 already take seconds without a bound.
    const mapper = regex('(x+x+)+y');
    const within = timed(mapper, 'x'.repeat(1000));
    expect(within).toEqual({ name: 'x'.repeat(1000), ms: expect.any(Number) });
    expect(within.ms).toBeLessThan(250);
    const longer = timed(mapper, 'x'.repeat(100_000));
    expect(longer.name).toBeUndefined();
    expect(longer.ms).toBeLessThan(50);
  });

  it('answers at once for the reference-style pattern of unbounded groups on a name of many dots', () => {
    const start = performance.now();
    expect(regex('ratelimit\\.service\\.(.*)\\.(.*)\\.(.*)\\.total_hits').map(`ratelimit.service.${'a.'.repeat(500)}`, 'counter')).toMatchObject({
      drop: false,
    });
    expect(performance.now() - start).toBeLessThan(250);
  });
});

describe('MappedPrometheus', () => {
  it('drops and counts the events of a name too long to map', async () => {
    const prom = new MappedPrometheus({ mapper: new StatsdMapper('mappings:\n  - match: "a.*"\n    name: "a_total"\n') });
    prom.increment(`a.${'v'.repeat(2000)}`, 1);
    prom.increment(`a.${'v'.repeat(2000)}`, 1);
    prom.timing(`t.${'v'.repeat(2000)}`, 1);
    const text = await prom.registry.metrics();
    expect(text).toContain('statsd_exporter_events_dropped_total 3');
    expect(text).not.toContain('vvvv');
  });

  it('exposes one-level and deeper rules under one name with their own labels, and extra tags on every series', async () => {
    const prom = new MappedPrometheus({ mapper: new StatsdMapper(defaultMappingYaml()), extraLabels: { cluster: 'eu1' } });
    prom.increment('ratelimit.service.rate_limit.edge.api_key.total_hits', 2);
    prom.increment('ratelimit.service.rate_limit.edge.api_key.total_hits', 3);
    prom.increment('ratelimit.service.rate_limit.edge.tenant_acme.path.total_hits', 1);
    prom.timing('ratelimit_server.ShouldRateLimit.response_time', 3);
    const text = await prom.registry.metrics();
    expect(text).toContain('ratelimit_service_rate_limit_total_hits{domain="edge",key1="api_key",cluster="eu1"} 5');
    expect(text).toContain('ratelimit_service_rate_limit_total_hits{domain="edge",key1="tenant_acme",key2="path",cluster="eu1"} 1');
    expect(text).toContain('ratelimit_service_response_time_seconds_bucket{le="0.005",grpc_method="ShouldRateLimit",cluster="eu1"} 1');
    expect(text).toContain('ratelimit_service_response_time_seconds_sum{grpc_method="ShouldRateLimit",cluster="eu1"} 0.003');
  });

  it('maps at most maxNames names, dropping and counting events of new ones beyond', async () => {
    const prom = new MappedPrometheus({ mapper: new StatsdMapper('mappings:\n  - match: "a.*"\n    name: "a_total"\n    labels: {k: "$1"}\n'), maxNames: 2 });
    for (const k of ['x', 'y', 'z', 'x']) prom.increment(`a.${k}`, 1);
    prom.timing('t.q', 1);
    const text = await prom.registry.metrics();
    expect(text).toContain('a_total{k="x"} 2');
    expect(text).toContain('a_total{k="y"} 1');
    expect(text).not.toContain('a_total{k="z"}');
    expect(text).toContain('statsd_exporter_events_dropped_total 2');
  });

  it('drops and counts a name reused with another type', async () => {
    const prom = new MappedPrometheus({ mapper: new StatsdMapper('mappings:\n  - match: "a.*"\n    name: "a_total"\n') });
    prom.increment('a.x', 1);
    prom.timing('a.y', 1);
    const text = await prom.registry.metrics();
    expect(text).toContain('a_total 1');
    expect(text).toContain('statsd_exporter_events_conflict_total{type="observer"} 1');
  });
});
