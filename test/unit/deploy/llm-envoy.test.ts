import * as path from 'node:path';
import { loadConfigPath } from '../../../src/config/files';
import { matchDescriptor } from '../../../src/limiter/match';
import { readBootstrap, type Obj } from '../../helpers/envoy-bootstrap';

/**
 * envoy-llm.yaml, the Envoy example of token budgets: each request is checked before it is sent
 * (hits_addend 0) and charged the response's token count once its stream is done, both on one
 * descriptor, which a rule of examples/ in the filter's domain limits per minute and per day and
 * records past its limit. (Every field is checked against Envoy's API in ./rlqs-envoy.test.ts.)
 */

const ROOT = path.resolve(__dirname, '../../..');
const [bootstrap] = readBootstrap(path.join(ROOT, 'envoy-llm.yaml'));
const hcm: Obj = bootstrap.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
const filter = (name: string): Obj => hcm.http_filters.find((f: Obj) => f.name === name).typed_config;
const route: Obj = hcm.route_config.virtual_hosts[0].routes[0].route;

test('the route checks before the request and charges the token count when the stream is done, on one descriptor', () => {
  const [check, charge] = route.rate_limits as Obj[];
  expect(route.rate_limits).toHaveLength(2);
  expect(check.hits_addend).toEqual({ number: 0 });
  expect(check.apply_on_stream_done).toBeUndefined();
  expect(charge.apply_on_stream_done).toBe(true);
  expect(charge.actions).toEqual(check.actions);
  expect(check.actions).toEqual([{ request_headers: { header_name: 'x-api-key', descriptor_key: 'api_key' } }]);
});

test("the charge reads, as a number, the metadata the response's token header is copied to", () => {
  const rule = (filter('envoy.filters.http.header_to_metadata').response_rules as Obj[])[0];
  expect(rule.header).toBe('x-usage-total-tokens');
  const { metadata_namespace: namespace, key, type } = rule.on_header_present;
  expect(type).toBe('NUMBER');
  // Envoy's hits_addend format holds exactly one substitution.
  expect(route.rate_limits[1].hits_addend).toEqual({ format: `%DYNAMIC_METADATA(${namespace}:${key})%` });
});

test('the filters run the metadata copy and the rate-limit filter before the router, against the gRPC cluster on HTTP/2', () => {
  expect(hcm.http_filters.map((f: Obj) => f.name)).toEqual([
    'envoy.filters.http.header_to_metadata',
    'envoy.filters.http.ratelimit',
    'envoy.filters.http.router',
  ]);
  const service = filter('envoy.filters.http.ratelimit').rate_limit_service;
  expect(service.transport_api_version).toBe('V3');
  const cluster = bootstrap.static_resources.clusters.find((c: Obj) => c.name === service.grpc_service.envoy_grpc.cluster_name);
  expect(cluster.typed_extension_protocol_options['envoy.extensions.upstreams.http.v3.HttpProtocolOptions'].explicit_http_config).toEqual({
    http2_protocol_options: {},
  });
  expect(cluster.load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address.port_value).toBe(8081);
});

test("the descriptor matches a rule of examples/ in the filter's domain: tokens per minute and per day, recorded past the limit", async () => {
  const config = await loadConfigPath(path.join(ROOT, 'examples'), { defaultAlgorithm: 'sliding_window' });
  const rule = matchDescriptor(config, filter('envoy.filters.http.ratelimit').domain, [{ key: 'api_key', value: 'team-a' }]);
  expect(rule?.countDeniedRequests).toBe(true);
  expect(rule?.limits?.map((l) => [l.limit.unit, l.limit.name])).toEqual([
    ['minute', 'tokens_per_minute'],
    ['day', 'tokens_per_day'],
  ]);
});
