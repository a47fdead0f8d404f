import { InvalidRequestError } from './errors';
import { REQUEST_LIMIT_SETTINGS, UNIT_MS, type Descriptor, type RateLimitRequest, type RequestLimits } from './types';
import { MAX_RESERVATION_ID_BYTES } from './reservations';

/** The entry keys that make a descriptor a reservation's (RESERVE_ENTRY_KEY, COMMIT_ENTRY_KEY). */
export interface ReservationKeys {
  readonly reserve: string;
  readonly commit: string;
}

export const DEFAULT_RESERVATION_KEYS: ReservationKeys = Object.freeze({ reserve: 'reserve', commit: 'commit' });

/** A descriptor's reservation entry: reserve or commit, and the ID. */
export interface ReservationEntry {
  readonly kind: 'reserve' | 'commit';
  readonly id: string;
}

/**
 * What a ShouldRateLimit request must be before it is matched: a domain, 1..maxDescriptors
 * descriptors, and within every cap of `limits` (each message names the cap and the setting that
 * raises it, never the value itself). Throws InvalidRequestError.
 */
export function validateRequest(req: RateLimitRequest, limits: RequestLimits): void {
  if (req.domain === '') throw new InvalidRequestError('domain must not be empty');
  const n = req.descriptors.length;
  if (n === 0) throw new InvalidRequestError('descriptors must not be empty');
  if (n > limits.maxDescriptors) throw overCap('descriptors', `${n} descriptors`, limits, 'maxDescriptors');
}

/**
 * Descriptor `i` of a request: entries within their caps, a limit override and hits_addend that are
 * non-negative integers. An entry with an empty value is accepted, as the reference server accepts
 * it (Envoy sends them; the reference counts them). Throws InvalidRequestError.
 */
export function validateDescriptor(d: Descriptor, i: number, limits: RequestLimits): void {
  const entries = d.entries;
  if (entries.length === 0) throw new InvalidRequestError(`descriptors[${i}]: entries must not be empty`);
  if (entries.length > limits.maxEntries) throw overCap(`descriptors[${i}].entries`, `${entries.length} entries`, limits, 'maxEntries');
  for (let j = 0; j < entries.length; j++) {
    const { key, value } = entries[j];
    if (key === '') throw new InvalidRequestError(`descriptors[${i}].entries[${j}]: key must not be empty`);
    if (isOver(key, limits.maxKeyBytes)) throw overCap(`descriptors[${i}].entries[${j}].key`, `${utf8Bytes(key)} bytes`, limits, 'maxKeyBytes');
    if (isOver(value, limits.maxValueBytes)) throw overCap(`descriptors[${i}].entries[${j}].value`, `${utf8Bytes(value)} bytes`, limits, 'maxValueBytes');
  }
  const limit = d.limit;
  if (limit !== undefined) {
    if (!Number.isSafeInteger(limit.requestsPerUnit) || limit.requestsPerUnit < 0) {
      throw new InvalidRequestError(`descriptors[${i}].limit.requests_per_unit: expected a non-negative integer, got ${limit.requestsPerUnit}`);
    }
    if (UNIT_MS[limit.unit] === undefined) throw new InvalidRequestError(`descriptors[${i}].limit.unit: unknown unit "${limit.unit}"`);
  }
  const hits = d.hitsAddend;
  if (hits !== undefined && (!Number.isSafeInteger(hits) || hits < 0)) {
    throw new InvalidRequestError(`descriptors[${i}].hits_addend: expected a non-negative integer, got ${hits}`);
  }
}

/**
 * The reservation entry of descriptor `i` (its last entry, keyed `reserve` or `commit`), or
 * undefined for an ordinary descriptor. Such a key anywhere but last, a descriptor of that entry
 * alone, an empty ID or one over MAX_RESERVATION_ID_BYTES are InvalidRequestError naming it. Run
 * with validateDescriptor, once per kept descriptor.
 */
export function reservationEntryOf(d: Descriptor, i: number, keys: ReservationKeys): ReservationEntry | undefined {
  const entries = d.entries;
  const last = entries.length - 1;
  for (let j = 0; j < last; j++) {
    const key = entries[j].key;
    if (key === keys.reserve || key === keys.commit) {
      throw new InvalidRequestError(`descriptors[${i}].entries[${j}]: a "${key}" entry must be the descriptor's last`);
    }
  }
  const { key, value } = entries[last];
  const kind = key === keys.reserve ? 'reserve' : key === keys.commit ? 'commit' : undefined;
  if (kind === undefined) return undefined;
  const at = `descriptors[${i}].entries[${last}]`;
  if (last === 0) throw new InvalidRequestError(`${at}: a "${key}" entry needs the entries of a rule before it`);
  if (value === '') throw new InvalidRequestError(`${at}.value: a reservation ID must not be empty`);
  if (isOver(value, MAX_RESERVATION_ID_BYTES)) {
    throw new InvalidRequestError(`${at}.value: a reservation ID of ${utf8Bytes(value)} bytes, over the cap of ${MAX_RESERVATION_ID_BYTES}`);
  }
  if (d.limit !== undefined) throw new InvalidRequestError(`descriptors[${i}].limit: a "${key}" descriptor holds on its rule's limits, not on an override`);
  return { kind, id: value };
}

/** A request over one of its caps: where, how much, and the cap with the setting that raises it (never the value itself). */
function overCap(path: string, amount: string, limits: RequestLimits, cap: keyof RequestLimits): InvalidRequestError {
  return new InvalidRequestError(`${path}: ${amount}, over the cap of ${limits[cap]} (${REQUEST_LIMIT_SETTINGS[cap]})`);
}

/** Whether `s` takes more than `max` bytes in UTF-8; counts them only for strings long enough to. */
function isOver(s: string, max: number): boolean {
  // A UTF-16 unit takes 1 to 3 bytes.
  if (s.length * 3 <= max) return false;
  if (s.length > max) return true;
  return utf8Bytes(s) > max;
}

/** Bytes of `s` in UTF-8 (a lone surrogate counts as the 3-byte replacement character). */
function utf8Bytes(s: string): number {
  let bytes = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) bytes += 1;
    else if (c < 0x800) bytes += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      bytes += 4;
      i++;
    } else bytes += 3;
  }
  return bytes;
}
