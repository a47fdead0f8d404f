import * as fs from 'node:fs';
import { makeTestCerts, type CertFiles } from '../../helpers/certs';
import { TestAdsServer, type RateLimitConfigMessage } from '../../helpers/ads-server';
import { descriptor, grpc, grpcCode } from '../../helpers/grpc-client';
import { startTestService, type TestService } from '../../helpers/service';
import { capturedLogger } from '../../helpers/captured-logger';

/**
 * The service fed by a real ADS control plane (CONFIG_TYPE=GRPC_XDS_SOTW): a grpc-js server started
 * by the test speaks the state-of-the-world discovery protocol with versions and nonces, and the
 * service's answers follow its snapshots: the first one, an update, an invalid one (NACKed, old
 * rules kept), the control plane going away and coming back, and the starts with and without a config.
 */

const NODE = 'envoy-ratelimit';
const DOMAIN = 'default/eg/http';
const ROUTE = 'httproute/default/backend/rule/0';

/** Envoy Gateway's shape: route name -> rule-0-match-0 (the client's header value) with a limit per minute. */
function routeLimit(perMinute: number, name = DOMAIN): RateLimitConfigMessage {
  return {
    name,
    domain: DOMAIN,
    descriptors: [
      {
        key: ROUTE,
        value: ROUTE,
        descriptors: [{ key: 'rule-0-match-0', rateLimit: { unit: 'MINUTE', requestsPerUnit: perMinute } }],
      },
    ],
  };
}

const ask = (user: string) => ({
  domain: DOMAIN,
  descriptors: [
    descriptor([
      [ROUTE, ROUTE],
      ['rule-0-match-0', user],
    ]),
  ],
});

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function waitFor(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 5_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** The limit the service reports for a fresh key, or undefined when none matched or the call failed. */
async function limitFor(svc: TestService, key: string): Promise<number | undefined> {
  try {
    return (await svc.client.shouldRateLimit(ask(key))).statuses[0].currentLimit?.requestsPerUnit;
  } catch {
    return undefined;
  }
}

async function metric(svc: TestService, name: string): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${svc.service.httpPort}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line === undefined ? NaN : Number(line.split(' ')[1]);
}

/** The env pointing the service at `port`, with short reconnect waits. */
function xdsEnv(port: number, extra: Record<string, string> = {}): Record<string, string> {
  return {
    CONFIG_TYPE: 'GRPC_XDS_SOTW',
    CONFIG_GRPC_XDS_SERVER_URL: `127.0.0.1:${port}`,
    CONFIG_GRPC_XDS_NODE_ID: NODE,
    CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL: '100ms',
    XDS_CLIENT_BACKOFF_INITIAL_INTERVAL: '100ms',
    XDS_CLIENT_BACKOFF_MAX_INTERVAL: '400ms',
    ...extra,
  };
}

