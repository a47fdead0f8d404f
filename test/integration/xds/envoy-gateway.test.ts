import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { TestAdsServer } from '../../helpers/ads-server';
import { makeTestCerts, type CertFiles } from '../../helpers/certs';
import { descriptor, grpc, rlsClient } from '../../helpers/grpc-client';
import { freePort, startRedis, type RedisServer } from '../../helpers/redis';
import { createRlsClient, type RlsClient } from '../../../src/cli/rls-client';

/**
 * The built service (dist/src/main.js) started with the environment Envoy Gateway gives its
 * rate-limit Deployment, pointed at a test control plane that serves what Envoy Gateway's
 * translator serves (one RateLimitConfig per listener domain, route name -> rule-N-match-M):
 * /healthcheck answers 200 before any config (the probes), the gRPC port speaks TLS without asking
 * a client certificate (GRPC_SERVER_TLS_CA_CERT is not a setting), the control plane is reached
 * over mTLS with TLS 1.3, and the decisions are the ones the served rules define.
 */

const MAIN_JS = path.resolve(__dirname, '../../../dist/src/main.js');
const NODE = 'envoy-ratelimit';
const DOMAIN = 'default/eg/http';
const ROUTE = 'httproute/default/backend/rule/0';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function waitFor(what: string, check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await check().catch(() => false))) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

