import { InvalidRequestError } from '../../../src/limiter/errors';
import { loadProtoFiles } from '../../../src/wire/proto';
import { decodeUsageReports, encodeQuotaResponse, RLQS_PROTO } from '../../../src/wire/rlqs-codec';

const root = loadProtoFiles([RLQS_PROTO]);
const Reports = root.lookupType('envoy.service.rate_limit_quota.v3.RateLimitQuotaUsageReports');
const Response = root.lookupType('envoy.service.rate_limit_quota.v3.RateLimitQuotaResponse');

const encode = (o: object): Uint8Array => Reports.encode(Reports.fromObject(o)).finish();

describe('usage reports', () => {
  test('decode into sorted pairs, whole seconds and counts', () => {
    const report = decodeUsageReports(
      encode({
        domain: 'd',
        bucketQuotaUsages: [{ bucketId: { bucket: { z: '1', a: '2' } }, timeElapsed: { seconds: 5 }, numRequestsAllowed: 7, numRequestsDenied: 3 }],
      }),
    );
    expect(report).toEqual({
      domain: 'd',
      usages: [
        {
          bucket: [
            { key: 'a', value: '2' },
            { key: 'z', value: '1' },
          ],
          timeElapsedSeconds: 5,
          allowed: 7,
          denied: 3,
        },
      ],
    });
  });

  test('a missing domain and time_elapsed decode as empty and 0', () => {
    expect(decodeUsageReports(encode({ bucketQuotaUsages: [{ bucketId: { bucket: { k: 'v' } } }] }))).toEqual({
      domain: '',
      usages: [{ bucket: [{ key: 'k', value: 'v' }], timeElapsedSeconds: 0, allowed: 0, denied: 0 }],
    });
  });

  test('bad bytes, a bucket without pairs or with an empty value are invalid requests (INVALID_ARGUMENT on the stream)', () => {
    expect(() => decodeUsageReports(Buffer.from([0x0a, 0xff]))).toThrow(InvalidRequestError);
    expect(() => decodeUsageReports(encode({ domain: 'd', bucketQuotaUsages: [{}] }))).toThrow(InvalidRequestError);
    expect(() => decodeUsageReports(encode({ domain: 'd', bucketQuotaUsages: [{ bucketId: { bucket: { k: '' } } }] }))).toThrow(InvalidRequestError);
  });
});

describe('responses', () => {
  test('assignments (blanket rules and token buckets, whole-second TTL) and abandon actions, unframed', () => {
    const message = encodeQuotaResponse([
      { bucket: [{ key: 'k', value: 'a' }], strategy: { kind: 'allow_all' }, ttlSeconds: 3 },
      { bucket: [{ key: 'k', value: 'b' }], strategy: { kind: 'deny_all' }, ttlSeconds: 3 },
      { bucket: [{ key: 'k', value: 'c' }], strategy: { kind: 'token_bucket', maxTokens: 2, tokensPerFill: 10, fillIntervalSeconds: 20 }, ttlSeconds: 15 },
      { bucket: [{ key: 'k', value: 'd' }], abandon: true },
    ]);
    const decoded = Response.toObject(Response.decode(message), { longs: Number, oneofs: true, defaults: false }) as any;
    const actions = decoded.bucketAction;
    expect(actions[0].quotaAssignmentAction).toEqual({
      assignmentTimeToLive: { seconds: 3 },
      rateLimitStrategy: { blanketRule: 0, strategy: 'blanketRule' },
    });
    expect(actions[1].quotaAssignmentAction.rateLimitStrategy).toEqual({ blanketRule: 1, strategy: 'blanketRule' });
    expect(actions[2].quotaAssignmentAction).toEqual({
      assignmentTimeToLive: { seconds: 15 },
      rateLimitStrategy: { tokenBucket: { maxTokens: 2, tokensPerFill: { value: 10 }, fillInterval: { seconds: 20 } }, strategy: 'tokenBucket' },
    });
    expect(actions[3]).toEqual({ bucketId: { bucket: { k: 'd' } }, abandonAction: {}, bucketAction: 'abandonAction' });
  });

  test("the bytes are protobufjs's for the whole message, actions of any length; a later strategy or TTL of the same bucket is encoded anew", () => {
    const long = [{ key: 'tenant', value: 'x'.repeat(300) }];
    const short = [{ key: 'k', value: 'a' }];
    const strategy = { kind: 'token_bucket', maxTokens: 2, tokensPerFill: 10, fillIntervalSeconds: 20 } as const;
    const actions = [
      { bucket: long, strategy, ttlSeconds: 15 },
      { bucket: short, strategy: { kind: 'deny_all' } as const, ttlSeconds: 3 },
      { bucket: [{ key: 'k', value: 'gone' }], abandon: true as const },
    ];
    const whole = (list: typeof actions): Uint8Array =>
      Response.encode(
        Response.fromObject({
          bucketAction: list.map((a) =>
            a.abandon === true
              ? { bucketId: { bucket: { k: 'gone' } }, abandonAction: {} }
              : {
                  bucketId: { bucket: Object.fromEntries(a.bucket.map((e) => [e.key, e.value])) },
                  quotaAssignmentAction: {
                    assignmentTimeToLive: { seconds: a.ttlSeconds, nanos: 0 },
                    rateLimitStrategy:
                      a.strategy.kind === 'deny_all'
                        ? { blanketRule: 1 }
                        : { tokenBucket: { maxTokens: 2, tokensPerFill: { value: 10 }, fillInterval: { seconds: 20, nanos: 0 } } },
                  },
                },
          ),
        }),
      ).finish();
    const first = encodeQuotaResponse(actions);
    expect(Buffer.from(first).equals(Buffer.from(whole(actions)))).toBe(true);
    expect(Buffer.from(encodeQuotaResponse(actions)).equals(Buffer.from(first))).toBe(true);
    // A new TTL, or a new strategy object for the same bucket, is encoded anew.
    const later = encodeQuotaResponse([{ bucket: long, strategy: { ...strategy, tokensPerFill: 11 }, ttlSeconds: 6 }]);
    const decoded = Response.toObject(Response.decode(later), { longs: Number, oneofs: true, defaults: false }) as any;
    expect(decoded.bucketAction[0].quotaAssignmentAction).toEqual({
      assignmentTimeToLive: { seconds: 6 },
      rateLimitStrategy: { tokenBucket: { maxTokens: 2, tokensPerFill: { value: 11 }, fillInterval: { seconds: 20 } }, strategy: 'tokenBucket' },
    });
    expect(encodeQuotaResponse([])).toHaveLength(0);
  });
});
