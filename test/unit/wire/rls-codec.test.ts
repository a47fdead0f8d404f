import fc from 'fast-check';
import { InvalidRequestError } from '../../../src/limiter/errors';
import type { DescriptorStatus, RateLimitResponse, Unit } from '../../../src/limiter/types';
import { requestFromWire } from '../../../src/wire/convert';
import { responseToWire } from '../../helpers/response-oracle';
import { protoRoot, type WireRateLimitRequest } from '../../../src/wire/proto';
import {
  decodeRateLimitRequest,
  DescriptorCache,
  frameResponse,
  MalformedMessageError,
  RequestCache,
  REQUEST_KEY_MAX_BYTES,
  requestKey,
} from '../../../src/wire/rls-codec';
import { plainStruct } from '../../helpers/struct';

/**
 * The hand-written codec must agree with the generic path of the grpc-js transport
 * (protobufjs + src/wire/convert.ts) on every message.
 */

const RequestType = protoRoot().lookupType('envoy.service.ratelimit.v3.RateLimitRequest');
const ResponseType = protoRoot().lookupType('envoy.service.ratelimit.v3.RateLimitResponse');

const text = fc.string({ maxLength: 12, unit: 'binary' });
const uint32 = fc.integer({ min: 0, max: 4_294_967_295 });
const uint64 = fc.oneof(
  uint32,
  fc.bigInt({ min: 0n, max: (1n << 64n) - 1n }).map((b) => b.toString()),
);

const wireRequest = fc.record(
  {
    domain: text,
    hitsAddend: uint32,
    descriptors: fc.array(
      fc.record(
        {
          entries: fc.array(fc.record({ key: text, value: text }), { maxLength: 4 }),
          limit: fc.record({ requestsPerUnit: uint32, unit: fc.integer({ min: 1, max: 7 }) }),
          hitsAddend: fc.record({ value: uint64 }, { requiredKeys: [] }),
        },
        { requiredKeys: ['entries'] },
      ),
      { maxLength: 4 },
    ),
  },
  { requiredKeys: [] },
);

function viaProtobufjs(bytes: Uint8Array) {
  return requestFromWire(RequestType.decode(bytes) as unknown as WireRateLimitRequest);
}

describe('decodeRateLimitRequest', () => {
  it('decodes every request exactly as protobufjs and requestFromWire do', () => {
    fc.assert(
      fc.property(wireRequest, (msg) => {
        const bytes = Buffer.from(RequestType.encode(RequestType.fromObject(msg)).finish());
        expect(decodeRateLimitRequest(bytes)).toEqual(viaProtobufjs(bytes));
      }),
      { numRuns: 300 },
    );
  });

  it('skips unknown fields of every wire type', () => {
    const known = Buffer.from(RequestType.encode({ domain: 'd', descriptors: [{ entries: [{ key: 'k', value: 'v' }] }] }).finish());
    // field 9 varint, field 10 fixed64, field 11 bytes, field 12 fixed32
    const unknown = Buffer.from([0x48, 0x96, 0x01, 0x51, 1, 2, 3, 4, 5, 6, 7, 8, 0x5a, 0x02, 0x61, 0x62, 0x65, 1, 2, 3, 4]);
    const bytes = Buffer.concat([unknown, known, unknown]);
    expect(decodeRateLimitRequest(bytes)).toEqual(viaProtobufjs(bytes));
  });

  it('rejects truncated and malformed bytes with MalformedMessageError', () => {
    expect(() => decodeRateLimitRequest(Buffer.from([0x0a, 0x05, 0x61]))).toThrow(MalformedMessageError);
    expect(() => decodeRateLimitRequest(Buffer.from([0x0b]))).toThrow(MalformedMessageError);
    expect(() => decodeRateLimitRequest(Buffer.from([0x18, 0xff]))).toThrow(MalformedMessageError);
  });

  it('rejects an override with the UNKNOWN or an undefined unit as an invalid request', () => {
    for (const unit of [0, 99]) {
      const bytes = Buffer.from(RequestType.encode({ domain: 'd', descriptors: [{ entries: [], limit: { requestsPerUnit: 1, unit } }] }).finish());
      expect(() => decodeRateLimitRequest(bytes)).toThrow(InvalidRequestError);
    }
  });
});

