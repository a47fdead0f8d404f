import * as dgram from 'node:dgram';
import * as fs from 'node:fs';
import * as net from 'node:net';
import type { AddressInfo } from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { descriptor, grpcCode, type RlsRequestInput } from '../../helpers/grpc-client';
import { startTestService, type TestService } from '../../helpers/service';

/**
 * Metrics after real traffic: the Prometheus exposition on the HTTP port, statsd lines (USE_STATSD,
 * TCP) and DogStatsD lines (USE_DOG_STATSD, UDP) received by sockets standing in for the agent, and the
 * reference-named series on the USE_PROMETHEUS listener. Counts are exact.
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

/**
 * Sends the same traffic to any service: 5 user hits (3 allowed, 2 denied), 2 shadow hits, 2 detailed,
 * 1 bad call. Resolves with how many calls the client saw answered within 50 ms (every one on a quiet
 * machine): the service measured each of those at less than that.
 */
async function traffic(svc: TestService): Promise<number> {
  let fast = 0;
  const timed = async <T>(call: () => Promise<T>): Promise<T> => {
    const start = performance.now();
    const result = await call();
    if (performance.now() - start < 50) fast += 1;
    return result;
  };
  for (let i = 0; i < 5; i++) await timed(() => svc.client.shouldRateLimit(req(descriptor([['user', 'alice']]))));
  for (let i = 0; i < 2; i++)
    await timed(() =>
      svc.client.shouldRateLimit(
        req(
          descriptor([
            ['tenant', 'acme'],
            ['path', '/a'],
          ]),
        ),
      ),
    );
  await timed(() => svc.client.shouldRateLimit(req(descriptor([['client', 'web']]))));
  await timed(() => svc.client.shouldRateLimit(req(descriptor([['client', 'ios']]))));
  // INVALID_ARGUMENT (3): an empty domain.
  expect(await timed(() => grpcCode(svc.client.shouldRateLimit({ domain: '', descriptors: [] })))).toBe(3);
  return fast;
}

