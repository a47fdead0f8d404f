import { execFile, execFileSync, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as path from 'node:path';
import { parseAllDocuments } from 'yaml';
import { loadSettings, type Settings } from '../../../src/settings/settings';

/**
 * The deployment files agree with the settings table: every environment variable they set is one
 * the service reads (and holds a valid value), and every port, probe and health path they use is
 * where the service, so configured, listens.
 */

const ROOT = path.resolve(__dirname, '..', '..', '..');

type Obj = Record<string, any>;

function readDocs(file: string): Obj[] {
  return parseAllDocuments(fs.readFileSync(path.join(ROOT, file), 'utf8'))
    .map((d) => d.toJS() as Obj)
    .filter((d) => d !== null && d !== undefined);
}

function yamlFilesUnder(dir: string): string[] {
  return fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) return yamlFilesUnder(p);
    return /\.ya?ml$/.test(e.name) ? [p] : [];
  });
}

/**
 * Names the settings table reads: the upper-case string literals of src/settings/settings.ts, and the
 * Redis connection variables it reads by suffix (`name('TYPE')`) under both prefixes.
 */
const SETTINGS_TEXT = fs.readFileSync(path.join(ROOT, 'src', 'settings', 'settings.ts'), 'utf8');
const SETTING_NAMES = new Set([
  ...[...SETTINGS_TEXT.matchAll(/'([A-Z][A-Z0-9_]+)'/g)].map((m) => m[1]),
  ...[...SETTINGS_TEXT.matchAll(/name\('([A-Z][A-Z0-9_]+)'\)/g)].flatMap((m) => [`REDIS_${m[1]}`, `GLOBAL_REDIS_${m[1]}`]),
]);

const HEALTH_PATH = '/healthcheck';
const LIVENESS_PATH = '/livez';
const READINESS_PATH = '/readyz';

/** RSS measured per process (see deploy/kubernetes/deployment.yaml): the supervisor, and a worker at its peak. */
const SUPERVISOR_MIB = 70;
const WORKER_PEAK_MIB = 130;
/** The process exits at most this long after SHUTDOWN_GRACE_MS on its own (src/main.ts). */
const EXIT_MARGIN_MS = 1_000;

/** `kubectl kustomize DIR` when kubectl is installed: the objects exactly as `kubectl apply -k` sends them. */
const KUBECTL = spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8' }).status === 0;

function rendered(dir: string): Obj[] | undefined {
  if (!KUBECTL) return undefined;
  const text = execFileSync('kubectl', ['kustomize', path.join(ROOT, dir)], { encoding: 'utf8' });
  return parseAllDocuments(text)
    .map((d) => d.toJS() as Obj)
    .filter((d) => d !== null && d !== undefined);
}

/** Kubernetes quantities as the manifests write them: "512Mi", "1Gi", "2", "500m". */
function mebibytes(quantity: string): number {
  const m = /^(\d+)(Mi|Gi)$/.exec(quantity);
  if (!m) throw new Error(`memory quantity "${quantity}" not in Mi or Gi`);
  return Number(m[1]) * (m[2] === 'Gi' ? 1024 : 1);
}

function cpus(quantity: string): number {
  return quantity.endsWith('m') ? Number(quantity.slice(0, -1)) / 1000 : Number(quantity);
}

interface ServiceContainer {
  readonly where: string;
  readonly container: Obj;
  readonly env: Record<string, string>;
  readonly settings: Settings;
  readonly labels: Record<string, string>;
  readonly pod: Obj;
  readonly objects: Obj[];
}

/** The slidegate containers of the Kubernetes and Istio variants (image `slidegate`), with their settings. */
function serviceContainers(): ServiceContainer[] {
  return (['deploy/kubernetes', 'deploy/istio'] as const).flatMap((dir) => {
    const objects =
      rendered(dir) ??
      yamlFilesUnder(dir)
        .filter((f) => !f.endsWith('kustomization.yaml'))
        .flatMap(readDocs);
    return objects
      .filter((o) => o.kind === 'Deployment')
      .flatMap((d) =>
        (d.spec.template.spec.containers as Obj[])
          .filter((c) => /^([\w.-]+\/)*slidegate(:|$)/.test(c.image))
          .map((container) => {
            const env = Object.fromEntries(((container.env ?? []) as Obj[]).map((e) => [e.name, String(e.value)]));
            return {
              where: `${dir} ${d.metadata.name}/${container.name}`,
              container,
              env,
              settings: loadSettings(env, { parallelism: () => 64, quota: () => undefined }),
              labels: d.spec.template.metadata.labels,
              pod: d.spec.template.spec,
              objects,
            };
          }),
      );
  });
}