const units: Unit[] = ['second', 'minute', 'hour', 'day', 'week', 'month', 'year'];
// Names and header values of 128 bytes or more take two-byte lengths (and so does their field).
const longText = fc.string({ minLength: 40, maxLength: 300, unit: 'binary' });
const someText = fc.oneof(text, longText);
const status: fc.Arbitrary<DescriptorStatus> = fc.record(
  {
    code: fc.constantFrom('OK' as const, 'OVER_LIMIT' as const),
    limitRemaining: fc.oneof(uint32, fc.constant(5e10), fc.constant(-3)),
    currentLimit: fc.record(
      { requestsPerUnit: fc.oneof(uint32, fc.constant(0)), unit: fc.constantFrom(...units), name: someText },
      { requiredKeys: ['requestsPerUnit', 'unit'] },
    ),
    // Up to a bucket's debt cap of 200 years: seconds beyond 2^32.
    durationUntilResetMs: fc.oneof(
      fc.integer({ min: 0, max: 400 * 86_400_000 }),
      fc.double({ min: -5, max: 1e7, noNaN: true }),
      fc.constant(200 * 365 * 86_400_000),
    ),
  },
  { requiredKeys: ['code', 'limitRemaining'] },
);
const response: fc.Arbitrary<RateLimitResponse> = fc.record(
  {
    overallCode: fc.constantFrom('OK' as const, 'OVER_LIMIT' as const),
    statuses: fc.array(status, { maxLength: 5 }),
    responseHeaders: fc.array(fc.record({ key: text, value: someText }), { maxLength: 3 }),
    // dynamic_metadata: a google.protobuf.Struct of any JSON value, nested.
    dynamicMetadata: fc.dictionary(text, fc.jsonValue({ maxDepth: 3 }), { maxKeys: 4 }) as fc.Arbitrary<RateLimitResponse['dynamicMetadata']>,
  },
  { requiredKeys: ['overallCode', 'statuses', 'responseHeaders'] },
);

describe('DescriptorCache', () => {
  const encode = (domain: string, values: string[]): Buffer =>
    Buffer.from(RequestType.encode(RequestType.fromObject({ domain, descriptors: values.map((v) => ({ entries: [{ key: 'k', value: v }] })) })).finish());

  it('decodes every request, again and again, exactly as without it', () => {
    const cache = new DescriptorCache({ maxEntries: 8, maxDescriptorBytes: 24 });
    fc.assert(
      fc.property(wireRequest, (msg) => {
        const bytes = Buffer.from(RequestType.encode(RequestType.fromObject(msg)).finish());
        const plain = decodeRateLimitRequest(bytes);
        expect(decodeRateLimitRequest(bytes, cache)).toEqual(plain);
        expect(decodeRateLimitRequest(bytes, cache)).toEqual(plain);
      }),
      { numRuns: 300 },
    );
  });

  it('hands out one frozen object per distinct descriptor, whatever request it comes in', () => {
    const cache = new DescriptorCache({ maxEntries: 10, maxDescriptorBytes: 64 });
    // Seen once: decoded, not kept.
    const once = decodeRateLimitRequest(encode('a', ['x', 'y']), cache);
    expect(Object.isFrozen(once.descriptors[0])).toBe(false);
    expect(cache.size).toBe(0);
    const first = decodeRateLimitRequest(encode('a', ['x', 'y']), cache);
    const second = decodeRateLimitRequest(encode('b', ['y', 'x', 'z', 'z']), cache);
    expect(second.descriptors[0]).toBe(first.descriptors[1]);
    expect(second.descriptors[1]).toBe(first.descriptors[0]);
    // "z" is kept from its second sighting, inside the same request.
    expect(second.descriptors[3]).toEqual({ entries: [{ key: 'k', value: 'z' }] });
    expect(decodeRateLimitRequest(encode('c', ['z']), cache).descriptors[0]).toBe(second.descriptors[3]);
    for (const d of [second.descriptors[0], second.descriptors[1], second.descriptors[3]]) {
      expect(Object.isFrozen(d)).toBe(true);
      expect(Object.isFrozen(d.entries)).toBe(true);
      expect(Object.isFrozen(d.entries[0])).toBe(true);
    }
    expect(cache.size).toBe(3);
  });

  it('keeps at most maxEntries descriptors, dropping the oldest, and none larger than maxDescriptorBytes', () => {
    const cache = new DescriptorCache({ maxEntries: 2, maxDescriptorBytes: 10 });
    decodeRateLimitRequest(encode('d', ['a']), cache);
    const a = decodeRateLimitRequest(encode('d', ['a']), cache).descriptors[0];
    decodeRateLimitRequest(encode('d', ['b', 'c', 'b', 'c']), cache);
    expect(cache.size).toBe(2);
    // "a" was dropped: decoded again, as a new object (kept again from its next sighting).
    const again = decodeRateLimitRequest(encode('d', ['a', 'a']), cache).descriptors[1];
    expect(again).toEqual(a);
    expect(again).not.toBe(a);
    // A descriptor of 11 encoded bytes is decoded, not kept.
    const big = decodeRateLimitRequest(encode('d', ['0123456', '0123456']), cache).descriptors[1];
    expect(big).toEqual({ entries: [{ key: 'k', value: '0123456' }] });
    expect(Object.isFrozen(big)).toBe(false);
    expect(cache.size).toBe(2);
  });

  it('rejects bounds that are not positive integers', () => {
    expect(() => new DescriptorCache({ maxEntries: 0, maxDescriptorBytes: 10 })).toThrow(RangeError);
    expect(() => new DescriptorCache({ maxEntries: 10, maxDescriptorBytes: 1.5 })).toThrow(RangeError);
  });
});

