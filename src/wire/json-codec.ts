import { InvalidRequestError } from '../limiter/errors';
import type { RateLimitRequest, RateLimitResponse, Unit } from '../limiter/types';
import { durationFromMs, requestFromWire } from './convert';
import type { WireDescriptor, WireRateLimitRequest, WireUnitName } from './proto';

/**
 * The proto JSON form of ShouldRateLimit (the /json endpoint): requests decoded with the proto JSON
 * rules the reference's endpoint accepts (both field spellings, unknown fields rejected), responses
 * written as protojson writes them.
 */

/** A JSON object as proto JSON writes it. */
export type Json = Record<string, unknown>;

const REQUEST_FIELDS = new Set(['domain', 'descriptors', 'hitsAddend']);
const DESCRIPTOR_FIELDS = new Set(['entries', 'limit', 'hitsAddend']);
const ENTRY_FIELDS = new Set(['key', 'value']);
const LIMIT_FIELDS = new Set(['requestsPerUnit', 'unit']);

/** lower_snake_case -> lowerCamelCase; proto JSON parsers accept both spellings of a field. */
function camel(name: string): string {
  return name.includes('_') ? name.replace(/_([a-z0-9])/g, (_m, c: string) => c.toUpperCase()) : name;
}

/** The object's fields under their camelCase names; rejects unknown and duplicate fields. */
function fields(value: unknown, where: string, known: ReadonlySet<string>): Map<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new InvalidRequestError(`${where}: expected an object`);
  const out = new Map<string, unknown>();
  for (const [name, v] of Object.entries(value as Json)) {
    const key = camel(name);
    if (!known.has(key)) throw new InvalidRequestError(`${where}: unknown field "${name}"`);
    if (out.has(key)) throw new InvalidRequestError(`${where}: field "${name}" given twice`);
    // proto JSON: null means "default value".
    if (v !== null) out.set(key, v);
  }
  return out;
}

function string(value: unknown, where: string): string {
  if (value === undefined) return '';
  if (typeof value !== 'string') throw new InvalidRequestError(`${where}: expected a string`);
  return value;
}

/** A uint32/uint64 field: a JSON number or a decimal string, as proto JSON allows. */
function count(value: unknown, where: string): number {
  if (value === undefined) return 0;
  const n = typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 0) throw new InvalidRequestError(`${where}: expected a non-negative integer`);
  return n;
}

function array(value: unknown, where: string): unknown[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw new InvalidRequestError(`${where}: expected an array`);
  return value;
}

function descriptorFromJson(value: unknown, where: string): WireDescriptor {
  const f = fields(value, where, DESCRIPTOR_FIELDS);
  const entries = array(f.get('entries'), `${where}.entries`).map((e, j) => {
    const ef = fields(e, `${where}.entries[${j}]`, ENTRY_FIELDS);
    return { key: string(ef.get('key'), `${where}.entries[${j}].key`), value: string(ef.get('value'), `${where}.entries[${j}].value`) };
  });
  const out: WireDescriptor = { entries };
  const limit = f.get('limit');
  if (limit !== undefined) {
    const lf = fields(limit, `${where}.limit`, LIMIT_FIELDS);
    const unit = lf.get('unit') ?? 'UNKNOWN';
    if (typeof unit !== 'string' && typeof unit !== 'number') throw new InvalidRequestError(`${where}.limit.unit: expected a unit name`);
    out.limit = {
      requestsPerUnit: count(lf.get('requestsPerUnit'), `${where}.limit.requests_per_unit`),
      unit: typeof unit === 'string' ? (unit.toUpperCase() as WireUnitName) : unit,
    };
  }
  // google.protobuf.UInt64Value is a bare number (or string) in proto JSON; the object form is accepted too.
  const hits = f.get('hitsAddend');
  if (hits !== undefined) {
    const v = typeof hits === 'object' && hits !== null && !Array.isArray(hits) ? (hits as Json).value : hits;
    out.hitsAddend = { value: count(v, `${where}.hits_addend`) };
  }
  return out;
}

/** A proto-JSON RateLimitRequest as the limiter's request. Throws InvalidRequestError naming the bad field. */
export function requestFromJson(body: string): RateLimitRequest {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch (err) {
    throw new InvalidRequestError(`invalid JSON: ${(err as Error).message}`);
  }
  const f = fields(parsed, 'request', REQUEST_FIELDS);
  const wire: WireRateLimitRequest = {
    domain: string(f.get('domain'), 'domain'),
    descriptors: array(f.get('descriptors'), 'descriptors').map((d, i) => descriptorFromJson(d, `descriptors[${i}]`)),
    hitsAddend: count(f.get('hitsAddend'), 'hits_addend'),
  };
  return requestFromWire(wire);
}

const UNIT_NAME: Readonly<Record<Unit, WireUnitName>> = {
  second: 'SECOND',
  minute: 'MINUTE',
  hour: 'HOUR',
  day: 'DAY',
  week: 'WEEK',
  month: 'MONTH',
  year: 'YEAR',
};

/** A Duration in proto JSON: seconds with 0 or 3 fractional digits and an "s" suffix ("1s", "1.500s"). */
function durationJson(ms: number): string {
  const d = durationFromMs(ms);
  const millis = d.nanos / 1_000_000;
  return millis === 0 ? `${d.seconds}s` : `${d.seconds}.${String(millis).padStart(3, '0')}s`;
}

/** The limiter's response in proto JSON; fields with default values are left out, as proto JSON does. */
export function responseToJson(response: RateLimitResponse): Json {
  const statuses = response.statuses.map((s) => {
    const out: Json = { code: s.code };
    if (s.currentLimit !== undefined) {
      const cl: Json = { requestsPerUnit: s.currentLimit.requestsPerUnit, unit: UNIT_NAME[s.currentLimit.unit] };
      if (s.currentLimit.name) cl.name = s.currentLimit.name;
      out.currentLimit = cl;
    }
    if (s.limitRemaining > 0) out.limitRemaining = s.limitRemaining;
    if (s.durationUntilResetMs !== undefined) out.durationUntilReset = durationJson(s.durationUntilResetMs);
    return out;
  });
  const json: Json = { overallCode: response.overallCode === 'OVER_LIMIT' ? 'OVER_LIMIT' : 'OK', statuses };
  if (response.responseHeaders.length > 0) json.responseHeadersToAdd = response.responseHeaders.map((h) => ({ key: h.key, value: h.value }));
  // A Struct's proto JSON is the plain object itself.
  if (response.dynamicMetadata !== undefined) json.dynamicMetadata = response.dynamicMetadata as Json;
  return json;
}