/** Every TCP port the service, so configured, listens on. */
function listenPorts(s: Settings): number[] {
  const prometheus = s.usePrometheus && !s.disableStats ? [s.prometheus.port] : [];
  return [s.httpPort, s.grpcPort, s.debugPort, ...prometheus];
}

describe('Kubernetes and Istio manifests', () => {
  const containers = serviceContainers();

  test('both variants run the slidegate image', () => {
    expect(containers.map((c) => c.where)).toEqual(['deploy/kubernetes ratelimit/ratelimit', 'deploy/istio ratelimit/ratelimit']);
  });

  test('every environment variable they set is one the service reads', () => {
    for (const c of containers) {
      expect({ where: c.where, unknown: Object.keys(c.env).filter((n) => !SETTING_NAMES.has(n)) }).toEqual({ where: c.where, unknown: [] });
    }
  });

  test("Istio's variant keeps the sample's environment: Redis over TCP, no statsd, config under /data/ratelimit", () => {
    const istio = containers.find((c) => c.where.startsWith('deploy/istio'))!;
    expect(istio.env).toMatchObject({
      REDIS_URL: 'redis:6379',
      REDIS_SOCKET_TYPE: 'tcp',
      USE_STATSD: 'false',
      RUNTIME_ROOT: '/data',
      RUNTIME_SUBDIRECTORY: 'ratelimit',
      RUNTIME_WATCH_ROOT: 'false',
      RUNTIME_IGNOREDOTFILES: 'true',
    });
    expect(istio.settings.backendType).toBe('redis');
  });

  test('containers expose the HTTP, gRPC and debug ports the settings listen on', () => {
    for (const c of containers) {
      const declared = (c.container.ports as Obj[]).map((p) => p.containerPort).sort();
      expect({ where: c.where, ports: declared }).toEqual({ where: c.where, ports: listenPorts(c.settings).sort() });
    }
  });

  test('are rendered by `kubectl kustomize` when kubectl is installed', () => {
    if (KUBECTL) expect(containers.every((c) => c.objects.some((o) => o.kind === 'Service'))).toBe(true);
    else expect(rendered('deploy/kubernetes')).toBeUndefined();
  });

  test('gRPC probes ask the gRPC port and HTTP probes ask a health path on the HTTP port', () => {
    for (const c of containers) {
      const probes = ['startupProbe', 'readinessProbe', 'livenessProbe'].map((k) => c.container[k]).filter(Boolean) as Obj[];
      for (const p of probes) {
        if (p.grpc) {
          expect(p.grpc.port).toBe(c.settings.grpcPort);
          expect(['', 'ratelimit', undefined]).toContain(p.grpc.service);
        }
        if (p.httpGet) {
          expect(p.httpGet.port).toBe(c.settings.httpPort);
          expect([HEALTH_PATH, LIVENESS_PATH, READINESS_PATH]).toContain(p.httpGet.path);
        }
      }
    }
  });

  test('liveness asks /livez, which never depends on Redis, and readiness asks /readyz', () => {
    for (const c of containers) {
      expect({ where: c.where, liveness: c.container.livenessProbe?.httpGet?.path }).toEqual({ where: c.where, liveness: LIVENESS_PATH });
      expect({ where: c.where, readiness: c.container.readinessProbe?.httpGet?.path }).toEqual({ where: c.where, readiness: READINESS_PATH });
      if (c.container.startupProbe) expect(c.container.startupProbe.httpGet?.path).toBe(LIVENESS_PATH);
    }
  });

  test('HOST and GRPC_HOST are "::", as in Istio\'s sample: every address family', () => {
    for (const c of containers) {
      expect({ where: c.where, http: c.settings.httpHost, grpc: c.settings.grpcHost }).toEqual({ where: c.where, http: '::', grpc: '::' });
    }
  });

  test('set WORKERS and a CPU limit to match, and a memory limit that holds that many workers at their measured peak', () => {
    for (const c of containers) {
      const { limits, requests } = c.container.resources;
      expect({ where: c.where, WORKERS: c.env.WORKERS }).toEqual({ where: c.where, WORKERS: expect.stringMatching(/^\d+$/) });
      const workers = c.settings.workers;
      expect(Math.ceil(cpus(limits.cpu))).toBe(workers);
      const needMib = workers > 1 ? SUPERVISOR_MIB + workers * WORKER_PEAK_MIB : WORKER_PEAK_MIB;
      expect({ where: c.where, limitMib: mebibytes(limits.memory) >= needMib * 1.25 }).toEqual({ where: c.where, limitMib: true });
      expect(mebibytes(requests.memory)).toBeGreaterThanOrEqual(needMib);
      expect(mebibytes(requests.memory)).toBeLessThanOrEqual(mebibytes(limits.memory));
    }
  });

  test('the rollout waits: a preStop sleep, then SIGTERM, and terminationGracePeriodSeconds covers both and SHUTDOWN_GRACE_MS', () => {
    for (const c of containers) {
      const preStop = c.container.lifecycle?.preStop;
      const sleepS = preStop?.sleep?.seconds ?? (preStop?.exec?.command?.[0] === 'sleep' ? Number(preStop.exec.command[1]) : undefined);
      expect({ where: c.where, sleepS }).toEqual({ where: c.where, sleepS: expect.any(Number) });
      expect(sleepS).toBeGreaterThanOrEqual(5);
      const neededMs = sleepS! * 1000 + c.settings.shutdownGraceMs + EXIT_MARGIN_MS;
      expect({ where: c.where, graceCovers: c.pod.terminationGracePeriodSeconds * 1000 > neededMs }).toEqual({ where: c.where, graceCovers: true });
    }
  });

  test('the Kubernetes Deployment runs 3 non-root replicas on a read-only root filesystem', () => {
    const k8s = containers.find((c) => c.where.startsWith('deploy/kubernetes'))!;
    const deployment = k8s.objects.find((o) => o.kind === 'Deployment' && o.metadata.name === 'ratelimit')!;
    expect(deployment.spec.replicas).toBe(3);
    expect(deployment.spec.template.spec.securityContext.runAsNonRoot).toBe(true);
    expect(k8s.container.securityContext.readOnlyRootFilesystem).toBe(true);
    expect(k8s.container.resources.requests).toBeDefined();
    expect(k8s.env.REDIS_URL).toBeDefined();
  });

  test('Services route their named ports to ports the service listens on, gRPC under a grpc- name, never the debug port', () => {
    for (const c of containers) {
      const services = c.objects.filter(
        (o) => o.kind === 'Service' && Object.entries(o.spec.selector as Record<string, string>).every(([k, v]) => c.labels[k] === v),
      );
      expect(services.length).toBeGreaterThan(0);
      for (const svc of services) {
        for (const p of svc.spec.ports as Obj[]) {
          const target = p.targetPort ?? p.port;
          expect(listenPorts(c.settings)).toContain(target);
          // The debug port shows every rule and its traffic: reachable by port-forward only.
          expect({ service: svc.metadata.name, target }).not.toEqual({ service: svc.metadata.name, target: c.settings.debugPort });
          if (target === c.settings.grpcPort) expect(p.name).toMatch(/^grpc-/);
        }
      }
      const main = services.find((s) => s.metadata.name === 'ratelimit')!;
      const names = Object.fromEntries((main.spec.ports as Obj[]).map((p) => [p.name, p.port]));
      expect(names).toEqual({ 'grpc-ratelimit': c.settings.grpcPort, http: c.settings.httpPort });
    }
  });

  test('the PodDisruptionBudget and the autoscaler target the Kubernetes Deployment', () => {
    const k8s = containers.find((c) => c.where.startsWith('deploy/kubernetes'))!;
    const pdb = k8s.objects.find((o) => o.kind === 'PodDisruptionBudget')!;
    expect(Object.entries(pdb.spec.selector.matchLabels).every(([k, v]) => k8s.labels[k] === v)).toBe(true);
    const hpa = k8s.objects.find((o) => o.kind === 'HorizontalPodAutoscaler')!;
    expect(hpa.apiVersion).toBe('autoscaling/v2');
    expect(hpa.spec.scaleTargetRef).toEqual({ apiVersion: 'apps/v1', kind: 'Deployment', name: 'ratelimit' });
    expect(hpa.spec.minReplicas).toBeGreaterThanOrEqual(2);
  });

  test("Istio's filters use the cluster Istio generates for the ratelimit Service's gRPC port", () => {
    const istioObjects = yamlFilesUnder('deploy/istio').flatMap(readDocs);
    const clusterNames = istioObjects
      .filter((o) => o.kind === 'EnvoyFilter')
      .flatMap((o) => o.spec.configPatches as Obj[])
      .filter((p) => p.applyTo === 'HTTP_FILTER')
      .map((p) => p.patch.value.typed_config.rate_limit_service.grpc_service.envoy_grpc.cluster_name as string);
    expect(clusterNames.length).toBe(2);
    for (const name of clusterNames) {
      const m = /^outbound\|(\d+)\|\|([^.]+)\.([^.]+)\.svc\.cluster\.local$/.exec(name);
      expect(m).not.toBeNull();
      const [, port, svcName, namespace] = m!;
      const svc = istioObjects.find((o) => o.kind === 'Service' && o.metadata.name === svcName && (o.metadata.namespace ?? 'default') === namespace);
      expect(svc).toBeDefined();
      const svcPort = (svc!.spec.ports as Obj[]).find((p) => p.port === Number(port))!;
      expect(svcPort.name).toMatch(/^grpc-/);
    }
  });
});

