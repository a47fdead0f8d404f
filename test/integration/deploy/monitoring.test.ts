import * as fs from 'node:fs';
import * as path from 'node:path';
import { parse, parseAllDocuments } from 'yaml';
import { loadSettings } from '../../../src/settings/settings';
import { descriptor } from '../../helpers/grpc-client';
import { startTestService, type TestService } from '../../helpers/service';

/**
 * deploy/monitoring against the running service: every metric the Grafana dashboard and the
 * PrometheusRule name exists in the service's real /metrics output, and the ServiceMonitor scrapes
 * the port and path that serve it.
 */

const ROOT = path.resolve(__dirname, '../../..');
const MONITORING = path.join(ROOT, 'deploy/monitoring');
const HISTOGRAM_SUFFIXES = ['_bucket', '_sum', '_count'];

let svc: TestService;
let exposition: string;

/** Every metric family of an exposition, by its `# TYPE name type` line. */
function families(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) out.set(m[1], m[2]);
  return out;
}

/** The metric names a PromQL expression uses (this service's are all `ratelimit_...`). */
function metricNames(expr: string): string[] {
  return [...expr.matchAll(/\bratelimit_[a-z0-9_]+\b/g)].map((m) => m[0]);
}

/** A name in an expression as the family it belongs to (a histogram's series carry a suffix). */
function familyOf(name: string, known: Map<string, string>): string | undefined {
  if (known.has(name)) return name;
  for (const suffix of HISTOGRAM_SUFFIXES) {
    const base = name.slice(0, -suffix.length);
    if (name.endsWith(suffix) && known.get(base) === 'histogram') return base;
  }
  return undefined;
}

function dashboardExpressions(): string[] {
  const dashboard = JSON.parse(fs.readFileSync(path.join(MONITORING, 'grafana-dashboard.json'), 'utf8')) as {
    panels: { targets?: { expr: string }[] }[];
    templating: { list: { query?: { query?: string } | string }[] };
  };
  const exprs = dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr));
  for (const v of dashboard.templating.list) if (typeof v.query === 'object' && v.query.query !== undefined) exprs.push(v.query.query);
  return exprs;
}

function ruleExpressions(): { alert: string; expr: string }[] {
  const rule = parse(fs.readFileSync(path.join(MONITORING, 'prometheus-rule.yaml'), 'utf8')) as {
    kind: string;
    spec: { groups: { rules: { alert: string; expr: string }[] }[] };
  };
  expect(rule.kind).toBe('PrometheusRule');
  return rule.spec.groups.flatMap((g) => g.rules);
}

beforeAll(async () => {
  svc = await startTestService({
    config: { 'edge.yaml': 'domain: edge\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 1}\n' },
  });
  for (let i = 0; i < 3; i++) await svc.client.shouldRateLimit({ domain: 'edge', descriptors: [descriptor([['api_key', 'a']])] });
  exposition = await (await fetch(`http://127.0.0.1:${svc.service.httpPort}/metrics`)).text();
});

afterAll(async () => {
  await svc?.stop();
});

it('names in the dashboard only metrics the service exports', () => {
  const known = families(exposition);
  const exprs = dashboardExpressions();
  expect(exprs.length).toBeGreaterThan(10);
  const names = new Set(exprs.flatMap(metricNames));
  const missing = [...names].filter((n) => familyOf(n, known) === undefined);
  expect(missing).toEqual([]);
  // What the dashboard is for: decisions, denials per rule, near-limit, latency, store errors and fallbacks, config loads, cache hits.
  for (const family of [
    'ratelimit_service_rate_limit_over_limit',
    'ratelimit_service_rate_limit_near_limit',
    'ratelimit_service_rate_limit_within_limit',
    'ratelimit_service_response_time_seconds',
    'ratelimit_service_store_errors_total',
    'ratelimit_service_store_fallbacks_total',
    'ratelimit_service_config_load_error',
    'ratelimit_service_local_cache_hits',
  ]) {
    expect([...names].some((n) => familyOf(n, known) === family)).toBe(true);
  }
});

it('alerts only on metrics the service exports, with the alerts an on-call engineer needs', () => {
  const known = families(exposition);
  const rules = ruleExpressions();
  const missing = rules.flatMap((r) =>
    metricNames(r.expr)
      .filter((n) => familyOf(n, known) === undefined)
      .map((n) => `${r.alert}: ${n}`),
  );
  expect(missing).toEqual([]);
  const byName = new Map(rules.map((r) => [r.alert, r.expr]));
  expect(byName.get('SlidegateStoreUnavailable')).toMatch(/ratelimit_service_store_healthy/);
  expect(byName.get('SlidegateErrorRate')).toMatch(/ratelimit_service_should_rate_limit_error/);
  // Envoy's default rate-limit timeout: 20 ms.
  expect(byName.get('SlidegateLatencyP99AboveEnvoyTimeout')).toMatch(/histogram_quantile\(0\.99,[^]*ratelimit_service_response_time_seconds_bucket[^]*> 0\.02/);
  expect(byName.get('SlidegateConfigLoadFailed')).toMatch(/ratelimit_service_config_load_error/);
  expect(byName.get('SlidegateRuleDenyingMost')).toMatch(/ratelimit_service_rate_limit_over_limit/);
});

it('reports the store as healthy (1) while it answers', () => {
  expect(exposition).toMatch(/^ratelimit_service_store_healthy 1$/m);
});

it('scrapes the HTTP port by its name in the Service, on the path that serves the metrics', () => {
  const monitor = parse(fs.readFileSync(path.join(MONITORING, 'service-monitor.yaml'), 'utf8')) as {
    kind: string;
    spec: { selector: { matchLabels: Record<string, string> }; endpoints: { port: string; path: string }[] };
  };
  expect(monitor.kind).toBe('ServiceMonitor');
  const services = parseAllDocuments(fs.readFileSync(path.join(ROOT, 'deploy/kubernetes/service.yaml'), 'utf8')).map(
    (d) => d.toJSON() as { metadata: { labels: Record<string, string> }; spec: { ports: { name: string; port: number }[] } },
  );
  const selected = services.filter((s) => Object.entries(monitor.spec.selector.matchLabels).every(([k, v]) => s.metadata.labels[k] === v));
  expect(selected.length).toBeGreaterThan(0);
  // The port the service serves /metrics on by default (PORT), under the name the monitor uses.
  const defaults = loadSettings({});
  for (const endpoint of monitor.spec.endpoints) {
    expect(endpoint.path).toBe('/metrics');
    expect(selected[0].spec.ports.find((p) => p.name === endpoint.port)?.port).toBe(defaults.httpPort);
  }
});
