import { InvalidRequestError, NotReadyError } from '../../../src/limiter/errors';
import type { RateLimitRequest, RateLimitResponse } from '../../../src/limiter/types';
import { silentLogger } from '../../../src/log';
import { GrpcServer } from '../../../src/grpc/grpc-js-server';
import type { GrpcServerOptions } from '../../../src/grpc/edge';
import type { RateLimitDecider } from '../../../src/limiter/types';
import { HealthState } from '../../../src/service/health';
import { Http2GrpcServer } from '../../../src/grpc/http2-server';
import { StoreUnavailableError } from '../../../src/limiter/store';
import { descriptor, grpc, grpcCode, rlsClient, type RlsClient } from '../../helpers/grpc-client';
import { TRANSPORT_DEFAULTS } from '../../helpers/transport-defaults';

/**
 * The gRPC edge alone, in front of a scripted limiter: error mapping, message size, graceful stop.
 * Run against both transports, which must be indistinguishable to a grpc-js client.
 */

const settings = (over: Partial<{ grpcMaxMessageBytes: number }> = {}) => ({
  grpcHost: '127.0.0.1',
  grpcPort: 0,
  grpcMaxMessageBytes: 4 * 1024 * 1024,
  grpcTls: { enabled: false },
  ...TRANSPORT_DEFAULTS,
  ...over,
});

const OK: RateLimitResponse = { overallCode: 'OK', statuses: [{ code: 'OK', limitRemaining: 0 }], responseHeaders: [] };

const TRANSPORTS: [string, new (options: GrpcServerOptions) => GrpcServer | Http2GrpcServer][] = [
  ['http2', Http2GrpcServer],
  ['grpc-js', GrpcServer],
];

describe.each(TRANSPORTS)('over the %s transport', (name, Server) => {
  async function serve(limiter: RateLimitDecider, over: Partial<{ grpcMaxMessageBytes: number }> = {}) {
    const health = new HealthState();
    health.set('config', true);
    const logged: unknown[] = [];
    const logger = silentLogger();
    logger.error = ((obj: unknown) => void logged.push(obj)) as typeof logger.error;
    const server = new Server({ limiter, health, settings: settings(over), logger });
    const port = await server.start();
    const client = rlsClient(`127.0.0.1:${port}`);
    return { server, health, client, logged, port };
  }

  const request = { domain: 'd', descriptors: [descriptor([['k', 'v']])] };

  describe('GrpcServer error classification', () => {
    let stop: (() => Promise<void>) | undefined;
    afterEach(async () => {
      await stop?.();
      stop = undefined;
    });

    async function codeFor(err: Error): Promise<{ code: grpc.status | undefined; logged: unknown[] }> {
      const s = await serve({ shouldRateLimit: () => Promise.reject(err) });
      stop = async () => {
        s.client.close();
        await s.server.stop(100);
      };
      return { code: await grpcCode(s.client.shouldRateLimit(request)), logged: s.logged };
    }

    it('maps InvalidRequestError to INVALID_ARGUMENT without logging', async () => {
      expect(await codeFor(new InvalidRequestError('bad'))).toEqual({ code: grpc.status.INVALID_ARGUMENT, logged: [] });
    });

    it('maps StoreUnavailableError to UNAVAILABLE so failure_mode_deny decides', async () => {
      expect(await codeFor(new StoreUnavailableError('down'))).toEqual({ code: grpc.status.UNAVAILABLE, logged: [] });
    });

    it('maps NotReadyError to UNAVAILABLE', async () => {
      expect((await codeFor(new NotReadyError('no config'))).code).toBe(grpc.status.UNAVAILABLE);
    });

    it('maps anything else to INTERNAL with one log line', async () => {
      const { code, logged } = await codeFor(new TypeError('boom'));
      expect(code).toBe(grpc.status.INTERNAL);
      expect(logged).toHaveLength(1);
    });

    it('maps a synchronous throw like a rejection', async () => {
      const s = await serve({
        shouldRateLimit: () => {
          throw new InvalidRequestError('sync');
        },
      });
      stop = async () => {
        s.client.close();
        await s.server.stop(100);
      };
      expect(await grpcCode(s.client.shouldRateLimit(request))).toBe(grpc.status.INVALID_ARGUMENT);
    });

    it('refuses a message larger than GRPC_MAX_MESSAGE_BYTES with RESOURCE_EXHAUSTED', async () => {
      const s = await serve({ shouldRateLimit: () => Promise.resolve(OK) }, { grpcMaxMessageBytes: 1024 });
      stop = async () => {
        s.client.close();
        await s.server.stop(100);
      };
      const big = { domain: 'd', descriptors: [descriptor([['k', 'x'.repeat(4096)]])] };
      expect(await grpcCode(s.client.shouldRateLimit(big))).toBe(grpc.status.RESOURCE_EXHAUSTED);
      expect((await s.client.shouldRateLimit(request)).overallCode).toBe('OK');
    });
  });

  describe('GrpcServer graceful stop', () => {
    it('finishes an in-flight call, refuses new ones and resolves well before the grace period', async () => {
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      const seen: RateLimitRequest[] = [];
      const s = await serve({
        shouldRateLimit: async (req) => {
          seen.push(req);
          await gate;
          return OK;
        },
      });
      const inFlight = s.client.shouldRateLimit(request);
      while (seen.length === 0) await new Promise((r) => setImmediate(r));
      const t0 = Date.now();
      const stopped = s.server.stop(5_000);
      expect(s.health.serving()).toBe(false);
      const late: RlsClient = rlsClient(`127.0.0.1:${s.port}`);
      const lateCode = await grpcCode(late.shouldRateLimit(request, { deadlineMs: 1_000 }));
      expect(lateCode).toBe(grpc.status.UNAVAILABLE);
      release();
      expect((await inFlight).overallCode).toBe('OK');
      await stopped;
      expect(Date.now() - t0).toBeLessThan(2_000);
      late.close();
      s.client.close();
    });

    it('cuts calls still running when the grace period ends', async () => {
      const s = await serve({ shouldRateLimit: () => new Promise<RateLimitResponse>(() => undefined) });
      const hanging = grpcCode(s.client.shouldRateLimit(request));
      await new Promise((r) => setTimeout(r, 50));
      const t0 = Date.now();
      await s.server.stop(200);
      expect(Date.now() - t0).toBeLessThan(1_000);
      // The own layer ends a cut call UNAVAILABLE (the proxy retries elsewhere). grpc-js's forceShutdown
      // resets the stream (CANCELLED) and closes the connection (UNAVAILABLE): the client sees whichever
      // arrives first.
      const cut = name === 'grpc-js' ? [grpc.status.CANCELLED, grpc.status.UNAVAILABLE] : [grpc.status.UNAVAILABLE];
      expect(cut).toContain(await hanging);
      s.client.close();
    });
  });
});
