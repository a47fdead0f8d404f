import * as path from 'node:path';
import { loadConfigPath } from '../../../src/config/files';
import { matchBucket } from '../../../src/limiter/bucket-match';
import { readBootstrap, unknownFields, type Obj } from '../../helpers/envoy-bootstrap';

/**
 * envoy-rlqs.yaml, the Envoy example on the quota protocol: it parses as one v3 bootstrap whose every
 * field is a field of its message in Envoy's API (the table of test/helpers/envoy-bootstrap.ts, which
 * checks envoy-llm.yaml here too), its filter points at the service's gRPC cluster, and every bucket
 * it builds matches a rule of examples/edge.yaml.
 */

const ROOT = path.resolve(__dirname, '../../..');

const bootstrap = readBootstrap(path.join(ROOT, 'envoy-rlqs.yaml'));

function quotaFilter(): Obj {
  const hcm = bootstrap[0].static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
  return hcm.http_filters.find((f: Obj) => f.name === 'envoy.filters.http.rate_limit_quota').typed_config;
}

/** The bucket ids the example's matchers build for a request with `headers` (Envoy's first-match list, then on_no_match). */
function bucketFor(headers: Record<string, string>): Record<string, string> {
  const matcher = quotaFilter().bucket_matchers;
  const header = (input: Obj): string | undefined => headers[String(input.typed_config.header_name).toLowerCase()];
  const settingsOf = (onMatch: Obj): Obj => onMatch.action.typed_config;
  const chosen =
    (matcher.matcher_list.matchers as Obj[]).find((m) => {
      const p = m.predicate.single_predicate;
      const value = header(p.input);
      return value !== undefined && new RegExp(`^(?:${p.value_match.safe_regex.regex})$`).test(value);
    })?.on_match ?? matcher.on_no_match;
  const builder = settingsOf(chosen).bucket_id_builder.bucket_id_builder as Record<string, Obj>;
  return Object.fromEntries(Object.entries(builder).map(([k, v]) => [k, v.string_value ?? header(v.custom_value)]));
}

test.each(['envoy-rlqs.yaml', 'envoy-llm.yaml'])('%s is one Envoy v3 bootstrap whose every field is real', (file) => {
  const docs = readBootstrap(path.join(ROOT, file));
  expect(docs).toHaveLength(1);
  expect(unknownFields(docs[0], 'envoy.config.bootstrap.v3.Bootstrap', '')).toEqual([]);
});

test('the quota filter runs before the router, against the gRPC cluster on HTTP/2, with every behaviour set', () => {
  const hcm = bootstrap[0].static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
  expect(hcm.http_filters.map((f: Obj) => f.name)).toEqual(['envoy.filters.http.rate_limit_quota', 'envoy.filters.http.router']);
  const filter = quotaFilter();
  const cluster = bootstrap[0].static_resources.clusters.find((c: Obj) => c.name === filter.rlqs_server.envoy_grpc.cluster_name);
  expect(cluster.typed_extension_protocol_options['envoy.extensions.upstreams.http.v3.HttpProtocolOptions'].explicit_http_config).toEqual({
    http2_protocol_options: {},
  });
  expect(cluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value).toBe(8081);
  const settings = [...filter.bucket_matchers.matcher_list.matchers.map((m: Obj) => m.on_match), filter.bucket_matchers.on_no_match].map(
    (o: Obj) => o.action.typed_config,
  );
  for (const s of settings) {
    expect(Object.keys(s).sort()).toEqual([
      '@type',
      'bucket_id_builder',
      'deny_response_settings',
      'expired_assignment_behavior',
      'no_assignment_behavior',
      'reporting_interval',
    ]);
    // Envoy requires more than 100 ms; whole seconds as it reports.
    expect(s.reporting_interval).toMatch(/^\d+s$/);
  }
});

test("every bucket the example builds matches a rule of examples/edge.yaml in the filter's domain", async () => {
  const config = await loadConfigPath(path.join(ROOT, 'examples'), { defaultAlgorithm: 'sliding_window' });
  const domain = quotaFilter().domain;
  for (const headers of [{ 'x-api-key': 'demo-key' }, {}] as Record<string, string>[]) {
    const bucket = bucketFor(headers);
    const pairs = Object.entries(bucket).map(([key, value]) => ({ key, value }));
    expect({ bucket, matched: matchBucket(config, domain, pairs) !== undefined }).toEqual({ bucket, matched: true });
  }
  expect(bucketFor({ 'x-api-key': 'demo-key' })).toEqual({ api_key: 'demo-key' });
  expect(bucketFor({})).toEqual({ generic_key: 'all' });
});
