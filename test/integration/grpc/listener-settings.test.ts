import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as http2 from 'node:http2';
import * as os from 'node:os';
import * as path from 'node:path';
import * as tls from 'node:tls';
import { createRlsClient } from '../../../src/cli/rls-client';
import { makeTestCerts, type CertFiles } from '../../helpers/certs';
import { descriptor, grpc, grpcCode } from '../../helpers/grpc-client';
import { startTestService, type TestService } from '../../helpers/service';

/**
 * The reference's gRPC listener settings on the real service: GRPC_UDS (a Unix socket),
 * GRPC_CLIENT_TLS_SAN (the name client certificates must carry), rotation of GRPC_SERVER_TLS_CERT/KEY,
 * and GRPC_MAX_CONNECTION_AGE / _GRACE (GOAWAY after the age), on both transports where they apply.
 */

const EDGE = `
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
`;
const request = { domain: 'edge', descriptors: [descriptor([['user', 'u']])] };
const TRANSPORTS = ['http2', 'grpc-js'] as const;

let certs: CertFiles;
let tmp: string;

beforeAll(() => {
  certs = makeTestCerts();
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'slidegate-listen-'));
});

afterAll(() => {
  certs?.remove();
  fs.rmSync(tmp, { recursive: true, force: true });
});

async function withService(env: Record<string, string>, body: (svc: TestService) => Promise<void>): Promise<void> {
  const svc = await startTestService({ config: { 'edge.yaml': EDGE }, env });
  try {
    await body(svc);
  } finally {
    await svc.stop();
  }
}

describe.each(TRANSPORTS)('GRPC_UDS with GRPC_TRANSPORT=%s', (transport) => {
  it('serves ShouldRateLimit on the Unix socket', async () => {
    const socket = path.join(tmp, `rl-${transport}.sock`);
    await withService({ GRPC_TRANSPORT: transport, GRPC_UDS: socket, WARM_UP_CALLS: '0' }, async () => {
      expect(fs.statSync(socket).isSocket()).toBe(true);
      const client = createRlsClient({ address: `unix:${socket}` });
      try {
        const response = await client.shouldRateLimit(request, { deadlineMs: 5_000 });
        expect(response.overallCode).toBe('OK');
        expect(response.statuses[0]!.limitRemaining).toBe(9);
      } finally {
        client.close();
      }
    });
  });
});

describe('GRPC_CLIENT_TLS_SAN', () => {
  const mtls = () => ({
    GRPC_SERVER_USE_TLS: 'true',
    GRPC_SERVER_TLS_CERT: certs.serverCert,
    GRPC_SERVER_TLS_KEY: certs.serverKey,
    GRPC_CLIENT_TLS_CACERT: certs.caCert,
    GRPC_CLIENT_TLS_SAN: 'envoy.mesh',
  });
  const call = (svc: TestService, cert: string, key: string) => {
    const credentials = grpc.credentials.createSsl(fs.readFileSync(certs.caCert), fs.readFileSync(key), fs.readFileSync(cert));
    const client = createRlsClient({ address: `localhost:${svc.service.grpcPort}`, credentials });
    return client.shouldRateLimit(request, { deadlineMs: 3_000 }).finally(() => client.close());
  };

  it('answers a client whose certificate carries the name', async () => {
    await withService(mtls(), async (svc) => {
      expect((await call(svc, certs.meshClientCert, certs.meshClientKey)).overallCode).toBe('OK');
    });
  });

  it('refuses a client certificate from the same CA without the name', async () => {
    await withService(mtls(), async (svc) => {
      expect(await grpcCode(call(svc, certs.clientCert, certs.clientKey))).toBe(grpc.status.UNAVAILABLE);
    });
  });
});

/** The SHA-256 fingerprint of the certificate the server presents on a new connection. */
function servedFingerprint(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: '127.0.0.1', port, servername: 'localhost', ALPNProtocols: ['h2'], ca: fs.readFileSync(certs.caCert) }, () => {
      const fingerprint = socket.getPeerCertificate().fingerprint256;
      socket.destroy();
      resolve(fingerprint);
    });
    socket.once('error', reject);
  });
}

