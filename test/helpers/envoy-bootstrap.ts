import * as fs from 'node:fs';
import { parseAllDocuments } from 'yaml';

/**
 * The Envoy bootstraps of the repository checked against Envoy's v3 API: the table below lists, per
 * message, the fields the examples use and the message of each, read off Envoy's .proto files; a
 * field not in it is reported with its path.
 */

export type Obj = Record<string, any>;

/** Per message: field -> the message it holds ('' for a scalar, an enum or a map of scalars). */
export const SCHEMA: Readonly<Record<string, Readonly<Record<string, string>>>> = {
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
  'envoy.config.route.v3.RouteAction': { cluster: '', rate_limits: 'envoy.config.route.v3.RateLimit' },
  'envoy.config.route.v3.RateLimit': {
    actions: 'envoy.config.route.v3.RateLimit.Action',
    hits_addend: 'envoy.config.route.v3.RateLimit.HitsAddend',
    apply_on_stream_done: '',
  },
  'envoy.config.route.v3.RateLimit.Action': { request_headers: 'envoy.config.route.v3.RateLimit.Action.RequestHeaders' },
  'envoy.config.route.v3.RateLimit.Action.RequestHeaders': { header_name: '', descriptor_key: '' },
  'envoy.config.route.v3.RateLimit.HitsAddend': { number: '', format: '' },
  'envoy.extensions.filters.http.header_to_metadata.v3.Config': { response_rules: 'envoy.extensions.filters.http.header_to_metadata.v3.Config.Rule' },
  'envoy.extensions.filters.http.header_to_metadata.v3.Config.Rule': {
    header: '',
    on_header_present: 'envoy.extensions.filters.http.header_to_metadata.v3.Config.KeyValuePair',
    remove: '',
  },
  'envoy.extensions.filters.http.header_to_metadata.v3.Config.KeyValuePair': { metadata_namespace: '', key: '', type: '' },
  'envoy.extensions.filters.http.ratelimit.v3.RateLimit': {
    domain: '',
    failure_mode_deny: '',
    timeout: '',
    rate_limit_service: 'envoy.config.ratelimit.v3.RateLimitServiceConfig',
  },
  'envoy.config.ratelimit.v3.RateLimitServiceConfig': { grpc_service: 'envoy.config.core.v3.GrpcService', transport_api_version: '' },
  'envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter': { name: '', typed_config: 'any' },
  'envoy.extensions.filters.http.router.v3.Router': {},
  'envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig': {
    rlqs_server: 'envoy.config.core.v3.GrpcService',
    domain: '',
    bucket_matchers: 'xds.type.matcher.v3.Matcher',
  },
  'envoy.config.core.v3.GrpcService': { envoy_grpc: 'envoy.config.core.v3.GrpcService.EnvoyGrpc', initial_metadata: 'envoy.config.core.v3.HeaderValue' },
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
  'envoy.config.core.v3.HeaderValueOption': { header: 'envoy.config.core.v3.HeaderValue', append_action: '' },
  'envoy.extensions.filters.http.header_mutation.v3.HeaderMutation': { mutations: 'envoy.extensions.filters.http.header_mutation.v3.Mutations' },
  'envoy.extensions.filters.http.header_mutation.v3.Mutations': { request_mutations: 'envoy.config.common.mutation_rules.v3.HeaderMutation' },
  'envoy.config.common.mutation_rules.v3.HeaderMutation': { append: 'envoy.config.core.v3.HeaderValueOption' },
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
export function unknownFields(value: unknown, type: string, where: string): string[] {
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

/** The documents of a YAML file, as plain data. */
export function readBootstrap(file: string): Obj[] {
  const docs = parseAllDocuments(fs.readFileSync(file, 'utf8'));
  return (Array.isArray(docs) ? docs : [docs]).map((d) => d.toJS() as Obj);
}
