import * as fs from 'node:fs';
import * as path from 'node:path';
import { parseAllDocuments } from 'yaml';
import { loadConfigPath } from '../../../src/config/files';
import { matchBucket } from '../../../src/limiter/bucket-match';

/**
 * envoy-rlqs.yaml, the Envoy example on the quota protocol: it parses as one v3 bootstrap whose every
 * field is a field of its message in Envoy's API (the table below lists, per message, the fields the
 * example uses and the message of each, read off Envoy's .proto files), its filter points at the
 * service's gRPC cluster, and every bucket it builds matches a rule of examples/edge.yaml.
 */

const ROOT = path.resolve(__dirname, '../../..');
type Obj = Record<string, any>;

/** Per message: field -> the message it holds ('' for a scalar, an enum or a map of scalars). */
const SCHEMA: Readonly<Record<string, Readonly<Record<string, string>>>> = {
  'envoy.config.bootstrap.v3.Bootstrap': { admin: 'envoy.config.bootstrap.v3.Admin', static_resources: 'envoy.config.bootstrap.v3.Bootstrap.StaticResources' },
  'envoy.config.bootstrap.v3.Admin': { address: 'envoy.config.core.v3.Address' },
  'envoy.config.bootstrap.v3.Bootstrap.StaticResources': { listeners: 'envoy.config.listener.v3.Listener', clusters: 'envoy.config.cluster.v3.Cluster' },
  'envoy.config.core.v3.Address': { socket_address: 'envoy.config.core.v3.SocketAddress' },
  'envoy.config.core.v3.SocketAddress': { address: '', port_value: '' },
  'envoy.config.listener.v3.Listener': { name: '', address: 'envoy.config.core.v3.Address', filter_chains: 'envoy.config.listener.v3.FilterChain' },
  'envoy.config.listener.v3.FilterChain': { filters: 'envoy.config.listener.v3.Filter' },
  'envoy.config.listener.v3.Filter': { name: '', typed_config: 'any' },
  'envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager': {
    stat_prefix: '',
    use_remote_address: '',
    route_config: 'envoy.config.route.v3.RouteConfiguration',
    http_filters: 'envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter',
  },
  'envoy.config.route.v3.RouteConfiguration': { name: '', virtual_hosts: 'envoy.config.route.v3.VirtualHost' },
  'envoy.config.route.v3.VirtualHost': { name: '', domains: '', routes: 'envoy.config.route.v3.Route' },
  'envoy.config.route.v3.Route': { match: 'envoy.config.route.v3.RouteMatch', route: 'envoy.config.route.v3.RouteAction' },
  'envoy.config.route.v3.RouteMatch': { prefix: '' },
  'envoy.config.route.v3.RouteAction': { cluster: '' },
  'envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter': { name: '', typed_config: 'any' },
  'envoy.extensions.filters.http.router.v3.Router': {},
  'envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig': {
    rlqs_server: 'envoy.config.core.v3.GrpcService',
    domain: '',
    bucket_matchers: 'xds.type.matcher.v3.Matcher',
  },
  'envoy.config.core.v3.GrpcService': { envoy_grpc: 'envoy.config.core.v3.GrpcService.EnvoyGrpc' },
  'envoy.config.core.v3.GrpcService.EnvoyGrpc': { cluster_name: '' },
  'xds.type.matcher.v3.Matcher': { matcher_list: 'xds.type.matcher.v3.Matcher.MatcherList', on_no_match: 'xds.type.matcher.v3.Matcher.OnMatch' },
  'xds.type.matcher.v3.Matcher.MatcherList': { matchers: 'xds.type.matcher.v3.Matcher.MatcherList.FieldMatcher' },
  'xds.type.matcher.v3.Matcher.MatcherList.FieldMatcher': {
    predicate: 'xds.type.matcher.v3.Matcher.MatcherList.Predicate',
    on_match: 'xds.type.matcher.v3.Matcher.OnMatch',
  },
  'xds.type.matcher.v3.Matcher.MatcherList.Predicate': { single_predicate: 'xds.type.matcher.v3.Matcher.MatcherList.Predicate.SinglePredicate' },
  'xds.type.matcher.v3.Matcher.MatcherList.Predicate.SinglePredicate': {
    input: 'xds.core.v3.TypedExtensionConfig',
    value_match: 'xds.type.matcher.v3.StringMatcher',
  },
  'xds.type.matcher.v3.StringMatcher': { safe_regex: 'xds.type.matcher.v3.RegexMatcher' },
  'xds.type.matcher.v3.RegexMatcher': { google_re2: 'xds.type.matcher.v3.RegexMatcher.GoogleRE2', regex: '' },
  'xds.type.matcher.v3.RegexMatcher.GoogleRE2': {},
  'xds.type.matcher.v3.Matcher.OnMatch': { action: 'xds.core.v3.TypedExtensionConfig' },
  'xds.core.v3.TypedExtensionConfig': { name: '', typed_config: 'any' },
  'envoy.config.core.v3.TypedExtensionConfig': { name: '', typed_config: 'any' },
  'envoy.type.matcher.v3.HttpRequestHeaderMatchInput': { header_name: '' },
  'envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings': {
    bucket_id_builder: 'envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings.BucketIdBuilder',
    reporting_interval: '',
    deny_response_settings: 'envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings.DenyResponseSettings',
    no_assignment_behavior: 'envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings.NoAssignmentBehavior',
    expired_assignment_behavior: 'envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings.ExpiredAssignmentBehavior',
  },
  'envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings.BucketIdBuilder': {
    bucket_id_builder: 'map:envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings.BucketIdBuilder.ValueBuilder',
  },
  'envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings.BucketIdBuilder.ValueBuilder': {
    string_value: '',
    custom_value: 'envoy.config.core.v3.TypedExtensionConfig',
  },
  'envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings.DenyResponseSettings': {
    http_status: 'envoy.type.v3.HttpStatus',
    response_headers_to_add: 'envoy.config.core.v3.HeaderValueOption',
  },
  'envoy.type.v3.HttpStatus': { code: '' },
  'envoy.config.core.v3.HeaderValueOption': { header: 'envoy.config.core.v3.HeaderValue' },
  'envoy.config.core.v3.HeaderValue': { key: '', value: '' },
  'envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings.NoAssignmentBehavior': {
    fallback_rate_limit: 'envoy.type.v3.RateLimitStrategy',
  },
  'envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings.ExpiredAssignmentBehavior': {
    expired_assignment_behavior_timeout: '',
    fallback_rate_limit: 'envoy.type.v3.RateLimitStrategy',
    reuse_last_assignment: 'envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings.ExpiredAssignmentBehavior.ReuseLastAssignment',
  },
  'envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings.ExpiredAssignmentBehavior.ReuseLastAssignment': {},
  'envoy.type.v3.RateLimitStrategy': { blanket_rule: '' },
  'envoy.config.cluster.v3.Cluster': {
    name: '',
    type: '',
    dns_lookup_family: '',
    connect_timeout: '',
    lb_policy: '',
    typed_extension_protocol_options: 'map:any',
    load_assignment: 'envoy.config.endpoint.v3.ClusterLoadAssignment',
  },
  'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': {
    explicit_http_config: 'envoy.extensions.upstreams.http.v3.HttpProtocolOptions.ExplicitHttpConfig',
  },
  'envoy.extensions.upstreams.http.v3.HttpProtocolOptions.ExplicitHttpConfig': { http2_protocol_options: 'envoy.config.core.v3.Http2ProtocolOptions' },
  'envoy.config.core.v3.Http2ProtocolOptions': {},
  'envoy.config.endpoint.v3.ClusterLoadAssignment': { cluster_name: '', endpoints: 'envoy.config.endpoint.v3.LocalityLbEndpoints' },
  'envoy.config.endpoint.v3.LocalityLbEndpoints': { lb_endpoints: 'envoy.config.endpoint.v3.LbEndpoint' },
  'envoy.config.endpoint.v3.LbEndpoint': { endpoint: 'envoy.config.endpoint.v3.Endpoint' },
  'envoy.config.endpoint.v3.Endpoint': { address: 'envoy.config.core.v3.Address' },
};

