import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { capturedLogger } from '../../helpers/captured-logger';
import { makeTestCerts, type CertFiles } from '../../helpers/certs';
import { LOOPBACK_ANY_PORT, startTestService, type TestService } from '../../helpers/service';

/**
 * What the service exposes beside a gRPC port that demands client certificates: POST /json (plaintext,
 * no certificate) answers 403 unless HTTP_JSON_ALLOW_WITHOUT_CLIENT_CERT says otherwise, and the start
 * says which; GRPC_CLIENT_TLS_CACERT without TLS stops the start; xDS header values never reach the log.
 */

const EDGE = 'domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 10}\n';
const BODY = JSON.stringify({ domain: 'edge', descriptors: [{ entries: [{ key: 'user', value: 'a' }] }] });
const MAIN_JS = path.resolve(__dirname, '../../../dist/src/main.js');

let certs: CertFiles;

beforeAll(() => {
  certs = makeTestCerts();
});

afterAll(() => {
  certs?.remove();
});

const postJson = (svc: TestService): Promise<Response> =>
  fetch(`http://127.0.0.1:${svc.service.httpPort}/json`, { method: 'POST', body: BODY, headers: { 'content-type': 'application/json' } });

describe('POST /json beside a gRPC port that demands client certificates', () => {
  const mtls = (): Record<string, string> => ({
    GRPC_SERVER_USE_TLS: 'true',
    GRPC_SERVER_TLS_CERT: certs.serverCert,
    GRPC_SERVER_TLS_KEY: certs.serverKey,
    GRPC_CLIENT_TLS_CACERT: certs.caCert,
  });

  it('answers 403, says so at start, and keeps the probes', async () => {
    const log = capturedLogger();
    const svc = await startTestService({ config: { 'edge.yaml': EDGE }, env: mtls(), logger: log.logger });
    try {
      const response = await postJson(svc);
      expect(response.status).toBe(403);
      expect(await response.text()).toMatch(/HTTP_JSON_ALLOW_WITHOUT_CLIENT_CERT/);
      expect((await fetch(`http://127.0.0.1:${svc.service.httpPort}/healthcheck`)).status).toBe(200);
      expect(log.lines().some((l) => /POST \/json answers 403/.test(l.msg))).toBe(true);
    } finally {
      await svc.stop();
    }
  });

  it('serves it with HTTP_JSON_ALLOW_WITHOUT_CLIENT_CERT=true, with a warning at start', async () => {
    const log = capturedLogger();
    const svc = await startTestService({ config: { 'edge.yaml': EDGE }, env: { ...mtls(), HTTP_JSON_ALLOW_WITHOUT_CLIENT_CERT: 'true' }, logger: log.logger });
    try {
      expect((await postJson(svc)).status).toBe(200);
      expect(log.lines().some((l) => l.level === 40 && /POST \/json serves without one/.test(l.msg))).toBe(true);
    } finally {
      await svc.stop();
    }
  });

  it('serves it when gRPC uses TLS without client certificates', async () => {
    const svc = await startTestService({
      config: { 'edge.yaml': EDGE },
      env: { GRPC_SERVER_USE_TLS: 'true', GRPC_SERVER_TLS_CERT: certs.serverCert, GRPC_SERVER_TLS_KEY: certs.serverKey },
    });
    try {
      expect((await postJson(svc)).status).toBe(200);
    } finally {
      await svc.stop();
    }
  });
});

describe('GRPC_CLIENT_TLS_CACERT without GRPC_SERVER_USE_TLS', () => {
  it('stops the built service at start with one line naming the variable (not a plaintext port)', () => {
    if (!fs.existsSync(MAIN_JS)) throw new Error(`${MAIN_JS} is missing: build first (npx tsc -p tsconfig.json)`);
    const run = spawnSync(process.execPath, [MAIN_JS], {
      env: {
        PATH: process.env.PATH,
        ...LOOPBACK_ANY_PORT,
        CONFIG_PATH: certs.dir,
        USE_STATSD: 'false',
        WARM_UP_CALLS: '0',
        GRPC_CLIENT_TLS_CACERT: certs.caCert,
      },
      encoding: 'utf8',
      timeout: 20_000,
    });
    expect(run.status).toBe(1);
    expect(run.stderr.trim().split('\n')).toEqual([expect.stringMatching(/^invalid setting GRPC_CLIENT_TLS_CACERT: requires GRPC_SERVER_USE_TLS=true/)]);
  });
});

describe('CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS in the log', () => {
  it('logs the header names with their values masked, as other credentials', async () => {
    const log = capturedLogger();
    const svc = await startTestService({
      config: { 'edge.yaml': EDGE },
      env: { CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: 'authorization:Bearer s3cr3t-token,x-tenant:t-77', REDIS_AUTH: 'pw-123' },
      logger: log.logger,
    });
    await svc.stop();
    const starting = log.lines().find((l) => l.msg === 'starting') as unknown as { settings: { xds: { additionalHeaders: Record<string, string> } } };
    expect(starting.settings.xds.additionalHeaders).toEqual({ authorization: '***', 'x-tenant': '***' });
    expect(log.text()).not.toMatch(/s3cr3t-token|t-77|pw-123/);
  });
});
