import * as dgram from 'node:dgram';
import type { AddressInfo } from 'node:net';
import { descriptor, grpcCode, type RlsRequestInput } from '../helpers/grpc-client';
import { startTestService, type TestService } from '../helpers/service';

/**
 * Metrics after real traffic: the Prometheus exposition on the HTTP port, and statsd lines
 * (USE_STATSD) received by a UDP socket standing in for the statsd agent. Counts are exact.
 */

const EDGE = `
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: tenant
    value: acme
    descriptors:
      - key: path
        shadow_mode: true
        rate_limit: {unit: hour, requests_per_unit: 1}
  - key: client
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 10}
`;

const req = (...descriptors: RlsRequestInput['descriptors']): RlsRequestInput => ({ domain: 'edge', descriptors });

/** Sends the same traffic to any service: 5 user hits (3 allowed, 2 denied), 2 shadow hits, 2 detailed, 1 bad call. */
async function traffic(svc: TestService): Promise<void> {
  for (let i = 0; i < 5; i++) await svc.client.shouldRateLimit(req(descriptor([['user', 'alice']])));
  for (let i = 0; i < 2; i++) await svc.client.shouldRateLimit(req(descriptor([['tenant', 'acme'], ['path', '/a']])));
  await svc.client.shouldRateLimit(req(descriptor([['client', 'web']])));
  await svc.client.shouldRateLimit(req(descriptor([['client', 'ios']])));
  expect(await grpcCode(svc.client.shouldRateLimit({ domain: '', descriptors: [] }))).toBeDefined();
}

/** The value of one sample line of a Prometheus exposition. */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(series + ' '));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe('Prometheus metrics after traffic', () => {
  let svc: TestService;
  let text: string;

  beforeAll(async () => {
    svc = await startTestService({ config: { 'edge.yaml': EDGE } });
    await traffic(svc);
    text = await (await fetch(`http://127.0.0.1:${svc.service.httpPort}/metrics`)).text();
  });

  afterAll(async () => {
    await svc?.stop();
  });

  const rule = (name: string, descriptorLabel: string): number | undefined =>
    sample(text, `ratelimit_service_rate_limit_${name}{domain="edge",descriptor="${descriptorLabel}"}`);

  it('counts hits per rule with the reference counter names', () => {
    expect(rule('total_hits', 'user')).toBe(5);
    expect(rule('within_limit', 'user')).toBe(3);
    expect(rule('over_limit', 'user')).toBe(2);
    expect(rule('near_limit', 'user')).toBe(1);
    expect(rule('shadow_mode', 'user')).toBeUndefined();
  });

  it('counts shadow-mode denials under the nested key path', () => {
    expect(rule('total_hits', 'tenant_acme.path')).toBe(2);
    expect(rule('within_limit', 'tenant_acme.path')).toBe(1);
    expect(rule('over_limit', 'tenant_acme.path')).toBe(1);
    expect(rule('shadow_mode', 'tenant_acme.path')).toBe(1);
  });

  it('labels detailed_metric rules with the request values', () => {
    expect(rule('total_hits', 'client_web')).toBe(1);
    expect(rule('total_hits', 'client_ios')).toBe(1);
    expect(rule('total_hits', 'client')).toBeUndefined();
  });

  it('counts every call in the latency histogram and the failed one as a service error', () => {
    const calls = 5 + 2 + 2 + 1;
    expect(sample(text, 'ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}')).toBe(calls);
    expect(sample(text, 'ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"}')).toBe(calls);
    expect(sample(text, 'ratelimit_service_response_time_seconds_bucket{le="0.05",grpc_method="ShouldRateLimit"}')).toBe(calls);
    expect(sample(text, 'ratelimit_service_should_rate_limit_error{err_type="service_error"}')).toBe(1);
  });

  it('counts the config load', () => {
    expect(sample(text, 'ratelimit_service_config_load_success')).toBe(1);
    expect(sample(text, 'ratelimit_service_config_load_error')).toBe(0);
  });

  it('counts a failed reload and keeps serving the previous config', async () => {
    svc.writeConfig('edge.yaml', 'domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n');
    const deadline = Date.now() + 10_000;
    let after = text;
    while (Date.now() < deadline) {
      after = await (await fetch(`http://127.0.0.1:${svc.service.httpPort}/metrics`)).text();
      if (sample(after, 'ratelimit_service_config_load_error') === 1) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(sample(after, 'ratelimit_service_config_load_error')).toBe(1);
    const response = await svc.client.shouldRateLimit(req(descriptor([['user', 'bob']])));
    expect(response.statuses[0]!.currentLimit?.requestsPerUnit).toBe(3);
  });
});

describe('statsd metrics after traffic', () => {
  it('sends the reference statsd names to STATSD_HOST:STATSD_PORT', async () => {
    const socket = dgram.createSocket('udp4');
    const counts = new Map<string, number>();
    const timings: string[] = [];
    socket.on('message', (msg) => {
      for (const line of msg.toString().split('\n')) {
        const m = /^([^:]+):([\d.]+)\|(c|ms)$/.exec(line);
        if (m === null) continue;
        if (m[3] === 'ms') timings.push(m[1]!);
        else counts.set(m[1]!, (counts.get(m[1]!) ?? 0) + Number(m[2]));
      }
    });
    await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
    const port = (socket.address() as AddressInfo).port;
    const svc = await startTestService({
      config: { 'edge.yaml': EDGE },
      env: { USE_STATSD: 'true', STATSD_HOST: '127.0.0.1', STATSD_PORT: String(port) },
    });
    try {
      await traffic(svc);
    } finally {
      // Closing flushes the buffered lines.
      await svc.stop();
    }
    const deadline = Date.now() + 5_000;
    while (Date.now() < deadline && (counts.get('ratelimit.service.rate_limit.edge.user.total_hits') ?? 0) < 5) {
      await new Promise((r) => setTimeout(r, 50));
    }
    socket.close();

    expect(counts.get('ratelimit.service.rate_limit.edge.user.total_hits')).toBe(5);
    expect(counts.get('ratelimit.service.rate_limit.edge.user.within_limit')).toBe(3);
    expect(counts.get('ratelimit.service.rate_limit.edge.user.over_limit')).toBe(2);
    expect(counts.get('ratelimit.service.rate_limit.edge.user.near_limit')).toBe(1);
    expect(counts.get('ratelimit.service.rate_limit.edge.tenant_acme.path.shadow_mode')).toBe(1);
    expect(counts.get('ratelimit.service.rate_limit.edge.client_web.total_hits')).toBe(1);
    expect(counts.get('ratelimit.service.config_load_success')).toBe(1);
    expect(counts.get('ratelimit.service.call.should_rate_limit.service_error')).toBe(1);
    expect(counts.get('ratelimit_server.ShouldRateLimit.total_requests')).toBe(10);
    expect(timings.filter((t) => t === 'ratelimit_server.ShouldRateLimit.response_time')).toHaveLength(10);
  });
});
