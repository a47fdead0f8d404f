import { InvalidRequestError } from '../../../src/limiter/errors';
import type { RateLimitResponse } from '../../../src/limiter/types';
import { CODE_NUMBER, UINT32_MAX, UNIT_NUMBER, durationFromMs, requestFromWire, unitFromWire, wireCount } from '../../../src/wire/convert';
import { responseToWire } from '../../helpers/response-oracle';
import { protoRoot } from '../../../src/wire/proto';
import type { WireRateLimitRequest } from '../../../src/wire/proto';

const entry = (key: string, value: string) => ({ key, value });

describe('requestFromWire', () => {
  it('copies domain, entries in order and the request hits', () => {
    const req = requestFromWire({
      domain: 'edge',
      descriptors: [{ entries: [entry('a', '1'), entry('b', '2')], limit: null, hitsAddend: null }],
      hitsAddend: 3,
    });
    expect(req).toEqual({
      domain: 'edge',
      descriptors: [{ entries: [entry('a', '1'), entry('b', '2')], limit: undefined, hitsAddend: undefined }],
      hitsAddend: 3,
    });
  });

  it('reads a set descriptor hits_addend wrapper, including an empty one meaning zero', () => {
    const req = requestFromWire({
      domain: 'd',
      descriptors: [
        { entries: [entry('k', 'v')], hitsAddend: { value: 7 } },
        { entries: [entry('k', 'v')], hitsAddend: {} },
        { entries: [entry('k', 'v')], hitsAddend: { value: 0 } },
        { entries: [entry('k', 'v')], hitsAddend: null },
      ],
      hitsAddend: 0,
    });
    expect(req.descriptors.map((d) => d.hitsAddend)).toEqual([7, 0, 0, undefined]);
  });

  it('caps uint64 hit counts at the uint32 maximum, whether decoded as numbers or strings', () => {
    const req = requestFromWire({
      domain: 'd',
      descriptors: [
        { entries: [entry('k', 'v')], hitsAddend: { value: 18446744073709552000 } },
        { entries: [entry('k', 'v')], hitsAddend: { value: '18446744073709551615' } },
      ],
      hitsAddend: 0,
    });
    expect(req.descriptors.map((d) => d.hitsAddend)).toEqual([UINT32_MAX, UINT32_MAX]);
  });

  it('converts a limit override with a unit given by name or by number', () => {
    const req = requestFromWire({
      domain: 'd',
      descriptors: [
        { entries: [entry('k', 'v')], limit: { requestsPerUnit: 5, unit: 'WEEK' } },
        { entries: [entry('k', 'v')], limit: { requestsPerUnit: 9, unit: 2 } },
      ],
      hitsAddend: 0,
    });
    expect(req.descriptors.map((d) => d.limit)).toEqual([
      { requestsPerUnit: 5, unit: 'week' },
      { requestsPerUnit: 9, unit: 'minute' },
    ]);
  });

  it('rejects an override whose unit is UNKNOWN or not defined by the protocol', () => {
    for (const unit of ['UNKNOWN', 0, 99] as const) {
      expect(() => requestFromWire({ domain: 'd', descriptors: [{ entries: [entry('k', 'v')], limit: { requestsPerUnit: 1, unit } }], hitsAddend: 0 })).toThrow(
        InvalidRequestError,
      );
    }
  });

  it('names the descriptor index of a bad override', () => {
    expect(() =>
      requestFromWire({
        domain: 'd',
        descriptors: [{ entries: [entry('k', 'v')] }, { entries: [entry('k', 'v')], limit: { requestsPerUnit: 1, unit: 42 } }],
        hitsAddend: 0,
      }),
    ).toThrow(/descriptors\[1\]\.limit\.unit/);
  });

  it('tolerates fields a decoder left out', () => {
    const req = requestFromWire({} as WireRateLimitRequest);
    expect(req).toEqual({ domain: '', descriptors: [], hitsAddend: 0 });
  });

  it('decodes real wire bytes with an undefined unit value into an InvalidRequestError', () => {
    const root = protoRoot();
    const type = root.lookupType('envoy.service.ratelimit.v3.RateLimitRequest');
    // Hand-built: descriptors { entries { key "k" value "v" } limit { requests_per_unit 5 unit 99 } }
    const descriptor = Buffer.from([0x0a, 0x06, 0x0a, 0x01, 0x6b, 0x12, 0x01, 0x76, 0x12, 0x04, 0x08, 0x05, 0x10, 0x63]);
    const bytes = Buffer.concat([Buffer.from([0x0a, 0x01, 0x64, 0x12, descriptor.length]), descriptor]);
    const decoded = type.toObject(type.decode(bytes), { enums: String, longs: Number, defaults: true, arrays: true });
    expect(() => requestFromWire(decoded as WireRateLimitRequest)).toThrow(InvalidRequestError);
  });
});