function fileFingerprint(file: string): string {
  return new crypto.X509Certificate(fs.readFileSync(file)).fingerprint256;
}

describe('rotation of GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY', () => {
  it('serves the new certificate to new connections once the files change', async () => {
    // The layout of a Kubernetes secret volume: the files are symlinks through ..data, which is swapped.
    const volume = fs.mkdtempSync(path.join(tmp, 'secret-'));
    const publish = (name: string, cert: string, key: string): void => {
      const dir = path.join(volume, name);
      fs.mkdirSync(dir);
      fs.copyFileSync(cert, path.join(dir, 'tls.crt'));
      fs.copyFileSync(key, path.join(dir, 'tls.key'));
      fs.symlinkSync(name, path.join(volume, '..data_tmp'));
      fs.renameSync(path.join(volume, '..data_tmp'), path.join(volume, '..data'));
    };
    publish('..v1', certs.serverCert, certs.serverKey);
    fs.symlinkSync('..data/tls.crt', path.join(volume, 'tls.crt'));
    fs.symlinkSync('..data/tls.key', path.join(volume, 'tls.key'));
    const env = {
      GRPC_SERVER_USE_TLS: 'true',
      GRPC_SERVER_TLS_CERT: path.join(volume, 'tls.crt'),
      GRPC_SERVER_TLS_KEY: path.join(volume, 'tls.key'),
    };
    await withService(env, async (svc) => {
      const port = svc.service.grpcPort;
      expect(await servedFingerprint(port)).toBe(fileFingerprint(certs.serverCert));
      publish('..v2', certs.nextServerCert, certs.nextServerKey);
      const deadline = Date.now() + 10_000;
      let served = await servedFingerprint(port);
      while (served !== fileFingerprint(certs.nextServerCert) && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 100));
        served = await servedFingerprint(port);
      }
      expect(served).toBe(fileFingerprint(certs.nextServerCert));
      const client = createRlsClient({ address: `localhost:${port}`, credentials: grpc.credentials.createSsl(fs.readFileSync(certs.caCert)) });
      try {
        expect((await client.shouldRateLimit(request, { deadlineMs: 5_000 })).overallCode).toBe('OK');
      } finally {
        client.close();
      }
    });
  });
});

describe.each(TRANSPORTS)('GRPC_MAX_CONNECTION_AGE with GRPC_TRANSPORT=%s', (transport) => {
  it('sends GOAWAY once the age (±10%) has passed, and closes the connection after the grace', async () => {
    const ageMs = 400;
    const env = { GRPC_TRANSPORT: transport, GRPC_MAX_CONNECTION_AGE: `${ageMs}ms`, GRPC_MAX_CONNECTION_AGE_GRACE: '200ms', WARM_UP_CALLS: '0' };
    await withService(env, async (svc) => {
      const session = http2.connect(`http://127.0.0.1:${svc.service.grpcPort}`);
      session.on('error', () => undefined);
      const opened = await new Promise<number>((resolve) => session.once('connect', () => resolve(performance.now())));
      const goawayAt = await new Promise<number>((resolve) => session.once('goaway', () => resolve(performance.now())));
      await new Promise<void>((resolve) => (session.closed ? resolve() : session.once('close', () => resolve())));
      // The connection is accepted before the client's 'connect' fires, so the age runs from a little earlier.
      expect(goawayAt - opened).toBeGreaterThanOrEqual(ageMs * 0.9 - 50);
      expect(goawayAt - opened).toBeLessThan(ageMs * 1.1 + 5_000);
    });
  });

  it('keeps connections open without an age', async () => {
    await withService({ GRPC_TRANSPORT: transport, GRPC_MAX_CONNECTION_AGE: '0', WARM_UP_CALLS: '0' }, async (svc) => {
      const session = http2.connect(`http://127.0.0.1:${svc.service.grpcPort}`);
      session.on('error', () => undefined);
      let goaway = false;
      session.once('goaway', () => (goaway = true));
      await new Promise((resolve) => session.once('connect', resolve));
      await new Promise((r) => setTimeout(r, 600));
      expect(goaway).toBe(false);
      session.close();
    });
  });
});