describe('rules from an xDS control plane', () => {
  let ads: TestAdsServer;
  let svc: TestService;
  const log = capturedLogger();

  beforeAll(async () => {
    ads = new TestAdsServer();
    const port = await ads.start();
    ads.setSnapshot(NODE, '1', [routeLimit(3)]);
    svc = await startTestService({ env: xdsEnv(port, { CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: 'x-tenant:edge,x-team:rl' }), logger: log.logger });
  });

  afterAll(async () => {
    await svc?.stop();
    await ads?.stop();
  });

  test('the first snapshot decides: its node id is sent, its version ACKed, its limit enforced', async () => {
    const first = ads.requests[0];
    expect(first).toMatchObject({ nodeId: NODE, versionInfo: '', responseNonce: '', resourceNames: [] });
    expect(first.typeUrl).toBe('type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig');
    expect(first.metadata).toMatchObject({ 'x-tenant': 'edge', 'x-team': 'rl' });
    await waitFor('the ACK of version 1', () => ads.acks('1').length === 1);
    const codes = [];
    for (let i = 0; i < 4; i++) codes.push((await svc.client.shouldRateLimit(ask('alice'))).overallCode);
    expect(codes).toEqual(['OK', 'OK', 'OK', 'OVER_LIMIT']);
    expect((await svc.client.shouldRateLimit(ask('bob'))).statuses[0]).toMatchObject({ code: 'OK', limitRemaining: 2 });
    expect(await svc.client.healthCheck('')).toBe('SERVING');
    expect(await metric(svc, 'ratelimit_service_config_load_success')).toBe(1);
  });

  test('says at the start that its resources hold one limit per descriptor (rate_limits and count_denied_requests are for files)', () => {
    expect(log.lines().filter((l) => /one rate_limit per descriptor/.test(l.msg))).toHaveLength(1);
    expect(log.text()).toMatch(/rate_limits\b.*count_denied_requests/);
  });

  test('an update applies within a second and is ACKed with its version', async () => {
    const started = Date.now();
    ads.setSnapshot(NODE, '2', [routeLimit(1)]);
    await waitFor('limit 1', async () => (await limitFor(svc, `u-${Date.now()}`)) === 1, 1_000);
    expect(Date.now() - started).toBeLessThan(1_000);
    await waitFor('the ACK of version 2', () => ads.acks('2').length === 1);
    expect(await metric(svc, 'ratelimit_service_config_load_success')).toBe(2);
  });

  test('an invalid snapshot is NACKed naming the resource and the path; the previous rules keep answering', async () => {
    const bad = routeLimit(5);
    (bad.descriptors as { descriptors: { rateLimit: Record<string, unknown> }[] }[])[0].descriptors[0].rateLimit = { requestsPerUnit: 5 };
    ads.setSnapshot(NODE, '3', [routeLimit(7, 'other'), bad]);
    await waitFor('a NACK', () => ads.nacks().length === 1);
    const nack = ads.nacks()[0];
    // The version still applied, the nonce of the rejected response, and why.
    expect(nack.versionInfo).toBe('2');
    expect(nack.responseNonce).not.toBe('');
    expect(nack.errorDetail?.code).toBe(3);
    expect(nack.errorDetail?.message).toBe(`RateLimitConfig "${DOMAIN}": descriptors[0].descriptors[0].rate_limit.unit: required (or unlimited: true)`);
    expect(await limitFor(svc, 'after-nack')).toBe(1);
    expect(await metric(svc, 'ratelimit_service_config_load_error')).toBe(1);
    expect(await svc.client.healthCheck('')).toBe('SERVING');
  });

  test('the control plane going away stops no decision; the client reconnects and follows the next snapshot', async () => {
    await ads.stop();
    await sleep(300);
    expect(await limitFor(svc, 'while-away')).toBe(1);
    expect(await svc.client.healthCheck('')).toBe('SERVING');
    const before = ads.requests.length;
    ads.setSnapshot(NODE, '4', [routeLimit(9)]);
    await ads.start();
    await waitFor('limit 9 after the restart', async () => (await limitFor(svc, `r-${Date.now()}`)) === 9);
    // The new stream announced the node and the version it still had (2: version 3 was rejected).
    expect(ads.requests[before]).toMatchObject({ nodeId: NODE, versionInfo: '2', responseNonce: '' });
    await waitFor('the ACK of version 4', () => ads.acks('4').length === 1);
  });
});