describe("Envoy Gateway's rate-limit Deployment environment", () => {
  // The module object: Envoy Gateway's control plane accepts TLS 1.3 only.
  const tls = process.getBuiltinModule('node:tls') as { DEFAULT_MIN_VERSION: string };
  let previousMin: string;
  let certs: CertFiles;
  let redis: RedisServer;
  let ads: TestAdsServer;
  let child: ChildProcess;
  let client: RlsClient;
  let httpPort: number;
  let grpcPort: number;
  let output = '';

  beforeAll(async () => {
    if (!fs.existsSync(MAIN_JS)) throw new Error(`${MAIN_JS} is missing: build first (npx tsc -p tsconfig.json, or make test)`);
    previousMin = tls.DEFAULT_MIN_VERSION;
    tls.DEFAULT_MIN_VERSION = 'TLSv1.3';
    certs = makeTestCerts();
    redis = await startRedis();
    ads = new TestAdsServer({
      tls: { cert: fs.readFileSync(certs.serverCert), key: fs.readFileSync(certs.serverKey), clientCa: fs.readFileSync(certs.caCert) },
    });
    await ads.start();
    const mapper = path.join(certs.dir, 'statsd-exporter.yaml');
    fs.writeFileSync(mapper, 'mappings: []\n');
    [grpcPort, httpPort] = [await freePort(), await freePort()];
    child = spawn(process.execPath, [MAIN_JS], {
      env: {
        PATH: process.env.PATH,
        // As Envoy Gateway sets them (resource.go), file paths pointing at the test's certificates.
        RUNTIME_ROOT: '/data',
        RUNTIME_SUBDIRECTORY: 'ratelimit',
        RUNTIME_IGNOREDOTFILES: 'true',
        RUNTIME_WATCH_ROOT: 'false',
        LOG_LEVEL: 'info',
        USE_STATSD: 'false',
        CONFIG_TYPE: 'GRPC_XDS_SOTW',
        CONFIG_GRPC_XDS_SERVER_URL: `localhost:${ads.port}`,
        CONFIG_GRPC_XDS_NODE_ID: NODE,
        GRPC_SERVER_USE_TLS: 'true',
        GRPC_SERVER_TLS_CERT: certs.serverCert,
        GRPC_SERVER_TLS_KEY: certs.serverKey,
        GRPC_SERVER_TLS_CA_CERT: certs.caCert,
        CONFIG_GRPC_XDS_SERVER_USE_TLS: 'true',
        CONFIG_GRPC_XDS_CLIENT_TLS_CERT: certs.clientCert,
        CONFIG_GRPC_XDS_CLIENT_TLS_KEY: certs.clientKey,
        CONFIG_GRPC_XDS_SERVER_TLS_CACERT: certs.caCert,
        FORCE_START_WITHOUT_INITIAL_CONFIG: 'true',
        REDIS_SOCKET_TYPE: 'tcp',
        REDIS_URL: redis.url,
        USE_PROMETHEUS: 'true',
        PROMETHEUS_ADDR: `127.0.0.1:${await freePort()}`,
        PROMETHEUS_MAPPER_YAML: mapper,
        // The test's own: every listener on loopback, on free ports.
        GRPC_HOST: '127.0.0.1',
        GRPC_PORT: String(grpcPort),
        HOST: '127.0.0.1',
        PORT: String(httpPort),
        DEBUG_HOST: '127.0.0.1',
        DEBUG_PORT: '0',
        // A cold process on a loaded test machine may miss the 10 ms default; this test is about rules, not latency.
        STORE_TIMEOUT_MS: '1000',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
    client = createRlsClient({ address: `localhost:${grpcPort}`, credentials: grpc.credentials.createSsl(fs.readFileSync(certs.caCert)) });
  }, 30_000);

  afterAll(async () => {
    client?.close();
    if (child && child.exitCode === null) child.kill('SIGKILL');
    await ads?.stop();
    await redis?.stop();
    certs?.remove();
    tls.DEFAULT_MIN_VERSION = previousMin;
  });

  test('probes pass before any config; then the served rules decide', async () => {
    // Startup, readiness and liveness probes: GET /healthcheck on 8080, before the control plane has sent anything.
    await waitFor('/healthcheck 200', async () => (await fetch(`http://127.0.0.1:${httpPort}/healthcheck`)).status === 200, 15_000);
    expect(ads.acks('1')).toHaveLength(0);

    ads.setSnapshot(NODE, '1', [
      {
        name: DOMAIN,
        domain: DOMAIN,
        descriptors: [
          {
            key: ROUTE,
            value: ROUTE,
            descriptors: [
              { key: 'rule-0-match-0', rateLimit: { unit: 'MINUTE', requestsPerUnit: 2 } },
              { key: 'rule-1-match-0', value: 'rule-1-match-0', rateLimit: { unit: 'HOUR', requestsPerUnit: 1 } },
            ],
          },
        ],
      },
    ]);
    const ask = (entries: [string, string][]) => client.shouldRateLimit({ domain: DOMAIN, descriptors: [descriptor(entries)] });
    const perUser = (user: string): [string, string][] => [
      [ROUTE, ROUTE],
      ['rule-0-match-0', user],
    ];
    await waitFor('the served config', async () => (await ask(perUser(`probe-${Date.now()}`))).overallCode === 'OK', 10_000);

    const alice = [];
    for (let i = 0; i < 3; i++) alice.push((await ask(perUser('alice'))).overallCode);
    expect(alice).toEqual(['OK', 'OK', 'OVER_LIMIT']);
    expect((await ask(perUser('bob'))).statuses[0]).toMatchObject({ code: 'OK', limitRemaining: 1, currentLimit: { requestsPerUnit: 2, unit: 'MINUTE' } });
    const shared: [string, string][] = [
      [ROUTE, ROUTE],
      ['rule-1-match-0', 'rule-1-match-0'],
    ];
    expect((await ask(shared)).overallCode).toBe('OK');
    expect((await ask(shared)).overallCode).toBe('OVER_LIMIT');
    // A descriptor the rules do not name is not limited.
    expect(
      (
        await ask([
          [ROUTE, ROUTE],
          ['rule-9-match-0', 'x'],
        ])
      ).statuses[0],
    ).toMatchObject({ code: 'OK', currentLimit: null });
    // No client certificate was needed on the gRPC port; every ACK names the node.
    expect(ads.acks('1').every((r) => r.nodeId === NODE)).toBe(true);
    expect(child.exitCode).toBeNull();
  }, 40_000);

  test('an unencrypted client is refused on the TLS gRPC port', async () => {
    const plain = rlsClient(`127.0.0.1:${grpcPort}`);
    try {
      await expect(plain.healthCheck('', { deadlineMs: 1_000 })).rejects.toBeDefined();
    } finally {
      plain.close();
    }
    expect(output).not.toMatch(/"level":(50|60)|ERROR|FATAL/);
  });
});
