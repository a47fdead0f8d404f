import * as fs from 'node:fs';
import * as path from 'node:path';
import { loadConfigPath } from '../../../src/config/files';
import { matchDescriptor } from '../../../src/limiter/match';
import { RateLimiter } from '../../../src/limiter/rate-limiter';
import type { RateLimitRequest } from '../../../src/limiter/types';
import { MemoryStore } from '../../../src/store/memory-store';
import { readBootstrap, type Obj } from '../../helpers/envoy-bootstrap';
import { FakeClock } from '../../helpers/fake-clock';
import { LIMITER_DEFAULTS } from '../../helpers/limiter-defaults';

/**
 * envoy-llm.yaml, the Envoy example of token budgets: each request reserves its x-max-tokens before
 * it is sent and commits the response's token count once its stream is done, both named by an ID
 * Envoy generates for the request (never one a caller picks), on a rule of examples/ in the filter's
 * domain that takes reservations and limits tokens per minute and per day and calls in flight.
 * (Every field is checked against Envoy's API in ./rlqs-envoy.test.ts.)
 */

const ROOT = path.resolve(__dirname, '../../..');
const [bootstrap] = readBootstrap(path.join(ROOT, 'envoy-llm.yaml'));
const hcm: Obj = bootstrap.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
const filter = (name: string): Obj => hcm.http_filters.find((f: Obj) => f.name === name).typed_config;
const route: Obj = hcm.route_config.virtual_hosts[0].routes[0].route;

const ID_HEADER = 'x-slidegate-reservation';

test("the route reserves the request's x-max-tokens before it and commits when the stream is done, both named by the ID header", () => {
  const [reserve, commit] = route.rate_limits as Obj[];
  expect(route.rate_limits).toHaveLength(2);
  expect(reserve.hits_addend).toEqual({ format: '%REQ(x-max-tokens)%' });
  expect(reserve.apply_on_stream_done).toBeUndefined();
  expect(commit.apply_on_stream_done).toBe(true);
  const key = { request_headers: { header_name: 'x-api-key', descriptor_key: 'api_key' } };
  expect(reserve.actions).toEqual([key, { request_headers: { header_name: ID_HEADER, descriptor_key: 'reserve' } }]);
  expect(commit.actions).toEqual([key, { request_headers: { header_name: ID_HEADER, descriptor_key: 'commit' } }]);
});

test('Envoy generates the ID for every request, first in the chain, overwriting whatever the client sent; nothing reads x-request-id or removes the ID', () => {
  expect(hcm.http_filters[0].name).toBe('envoy.filters.http.header_mutation');
  const mutations = filter('envoy.filters.http.header_mutation').mutations;
  expect(Object.keys(mutations)).toEqual(['request_mutations']);
  // %UNIQUE_ID% is a fresh UUID each time it is formatted: once per request, in this one header.
  expect(mutations.request_mutations).toEqual([{ append: { header: { key: ID_HEADER, value: '%UNIQUE_ID%' }, append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' } }]);
  const text = fs.readFileSync(path.join(ROOT, 'envoy-llm.yaml'), 'utf8');
  const config = text.replace(/^\s*#.*$/gm, '');
  expect(config).not.toMatch(/x-request-id/i);
  expect(config).not.toMatch(/headers_to_remove/);
  // The commit reads the ID when the stream ends: the descriptors never format %UNIQUE_ID% themselves.
  expect(JSON.stringify(route.rate_limits)).not.toContain('UNIQUE_ID');
});

test("the charge reads, as a number, the metadata the response's token header is copied to", () => {
  const rule = (filter('envoy.filters.http.header_to_metadata').response_rules as Obj[])[0];
  expect(rule.header).toBe('x-usage-total-tokens');
  const { metadata_namespace: namespace, key, type } = rule.on_header_present;
  expect(type).toBe('NUMBER');
  // Envoy's hits_addend format holds exactly one substitution.
  expect(route.rate_limits[1].hits_addend).toEqual({ format: `%DYNAMIC_METADATA(${namespace}:${key})%` });
});

test('the filters run the ID, the metadata copy and the rate-limit filter before the router, against the gRPC cluster on HTTP/2', () => {
  expect(hcm.http_filters.map((f: Obj) => f.name)).toEqual([
    'envoy.filters.http.header_mutation',
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

test("the descriptors reserve and commit on a rule of examples/ in the filter's domain: tokens per minute and per day, 20 in flight", async () => {
  const config = await loadConfigPath(path.join(ROOT, 'examples'), { defaultAlgorithm: 'sliding_window' });
  const domain: string = filter('envoy.filters.http.ratelimit').domain;
  const clock = new FakeClock(1_700_000_000_000);
  const limiter = new RateLimiter({ store: new MemoryStore({ clock, maxKeys: 1_000, sweepIntervalMs: 0 }), config: () => config, ...LIMITER_DEFAULTS });
  const rule = matchDescriptor(config, domain, [{ key: 'api_key', value: 'team-a' }]);
  // It takes reservations, each held up to 5 minutes (a generation may outlast the minute's window).
  expect([rule?.reservations, rule?.reservationHoldSeconds]).toEqual([true, 300]);
  expect(rule?.limits?.map((l) => [l.limit.unit, l.limit.name, l.limit.concurrency])).toEqual([
    ['minute', 'tokens_per_minute', undefined],
    ['day', 'tokens_per_day', undefined],
    ['second', 'in_flight', 20],
  ]);
  const call = (kind: string, id: string, hits: number): RateLimitRequest => ({
    domain,
    hitsAddend: 0,
    descriptors: [
      {
        entries: [
          { key: 'api_key', value: 'team-a' },
          { key: kind, value: id },
        ],
        hitsAddend: hits,
      },
    ],
  });
  // 3 calls of up to 8,000 tokens: 2 fit the minute's 20,000 at once, the third waits for a commit.
  const reserved = await Promise.all(['a', 'b', 'c'].map((id) => limiter.shouldRateLimit(call('reserve', id, 8_000))));
  expect(reserved.map((r) => r.overallCode)).toEqual(['OK', 'OK', 'OVER_LIMIT']);
  expect((await limiter.shouldRateLimit(call('commit', 'a', 1_500))).overallCode).toBe('OK');
  // 1,500 counted and 8,000 held leave 2,500 of the minute; the status names the limit with the fewest left: 18 in flight.
  expect((await limiter.shouldRateLimit(call('reserve', 'c', 8_000))).statuses[0]).toMatchObject({ code: 'OK', limitRemaining: 18 });
  expect((await limiter.shouldRateLimit(call('reserve', 'd', 2_501))).statuses[0]).toMatchObject({
    code: 'OVER_LIMIT',
    currentLimit: { name: 'tokens_per_minute' },
  });
  // An ID held already is refused, whatever it asks.
  expect((await limiter.shouldRateLimit(call('reserve', 'b', 1))).overallCode).toBe('OVER_LIMIT');
  // Holds never committed lapse after 5 minutes: b and c free their 16,000 (the minute's count is gone by then too).
  clock.advance(299_999);
  expect((await limiter.shouldRateLimit(call('reserve', 'e', 20_000))).overallCode).toBe('OVER_LIMIT');
  clock.advance(1);
  expect((await limiter.shouldRateLimit(call('reserve', 'e', 20_000))).statuses[0]).toMatchObject({
    code: 'OK',
    limitRemaining: 0,
    currentLimit: { name: 'tokens_per_minute' },
  });
});
