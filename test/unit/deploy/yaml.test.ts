import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseAllDocuments } from 'yaml';
import { loadConfigPath } from '../../../src/config/files';
import { matchDescriptor } from '../../../src/limiter/match';
import type { RateLimitConfig } from '../../../src/limiter/rules';
import type { Entry } from '../../../src/limiter/types';
import { RateLimiter } from '../../../src/limiter/rate-limiter';
import { loadSettings } from '../../../src/settings/settings';
import { MemoryStore } from '../../../src/store/memory-store';
import { FakeClock } from '../../helpers/fake-clock';
import { LIMITER_DEFAULTS } from '../../helpers/limiter-defaults';

/**
 * The shipped deployment files against the service: every YAML parses, every limits file a
 * deployment serves loads, and every descriptor the shipped Envoy and Istio configs send finds a
 * rule in the limits shipped next to them.
 */

const ROOT = path.resolve(__dirname, '..', '..', '..');
const EXAMPLES = path.join(ROOT, 'examples');
const LOAD = { defaultAlgorithm: 'sliding_window' as const };

type Obj = Record<string, any>;

function yamlFilesUnder(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) return yamlFilesUnder(p);
    return /\.ya?ml$/.test(e.name) ? [p] : [];
  });
}

/** Every document of a (multi-document) YAML file; throws with the file name on any parse error. */
function readDocs(file: string): Obj[] {
  const docs = parseAllDocuments(fs.readFileSync(file, 'utf8'));
  if (!Array.isArray(docs)) throw new Error(`${file}: not YAML documents`);
  for (const d of docs) {
    const problems = [...d.errors, ...d.warnings];
    if (problems.length > 0) throw new Error(`${path.relative(ROOT, file)}: ${problems.map((e) => e.message).join('; ')}`);
  }
  return docs.map((d) => d.toJS() as Obj).filter((d) => d !== null && d !== undefined);
}

const ALL_YAML = [path.join(ROOT, 'envoy.yaml'), ...yamlFilesUnder(path.join(ROOT, 'deploy')), ...yamlFilesUnder(EXAMPLES)];

function manifests(variant: 'kubernetes' | 'istio'): Obj[] {
  return yamlFilesUnder(path.join(ROOT, 'deploy', variant))
    .filter((f) => !f.endsWith('kustomization.yaml'))
    .flatMap(readDocs);
}

function configMap(variant: 'kubernetes' | 'istio', name: string): Obj {
  const cm = manifests(variant).find((m) => m.kind === 'ConfigMap' && m.metadata.name === name);
  if (!cm) throw new Error(`deploy/${variant}: no ConfigMap ${name}`);
  return cm;
}