describe('wireCount and unitFromWire', () => {
  it('treat absent, negative and non-numeric counts as zero and floor fractions', () => {
    expect([undefined, null, -1, 'x', 2.7].map((v) => wireCount(v as number))).toEqual([0, 0, 0, 0, 2]);
  });

  it('map every protocol unit and nothing else', () => {
    expect(['SECOND', 'MINUTE', 'HOUR', 'DAY', 'MONTH', 'YEAR', 'WEEK'].map((u) => unitFromWire(u as 'SECOND'))).toEqual([
      'second',
      'minute',
      'hour',
      'day',
      'month',
      'year',
      'week',
    ]);
    expect([1, 2, 3, 4, 5, 6, 7].map((n) => unitFromWire(n))).toEqual(['second', 'minute', 'hour', 'day', 'month', 'year', 'week']);
    expect(unitFromWire(8)).toBeUndefined();
    expect(unitFromWire(undefined)).toBeUndefined();
  });
});

describe('durationFromMs', () => {
  it('splits milliseconds into seconds and nanos', () => {
    expect(durationFromMs(0)).toEqual({ seconds: 0, nanos: 0 });
    expect(durationFromMs(1)).toEqual({ seconds: 0, nanos: 1_000_000 });
    expect(durationFromMs(61_250)).toEqual({ seconds: 61, nanos: 250_000_000 });
  });

  it('never produces a negative duration', () => {
    expect(durationFromMs(-5)).toEqual({ seconds: 0, nanos: 0 });
  });
});

describe('responseToWire', () => {
  const response: RateLimitResponse = {
    overallCode: 'OVER_LIMIT',
    statuses: [
      { code: 'OK', limitRemaining: 0 },
      {
        code: 'OVER_LIMIT',
        currentLimit: { requestsPerUnit: 5, unit: 'week', name: 'weekly' },
        limitRemaining: 0,
        durationUntilResetMs: 1500,
      },
      { code: 'OK', currentLimit: { requestsPerUnit: 10, unit: 'second' }, limitRemaining: 7, durationUntilResetMs: 2000 },
    ],
    responseHeaders: [{ key: 'RateLimit-Limit', value: '5' }],
  };

  it('uses the protocol enum numbers and keeps statuses in order', () => {
    const wire = responseToWire(response);
    expect(wire.overallCode).toBe(CODE_NUMBER.OVER_LIMIT);
    expect(wire.statuses.map((s) => s.code)).toEqual([1, 2, 1]);
    expect(wire.statuses[1].currentLimit).toEqual({ requestsPerUnit: 5, unit: UNIT_NUMBER.week, name: 'weekly' });
    expect(wire.statuses[2].currentLimit).toEqual({ requestsPerUnit: 10, unit: 1, name: '' });
  });

  it('sets current_limit and duration_until_reset only when the limiter gave them', () => {
    const wire = responseToWire(response);
    expect(wire.statuses[0]).toEqual({ code: 1, limitRemaining: 0 });
    expect(wire.statuses[1].durationUntilReset).toEqual({ seconds: 1, nanos: 500_000_000 });
    expect(wire.statuses[2].limitRemaining).toBe(7);
  });

  it('carries response headers', () => {
    expect(responseToWire(response).responseHeadersToAdd).toEqual([{ key: 'RateLimit-Limit', value: '5' }]);
  });

  it('answers OK overall whenever the limiter did not say OVER_LIMIT', () => {
    const wire = responseToWire({ overallCode: 'OK', statuses: [], responseHeaders: [] });
    expect(wire.overallCode).toBe(CODE_NUMBER.OK);
  });

  it('clamps limit_remaining into the uint32 range', () => {
    const wire = responseToWire({
      overallCode: 'OK',
      statuses: [
        { code: 'OK', limitRemaining: 2 ** 40 },
        { code: 'OK', limitRemaining: -3 },
      ],
      responseHeaders: [],
    });
    expect(wire.statuses.map((s) => s.limitRemaining)).toEqual([UINT32_MAX, 0]);
  });

  it('encodes through the real message type', () => {
    const type = protoRoot().lookupType('envoy.service.ratelimit.v3.RateLimitResponse');
    const bytes = type.encode(type.fromObject(responseToWire(response))).finish();
    const back = type.toObject(type.decode(bytes), { enums: String, longs: Number }) as Record<string, unknown>;
    expect(back).toMatchObject({
      overallCode: 'OVER_LIMIT',
      statuses: [
        { code: 'OK' },
        { code: 'OVER_LIMIT', currentLimit: { requestsPerUnit: 5, unit: 'WEEK', name: 'weekly' }, durationUntilReset: { seconds: 1, nanos: 500_000_000 } },
        { code: 'OK', limitRemaining: 7 },
      ],
      responseHeadersToAdd: [{ key: 'RateLimit-Limit', value: '5' }],
    });
  });
});
