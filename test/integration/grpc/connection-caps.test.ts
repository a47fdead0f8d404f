import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { rawQuotaStream, type RawQuotaStream } from '../../helpers/envoy-quota-client';
import { openReflectionStream, type ReflectionStream } from '../../helpers/reflection-stream';
import { startTestService, type TestService } from '../../helpers/service';

/**
 * The per-connection caps of the streaming services (quota streams, reflection streams) hold each
 * connection, not the process: on both transports, over TCP and over a Unix socket (GRPC_UDS, where
 * a peer has no address to tell connections apart). One peer holds its connection's every stream;
 * a second connection beside it opens as many, and its quota assignments are exact.
 */

const CONFIG = `domain: quota
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 100}
`;
const TRANSPORTS = ['http2', 'grpc-js'] as const;
const LISTENERS = ['tcp', 'unix'] as const;
const QUOTA_PER_CONNECTION = 4;
const HANDSHAKE_TIMEOUT_MS = 1_000;
const REFLECTION_PER_CONNECTION = 2;

let tmp: string;
beforeAll(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'slidegate-caps-'));
});
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

/** A report of one bucket `{tenant: name}`, 10 allowed. */
const report = (name: string) => ({
  domain: 'quota',
  bucketQuotaUsages: [{ bucketId: { bucket: { tenant: name } }, timeElapsed: { seconds: 1 }, numRequestsAllowed: 10, numRequestsDenied: 0 }],
});

describe.each(TRANSPORTS.flatMap((transport) => LISTENERS.map((listener) => [transport, listener] as const)))(
  'GRPC_TRANSPORT=%s on %s',
  (transport, listener) => {
    let svc: TestService;
    let target: string;
    let silentPeer: () => net.Socket;
    const clients: grpc.Client[] = [];
    const quota: RawQuotaStream[] = [];
    const reflection: ReflectionStream[] = [];

    beforeEach(async () => {
      const socket = path.join(tmp, `${transport}-${listener}.sock`);
      svc = await startTestService({
        config: { 'quota.yaml': CONFIG },
        env: {
          GRPC_TRANSPORT: transport,
          WARM_UP_CALLS: '0',
          RLQS_MAX_STREAMS_PER_CONNECTION: String(QUOTA_PER_CONNECTION),
          GRPC_REFLECTION_MAX_STREAMS_PER_CONNECTION: String(REFLECTION_PER_CONNECTION),
          H2_HANDSHAKE_TIMEOUT_MS: String(HANDSHAKE_TIMEOUT_MS),
          ...(listener === 'unix' ? { GRPC_UDS: socket } : {}),
        },
      });
      target = listener === 'unix' ? `unix:${socket}` : svc.addr;
      silentPeer = () => (listener === 'unix' ? net.connect(socket) : net.connect(svc.service.grpcPort, '127.0.0.1'));
    });

    afterEach(async () => {
      for (const s of quota.splice(0)) s.close();
      for (const s of reflection.splice(0)) s.cancel();
      for (const c of clients.splice(0)) c.close();
      await svc.stop();
    });

    /** A client on a connection of its own. */
    const connection = (): grpc.Client => {
      const client = new grpc.Client(target, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 });
      clients.push(client);
      return client;
    };
    const openQuota = (client: grpc.Client): RawQuotaStream => {
      const s = rawQuotaStream(client);
      quota.push(s);
      return s;
    };

    test('one peer at its connection cap of quota and reflection streams; a second connection still opens all of its own, with exact assignments', async () => {
      // The hostile peer: every quota stream its connection may hold (each reports once, then stays
      // quiet), every reflection stream, and one more of each, refused.
      const hostile = connection();
      const held = Array.from({ length: QUOTA_PER_CONNECTION }, () => openQuota(hostile));
      held.forEach((s, i) => s.write(report(`hostile-${i}`)));
      await Promise.all(held.map((s) => s.next(15_000)));
      const extra = openQuota(hostile);
      extra.write(report('hostile-extra'));
      expect(await extra.status).toMatchObject({
        code: grpc.status.RESOURCE_EXHAUSTED,
        details: `more than ${QUOTA_PER_CONNECTION} quota streams on one connection`,
      });
      const asks = Array.from({ length: REFLECTION_PER_CONNECTION }, () => {
        const s = openReflectionStream(hostile, 'v1');
        reflection.push(s);
        return s.ask({ listServices: '*' });
      });
      await Promise.all(asks);
      const extraReflection = openReflectionStream(hostile, 'v1');
      reflection.push(extraReflection);
      void extraReflection.ask({ listServices: '*' }).catch(() => undefined);
      expect((await extraReflection.status).code).toBe(grpc.status.RESOURCE_EXHAUSTED);

      // The legitimate peer on its own connection: as many of each, every one served.
      const legit = connection();
      const own = Array.from({ length: QUOTA_PER_CONNECTION }, () => openQuota(legit));
      own.forEach((s, i) => s.write(report(`legit-${i}`)));
      const answers = await Promise.all(own.map((s) => s.next(15_000)));
      for (const [i, answer] of answers.entries()) {
        // Alone on its bucket: the whole limit, 100 a second (a tenth of it as burst).
        expect(answer.bucketAction).toEqual([
          {
            bucketId: { bucket: { tenant: `legit-${i}` } },
            quotaAssignmentAction: {
              assignmentTimeToLive: { seconds: 15 },
              rateLimitStrategy: { tokenBucket: { maxTokens: 10, tokensPerFill: { value: 100 }, fillInterval: { seconds: 1 } }, strategy: 'tokenBucket' },
            },
            bucketAction: 'quotaAssignmentAction',
          },
        ]);
      }
      const legitAnswers = await Promise.all(
        Array.from({ length: REFLECTION_PER_CONNECTION }, () => {
          const s = openReflectionStream(legit, 'v1alpha');
          reflection.push(s);
          return s.ask({ listServices: '*' });
        }),
      );
      for (const a of legitAnswers)
        expect(a.listServicesResponse?.service.map((s) => s.name)).toContain('envoy.service.rate_limit_quota.v3.RateLimitQuotaService');
      // Nothing of either peer was ended meanwhile.
      const settled = await Promise.race([Promise.race([...held, ...own].map((s) => s.status)), new Promise((r) => setTimeout(() => r('open'), 200))]);
      expect(settled).toBe('open');
    });

    test('a peer that connects and sends nothing is closed at H2_HANDSHAKE_TIMEOUT_MS, and the service goes on answering exactly', async () => {
      const peer = silentPeer();
      peer.on('error', () => undefined);
      // It reads (the GOAWAY, the end), and writes nothing.
      peer.resume();
      const opened = performance.now();
      const closedAfterMs = await new Promise<number>((resolve) => peer.once('close', () => resolve(performance.now() - opened)));
      expect(closedAfterMs).toBeGreaterThanOrEqual(HANDSHAKE_TIMEOUT_MS - 50);
      expect(closedAfterMs).toBeLessThan(HANDSHAKE_TIMEOUT_MS + 2_000);
      const legit = openQuota(connection());
      legit.write(report('after'));
      expect((await legit.next(15_000)).bucketAction[0].quotaAssignmentAction.rateLimitStrategy.tokenBucket.tokensPerFill).toEqual({ value: 100 });
    });
  },
);
