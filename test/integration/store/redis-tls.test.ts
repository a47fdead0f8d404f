import { makeTestCerts, type CertFiles } from '../../helpers/certs';
import { descriptor, grpc, grpcCode, type RlsRequestInput } from '../../helpers/grpc-client';
import { freePort, redisCli, startRedis, type RedisServer } from '../../helpers/redis';
import { startTestService, type TestService } from '../../helpers/service';

/**
 * The service on a Redis that only speaks TLS to it and requires client certificates
 * (`--tls-auth-clients yes`): REDIS_TLS / rediss:// with REDIS_TLS_CACERT and the client pair.
 * The plain port stays open for the test's own checks only.
 */

const EDGE = `
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
`;

const ask = (user: string): RlsRequestInput => ({ domain: 'edge', descriptors: [descriptor([['user', user]])] });

describe('the redis store over TLS', () => {
  let certs: CertFiles;
  let redis: RedisServer;
  let tlsPort: number;

  beforeAll(async () => {
    certs = makeTestCerts();
    tlsPort = await freePort();
    redis = await startRedis([
      '--tls-port',
      String(tlsPort),
      '--tls-cert-file',
      certs.serverCert,
      '--tls-key-file',
      certs.serverKey,
      '--tls-ca-cert-file',
      certs.caCert,
      '--tls-auth-clients',
      'yes',
    ]);
  });

  afterAll(async () => {
    await redis?.stop();
    certs?.remove();
  });

  async function service(env: Record<string, string>): Promise<TestService> {
    return startTestService({ config: { 'edge.yaml': EDGE }, env: { BACKEND_TYPE: 'redis', STORE_TIMEOUT_MS: '500', ...env } });
  }

  const clientPair = (): Record<string, string> => ({
    REDIS_TLS_CACERT: certs.caCert,
    REDIS_TLS_CLIENT_CERT: certs.clientCert,
    REDIS_TLS_CLIENT_KEY: certs.clientKey,
  });

  it('counts in Redis through a rediss:// URL with a client certificate', async () => {
    const svc = await service({ REDIS_URL: `rediss://127.0.0.1:${tlsPort}`, ...clientPair() });
    try {
      const codes = [];
      for (let i = 0; i < 3; i++) codes.push((await svc.client.shouldRateLimit(ask('tls-url'))).overallCode);
      expect(codes).toEqual(['OK', 'OK', 'OVER_LIMIT']);
      // The counter lives in Redis: read it back over the plain port.
      expect(redisCli(redis.port, '--scan', '--pattern', '*tls-url*').trim()).not.toBe('');
    } finally {
      await svc.stop();
    }
  });

  it('counts in Redis with REDIS_TLS=true and the host:port form', async () => {
    const svc = await service({ REDIS_URL: `127.0.0.1:${tlsPort}`, REDIS_TLS: 'true', ...clientPair() });
    try {
      expect((await svc.client.shouldRateLimit(ask('tls-flag'))).overallCode).toBe('OK');
      expect(redisCli(redis.port, '--scan', '--pattern', '*tls-flag*').trim()).not.toBe('');
    } finally {
      await svc.stop();
    }
  });

  it('cannot reach a Redis that requires a client certificate without one, and says UNAVAILABLE', async () => {
    const svc = await service({ REDIS_URL: `rediss://127.0.0.1:${tlsPort}`, REDIS_TLS_CACERT: certs.caCert });
    try {
      expect(await grpcCode(svc.client.shouldRateLimit(ask('no-cert')))).toBe(grpc.status.UNAVAILABLE);
      expect(svc.service.store.isHealthy()).toBe(false);
    } finally {
      await svc.stop();
    }
  });
});