const TYPE_PREFIX = 'type.googleapis.com/';

/** Every field of `value` (a message of type `type`) that its message does not have, as paths. */
function unknownFields(value: unknown, type: string, where: string): string[] {
  if (type === '') return [];
  if (Array.isArray(value)) return value.flatMap((v, i) => unknownFields(v, type, `${where}[${i}]`));
  if (type.startsWith('map:')) return Object.entries(value as Obj).flatMap(([k, v]) => unknownFields(v, type.slice(4), `${where}.${k}`));
  const obj = value as Obj;
  if (type === 'any') {
    const named = String(obj['@type'] ?? '');
    if (!named.startsWith(TYPE_PREFIX)) return [`${where}: no @type`];
    const { ['@type']: _, ...rest } = obj;
    return unknownFields(rest, named.slice(TYPE_PREFIX.length), where);
  }
  const fields = SCHEMA[type];
  if (fields === undefined) return [`${where}: no schema for ${type}`];
  return Object.entries(obj).flatMap(([k, v]) => (k in fields ? unknownFields(v, fields[k], `${where}.${k}`) : [`${where}.${k}: not a field of ${type}`]));
}

const docs = parseAllDocuments(fs.readFileSync(path.join(ROOT, 'envoy-rlqs.yaml'), 'utf8'));
const bootstrap = (Array.isArray(docs) ? docs : [docs]).map((d) => d.toJS() as Obj);

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

test('envoy-rlqs.yaml is one Envoy v3 bootstrap whose every field is real', () => {
  expect(bootstrap).toHaveLength(1);
  expect(unknownFields(bootstrap[0], 'envoy.config.bootstrap.v3.Bootstrap', '')).toEqual([]);
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
