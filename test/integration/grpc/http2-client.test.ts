import type { RateLimitResponse } from '../../../src/limiter/types';
import { silentLogger } from '../../../src/log';
import { frameMessage, GrpcStatus } from '../../../src/wire/grpc-framing';
import { HealthState } from '../../../src/service/health';
import { Http2GrpcClient } from '../../../src/grpc/http2-client';
import { Http2GrpcServer } from '../../../src/grpc/http2-server';
import { protoRoot, RLS_SERVICE } from '../../../src/wire/proto';
import { startTestService, type TestService } from '../../helpers/service';
import { TRANSPORT_DEFAULTS } from '../../helpers/transport-defaults';

/**
 * Http2GrpcClient (the start-up warm-up's client) making real ShouldRateLimit calls over the
 * service's own HTTP/2 transport: many calls open on one connection, every answer decoded, error
 * statuses read from trailers-only answers, and a server shutting down under it.
 */

const PATH = `/${RLS_SERVICE}/ShouldRateLimit`;
const RequestType = protoRoot().lookupType('envoy.service.ratelimit.v3.RateLimitRequest');
const ResponseType = protoRoot().lookupType('envoy.service.ratelimit.v3.RateLimitResponse');

const request = (object: Record<string, unknown>): Buffer => frameMessage(RequestType.encode(RequestType.fromObject(object)).finish());

interface Answer {
  status: number;
  response?: Record<string, any>;
}

/** Makes the calls on one connection, at most `maxInFlight` open at a time; each call's end, in the calls' order. */
async function callAll(port: number, bodies: readonly Buffer[], maxInFlight: number): Promise<Answer[]> {
  const answers: Answer[] = [];
  let sent = 0;
  const client = Http2GrpcClient.connect(port, {
    path: PATH,
    maxInFlight,
    keepMessages: true,
    next: () => (sent < bodies.length ? bodies[sent++] : undefined),
    onEnd: (call, status, message) => {
      answers[call] = { status, response: message && ResponseType.toObject(ResponseType.decode(message), { enums: String, defaults: true }) };
    },
  });
  await client.done;
  return answers;
}

describe('Http2GrpcClient against the service', () => {
  let svc: TestService;
  let port: number;

  beforeAll(async () => {
    svc = await startTestService({
      config: { 'edge.yaml': 'domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 10}\n' },
    });
    port = svc.service.grpcPort;
  });

  afterAll(async () => {
    await svc?.stop();
  });

  it('keeps many calls open on one connection and gets every answer, decoded', async () => {
    const call = request({ domain: 'edge', descriptors: [{ entries: [{ key: 'user', value: 'ann' }] }] });
    const answers = await callAll(
      port,
      Array.from({ length: 30 }, () => call),
      8,
    );
    expect(answers).toHaveLength(30);
    expect(answers.every((a) => a.status === GrpcStatus.OK)).toBe(true);
    const ok = answers.filter((a) => a.response?.overallCode === 'OK');
    const over = answers.filter((a) => a.response?.overallCode === 'OVER_LIMIT');
    expect([ok.length, over.length]).toEqual([10, 20]);
    // Each admitted call took one of the ten places: the remaining counts are 9 down to 0, once each.
    expect(ok.map((a) => a.response!.statuses[0].limitRemaining).sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    for (const a of answers) expect(a.response!.statuses[0].currentLimit).toMatchObject({ requestsPerUnit: 10, unit: 'HOUR' });
  });

  it("reads the status of the service's error answers", async () => {
    const answers = await callAll(
      port,
      [
        request({ domain: 'edge', descriptors: [{ entries: [{ key: 'user', value: 'bob' }] }] }),
        frameMessage(Buffer.from([0xff, 0xff, 0xff])),
        request({ domain: 'edge', descriptors: [{ entries: [{ key: 'user', value: 'bob' }], limit: { requestsPerUnit: 1, unit: 99 } }] }),
      ],
      3,
    );
    expect(answers.map((a) => a.status)).toEqual([GrpcStatus.OK, GrpcStatus.INTERNAL, GrpcStatus.INVALID_ARGUMENT]);
    expect(answers[0].response).toMatchObject({ overallCode: 'OK', statuses: [{ code: 'OK', limitRemaining: 9 }] });
    expect(answers[1].response).toBeUndefined();
  });
});

describe('Http2GrpcClient and a server that shuts down', () => {
  it('finishes the calls the GOAWAY names, starts no more, and closes', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let started = 0;
    const OK: RateLimitResponse = { overallCode: 'OK', statuses: [{ code: 'OK', limitRemaining: 1 }], responseHeaders: [] };
    const health = new HealthState();
    health.set('config', true);
    const server = new Http2GrpcServer({
      limiter: {
        shouldRateLimit: async () => {
          started++;
          await gate;
          return OK;
        },
      },
      health,
      settings: { grpcHost: '127.0.0.1', grpcPort: 0, grpcMaxMessageBytes: 1024, grpcTls: { enabled: false }, ...TRANSPORT_DEFAULTS },
      logger: silentLogger(),
    });
    const port = await server.start();
    const ends: Array<[number, number]> = [];
    let sent = 0;
    const client = Http2GrpcClient.connect(port, {
      path: PATH,
      maxInFlight: 4,
      next: () => (sent++ < 10 ? request({ domain: 'd', descriptors: [{ entries: [{ key: 'k', value: 'v' }] }] }) : undefined),
      onEnd: (call, status) => ends.push([call, status]),
    });
    try {
      while (started < 4) await new Promise((r) => setImmediate(r));
      const stopped = server.stop(5_000);
      // The GOAWAY arrives while all four calls wait on the gate.
      while (!client.draining) await new Promise((r) => setTimeout(r, 5));
      release();
      await client.done;
      await stopped;
      expect(ends.sort((a, b) => a[0] - b[0])).toEqual([
        [0, GrpcStatus.OK],
        [1, GrpcStatus.OK],
        [2, GrpcStatus.OK],
        [3, GrpcStatus.OK],
      ]);
      expect(client.answered).toBe(4);
      expect(sent).toBe(4);
    } finally {
      release();
      client.close();
    }
  });
});
