import { InvalidRequestError, NotReadyError, OverCapacityError } from '../../src/limiter/errors';
import { StoreUnavailableError } from '../../src/limiter/store';
import { classify, ERROR_CATALOGUE, GrpcStatus, MalformedMessageError, publicMessage, type ErrorCode } from '../../src/errors';
import { decodeRateLimitRequest } from '../../src/wire/rls-codec';

// One example of every failure the catalogue names: a new entry without an example does not compile.
const EXAMPLES: Record<ErrorCode, unknown> = {
  invalid_request: new InvalidRequestError('descriptors must not be empty'),
  malformed_message: new MalformedMessageError('truncated message'),
  not_ready: new NotReadyError('no rate limit configuration loaded'),
  over_capacity: new OverCapacityError('quota streams hold their memory budget'),
  store_unavailable: new StoreUnavailableError('redis timed out'),
  internal: new TypeError('x is undefined'),
};

describe('the error catalogue', () => {
  const entries = Object.entries(ERROR_CATALOGUE) as [ErrorCode, (typeof ERROR_CATALOGUE)[ErrorCode]][];

  it.each(entries)('classifies its example of %s to that entry, under its own code', (code, kind) => {
    expect(kind.code).toBe(code);
    expect(classify(EXAMPLES[code])).toBe(kind);
  });

  it.each(entries.filter(([code]) => code !== 'internal'))('gives the error class of %s that code as its `code` property', (code) => {
    expect((EXAMPLES[code] as { code: unknown }).code).toBe(code);
  });

  it.each(entries)('answers %s with an error status on every edge', (_code, kind) => {
    // Envoy reads anything but an error as an answer: OK and UNKNOWN are never a failure's status.
    expect(kind.grpcStatus).not.toBe(GrpcStatus.OK);
    expect(kind.grpcStatus).not.toBe(GrpcStatus.UNKNOWN);
    expect(Object.values(GrpcStatus)).toContain(kind.grpcStatus);
    expect(kind.httpStatus).toBeGreaterThanOrEqual(400);
    expect(kind.httpStatus).toBeLessThan(600);
  });

  it('keeps the service contract: bad requests INVALID_ARGUMENT, a service that cannot decide UNAVAILABLE', () => {
    expect(classify(EXAMPLES.invalid_request).grpcStatus).toBe(GrpcStatus.INVALID_ARGUMENT);
    expect(classify(EXAMPLES.store_unavailable).grpcStatus).toBe(GrpcStatus.UNAVAILABLE);
    expect(classify(EXAMPLES.not_ready).grpcStatus).toBe(GrpcStatus.UNAVAILABLE);
    expect(classify(EXAMPLES.internal).grpcStatus).toBe(GrpcStatus.INTERNAL);
  });

  it('counts only store failures as store errors: a missing config is the service’s', () => {
    const storeCounted = entries.filter(([, kind]) => kind.metric === 'store').map(([code]) => code);
    expect(storeCounted).toEqual(['store_unavailable']);
    expect(classify(EXAMPLES.not_ready).metric).toBe('service');
  });

  it('logs only what nobody else reports', () => {
    const logged = entries.filter(([, kind]) => kind.logLevel !== 'silent').map(([code]) => code);
    expect(logged).toEqual(['internal']);
  });

  it('treats anything unknown, thrown non-errors included, as internal, and never shows its message', () => {
    for (const err of [new Error('secret detail'), 'a string', undefined, { code: 14 }]) {
      const kind = classify(err);
      expect(kind.code).toBe('internal');
      expect(publicMessage(kind, err)).toBe('internal error');
    }
  });

  it('passes on the message of a bad request, which names the field', () => {
    expect(publicMessage(classify(EXAMPLES.invalid_request), EXAMPLES.invalid_request)).toBe('descriptors must not be empty');
  });

  it('is what the wire decoder throws for undecodable bytes', () => {
    let thrown: unknown;
    try {
      decodeRateLimitRequest(Buffer.from([0x0a, 0x05, 0x61]));
    } catch (err) {
      thrown = err;
    }
    expect(classify(thrown).code).toBe('malformed_message');
  });
});
