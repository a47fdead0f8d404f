import { InvalidRequestError } from '../limiter/errors';
import type { Code, Descriptor, Entry, RateLimitRequest, Unit } from '../limiter/types';
import type { WireDescriptor, WireEnum, WireRateLimitRequest, WireUnitName } from './proto';

/**
 * Wire facts (enum numbers, uint32 ranges) and the conversion of a decoded RateLimitRequest object
 * (proto JSON on HTTP /json) into the limiter's request. Responses are encoded by one encoder,
 * ./rls-codec's frameResponse. Only wire-level facts are checked
 * here (enum values, wrapper types, integer ranges); what a well-formed request means is the limiter's business.
 */

/** Largest value of a uint32 field; uint64 hit counts are capped to it so arithmetic stays exact. */
export const UINT32_MAX = 4_294_967_295;

/** Numeric values of RateLimitResponse.Code. */
export const CODE_NUMBER: Readonly<Record<Code | 'UNKNOWN', number>> = Object.freeze({ UNKNOWN: 0, OK: 1, OVER_LIMIT: 2 });

/** Numeric values of RateLimitResponse.RateLimit.Unit (and envoy.type.v3.RateLimitUnit). */
export const UNIT_NUMBER: Readonly<Record<Unit, number>> = Object.freeze({
  second: 1,
  minute: 2,
  hour: 3,
  day: 4,
  month: 5,
  year: 6,
  week: 7,
});

const UNIT_BY_NAME: ReadonlyMap<string, Unit> = new Map<string, Unit>([
  ['SECOND', 'second'],
  ['MINUTE', 'minute'],
  ['HOUR', 'hour'],
  ['DAY', 'day'],
  ['MONTH', 'month'],
  ['YEAR', 'year'],
  ['WEEK', 'week'],
]);

const UNIT_BY_NUMBER: ReadonlyMap<number, Unit> = new Map((Object.entries(UNIT_NUMBER) as [Unit, number][]).map(([unit, n]) => [n, unit]));

/** The core unit of a wire unit enum (name or number); undefined for UNKNOWN and undefined values. */
export function unitFromWire(unit: WireEnum<WireUnitName> | null | undefined): Unit | undefined {
  if (typeof unit === 'number') return UNIT_BY_NUMBER.get(unit);
  if (typeof unit === 'string') return UNIT_BY_NAME.get(unit);
  return undefined;
}

/** A non-negative integer from a decoded uint32/uint64 field (number, or decimal string for big values), capped at UINT32_MAX. */
export function wireCount(value: number | string | null | undefined): number {
  if (value === undefined || value === null) return 0;
  const n = typeof value === 'number' ? value : Number(value);
  if (!Number.isFinite(n) || n <= 0) return 0;
  return n >= UINT32_MAX ? UINT32_MAX : Math.floor(n);
}

function descriptorFromWire(wire: WireDescriptor, index: number): Descriptor {
  const wireEntries = wire.entries ?? [];
  const entries: Entry[] = new Array(wireEntries.length);
  for (let i = 0; i < wireEntries.length; i++) {
    const e = wireEntries[i];
    entries[i] = { key: e.key ?? '', value: e.value ?? '' };
  }
  let limit: Descriptor['limit'];
  if (wire.limit) {
    const unit = unitFromWire(wire.limit.unit);
    if (unit === undefined) {
      throw new InvalidRequestError(`descriptors[${index}].limit.unit: unknown unit ${JSON.stringify(wire.limit.unit)}`);
    }
    limit = { requestsPerUnit: wireCount(wire.limit.requestsPerUnit), unit };
  }
  // A set UInt64Value wrapper, even an empty one (value 0), means "this many hits"; null means unset.
  const hitsAddend = wire.hitsAddend ? wireCount(wire.hitsAddend.value) : undefined;
  return { entries, limit, hitsAddend };
}

/** A decoded RateLimitRequest as the limiter's request. Throws InvalidRequestError on wire-level faults. */
export function requestFromWire(wire: WireRateLimitRequest): RateLimitRequest {
  const wireDescriptors = wire.descriptors ?? [];
  const descriptors: Descriptor[] = new Array(wireDescriptors.length);
  for (let i = 0; i < wireDescriptors.length; i++) descriptors[i] = descriptorFromWire(wireDescriptors[i], i);
  return { domain: wire.domain ?? '', descriptors, hitsAddend: wireCount(wire.hitsAddend) };
}

/** A Duration from milliseconds (negative and fractional inputs are clamped/rounded to whole ms). */
export function durationFromMs(ms: number): { seconds: number; nanos: number } {
  const whole = ms > 0 ? Math.round(ms) : 0;
  return { seconds: Math.floor(whole / 1000), nanos: (whole % 1000) * 1_000_000 };
}