/** The value of one sample line of a Prometheus exposition. */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(series + ' '));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe('Prometheus metrics after traffic', () => {
  let svc: TestService;
  let text: string;
  let fastCalls: number;

  beforeAll(async () => {
    svc = await startTestService({ config: { 'edge.yaml': EDGE } });
    fastCalls = await traffic(svc);
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
    expect(sample(text, 'ratelimit_service_response_time_seconds_bucket{le="+Inf",grpc_method="ShouldRateLimit"}')).toBe(calls);
    // In seconds: every call the client saw answered within 50 ms is in the 0.05 bucket.
    const fast = sample(text, 'ratelimit_service_response_time_seconds_bucket{le="0.05",grpc_method="ShouldRateLimit"}')!;
    expect(fast).toBeGreaterThanOrEqual(fastCalls);
    expect(fast).toBeLessThanOrEqual(calls);
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

/** Sums the statsd lines received (`name:value|c[|#tags]`, `name:value|ms[|#tags]`) by name, or by name and tags. */
class StatsdLines {
  readonly counts = new Map<string, number>();
  readonly timings: string[] = [];
  add(text: string): void {
    for (const line of text.split('\n')) {
      const m = /^([^:]+):([\d.]+)\|(c|ms)(\|#(.*))?$/.exec(line);
      if (m === null) continue;
      const key = m[5] === undefined ? m[1]! : `${m[1]!}#${m[5]}`;
      if (m[3] === 'ms') this.timings.push(key);
      else this.counts.set(key, (this.counts.get(key) ?? 0) + Number(m[2]));
    }
  }
  /** Waits until `name` has summed to at least `value` (lines arrive at each flush). */
  async until(name: string, value: number): Promise<void> {
    const deadline = Date.now() + 5_000;
    while (Date.now() < deadline && (this.counts.get(name) ?? 0) < value) await new Promise((r) => setTimeout(r, 50));
  }
}

/** A TCP statsd agent on 127.0.0.1 (the reference's statsd transport). */
async function tcpAgent(): Promise<{ port: number; lines: StatsdLines; close: () => void }> {
  const lines = new StatsdLines();
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    let pending = '';
    socket.on('data', (chunk) => {
      const text = pending + chunk.toString();
      const cut = text.lastIndexOf('\n');
      pending = text.slice(cut + 1);
      lines.add(text.slice(0, cut + 1));
    });
    socket.on('close', () => {
      lines.add(pending);
      sockets.delete(socket);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const close = (): void => {
    for (const s of sockets) s.destroy();
    server.close();
  };
  return { port: (server.address() as AddressInfo).port, lines, close };
}

describe('statsd metrics after traffic', () => {
  it('sends the reference statsd names over TCP to STATSD_HOST:STATSD_PORT, counters summed', async () => {
    const agent = await tcpAgent();
    const svc = await startTestService({
      config: { 'edge.yaml': EDGE },
      env: { USE_STATSD: 'true', STATSD_HOST: '127.0.0.1', STATSD_PORT: String(agent.port), STATS_FLUSH_INTERVAL: '100ms' },
    });
    try {
      await traffic(svc);
      // Summed counters are sent at each STATS_FLUSH_INTERVAL, without waiting for the stop.
      await agent.lines.until('ratelimit.service.rate_limit.edge.user.total_hits', 5);
    } finally {
      await svc.stop();
    }
    await agent.lines.until('ratelimit_server.ShouldRateLimit.total_requests', 10);
    agent.close();

    const { counts, timings } = agent.lines;
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

  it('writes EXTRA_TAGS into the names as the reference does (.__key=value, keys sorted)', async () => {
    const agent = await tcpAgent();
    const svc = await startTestService({
      config: { 'edge.yaml': EDGE },
      env: { USE_STATSD: 'true', STATSD_HOST: '127.0.0.1', STATSD_PORT: String(agent.port), STATS_FLUSH_INTERVAL: '100ms', EXTRA_TAGS: 'zone:b,app:rl' },
    });
    try {
      await traffic(svc);
    } finally {
      await svc.stop();
    }
    await agent.lines.until('ratelimit.service.rate_limit.edge.user.total_hits.__app=rl.__zone=b', 5);
    agent.close();
    expect(agent.lines.counts.get('ratelimit.service.rate_limit.edge.user.total_hits.__app=rl.__zone=b')).toBe(5);
    expect(agent.lines.counts.get('ratelimit.service.rate_limit.edge.user.total_hits')).toBeUndefined();
  });

  it('sends DogStatsD over UDP with EXTRA_TAGS as tags when USE_DOG_STATSD is set', async () => {
    const socket = dgram.createSocket('udp4');
    const lines = new StatsdLines();
    socket.on('message', (msg) => lines.add(msg.toString()));
    await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
    const port = (socket.address() as AddressInfo).port;
    const svc = await startTestService({
      config: { 'edge.yaml': EDGE },
      env: { USE_DOG_STATSD: 'true', STATSD_HOST: '127.0.0.1', STATSD_PORT: String(port), STATS_FLUSH_INTERVAL: '100ms', EXTRA_TAGS: 'app:rl' },
    });
    try {
      await traffic(svc);
    } finally {
      await svc.stop();
    }
    await lines.until('ratelimit.service.rate_limit.edge.user.total_hits#app:rl', 5);
    socket.close();
    expect(lines.counts.get('ratelimit.service.rate_limit.edge.user.total_hits#app:rl')).toBe(5);
    expect(lines.counts.get('ratelimit.service.rate_limit.edge.user.over_limit#app:rl')).toBe(2);
    expect(lines.timings.filter((t) => t === 'ratelimit_server.ShouldRateLimit.response_time#app:rl')).toHaveLength(10);
  });
});

describe('USE_PROMETHEUS: the reference names and labels on PROMETHEUS_ADDR', () => {
  const scrape = async (svc: TestService, path: string): Promise<Response> => fetch(`http://127.0.0.1:${svc.service.prometheusPort}${path}`);

  it('serves domain, key1 and key2 labels at PROMETHEUS_PATH, and /metrics on PORT stays', async () => {
    const svc = await startTestService({
      config: { 'edge.yaml': EDGE },
      env: { USE_PROMETHEUS: 'true', PROMETHEUS_ADDR: '127.0.0.1:0', PROMETHEUS_PATH: '/prom', EXTRA_TAGS: 'app:rl' },
    });
    try {
      await traffic(svc);
      const text = await (await scrape(svc, '/prom')).text();
      const rule = (name: string, labels: string): number | undefined => sample(text, `ratelimit_service_rate_limit_${name}{domain="edge",${labels},app="rl"}`);
      expect(rule('total_hits', 'key1="user"')).toBe(5);
      expect(rule('within_limit', 'key1="user"')).toBe(3);
      expect(rule('over_limit', 'key1="user"')).toBe(2);
      expect(rule('near_limit', 'key1="user"')).toBe(1);
      expect(rule('shadow_mode', 'key1="tenant_acme",key2="path"')).toBe(1);
      expect(rule('total_hits', 'key1="tenant_acme",key2="path"')).toBe(2);
      expect(rule('total_hits', 'key1="client_web"')).toBe(1);
      expect(sample(text, 'ratelimit_service_total_requests{grpc_method="ShouldRateLimit",app="rl"}')).toBe(10);
      expect(sample(text, 'ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit",app="rl"}')).toBe(10);
      expect(sample(text, 'ratelimit_service_should_rate_limit_error{err_type="service_error",app="rl"}')).toBe(1);
      expect(sample(text, 'ratelimit_service_config_load_success{app="rl"}')).toBe(1);
      expect((await scrape(svc, '/metrics')).status).toBe(404);
      const own = await (await fetch(`http://127.0.0.1:${svc.service.httpPort}/metrics`)).text();
      expect(sample(own, 'ratelimit_service_rate_limit_total_hits{domain="edge",descriptor="user"}')).toBe(5);
    } finally {
      await svc.stop();
    }
  });

  it('applies a PROMETHEUS_MAPPER_YAML in the statsd_exporter format', async () => {
    const file = path.join(os.tmpdir(), `slidegate-mapper-${process.pid}.yaml`);
    fs.writeFileSync(
      file,
      [
        'mappings:',
        '  - match: "ratelimit.service.rate_limit.*.*.over_limit"',
        '    name: "limited_total"',
        '    labels: {zone: "$1", rule: "$2"}',
        '  - match: "ratelimit.service.rate_limit.*.*.*"',
        '    action: drop',
        '',
      ].join('\n'),
    );
    const svc = await startTestService({
      config: { 'edge.yaml': EDGE },
      env: { USE_PROMETHEUS: 'true', PROMETHEUS_ADDR: '127.0.0.1:0', PROMETHEUS_MAPPER_YAML: file },
    });
    try {
      await traffic(svc);
      const text = await (await scrape(svc, '/metrics')).text();
      expect(sample(text, 'limited_total{zone="edge",rule="user"}')).toBe(2);
      // The drop covers one-level rules; the deeper one matches no mapping and keeps its escaped name.
      expect(text).not.toContain('edge_user_within_limit');
      expect(sample(text, 'ratelimit_service_rate_limit_edge_tenant_acme_path_within_limit')).toBe(1);
      expect(sample(text, 'ratelimit_server_ShouldRateLimit_total_requests')).toBe(10);
    } finally {
      await svc.stop();
      fs.rmSync(file, { force: true });
    }
  });

  it('stops the start on a mapping file it cannot use, naming PROMETHEUS_MAPPER_YAML', async () => {
    await expect(
      startTestService({
        config: { 'edge.yaml': EDGE },
        env: { USE_PROMETHEUS: 'true', PROMETHEUS_ADDR: '127.0.0.1:0', PROMETHEUS_MAPPER_YAML: '/nonexistent/mapper.yaml' },
      }),
    ).rejects.toThrow(/PROMETHEUS_MAPPER_YAML: cannot read/);
  });
});

describe('a rule with several limits (rate_limits) in the metrics', () => {
  it('has a series per limit, named by the limit after the key path, on PORT and on the USE_PROMETHEUS listener', async () => {
    const svc = await startTestService({
      config: {
        'budgets.yaml':
          'domain: budgets\ndescriptors:\n  - key: team\n    rate_limits:\n' +
          '      - {name: per_hour, unit: hour, requests_per_unit: 2}\n      - {unit: day, requests_per_unit: 10}\n',
      },
      env: { USE_PROMETHEUS: 'true', PROMETHEUS_ADDR: '127.0.0.1:0' },
    });
    try {
      for (let i = 0; i < 3; i++) await svc.client.shouldRateLimit({ domain: 'budgets', descriptors: [descriptor([['team', 'a']])] });
      const text = await (await fetch(`http://127.0.0.1:${svc.service.httpPort}/metrics`)).text();
      const rule = (name: string, label: string): number | undefined =>
        sample(text, `ratelimit_service_rate_limit_${name}{domain="budgets",descriptor="${label}"}`);
      // The third request went over 2 per hour; the day limit would have admitted it, uncharged.
      expect([rule('total_hits', 'team.per_hour'), rule('within_limit', 'team.per_hour'), rule('over_limit', 'team.per_hour')]).toEqual([3, 2, 1]);
      expect([rule('total_hits', 'team.1'), rule('within_limit', 'team.1'), rule('over_limit', 'team.1') ?? 0]).toEqual([3, 3, 0]);
      expect(rule('total_hits', 'team')).toBeUndefined();
      const prom = await (await fetch(`http://127.0.0.1:${svc.service.prometheusPort}/metrics`)).text();
      expect(sample(prom, 'ratelimit_service_rate_limit_over_limit{domain="budgets",key1="team",key2="per_hour"}')).toBe(1);
    } finally {
      await svc.stop();
    }
  });
});