describe('starting without a config', () => {
  test('FORCE_START_WITHOUT_INITIAL_CONFIG: healthy at once, calls UNAVAILABLE until this node gets a config', async () => {
    const ads = new TestAdsServer();
    const port = await ads.start();
    // Only another node has a snapshot: the control plane answers node ids, not connections.
    ads.setSnapshot('someone-else', '1', [routeLimit(3)]);
    const svc = await startTestService({ env: xdsEnv(port, { FORCE_START_WITHOUT_INITIAL_CONFIG: 'true' }) });
    try {
      const health = await fetch(`http://127.0.0.1:${svc.service.httpPort}/healthcheck`);
      expect(health.status).toBe(200);
      expect(await svc.client.healthCheck('ratelimit')).toBe('SERVING');
      await waitFor('the subscription', () => ads.requests.length > 0);
      expect(await grpcCode(svc.client.shouldRateLimit(ask('alice')))).toBe(grpc.status.UNAVAILABLE);
      ads.setSnapshot(NODE, '1', [routeLimit(3)]);
      await waitFor('limit 3', async () => (await limitFor(svc, `f-${Date.now()}`)) === 3);
    } finally {
      await svc.stop();
      await ads.stop();
    }
  });

  test('without it, the service waits for the first config before it opens its ports', async () => {
    const ads = new TestAdsServer();
    const port = await ads.start();
    let started = false;
    const starting = startTestService({ env: xdsEnv(port) }).then((s) => {
      started = true;
      return s;
    });
    await waitFor('the subscription', () => ads.requests.length > 0);
    await sleep(200);
    expect(started).toBe(false);
    ads.setSnapshot(NODE, '1', [routeLimit(2)]);
    const svc = await starting;
    try {
      expect(await limitFor(svc, 'w')).toBe(2);
      expect(await svc.client.healthCheck('')).toBe('SERVING');
    } finally {
      await svc.stop();
      await ads.stop();
    }
  });
});

describe('mTLS to the control plane', () => {
  let certs: CertFiles;
  // The module object itself: the minimum version is a plain property there.
  const tls = process.getBuiltinModule('node:tls') as { DEFAULT_MIN_VERSION: string };
  let previousMin: string;

  beforeAll(() => {
    certs = makeTestCerts();
    // As Envoy Gateway's control plane: TLS 1.3 only, and a client certificate is required.
    previousMin = tls.DEFAULT_MIN_VERSION;
    tls.DEFAULT_MIN_VERSION = 'TLSv1.3';
  });

  afterAll(() => {
    tls.DEFAULT_MIN_VERSION = previousMin;
    certs?.remove();
  });

  async function tlsAds(): Promise<TestAdsServer> {
    const ads = new TestAdsServer({
      tls: { cert: fs.readFileSync(certs.serverCert), key: fs.readFileSync(certs.serverKey), clientCa: fs.readFileSync(certs.caCert) },
    });
    await ads.start();
    ads.setSnapshot(NODE, '1', [routeLimit(4)]);
    return ads;
  }

  test('a client certificate from CONFIG_GRPC_XDS_CLIENT_TLS_*, the server checked against its CA and SAN', async () => {
    const ads = await tlsAds();
    const svc = await startTestService({
      env: xdsEnv(ads.port, {
        CONFIG_GRPC_XDS_SERVER_USE_TLS: 'true',
        CONFIG_GRPC_XDS_CLIENT_TLS_CERT: certs.clientCert,
        CONFIG_GRPC_XDS_CLIENT_TLS_KEY: certs.clientKey,
        CONFIG_GRPC_XDS_SERVER_TLS_CACERT: certs.caCert,
        // Dialled by address; the certificate names localhost.
        CONFIG_GRPC_XDS_SERVER_TLS_SAN: 'localhost',
      }),
    });
    try {
      expect(await limitFor(svc, 'tls')).toBe(4);
    } finally {
      await svc.stop();
      await ads.stop();
    }
  });

  test('a client certificate the control plane does not trust gets no config', async () => {
    const ads = await tlsAds();
    const svc = await startTestService({
      env: xdsEnv(ads.port, {
        FORCE_START_WITHOUT_INITIAL_CONFIG: 'true',
        CONFIG_GRPC_XDS_SERVER_USE_TLS: 'true',
        CONFIG_GRPC_XDS_CLIENT_TLS_CERT: certs.strangerCert,
        CONFIG_GRPC_XDS_CLIENT_TLS_KEY: certs.strangerKey,
        CONFIG_GRPC_XDS_SERVER_TLS_CACERT: certs.caCert,
        CONFIG_GRPC_XDS_SERVER_TLS_SAN: 'localhost',
      }),
    });
    try {
      await sleep(500);
      expect(ads.requests).toHaveLength(0);
      expect(await grpcCode(svc.client.shouldRateLimit(ask('x')))).toBe(grpc.status.UNAVAILABLE);
    } finally {
      await svc.stop();
      await ads.stop();
    }
  });
});