describe('RequestCache', () => {
  const encode = (domain: string, values: string[]): Buffer =>
    Buffer.from(RequestType.encode(RequestType.fromObject({ domain, descriptors: values.map((v) => ({ entries: [{ key: 'k', value: v }] })) })).finish());
  const cacheOf = (maxEntries: number): RequestCache =>
    new RequestCache({ maxEntries, descriptors: new DescriptorCache({ maxEntries: 100, maxDescriptorBytes: 1024 }) });
  const decode = (cache: RequestCache, bytes: Buffer) => cache.decode(bytes, requestKey(bytes));

  it('decodes every request, again and again, exactly as without it', () => {
    const cache = cacheOf(8);
    fc.assert(
      fc.property(wireRequest, (msg) => {
        const bytes = Buffer.from(RequestType.encode(RequestType.fromObject(msg)).finish());
        const plain = decodeRateLimitRequest(bytes);
        for (let i = 0; i < 3; i++) expect(decode(cache, bytes)).toEqual(plain);
      }),
      { numRuns: 300 },
    );
  });

  it('hands out one frozen request per distinct message from its second sighting on, its descriptors frozen', () => {
    const cache = cacheOf(10);
    const bytes = encode('a', ['x', 'y']);
    const once = decode(cache, bytes);
    expect(Object.isFrozen(once)).toBe(false);
    expect(cache.size).toBe(0);
    const kept = decode(cache, bytes);
    expect(Object.isFrozen(kept)).toBe(true);
    expect(Object.isFrozen(kept.descriptors)).toBe(true);
    for (const d of kept.descriptors) expect(Object.isFrozen(d) && Object.isFrozen(d.entries) && Object.isFrozen(d.entries[0])).toBe(true);
    expect(decode(cache, Buffer.from(bytes))).toBe(kept);
    // Another domain with the same descriptors is another request, sharing the frozen descriptors.
    decode(cache, encode('b', ['x', 'y']));
    const other = decode(cache, encode('b', ['x', 'y']));
    expect(other).not.toBe(kept);
    expect(other.descriptors[0]).toBe(kept.descriptors[0]);
    expect(cache.size).toBe(2);
  });

  it('keeps at most maxEntries requests, and none named by more than REQUEST_KEY_MAX_BYTES', () => {
    const cache = cacheOf(2);
    for (const v of ['a', 'b', 'c']) for (let i = 0; i < 2; i++) decode(cache, encode('d', [v]));
    expect(cache.size).toBe(2);
    const large = encode('d', ['v'.repeat(REQUEST_KEY_MAX_BYTES)]);
    expect(requestKey(large)).toBeUndefined();
    const first = decode(cache, large);
    expect(decode(cache, large)).not.toBe(first);
    expect(decode(cache, large)).toEqual(decodeRateLimitRequest(large));
    expect(cache.size).toBe(2);
  });
});

describe('frameResponse', () => {
  it('frames the same bytes protobufjs would after responseToWire', () => {
    fc.assert(
      fc.property(response, (r) => {
        const framed = frameResponse(r);
        expect(framed[0]).toBe(0);
        expect(framed.readUInt32BE(1)).toBe(framed.length - 5);
        const expected = ResponseType.toObject(ResponseType.decode(ResponseType.encode(responseToWire(r)).finish()), { longs: Number });
        const decoded = ResponseType.toObject(ResponseType.decode(framed.subarray(5)), { longs: Number });
        expect(decoded).toEqual(expected);
        // The Struct reads back as the plain data it was made from (-0 aside, which JSON cannot tell from 0).
        if (r.dynamicMetadata !== undefined) expect(plainStruct(decoded.dynamicMetadata)).toEqual(JSON.parse(JSON.stringify(r.dynamicMetadata)));
      }),
      { numRuns: 300 },
    );
  });

  it('frames a response larger than its scratch space, and the small one after it, exactly', () => {
    const big: RateLimitResponse = {
      overallCode: 'OVER_LIMIT',
      statuses: Array.from({ length: 3000 }, (_, i) => ({
        code: 'OVER_LIMIT' as const,
        currentLimit: { requestsPerUnit: i, unit: 'minute' as const, name: `limit-${i}-${'x'.repeat(i % 200)}` },
        limitRemaining: 0,
        durationUntilResetMs: i * 1001,
      })),
      responseHeaders: [{ key: 'x-ratelimit-limit', value: 'v'.repeat(70_000) }],
    };
    const small: RateLimitResponse = { overallCode: 'OK', statuses: [{ code: 'OK', limitRemaining: 7 }], responseHeaders: [] };
    for (const r of [big, small, big]) {
      const framed = frameResponse(r);
      expect(framed.readUInt32BE(1)).toBe(framed.length - 5);
      const expected = ResponseType.toObject(ResponseType.decode(ResponseType.encode(responseToWire(r)).finish()), { longs: Number });
      expect(ResponseType.toObject(ResponseType.decode(framed.subarray(5)), { longs: Number })).toEqual(expected);
    }
  });
});