describe('docker', () => {
  // Continuation lines joined, so every instruction is one line.
  const dockerfile = fs.readFileSync(path.join(ROOT, 'deploy', 'docker', 'Dockerfile'), 'utf8').replace(/\\\n\s*/g, ' ');
  const defaults = loadSettings({});

  test('the image exposes the default ports', () => {
    const exposed = /^EXPOSE\s+(.+)$/m.exec(dockerfile)![1].split(/\s+/).map(Number).sort();
    expect(exposed).toEqual(listenPorts(defaults).sort());
  });

  test('the image health check passes when PORT answers 200 on /livez, and fails otherwise', async () => {
    const argv = JSON.parse(/^HEALTHCHECK .*?CMD (\[.*\])$/m.exec(dockerfile)![1]) as string[];
    expect(argv.slice(0, 2)).toEqual(['node', '-e']);
    let status = 200;
    const seen: string[] = [];
    const server = http.createServer((req, res) => {
      seen.push(req.url ?? '');
      res.statusCode = req.url === LIVENESS_PATH ? status : 404;
      res.end();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    const check = () =>
      new Promise<number>((resolve) => {
        execFile(process.execPath, argv.slice(1), { env: { ...process.env, PORT: String(port) } }, (err) =>
          resolve(err ? ((err as { code?: number }).code ?? 1) : 0),
        );
      });
    try {
      expect(await check()).toBe(0);
      status = 503;
      expect(await check()).toBe(1);
      expect(seen).toEqual([LIVENESS_PATH, LIVENESS_PATH]);
    } finally {
      server.close();
    }
  });

  test('both stages start from a Node LTS still supported, pinned by digest', () => {
    const arg = /^ARG NODE_IMAGE=(\S+)$/m.exec(dockerfile);
    expect(arg).not.toBeNull();
    const m = /^node:(\d+)\.(\d+)\.(\d+)-[\w-]+@sha256:[0-9a-f]{64}$/.exec(arg![1]);
    expect(m).not.toBeNull();
    // Even majors become LTS; 20 reached end of life in April 2026, 22 is supported until April 2027, 24 until April 2028.
    const major = Number(m![1]);
    expect(major % 2).toBe(0);
    expect(major).toBeGreaterThanOrEqual(22);
    const froms = [...dockerfile.matchAll(/^FROM (\S+)/gm)].map((f) => f[1]);
    expect(froms).toEqual(['${NODE_IMAGE}', '${NODE_IMAGE}']);
  });

  test('dependencies are installed once (`npm ci` in the build stage, pruned, copied)', () => {
    const runs = dockerfile.split('\n').filter((l) => l.startsWith('RUN '));
    expect(runs.join('\n').match(/\bnpm ci\b/g)).toHaveLength(1);
    expect(dockerfile).toMatch(/npm prune --omit=dev/);
    expect(dockerfile).toMatch(/^COPY --from=build \/src\/node_modules \.\/node_modules$/m);
  });

  test('the image runs as a numeric non-root user and bakes examples/ in at the default config directory', () => {
    const user = /^USER\s+(\d+)(?::\d+)?$/m.exec(dockerfile);
    expect(user).not.toBeNull();
    expect(Number(user![1])).toBeGreaterThan(0);
    const configDir = path.posix.join(defaults.runtimeRoot, defaults.runtimeSubdirectory, defaults.runtimeAppDirectory);
    expect(dockerfile).toMatch(new RegExp(`^COPY examples ${configDir}$`, 'm'));
  });

  test('every file the Dockerfile copies from the context exists and is not excluded by .dockerignore', () => {
    const ignored = fs
      .readFileSync(path.join(ROOT, '.dockerignore'), 'utf8')
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith('#'));
    const sources = [...dockerfile.matchAll(/^COPY (?!--from)(.+) \S+$/gm)].flatMap((m) => m[1].split(/\s+/));
    expect(sources.length).toBeGreaterThan(0);
    for (const src of sources) {
      expect(fs.existsSync(path.join(ROOT, src))).toBe(true);
      expect(ignored).not.toContain(src.split('/')[0]);
    }
  });

  test('docker compose sets only settings the service reads, and publishes its ports', () => {
    const compose = readDocs('deploy/docker/docker-compose.yaml')[0];
    const svc = compose.services.ratelimit;
    const env = svc.environment as Record<string, string>;
    expect(Object.keys(env).filter((n) => !SETTING_NAMES.has(n))).toEqual([]);
    const settings = loadSettings(env);
    expect(settings.backendType).toBe('redis');
    const published = (svc.ports as string[]).map((p) => Number(p.split(':').pop()));
    expect(published.sort()).toEqual(listenPorts(settings).sort());
    // Local use: every published port binds to the loopback address only.
    for (const service of ['ratelimit', 'envoy']) {
      for (const p of compose.services[service].ports as string[])
        expect({ service, p, local: p.startsWith('127.0.0.1:') }).toEqual({ service, p, local: true });
    }
    expect(env.REDIS_URL.split(':')[0]).toBe('redis');
    expect(compose.services.redis).toBeDefined();
  });

  test("docker compose mounts envoy.yaml into Envoy, whose clusters reach the service's gRPC port and the upstream", () => {
    const compose = readDocs('deploy/docker/docker-compose.yaml')[0];
    const mount = (compose.services.envoy.volumes as string[]).map((v) => v.split(':')).find(([src]) => src.endsWith('envoy.yaml'))!;
    expect(path.resolve(ROOT, 'deploy', 'docker', mount[0])).toBe(path.join(ROOT, 'envoy.yaml'));
    const envoy = readDocs('envoy.yaml')[0];
    const endpoint = (name: string): Obj =>
      envoy.static_resources.clusters.find((c: Obj) => c.name === name).load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address;
    const settings = loadSettings(compose.services.ratelimit.environment);
    expect(endpoint('ratelimit')).toEqual({ address: 'ratelimit', port_value: settings.grpcPort });
    expect(compose.services[endpoint('echo').address]).toBeDefined();
    const ratelimitCluster = envoy.static_resources.clusters.find((c: Obj) => c.name === 'ratelimit');
    expect(ratelimitCluster.typed_extension_protocol_options['envoy.extensions.upstreams.http.v3.HttpProtocolOptions'].explicit_http_config).toEqual({
      http2_protocol_options: {},
    });
  });

  test('envoy.yaml runs the ratelimit filter before the router, on v3, with draft-03 rate-limit headers', () => {
    const envoy = readDocs('envoy.yaml')[0];
    const hcm = envoy.static_resources.listeners[0].filter_chains[0].filters[0].typed_config;
    expect(envoy.static_resources.listeners[0].address.socket_address.port_value).toBe(10000);
    const names = (hcm.http_filters as Obj[]).map((f) => f.name);
    expect(names).toEqual(['envoy.filters.http.ratelimit', 'envoy.filters.http.router']);
    const rl = hcm.http_filters[0].typed_config;
    expect(rl).toMatchObject({
      domain: 'edge',
      enable_x_ratelimit_headers: 'DRAFT_VERSION_03',
      rate_limit_service: { grpc_service: { envoy_grpc: { cluster_name: 'ratelimit' } }, transport_api_version: 'V3' },
    });
    expect(typeof rl.failure_mode_deny).toBe('boolean');
    expect(rl.timeout).toMatch(/^\d+(\.\d+)?s$/);
  });
});

describe('docker compose runs the service as Kubernetes does', () => {
  const compose = readDocs('deploy/docker/docker-compose.yaml')[0];
  const svc = compose.services.ratelimit;
  const k8s = serviceContainers().find((c) => c.where.startsWith('deploy/kubernetes'))!;

  test('with the same WORKERS and SHUTDOWN_GRACE_MS', () => {
    for (const name of ['WORKERS', 'SHUTDOWN_GRACE_MS']) expect({ name, value: svc.environment[name] }).toEqual({ name, value: k8s.env[name] });
  });

  test('stopping it waits SHUTDOWN_GRACE_MS and the exit margin before the kill', () => {
    const m = /^(\d+)s$/.exec(svc.stop_grace_period);
    expect(m).not.toBeNull();
    expect(Number(m![1]) * 1000).toBeGreaterThan(loadSettings(svc.environment).shutdownGraceMs + EXIT_MARGIN_MS);
  });

  test('Envoy starts once the service is ready (/readyz), not merely alive', () => {
    expect(compose.services.envoy.depends_on.ratelimit.condition).toBe('service_healthy');
    expect(svc.healthcheck.test.join(' ')).toContain(`:${loadSettings(svc.environment).httpPort}${READINESS_PATH}`);
  });
});
