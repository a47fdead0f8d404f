import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseAllDocuments } from 'yaml';
import { loadConfigPath } from '../../src/config/load';
import { matchDescriptor } from '../../src/config/match';
import type { RateLimitConfig } from '../../src/config/types';
import type { Entry } from '../../src/limiter/types';
import { loadSettings } from '../../src/settings';

/**
 * The shipped deployment files against the service: every YAML parses, every limits file a
 * deployment serves loads, and every descriptor the shipped Envoy and Istio configs send finds a
 * rule in the limits shipped next to them.
 */

const ROOT = path.resolve(__dirname, '..', '..');
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

/** Header values a request could carry; :path comes from the route's match. */
function sampleHeader(header: string, requestPath: string): string {
  if (header === ':path') return requestPath;
  if (header.toLowerCase() === 'x-api-key') return 'demo-key';
  return 'sample';
}

/** A request path the route matches: its exact path, or something under its prefix. */
function samplePath(match: Obj | undefined): string {
  if (match?.path) return String(match.path);
  return `${String(match?.prefix ?? '/')}sample`;
}

/** The entry one action appends (Envoy's default keys where the action leaves them out). */
function entryOf(action: Obj, requestPath: string): Entry {
  const [kind, spec] = Object.entries(action)[0] as [string, Obj];
  switch (kind) {
    case 'request_headers':
      return { key: spec.descriptor_key, value: sampleHeader(spec.header_name, requestPath) };
    case 'remote_address':
      return { key: 'remote_address', value: SAMPLE_REMOTE_ADDRESS };
    case 'generic_key':
      return { key: spec.descriptor_key ?? 'generic_key', value: spec.descriptor_value };
    case 'header_value_match':
      return { key: spec.descriptor_key ?? 'header_match', value: spec.descriptor_value };
    default:
      throw new Error(`rate_limits action ${kind} has no sample here`);
  }
}

interface SentDescriptor {
  readonly where: string;
  readonly entries: Entry[];
}

function descriptorsOf(rateLimits: Obj[], requestPath: string, where: string): SentDescriptor[] {
  return rateLimits.map((rl, i) => ({
    where: `${where} rate_limits[${i}]`,
    entries: (rl.actions as Obj[]).map((a) => entryOf(a, requestPath)),
  }));
}

function describeEntries(entries: Entry[]): string {
  return entries.map((e) => `(${e.key}, ${e.value})`).join(', ');
}

/** The descriptors that do not match a rule, as readable lines (empty when all match). */
function unmatched(config: RateLimitConfig, domain: string, sent: SentDescriptor[]): string[] {
  return sent.filter((d) => matchDescriptor(config, domain, d.entries) === undefined).map((d) => `${d.where}: ${describeEntries(d.entries)}`);
}

/* ---------- envoy.yaml ---------- */

const envoy = readDocs(path.join(ROOT, 'envoy.yaml'))[0];

function envoyHcm(): Obj {
  const filters = envoy.static_resources.listeners.flatMap((l: Obj) => l.filter_chains.flatMap((c: Obj) => c.filters));
  return filters.find((f: Obj) => f.name === 'envoy.filters.network.http_connection_manager').typed_config;
}

function envoyDescriptors(): SentDescriptor[] {
  const sent: SentDescriptor[] = [];
  for (const vh of envoyHcm().route_config.virtual_hosts as Obj[]) {
    sent.push(...descriptorsOf(vh.rate_limits ?? [], '/sample', `virtual host ${vh.name}`));
    for (const route of vh.routes as Obj[]) {
      const where = `route ${JSON.stringify(route.match)}`;
      sent.push(...descriptorsOf(route.route?.rate_limits ?? [], samplePath(route.match), where));
    }
  }
  return sent;
}

/* ---------- Istio EnvoyFilters ---------- */

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
        return descriptorsOf(rateLimits ?? [], '/sample', `${path.basename(file)} patch ${i} (${p.match.context})`);
      });
    if (domains.length !== 1) throw new Error(`${file}: expected one ratelimit filter, found ${domains.length}`);
    return { file: path.basename(file), domain: domains[0], sent };
  });
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

  test.each(['kubernetes', 'istio'])('every resource the %s kustomization lists exists', (variant) => {
    const dir = path.join(ROOT, 'deploy', variant);
    const kustomization = readDocs(path.join(dir, 'kustomization.yaml'))[0];
    for (const r of kustomization.resources as string[]) expect(fs.existsSync(path.join(dir, r))).toBe(true);
  });
});

describe('limits served by each deployment', () => {
  test.each(fs.readdirSync(EXAMPLES).filter((f) => /\.ya?ml$/.test(f)))('examples/%s loads', async (file) => {
    const config = await loadConfigPath(path.join(EXAMPLES, file), LOAD);
    expect(config.domains.size).toBe(1);
  });

  test('examples/ as a whole loads, as `make run` and docker compose serve it', async () => {
    const config = await loadConfigPath(EXAMPLES, LOAD);
    expect([...config.domains.keys()].sort()).toEqual(['edge', 'ratelimit']);
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
    const kinds = new Set(
      envoyDescriptors().flatMap((d) => d.entries.map((e) => e.key)),
    );
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

  test("Istio's VIRTUAL_HOST patch sends the task's (PATH, <path>) descriptor, and /productpage gets 1 per minute", async () => {
    const config = await loadConfigMap(configMap('istio', 'ratelimit-config'));
    const gateway = istioFilterDescriptors().find((f) => f.file === 'filter-ratelimit-gateway.yaml')!;
    expect(gateway.sent.map((d) => d.entries.map((e) => e.key))).toEqual([['PATH']]);
    const rule = matchDescriptor(config, gateway.domain, [{ key: 'PATH', value: '/productpage' }]);
    expect(rule?.limit).toMatchObject({ requestsPerUnit: 1, unit: 'minute' });
  });

  test('the example limits show the sliding window default, unit_multiplier, a wildcard, nesting, shadow mode and unlimited', async () => {
    const config = await loadConfigPath(EXAMPLES, LOAD);
    const edge = (entries: [string, string][]) => matchDescriptor(config, 'edge', entries.map(([key, value]) => ({ key, value })));
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
    expect(edge([['route', 'login'], ['remote_address', SAMPLE_REMOTE_ADDRESS]])?.limit).toMatchObject({
      algorithm: 'sliding_log',
      requestsPerUnit: 5,
    });
    expect(edge([['route', 'login']])).toBeUndefined();
    expect(edge([['remote_address', SAMPLE_REMOTE_ADDRESS], ['method', 'write']])?.limit.requestsPerUnit).toBe(60);
    expect(edge([['generic_key', 'all']])?.shadowMode).toBe(true);
  });
});
