import fc from 'fast-check';
import { InvalidRequestError } from '../../../src/limiter/errors';
import type { QuotaAction } from '../../../src/sharing/quota/quota-budgets';
import { loadProtoFiles } from '../../../src/wire/proto';
import { decodeUsageReports, encodeQuotaResponse, RLQS_PROTO, type UsageReport } from '../../../src/wire/rlqs-codec';

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

  test("the message is protobufjs's, actions of any length and ids of many pairs; a later strategy or TTL of the same bucket is encoded anew", () => {
    const long = [
      { key: 'path', value: '/a/é' },
      { key: 'tenant', value: 'x'.repeat(300) },
    ];
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
    const decode = (bytes: Uint8Array): unknown => Response.toObject(Response.decode(bytes), { longs: Number, oneofs: true, defaults: true });
    const first = encodeQuotaResponse(actions);
    expect(decode(first)).toEqual(decode(whole(actions)));
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

/** What protobufjs makes of a report, in the codec's terms (the codec's own rules applied alike). */
function viaProtobufjs(bytes: Uint8Array): UsageReport {
  const num = (v: unknown): number => (v === undefined || v === null ? 0 : Number(String(v)));
  const decoded = Reports.decode(bytes) as unknown as { domain?: string; bucketQuotaUsages?: any[] };
  return {
    domain: decoded.domain ?? '',
    usages: (decoded.bucketQuotaUsages ?? []).map((u, i) => {
      const pairs = u.bucketId?.bucket as Record<string, string> | undefined;
      if (pairs === undefined || Object.keys(pairs).length === 0)
        throw new InvalidRequestError(`bucket_quota_usages[${i}].bucket_id: must have at least one pair`);
      const bucket = Object.entries(pairs)
        .map(([key, value]) => ({ key, value }))
        .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
      if (bucket.some((e) => e.key === '' || e.value === ''))
        throw new InvalidRequestError(`bucket_quota_usages[${i}].bucket_id: keys and values must not be empty`);
      const seconds = num(u.timeElapsed?.seconds);
      if (seconds < 0) throw new InvalidRequestError(`bucket_quota_usages[${i}].time_elapsed: must not be negative`);
      return { bucket, timeElapsedSeconds: seconds, allowed: num(u.numRequestsAllowed), denied: num(u.numRequestsDenied) };
    }),
  };
}

const outcome = (f: () => UsageReport): UsageReport | string => {
  try {
    return f();
  } catch (err) {
    return (err as Error).message;
  }
};

const text = fc.string({ maxLength: 12, unit: 'binary' });
const uint64 = fc.oneof(
  fc.integer({ min: 0, max: 2 ** 31 }),
  fc.bigInt({ min: 0n, max: 1n << 53n }).map((b) => b.toString()),
);
const report = fc.record(
  {
    domain: text,
    bucketQuotaUsages: fc.array(
      fc.record(
        {
          bucketId: fc.record({ bucket: fc.dictionary(text, text, { maxKeys: 4 }) }),
          timeElapsed: fc.record(
            { seconds: fc.oneof(fc.integer({ min: -5, max: 100_000 }), fc.constant(0)), nanos: fc.integer({ min: 0, max: 999_999_999 }) },
            { requiredKeys: [] },
          ),
          numRequestsAllowed: uint64,
          numRequestsDenied: uint64,
        },
        { requiredKeys: [] },
      ),
      { maxLength: 5 },
    ),
  },
  { requiredKeys: [] },
);

describe('the hand-written codec against protobufjs', () => {
  test('decodes every report as protobufjs does, errors included', () => {
    fc.assert(
      fc.property(report, (msg) => {
        const bytes = encode(msg);
        expect(outcome(() => decodeUsageReports(bytes))).toEqual(outcome(() => viaProtobufjs(bytes)));
      }),
      { numRuns: 300 },
    );
  });

  test('skips unknown fields of every wire type, at every level, and merges a bucket id sent twice', () => {
    // field 9 varint, field 10 fixed64, field 11 bytes, field 12 fixed32
    const unknown = [0x48, 0x96, 0x01, 0x51, 1, 2, 3, 4, 5, 6, 7, 8, 0x5a, 0x02, 0x61, 0x62, 0x65, 1, 2, 3, 4];
    const entry = (k: string, v: string): number[] => [
      0x0a,
      4 + k.length + v.length + unknown.length,
      ...unknown,
      0x0a,
      k.length,
      ...Buffer.from(k),
      0x12,
      v.length,
      ...Buffer.from(v),
    ];
    const id = [...entry('b', '2'), ...unknown, ...entry('a', '1')];
    const length = (n: number): number[] => (n < 0x80 ? [n] : [(n & 0x7f) | 0x80, n >> 7]);
    const usage = [0x0a, ...length(id.length), ...id, ...unknown, 0x0a, entry('c', '3').length, ...entry('c', '3'), 0x18, 0x07, 0x12, 0x02, 0x08, 0x05];
    const bytes = Buffer.from([...unknown, 0x0a, 0x01, 0x64, 0x12, ...length(usage.length), ...usage, ...unknown]);
    expect(decodeUsageReports(bytes)).toEqual(viaProtobufjs(bytes));
    expect(decodeUsageReports(bytes).usages[0]).toEqual({
      bucket: [
        { key: 'a', value: '1' },
        { key: 'b', value: '2' },
        { key: 'c', value: '3' },
      ],
      timeElapsedSeconds: 5,
      allowed: 7,
      denied: 0,
    });
  });

  test('cut anywhere, a report is an invalid request where protobufjs fails, and the same report where it does not', () => {
    const good = Buffer.from(encode({ domain: 'd', bucketQuotaUsages: [{ bucketId: { bucket: { k: 'v', q: 'w' } }, numRequestsAllowed: 300 }] }));
    let failed = 0;
    for (let cut = 1; cut < good.length; cut++) {
      const bytes = good.subarray(0, cut);
      const theirs = outcome(() => viaProtobufjs(bytes));
      const ours = outcome(() => decodeUsageReports(bytes));
      if (typeof theirs === 'string') {
        expect(ours).toEqual(expect.stringMatching(/^cannot decode RateLimitQuotaUsageReports: /));
        failed++;
      } else expect(ours).toEqual(theirs);
    }
    expect(failed).toBeGreaterThan(good.length / 2);
    expect(() => decodeUsageReports(Buffer.from([0x0b]))).toThrow(InvalidRequestError);
  });

  test('encodes every response as protobufjs reads it', () => {
    const strategy = fc.oneof(
      fc.constant({ kind: 'allow_all' as const }),
      fc.constant({ kind: 'deny_all' as const }),
      fc.record({
        kind: fc.constant('token_bucket' as const),
        maxTokens: fc.integer({ min: 1, max: 4_294_967_295 }),
        tokensPerFill: fc.integer({ min: 1, max: 4_294_967_295 }),
        fillIntervalSeconds: fc.integer({ min: 1, max: 3_600 }),
      }),
    );
    const pairs = fc.uniqueArray(
      fc.record({ key: fc.string({ minLength: 1, maxLength: 200, unit: 'binary' }), value: fc.string({ minLength: 1, maxLength: 200, unit: 'binary' }) }),
      {
        minLength: 1,
        maxLength: 4,
        selector: (e) => e.key,
      },
    );
    const action: fc.Arbitrary<QuotaAction> = fc.oneof(
      fc.record({ bucket: pairs, strategy, ttlSeconds: fc.integer({ min: 1, max: 300 }) }),
      fc.record({ bucket: pairs, abandon: fc.constant(true as const) }),
    );
    fc.assert(
      fc.property(fc.array(action, { maxLength: 6 }), (actions) => {
        const decoded = Response.toObject(Response.decode(encodeQuotaResponse(actions)), { longs: Number, oneofs: true, defaults: false }) as any;
        expect(decoded.bucketAction ?? []).toEqual(
          actions.map((a) => {
            const bucketId = { bucket: Object.fromEntries(a.bucket.map((e) => [e.key, e.value])) };
            if (a.abandon === true) return { bucketId, abandonAction: {}, bucketAction: 'abandonAction' };
            const s = a.strategy;
            return {
              bucketId,
              bucketAction: 'quotaAssignmentAction',
              quotaAssignmentAction: {
                assignmentTimeToLive: { seconds: a.ttlSeconds },
                rateLimitStrategy:
                  s.kind === 'token_bucket'
                    ? {
                        strategy: 'tokenBucket',
                        tokenBucket: { maxTokens: s.maxTokens, tokensPerFill: { value: s.tokensPerFill }, fillInterval: { seconds: s.fillIntervalSeconds } },
                      }
                    : { strategy: 'blanketRule', blanketRule: s.kind === 'deny_all' ? 1 : 0 },
              },
            };
          }),
        );
      }),
      { numRuns: 300 },
    );
  });
});
