import { InvalidRequestError } from '../../../src/limiter/errors';
import { StoreUnavailableError } from '../../../src/limiter/store';
import type { RateLimitDecider, RateLimitResponse } from '../../../src/limiter/types';
import { silentLogger } from '../../../src/log';
import { GrpcStatus, MESSAGE_PREFIX_BYTES } from '../../../src/wire/grpc-framing';
import { HealthState } from '../../../src/service/health';
import { ServingStatusNumber, protoRoot } from '../../../src/wire/proto';
import { RlsService, type ServiceReplays } from '../../../src/service/rls-service';
import { frameResponse } from '../../../src/wire/rls-codec';

/** The service both gRPC transports serve: bytes in, bytes out; health; shutdown. */

const RequestType = protoRoot().lookupType('envoy.service.ratelimit.v3.RateLimitRequest');
const ResponseType = protoRoot().lookupType('envoy.service.ratelimit.v3.RateLimitResponse');
const REQUEST = Buffer.from(RequestType.encode(RequestType.fromObject({ domain: 'edge', descriptors: [{ entries: [{ key: 'k', value: 'v' }] }] })).finish());
const DENIED: RateLimitResponse = {
  overallCode: 'OVER_LIMIT',
  statuses: [{ code: 'OVER_LIMIT', limitRemaining: 0, durationUntilResetMs: 1500 }],
  responseHeaders: [],
};

function decodeFrame(frame: Buffer): { overallCode: string } {
  return ResponseType.toObject(ResponseType.decode(frame.subarray(MESSAGE_PREFIX_BYTES)), { enums: String }) as { overallCode: string };
}

/** The outcome of one call, and whether it came before shouldRateLimit returned. */
function call(s: RlsService, message: Buffer): { sync: boolean; outcome: Promise<Buffer> } {
  let returned = false;
  let sync = false;
  const outcome = new Promise<Buffer>((resolve, reject) => {
    s.shouldRateLimit(message, {
      answer: (frame) => {
        sync = !returned;
        resolve(frame);
      },
      fail: (err) => {
        sync = !returned;
        reject(err);
      },
    });
  });
  returned = true;
  return {
    get sync() {
      return sync;
    },
    outcome,
  };
}

function service(limiter: RateLimitDecider, health = new HealthState(), replays?: ServiceReplays): RlsService {
  return new RlsService({ limiter, health, logger: silentLogger(), replays });
}

describe('RlsService', () => {
  it('decodes, decides and encodes one call', async () => {
    const seen: string[] = [];
    const s = service({
      shouldRateLimit: (request) => {
        seen.push(`${request.domain}:${request.descriptors[0].entries[0].key}`);
        return Promise.resolve(DENIED);
      },
    });
    const c = call(s, REQUEST);
    const frame = await c.outcome;
    expect(c.sync).toBe(false);
    expect(seen).toEqual(['edge:k']);
    expect(decodeFrame(frame).overallCode).toBe('OVER_LIMIT');
  });

  it('answers a replayed request synchronously, without deciding again', async () => {
    let decided = 0;
    const s = service(
      {
        shouldRateLimit: () => {
          decided++;
          return Promise.resolve(DENIED);
        },
      },
      new HealthState(),
      { answer: (key) => (key === REQUEST.toString('latin1') ? frameResponse(DENIED) : undefined), remembering: () => () => undefined },
    );
    const c = call(s, REQUEST);
    expect(c.sync).toBe(true);
    expect(decodeFrame(await c.outcome).overallCode).toBe('OVER_LIMIT');
    expect(decided).toBe(0);
  });

  it('decides a request the replays do not hold with their listener for its bytes, and without one when it keeps none', async () => {
    const named: string[] = [];
    let listened = 0;
    const limiter: RateLimitDecider = {
      shouldRateLimit: (_request, onLocalDenial) => {
        if (onLocalDenial !== undefined) listened++;
        return Promise.resolve(DENIED);
      },
    };
    const replays: ServiceReplays = {
      answer: () => undefined,
      remembering: (key) => {
        named.push(key);
        return () => undefined;
      },
    };
    await call(service(limiter, new HealthState(), replays), REQUEST).outcome;
    expect(named).toEqual([REQUEST.toString('latin1')]);
    expect(listened).toBe(1);
    await call(service(limiter), REQUEST).outcome;
    expect(listened).toBe(1);
  });

  it('answers failures from the error catalogue', async () => {
    const s = service({ shouldRateLimit: () => Promise.resolve(DENIED) });
    expect(s.failure(new InvalidRequestError('domain must not be empty'))).toEqual({ code: GrpcStatus.INVALID_ARGUMENT, details: 'domain must not be empty' });
    expect(s.failure(new StoreUnavailableError('down')).code).toBe(GrpcStatus.UNAVAILABLE);
    expect(s.failure(new Error('secret'))).toEqual({ code: GrpcStatus.INTERNAL, details: 'internal error' });
    const undecodable = call(s, Buffer.from([0x0a, 0x05, 0x61]));
    await expect(undecodable.outcome).rejects.toThrow();
    expect(undecodable.sync).toBe(true);
    const rejected = call(service({ shouldRateLimit: () => Promise.reject(new StoreUnavailableError('down')) }), REQUEST);
    await expect(rejected.outcome).rejects.toBeInstanceOf(StoreUnavailableError);
  });

  it('checks known services and refuses unknown ones', () => {
    const health = new HealthState();
    health.set('config', true);
    const s = service({ shouldRateLimit: () => Promise.resolve(DENIED) }, health);
    expect(s.check('ratelimit')).toEqual({ status: ServingStatusNumber.SERVING });
    expect(s.check('other')).toEqual({ code: GrpcStatus.NOT_FOUND, details: 'unknown service "other"' });
  });

  it('tells watchers every change, and ends them at shutdown with NOT_SERVING', () => {
    const health = new HealthState();
    const s = service({ shouldRateLimit: () => Promise.resolve(DENIED) }, health);
    const sent: number[] = [];
    let ended = 0;
    s.watch('', { write: (status) => sent.push(status), end: () => ended++ });
    health.set('config', true);
    s.shutdown();
    s.shutdown();
    expect(sent).toEqual([ServingStatusNumber.NOT_SERVING, ServingStatusNumber.SERVING, ServingStatusNumber.NOT_SERVING]);
    expect(ended).toBe(1);
    expect(s.shuttingDown).toBe(true);
    // A Watch after shutdown gets NOT_SERVING and ends at once.
    const late: number[] = [];
    s.watch('', { write: (status) => late.push(status), end: () => ended++ });
    expect(late).toEqual([ServingStatusNumber.NOT_SERVING]);
    expect(ended).toBe(2);
  });

  it('keeps an unknown service’s Watch open and stops telling a watcher that went away', () => {
    const health = new HealthState();
    const s = service({ shouldRateLimit: () => Promise.resolve(DENIED) }, health);
    const unknown: number[] = [];
    s.watch('other', { write: (status) => unknown.push(status), end: () => undefined });
    expect(unknown).toEqual([ServingStatusNumber.SERVICE_UNKNOWN]);
    const sent: number[] = [];
    const forget = s.watch('', { write: (status) => sent.push(status), end: () => undefined });
    forget();
    health.set('config', true);
    expect(sent).toEqual([ServingStatusNumber.NOT_SERVING]);
  });
});