/** Writes a ConfigMap's data to a fresh directory, as the kubelet mounts it, and loads it. */
async function loadConfigMap(cm: Obj): Promise<RateLimitConfig> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'slidegate-cm-'));
  try {
    for (const [file, text] of Object.entries(cm.data as Record<string, string>)) fs.writeFileSync(path.join(dir, file), text);
    return await loadConfigPath(dir, LOAD);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/* ---------- Envoy rate_limits actions -> descriptor entries, as Envoy builds them ---------- */

const SAMPLE_REMOTE_ADDRESS = '203.0.113.7';

/** What a request gives Envoy's actions: its path and query, client address and headers. */
interface SampleRequest {
  readonly path: string;
  /** With its '?', or empty. */
  readonly query: string;
  readonly remoteAddress: string;
  readonly method: string;
  readonly headers: Readonly<Record<string, string>>;
}

function sampleRequest(requestPath: string, over: Partial<SampleRequest> = {}): SampleRequest {
  return { path: requestPath, query: '', remoteAddress: SAMPLE_REMOTE_ADDRESS, method: 'POST', headers: { 'x-api-key': 'demo-key' }, ...over };
}

/** A header as Envoy's actions see it (pseudo-headers included); undefined when absent. */
function headerOf(req: SampleRequest, name: string): string | undefined {
  if (name === ':path') return req.path + req.query;
  if (name === ':method') return req.method;
  return req.headers[name.toLowerCase()];
}

/** masked_remote_address: the client's network, as Envoy formats it ("203.0.113.7/32"). */
function maskedAddress(req: SampleRequest, spec: Obj): string {
  const v6 = req.remoteAddress.includes(':');
  const len = v6 ? (spec.v6_prefix_mask_len ?? 128) : (spec.v4_prefix_mask_len ?? 32);
  if (v6) throw new Error('no IPv6 sample here');
  const bits = req.remoteAddress.split('.').reduce((n, o) => n * 256 + Number(o), 0);
  const masked = len === 0 ? 0 : bits - (bits % 2 ** (32 - len));
  const octets = [24, 16, 8, 0].map((shift) => Math.floor(masked / 2 ** shift) % 256);
  return `${octets.join('.')}/${len}`;
}

/** The CEL attributes the example's expr descriptors use. */
function celAttribute(req: SampleRequest, text: string): string {
  if (text === 'request.url_path') return req.path;
  if (text === 'request.path') return req.path + req.query;
  throw new Error(`CEL expression "${text}" has no sample here`);
}

/** The regex string matchers the examples use (Envoy's safe_regex matches the whole value). */
function headerMatches(req: SampleRequest, matcher: Obj): boolean {
  const value = headerOf(req, matcher.name);
  if (value === undefined) return false;
  const regex = matcher.string_match?.safe_regex?.regex ?? matcher.safe_regex_match?.regex;
  if (regex === undefined) throw new Error(`header matcher ${JSON.stringify(matcher)} has no sample here`);
  return new RegExp(`^(?:${regex})$`).test(value);
}

/**
 * The entry one action appends for `req` (Envoy's default keys where the action leaves them out),
 * or undefined when the action has nothing to append (Envoy then sends no descriptor for the entry).
 */
function entryOf(action: Obj, req: SampleRequest): Entry | undefined {
  const [kind, spec] = Object.entries(action)[0] as [string, Obj];
  switch (kind) {
    case 'request_headers': {
      const value = headerOf(req, spec.header_name);
      return value === undefined ? undefined : { key: spec.descriptor_key, value };
    }
    case 'remote_address':
      return { key: 'remote_address', value: req.remoteAddress };
    case 'masked_remote_address':
      return { key: 'masked_remote_address', value: maskedAddress(req, spec) };
    case 'generic_key':
      return { key: spec.descriptor_key ?? 'generic_key', value: spec.descriptor_value };
    case 'header_value_match': {
      const matched = (spec.headers as Obj[]).every((h) => headerMatches(req, h));
      return matched === (spec.expect_match ?? true) ? { key: spec.descriptor_key ?? 'header_match', value: spec.descriptor_value } : undefined;
    }
    case 'extension': {
      if (spec.name !== 'envoy.rate_limit_descriptors.expr') throw new Error(`rate_limits extension ${spec.name} has no sample here`);
      return { key: spec.typed_config.descriptor_key, value: celAttribute(req, spec.typed_config.text) };
    }
    default:
      throw new Error(`rate_limits action ${kind} has no sample here`);
  }
}

/** How an action's entry reads in envoy.yaml's table: fixed values as they are, the others as <source>. */
function entryPlaceholder(action: Obj): string {
  const [kind, spec] = Object.entries(action)[0] as [string, Obj];
  switch (kind) {
    case 'request_headers':
      return `(${spec.descriptor_key}, <${spec.header_name}>)`;
    case 'remote_address':
      return '(remote_address, <ip>)';
    case 'masked_remote_address':
      return '(masked_remote_address, <network>)';
    case 'extension':
      return `(${spec.typed_config.descriptor_key}, <${spec.typed_config.text}>)`;
    default: {
      const entry = entryOf(action, sampleRequest('/'))!;
      return `(${entry.key}, ${entry.value})`;
    }
  }
}

interface SentDescriptor {
  readonly where: string;
  readonly entries: Entry[];
}

/** The descriptors `rateLimits` produce for `req`: one per entry whose every action appends. */
function descriptorsOf(rateLimits: Obj[], req: SampleRequest, where: string): SentDescriptor[] {
  return rateLimits.flatMap((rl, i) => {
    const entries = (rl.actions as Obj[]).map((a) => entryOf(a, req));
    if (entries.some((e) => e === undefined)) return [];
    return [{ where: `${where} rate_limits[${i}]`, entries: entries as Entry[] }];
  });
}

function describeEntries(entries: Entry[]): string {
  return entries.map((e) => `(${e.key}, ${e.value})`).join(', ');
}

/** The descriptors that do not match a rule, as readable lines (empty when all match). */
function unmatched(config: RateLimitConfig, domain: string, sent: SentDescriptor[]): string[] {
  return sent.filter((d) => matchDescriptor(config, domain, d.entries) === undefined).map((d) => `${d.where}: ${describeEntries(d.entries)}`);
}

/** A request path the route matches: its exact path, or something under its prefix. */
function samplePath(match: Obj | undefined): string {
  if (match?.path) return String(match.path);
  return `${String(match?.prefix ?? '/')}sample`;
}

/* ---------- envoy.yaml ---------- */

const envoy = readDocs(path.join(ROOT, 'envoy.yaml'))[0];

function envoyHcm(): Obj {
  const filters = envoy.static_resources.listeners.flatMap((l: Obj) => l.filter_chains.flatMap((c: Obj) => c.filters));
  return filters.find((f: Obj) => f.name === 'envoy.filters.network.http_connection_manager').typed_config;
}

function envoyRoutes(): Obj[] {
  return (envoyHcm().route_config.virtual_hosts as Obj[]).flatMap((vh) => vh.routes as Obj[]);
}

/** Envoy's route choice: the first route whose path or prefix matches (the query string plays no part). */
function envoyRouteFor(requestPath: string): Obj {
  const route = envoyRoutes().find((r) => (r.match.path !== undefined ? r.match.path === requestPath : requestPath.startsWith(r.match.prefix)));
  if (!route) throw new Error(`envoy.yaml: no route for ${requestPath}`);
  return route;
}

/** What envoy.yaml sends for one request: the descriptors of the route it takes. */
function envoySends(req: SampleRequest): Entry[][] {
  expect(envoyHcm().route_config.virtual_hosts.every((vh: Obj) => vh.rate_limits === undefined)).toBe(true);
  return descriptorsOf(envoyRouteFor(req.path).route.rate_limits ?? [], req, req.path).map((d) => d.entries);
}

function envoyDescriptors(): SentDescriptor[] {
  const sent: SentDescriptor[] = [];
  for (const vh of envoyHcm().route_config.virtual_hosts as Obj[]) {
    sent.push(...descriptorsOf(vh.rate_limits ?? [], sampleRequest('/sample'), `virtual host ${vh.name}`));
    for (const route of vh.routes as Obj[]) {
      const where = `route ${JSON.stringify(route.match)}`;
      sent.push(...descriptorsOf(route.route?.rate_limits ?? [], sampleRequest(samplePath(route.match)), where));
    }
  }
  return sent;
}

/* ---------- Istio EnvoyFilters ---------- */

/** Paths of the Istio task's walkthrough and of Bookinfo. */
const ISTIO_SAMPLE_PATHS = ['/sample', '/productpage', '/api/v1/products/1', '/api/v1/products/12'];

/** The gateway's patches: the VIRTUAL_HOST one, and the HTTP_ROUTE ones by the route name they patch. */
function istioGatewayPatches(): { vhost: Obj[]; routes: Map<string, Obj[]> } {
  const patches = readDocs(path.join(ROOT, 'deploy', 'istio', 'filter-ratelimit-gateway.yaml'))
    .filter((d) => d.kind === 'EnvoyFilter')
    .flatMap((d) => d.spec.configPatches as Obj[]);
  const vhost = patches.filter((p) => p.applyTo === 'VIRTUAL_HOST').flatMap((p) => p.patch.value.rate_limits as Obj[]);
  const routes = new Map<string, Obj[]>();
  for (const p of patches.filter((q) => q.applyTo === 'HTTP_ROUTE')) routes.set(p.match.routeConfiguration.vhost.route.name, p.patch.value.route.rate_limits);
  return { vhost, routes };
}

/**
 * What the gateway sends for `req` behind the Istio task's Bookinfo VirtualService, whose
 * /api/v1/products prefix route is named "api": that route's own rate_limits when a patch gives it
 * some (they replace the virtual host's), else the virtual host's.
 */
function istioGatewaySends(req: SampleRequest): Entry[][] {
  const { vhost, routes } = istioGatewayPatches();
  const routeName = req.path.startsWith('/api/v1/products') ? 'api' : undefined;
  const rateLimits = (routeName !== undefined ? routes.get(routeName) : undefined) ?? vhost;
  return descriptorsOf(rateLimits, req, req.path).map((d) => d.entries);
}

interface FilterDescriptors {
  readonly file: string;
  readonly domain: string;
  readonly sent: SentDescriptor[];
}

/** Per EnvoyFilter file: the ratelimit filter's domain and the descriptors its VIRTUAL_HOST/HTTP_ROUTE patches send. */
function istioFilterDescriptors(): FilterDescriptors[] {
  const files = yamlFilesUnder(path.join(ROOT, 'deploy', 'istio')).filter((f) => readDocs(f).some((d) => d.kind === 'EnvoyFilter'));
  return files.map((file) => {
    const patches = readDocs(file)
      .filter((d) => d.kind === 'EnvoyFilter')
      .flatMap((d) => d.spec.configPatches as Obj[]);
    const domains = patches
      .filter((p) => p.applyTo === 'HTTP_FILTER' && p.patch.value.name === 'envoy.filters.http.ratelimit')
      .map((p) => p.patch.value.typed_config.domain as string);
    const sent = patches
      .filter((p) => p.applyTo === 'VIRTUAL_HOST' || p.applyTo === 'HTTP_ROUTE')
      .flatMap((p, i) => {
        const value = p.patch.value;
        const rateLimits = p.applyTo === 'VIRTUAL_HOST' ? value.rate_limits : value.route?.rate_limits;
        return ISTIO_SAMPLE_PATHS.flatMap((samplePathname) =>
          descriptorsOf(rateLimits ?? [], sampleRequest(samplePathname), `${path.basename(file)} patch ${i} (${p.match.context}) ${samplePathname}`),
        );
      });
    if (domains.length !== 1) throw new Error(`${file}: expected one ratelimit filter, found ${domains.length}`);
    return { file: path.basename(file), domain: domains[0], sent };
  });
}

/** A limiter over `config` on a memory store whose clock stands still: exact counts, no wall clock. */
function limiterOver(config: RateLimitConfig): { decide(domain: string, descriptors: Entry[][]): Promise<string>; close(): void } {
  const store = new MemoryStore({ clock: new FakeClock(1_000_000), maxKeys: 10_000, sweepIntervalMs: 0 });
  const limiter = new RateLimiter({
    store,
    config: () => config,
    ...LIMITER_DEFAULTS,
  });
  return {
    decide: async (domain, descriptors) =>
      (await limiter.shouldRateLimit({ domain, descriptors: descriptors.map((entries) => ({ entries })), hitsAddend: 1 })).overallCode,
    close: () => store.close(),
  };
}

/* ---------- tests ---------- */

describe('shipped YAML', () => {
  test.each(ALL_YAML.map((f) => [path.relative(ROOT, f), f]))('%s parses, every document of it', (_name, file) => {
    expect(readDocs(file).length).toBeGreaterThan(0);
  });

  test('every Kubernetes object has an apiVersion, a kind and a name', () => {
    for (const m of [...manifests('kubernetes'), ...manifests('istio')]) {
      expect({ apiVersion: typeof m.apiVersion, kind: typeof m.kind, name: typeof m.metadata?.name }).toEqual({
        apiVersion: 'string',
        kind: 'string',
        name: 'string',
      });
    }
  });

  test.each(['kubernetes', 'istio', 'monitoring'])('every resource and generated file the %s kustomization lists exists', (variant) => {
    const dir = path.join(ROOT, 'deploy', variant);
    const kustomization = readDocs(path.join(dir, 'kustomization.yaml'))[0];
    const generated = ((kustomization.configMapGenerator ?? []) as { files: string[] }[]).flatMap((g) => g.files);
    for (const r of [...(kustomization.resources as string[]), ...generated]) expect(fs.existsSync(path.join(dir, r))).toBe(true);
  });
});

describe('limits served by each deployment', () => {
  test.each(fs.readdirSync(EXAMPLES).filter((f) => /\.ya?ml$/.test(f)))('examples/%s loads', async (file) => {
    const config = await loadConfigPath(path.join(EXAMPLES, file), LOAD);
    expect(config.domains.size).toBe(1);
  });

  test('examples/ as a whole loads, as `make run` and docker compose serve it', async () => {
    const config = await loadConfigPath(EXAMPLES, LOAD);
    expect([...config.domains.keys()].sort()).toEqual(['edge', 'llm', 'ratelimit']);
  });

  test('the Kubernetes ConfigMap carries examples/edge.yaml unchanged, and it loads', async () => {
    const cm = configMap('kubernetes', 'ratelimit-config');
    expect(cm.data['edge.yaml']).toBe(fs.readFileSync(path.join(EXAMPLES, 'edge.yaml'), 'utf8'));
    expect([...(await loadConfigMap(cm)).domains.keys()]).toEqual(['edge']);
  });

  test("the Istio ConfigMap carries examples/mesh.yaml unchanged under the sample's file name, and it loads", async () => {
    const cm = configMap('istio', 'ratelimit-config');
    expect(Object.keys(cm.data)).toEqual(['config.yaml']);
    expect(cm.data['config.yaml']).toBe(fs.readFileSync(path.join(EXAMPLES, 'mesh.yaml'), 'utf8'));
    expect([...(await loadConfigMap(cm)).domains.keys()]).toEqual(['ratelimit']);
  });

  test("docker compose mounts examples/ where the service's settings look for its config", () => {
    const compose = readDocs(path.join(ROOT, 'deploy', 'docker', 'docker-compose.yaml'))[0];
    const svc = compose.services.ratelimit;
    const settings = loadSettings(svc.environment);
    const configDir = path.posix.join(settings.runtimeRoot, settings.runtimeSubdirectory, settings.runtimeAppDirectory);
    const mounts = (svc.volumes as string[]).map((v) => v.split(':'));
    const mount = mounts.find(([, target]) => target === configDir);
    expect(mount).toBeDefined();
    expect(path.resolve(ROOT, 'deploy', 'docker', mount![0])).toBe(EXAMPLES);
  });

  test('each Kubernetes and Istio deployment mounts its ConfigMap at RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY', () => {
    for (const variant of ['kubernetes', 'istio'] as const) {
      const objects = manifests(variant);
      const deployment = objects.find((m) => m.kind === 'Deployment' && m.metadata.name === 'ratelimit')!;
      const pod = deployment.spec.template.spec;
      const container = pod.containers[0];
      const env = Object.fromEntries((container.env as Obj[]).map((e) => [e.name, e.value]));
      const settings = loadSettings(env);
      const configDir = path.posix.join(settings.runtimeRoot, settings.runtimeSubdirectory, settings.runtimeAppDirectory);
      const mount = (container.volumeMounts as Obj[]).find((m) => m.mountPath === configDir);
      expect({ variant, mounted: mount !== undefined }).toEqual({ variant, mounted: true });
      const volume = (pod.volumes as Obj[]).find((v) => v.name === mount!.name)!;
      expect(objects.some((m) => m.kind === 'ConfigMap' && m.metadata.name === volume.configMap.name)).toBe(true);
    }
  });
});

describe('descriptors sent by the shipped proxy configs', () => {
  test('envoy.yaml sends descriptors of every action kind the examples rely on', () => {
    const kinds = new Set(envoyDescriptors().flatMap((d) => d.entries.map((e) => e.key)));
    for (const key of ['api_key', 'remote_address', 'generic_key', 'path', 'method', 'route']) expect(kinds).toContain(key);
  });

  test("every descriptor envoy.yaml's routes send matches a rule in examples/ for the filter's domain", async () => {
    const filter = envoyHcm().http_filters.find((f: Obj) => f.name === 'envoy.filters.http.ratelimit');
    const config = await loadConfigPath(EXAMPLES, LOAD);
    expect(config.domains.has(filter.typed_config.domain)).toBe(true);
    const sent = envoyDescriptors();
    expect(sent.length).toBeGreaterThan(0);
    expect(unmatched(config, filter.typed_config.domain, sent)).toEqual([]);
  });

  test('every descriptor the Istio gateway and sidecar filters send matches a rule in the Istio ConfigMap', async () => {
    const config = await loadConfigMap(configMap('istio', 'ratelimit-config'));
    const filters = istioFilterDescriptors();
    expect(filters.map((f) => f.file).sort()).toEqual(['filter-ratelimit-gateway.yaml', 'filter-ratelimit-sidecar.yaml']);
    for (const f of filters) {
      expect(f.sent.length).toBeGreaterThan(0);
      expect({ file: f.file, unmatched: unmatched(config, f.domain, f.sent) }).toEqual({ file: f.file, unmatched: [] });
    }
  });

  test("Istio's gateway sends the task's descriptors: (PATH, <path>), and (PATH, api) on the task's route named api", () => {
    expect(istioGatewaySends(sampleRequest('/productpage'))).toEqual([[{ key: 'PATH', value: '/productpage' }]]);
    expect(istioGatewaySends(sampleRequest('/api/v1/products/3'))).toEqual([[{ key: 'PATH', value: 'api' }]]);
    expect(istioGatewaySends(sampleRequest('/api/v1/products/3', { query: '?x=1' }))).toEqual([[{ key: 'PATH', value: 'api' }]]);
  });

  test("the Istio task's walkthrough answers as the task says: /productpage 200 429, /api/v1/products/1..3 200 200 429", async () => {
    const config = await loadConfigMap(configMap('istio', 'ratelimit-config'));
    const domain = istioFilterDescriptors().find((f) => f.file === 'filter-ratelimit-gateway.yaml')!.domain;
    const limiter = limiterOver(config);
    const status = async (requestPath: string): Promise<number> =>
      (await limiter.decide(domain, istioGatewaySends(sampleRequest(requestPath, { method: 'GET' })))) === 'OK' ? 200 : 429;
    try {
      const productpage = [await status('/productpage'), await status('/productpage')];
      const products: number[] = [];
      for (const i of [1, 2, 3]) products.push(await status(`/api/v1/products/${i}`));
      expect({ productpage, products }).toEqual({ productpage: [200, 429], products: [200, 200, 429] });
    } finally {
      limiter.close();
    }
  });

  test('the example limits show the sliding window default, unit_multiplier, a wildcard, nesting, shadow mode and unlimited', async () => {
    const config = await loadConfigPath(EXAMPLES, LOAD);
    const edge = (entries: [string, string][]) =>
      matchDescriptor(
        config,
        'edge',
        entries.map(([key, value]) => ({ key, value })),
      );
    expect(edge([['api_key', 'demo-key']])?.limit).toMatchObject({
      algorithm: 'sliding_window',
      unit: 'second',
      unitMultiplier: 10,
      requestsPerUnit: 5,
      windowMs: 10_000,
    });
    expect(edge([['api_key', 'internal-batch']])?.limit.unlimited).toBe(true);
    expect(edge([['path', '/api/reports/daily']])?.limit.name).toBe('reports');
    expect(edge([['path', '/api/orders']])?.limit.requestsPerUnit).toBe(50);
    expect(
      edge([
        ['route', 'login'],
        ['remote_address', SAMPLE_REMOTE_ADDRESS],
      ])?.limit,
    ).toMatchObject({
      algorithm: 'sliding_log',
      requestsPerUnit: 5,
    });
    expect(edge([['route', 'login']])).toBeUndefined();
    expect(
      edge([
        ['remote_address', SAMPLE_REMOTE_ADDRESS],
        ['method', 'write'],
      ])?.limit.requestsPerUnit,
    ).toBe(60);
    expect(edge([['generic_key', 'all']])?.shadowMode).toBe(true);
  });
});

describe('envoy.yaml, the example every user copies', () => {
  const envoyText = fs.readFileSync(path.join(ROOT, 'envoy.yaml'), 'utf8');

  test("its header table lists exactly the descriptors each route's rate_limits send, in order", () => {
    const table = [...envoyText.matchAll(/^#   (\/\S*) +(\(.*\))$/gm)].map((m) => `${m[1]} ${m[2]}`);
    const actual = envoyRoutes().flatMap((route) =>
      ((route.route.rate_limits ?? []) as Obj[]).map(
        (rl) => `${route.match.path ?? route.match.prefix} ${(rl.actions as Obj[]).map(entryPlaceholder).join(', ')}`,
      ),
    );
    expect(actual.length).toBeGreaterThan(0);
    expect(table).toEqual(actual);
  });

  test('the query string changes no descriptor, and path descriptors carry the path alone', () => {
    for (const requestPath of ['/api/reports/daily', '/api/orders', '/login', '/home']) {
      const plain = envoySends(sampleRequest(requestPath));
      expect(envoySends(sampleRequest(requestPath, { query: '?n=1' }))).toEqual(plain);
      expect(envoySends(sampleRequest(requestPath, { query: '?n=2&x=y' }))).toEqual(plain);
      for (const entry of plain.flat()) expect(entry.value).not.toContain('?');
    }
    const api = envoySends(sampleRequest('/api/reports/daily', { query: '?n=7' }));
    expect(
      api
        .flat()
        .filter((e) => e.key === 'path')
        .map((e) => e.value),
    ).toEqual(['/api/reports/daily', '/api/reports/daily']);
  });

  test('one client changing the query string on every call is denied, and another client still gets through', async () => {
    const config = await loadConfigPath(EXAMPLES, LOAD);
    const limiter = limiterOver(config);
    try {
      const call = (remoteAddress: string, n: number): Promise<string> =>
        limiter.decide('edge', envoySends(sampleRequest('/api/reports/daily', { remoteAddress, method: 'GET', headers: {}, query: `?n=${n}` })));
      const first: string[] = [];
      for (let n = 0; n < 5; n++) first.push(await call('203.0.113.7', n));
      // reports_per_client: 3 per minute per client network.
      expect(first).toEqual(['OK', 'OK', 'OK', 'OVER_LIMIT', 'OVER_LIMIT']);
      expect(await call('198.51.100.23', 99)).toBe('OK');
    } finally {
      limiter.close();
    }
  });

  test('requests without an x-api-key send no api_key descriptor, GETs no (method, write) one, and the rest still go', () => {
    const sent = envoySends(sampleRequest('/api/orders', { headers: {}, method: 'GET' }));
    const keys = sent.map((d) => d.map((e) => e.key).join(','));
    expect(keys).toEqual(['path', 'masked_remote_address,path', 'remote_address', 'generic_key']);
  });

  test('every comment next to failure_mode_deny names the status Envoy really answers (500 unless status_on_error says otherwise)', () => {
    const files = ['envoy.yaml', ...yamlFilesUnder(path.join(ROOT, 'deploy', 'istio')).map((f) => path.relative(ROOT, f))];
    let checked = 0;
    for (const file of files) {
      const lines = fs.readFileSync(path.join(ROOT, file), 'utf8').split('\n');
      lines.forEach((line, i) => {
        if (!/^\s*failure_mode_deny:/.test(line)) return;
        let j = i - 1;
        const comment: string[] = [];
        while (j >= 0 && /^\s*#/.test(lines[j])) comment.unshift(lines[j--]);
        const text = comment.join(' ');
        const statuses = [...text.matchAll(/\b([45]\d\d)\b/g)].map((m) => m[1]);
        expect({ file, line: i + 1, statuses: statuses.filter((c) => c !== '500' && !/status_on_error/.test(text)) }).toEqual({
          file,
          line: i + 1,
          statuses: [],
        });
        expect({ file, line: i + 1, names500: statuses.includes('500') }).toEqual({ file, line: i + 1, names500: true });
        checked++;
      });
    }
    expect(checked).toBeGreaterThanOrEqual(3);
  });
});
