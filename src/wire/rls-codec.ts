import { MalformedMessageError } from '../errors';
import { InvalidRequestError } from '../limiter/errors';
import type { Descriptor, Entry, LimitOverride, RateLimitRequest, RateLimitResponse } from '../limiter/types';
import { CODE_NUMBER, UINT32_MAX, UNIT_NUMBER, unitFromWire } from './convert';
import { MESSAGE_PREFIX_BYTES } from './grpc-framing';
import { encodeStruct } from './struct-codec';

/**
 * Protobuf wire codec of the two hot messages, written by hand, used by both gRPC transports
 * (./rls-service): RateLimitRequest bytes straight into the limiter's RateLimitRequest, and a
 * RateLimitResponse straight into a framed gRPC message. Skipping the generic decoded-object layer
 * halves the allocations per call. Semantics are those of protobufjs (with ./convert.ts for the
 * request), which test/unit/wire/rls-codec.test.ts checks against on random messages:
 * unknown fields are skipped, the last value of a repeated scalar wins, messages merge.
 */

/** The bytes are not a valid protobuf encoding of the message (answered INTERNAL, like grpc-js; see src/errors.ts). */
export { MalformedMessageError };

/** A cursor over one message's bytes. */
class Reader {
  pos: number;
  /** End of the message being read; narrowed while a sub-message is read. */
  end: number;
  constructor(
    readonly buf: Buffer,
    start: number,
    end: number,
  ) {
    this.pos = start;
    this.end = end;
  }

  /** A varint as a non-negative number; values beyond 2^53 lose precision (callers cap them anyway). */
  varint(): number {
    const buf = this.buf;
    let pos = this.pos;
    let b = pos < this.end ? buf[pos++] : truncated();
    if (b < 0x80) {
      this.pos = pos;
      return b;
    }
    let value = b & 0x7f;
    let scale = 128;
    for (let i = 1; i < 10; i++) {
      b = pos < this.end ? buf[pos++] : truncated();
      value += (b & 0x7f) * scale;
      if (b < 0x80) {
        this.pos = pos;
        return value;
      }
      scale *= 128;
    }
    throw new MalformedMessageError('varint longer than 10 bytes');
  }

  /** A uint32 field: the low 32 bits of the varint, as protobuf readers do. */
  uint32(): number {
    const buf = this.buf;
    let pos = this.pos;
    let value = 0;
    for (let i = 0; i < 10; i++) {
      const b = pos < this.end ? buf[pos++] : truncated();
      if (i < 5) value = (value | ((b & 0x7f) << (7 * i))) >>> 0;
      if (b < 0x80) {
        this.pos = pos;
        return value;
      }
    }
    throw new MalformedMessageError('varint longer than 10 bytes');
  }

  /** The end offset of a length-delimited field starting here. */
  lengthEnd(): number {
    const length = this.varint();
    const end = this.pos + length;
    if (end > this.end) truncated();
    return end;
  }

  string(): string {
    const end = this.lengthEnd();
    const s = this.buf.toString('utf8', this.pos, end);
    this.pos = end;
    return s;
  }

  skip(wireType: number): void {
    switch (wireType) {
      case 0:
        this.varint();
        return;
      case 1:
        this.pos += 8;
        break;
      case 2:
        this.pos = this.lengthEnd();
        return;
      case 5:
        this.pos += 4;
        break;
      default:
        throw new MalformedMessageError(`unsupported wire type ${wireType}`);
    }
    if (this.pos > this.end) truncated();
  }
}

function truncated(): never {
  throw new MalformedMessageError('truncated message');
}

function capCount(n: number): number {
  return n >= UINT32_MAX ? UINT32_MAX : n;
}

function decodeEntry(r: Reader, end: number): Entry {
  let key = '';
  let value = '';
  const outer = r.end;
  r.end = end;
  while (r.pos < end) {
    const tag = r.varint();
    if (tag === 0x0a) key = r.string();
    else if (tag === 0x12) value = r.string();
    else r.skip(tag & 7);
  }
  r.end = outer;
  return { key, value };
}

interface OverrideFields {
  requestsPerUnit: number;
  unit: number;
}

function decodeOverride(r: Reader, end: number, into: OverrideFields): void {
  while (r.pos < end) {
    const tag = r.varint();
    if (tag === 0x08) into.requestsPerUnit = r.uint32();
    else if (tag === 0x10) into.unit = r.varint();
    else r.skip(tag & 7);
  }
}

function decodeUInt64Value(r: Reader, end: number, previous: number): number {
  let value = previous;
  while (r.pos < end) {
    const tag = r.varint();
    if (tag === 0x08) value = capCount(r.varint());
    else r.skip(tag & 7);
  }
  return value;
}

function decodeDescriptor(r: Reader, end: number, index: number): Descriptor {
  const entries: Entry[] = [];
  let override: OverrideFields | undefined;
  let hitsAddend: number | undefined;
  const outer = r.end;
  r.end = end;
  while (r.pos < end) {
    const tag = r.varint();
    if (tag === 0x0a) {
      entries.push(decodeEntry(r, r.lengthEnd()));
    } else if (tag === 0x12) {
      override ??= { requestsPerUnit: 0, unit: 0 };
      const e = r.lengthEnd();
      decodeOverride(r, e, override);
    } else if (tag === 0x1a) {
      const e = r.lengthEnd();
      hitsAddend = decodeUInt64Value(r, e, hitsAddend ?? 0);
    } else {
      r.skip(tag & 7);
    }
  }
  r.end = outer;
  if (override === undefined) return hitsAddend === undefined ? { entries } : { entries, hitsAddend };
  const unit = unitFromWire(override.unit);
  if (unit === undefined) {
    // The grpc-js path names defined enum values and prints undefined ones as numbers.
    const shown = override.unit === 0 ? '"UNKNOWN"' : String(override.unit);
    throw new InvalidRequestError(`descriptors[${index}].limit.unit: unknown unit ${shown}`);
  }
  const limit: LimitOverride = { requestsPerUnit: override.requestsPerUnit, unit };
  return hitsAddend === undefined ? { entries, limit } : { entries, limit, hitsAddend };
}

/** DescriptorCache bounds: the entries kept, and the encoded size of a descriptor it keeps. */
export interface DescriptorCacheOptions {
  readonly maxEntries: number;
  readonly maxDescriptorBytes: number;
}

/**
 * Decoded descriptors by their encoded bytes. Proxies send the same few descriptors over and over
 * (one per rate-limit action: the client, the path, the tenant ...): a descriptor seen before is
 * neither decoded nor allocated again, and it comes back as the same frozen object, so that what
 * the limiter derives from it alone (its rule, its counter key) is kept per object too
 * (src/limiter/rate-limiter.ts). A descriptor is kept from its second sighting on. Bounded in
 * entries and in bytes: only descriptors of at most `maxDescriptorBytes` are kept, at most
 * `maxEntries` of them (and as many seen once); beyond that the oldest entry is dropped (insertion
 * order: a hit costs no reordering).
 */
export class DescriptorCache {
  private readonly byBytes = new Map<string, Descriptor>();
  // Descriptors seen once, by their bytes (as many as the cache holds, oldest dropped first): a
  // descriptor is kept only when it comes back. Traffic whose descriptors never repeat (a value per
  // client, more clients than the cache holds) then pays one set entry per call, not the keeping
  // and the memos of descriptors nobody sends again.
  private readonly seenOnce = new Set<string>();
  private readonly maxEntries: number;
  private readonly maxDescriptorBytes: number;

  constructor(options: DescriptorCacheOptions) {
    for (const [name, v] of Object.entries(options)) {
      if (!Number.isInteger(v) || v < 1) throw new RangeError(`${name} must be a positive integer, got ${v}`);
    }
    this.maxEntries = options.maxEntries;
    this.maxDescriptorBytes = options.maxDescriptorBytes;
  }

  /** Descriptors kept. */
  get size(): number {
    return this.byBytes.size;
  }

  /** The descriptor encoded in r.buf[r.pos, end), from the cache when it is there; leaves r at `end`. */
  decode(r: Reader, end: number, index: number): Descriptor {
    if (end - r.pos > this.maxDescriptorBytes) return decodeDescriptor(r, end, index);
    // latin1: one character per byte, so equal strings are equal bytes.
    const bytes = r.buf.toString('latin1', r.pos, end);
    const known = this.byBytes.get(bytes);
    if (known !== undefined) {
      r.pos = end;
      return known;
    }
    if (!this.seenOnce.delete(bytes)) {
      this.seenOnce.add(bytes);
      if (this.seenOnce.size > this.maxEntries) this.seenOnce.delete(this.seenOnce.values().next().value!);
      return decodeDescriptor(r, end, index);
    }
    const d = freezeDescriptor(decodeDescriptor(r, end, index));
    this.byBytes.set(bytes, d);
    if (this.byBytes.size > this.maxEntries) this.byBytes.delete(this.byBytes.keys().next().value!);
    return d;
  }
}

function freezeDescriptor(d: Descriptor): Descriptor {
  for (const e of d.entries) Object.freeze(e);
  Object.freeze(d.entries);
  if (d.limit !== undefined) Object.freeze(d.limit);
  return Object.freeze(d);
}

/**
 * A RateLimitRequest message as the limiter's request. Throws MalformedMessageError for bytes that
 * are not a valid encoding, InvalidRequestError for an undefined override unit (as requestFromWire).
 * With a `cache`, descriptors it holds are taken from it (see DescriptorCache).
 */
export function decodeRateLimitRequest(buf: Buffer, cache?: DescriptorCache): RateLimitRequest {
  const r = new Reader(buf, 0, buf.length);
  let domain = '';
  const descriptors: Descriptor[] = [];
  let hitsAddend = 0;
  while (r.pos < r.end) {
    const tag = r.varint();
    if (tag === 0x0a) domain = r.string();
    else if (tag === 0x12) {
      const end = r.lengthEnd();
      descriptors.push(cache === undefined ? decodeDescriptor(r, end, descriptors.length) : cache.decode(r, end, descriptors.length));
    } else if (tag === 0x18) hitsAddend = r.uint32();
    else r.skip(tag & 7);
  }
  return { domain, descriptors, hitsAddend };
}

/* ---------- Response encoding ---------- */

function varintSize(n: number): number {
  let size = 1;
  while (n >= 128) {
    n = Math.floor(n / 128);
    size++;
  }
  return size;
}

function writeVarint(buf: Buffer, pos: number, n: number): number {
  while (n >= 128) {
    buf[pos++] = (n % 128) | 0x80;
    n = Math.floor(n / 128);
  }
  buf[pos++] = n;
  return pos;
}

function clampUint32(n: number): number {
  if (!(n > 0)) return 0;
  return n >= UINT32_MAX ? UINT32_MAX : Math.floor(n);
}

type LimitShape = NonNullable<RateLimitResponse['statuses'][number]['currentLimit']>;

/** The response as one framed gRPC message (5-byte prefix included), in one buffer. */
export function frameResponse(response: RateLimitResponse): Buffer {
  const statuses = response.statuses;
  const n = statuses.length;
  const limitSizes: number[] = new Array<number>(n);
  const statusSizes: number[] = new Array<number>(n);
  // overall_code is never 0 (UNKNOWN), so it is always present.
  let size = 2;
  for (let i = 0; i < n; i++) {
    const s = statuses[i];
    let inner = 2; // code (never 0)
    if (s.currentLimit !== undefined) {
      const limitSize = limitMessageSize(s.currentLimit);
      limitSizes[i] = limitSize;
      inner += 1 + varintSize(limitSize) + limitSize;
    }
    const remaining = clampUint32(s.limitRemaining);
    if (remaining !== 0) inner += 1 + varintSize(remaining);
    if (s.durationUntilResetMs !== undefined) inner += 1 + durationSize(s.durationUntilResetMs);
    statusSizes[i] = inner;
    size += 1 + varintSize(inner) + inner;
  }
  const headers = response.responseHeaders;
  for (let i = 0; i < headers.length; i++) {
    const inner = headerSize(headers[i].key, headers[i].value);
    size += 1 + varintSize(inner) + inner;
  }
  const metadata = response.dynamicMetadata === undefined ? undefined : encodeStruct(response.dynamicMetadata);
  if (metadata !== undefined) size += 1 + varintSize(metadata.length) + metadata.length;

  const buf = Buffer.allocUnsafe(MESSAGE_PREFIX_BYTES + size);
  buf[0] = 0;
  buf.writeUInt32BE(size, 1);
  let pos = MESSAGE_PREFIX_BYTES;
  buf[pos++] = 0x08;
  buf[pos++] = response.overallCode === 'OVER_LIMIT' ? CODE_NUMBER.OVER_LIMIT : CODE_NUMBER.OK;
  for (let i = 0; i < n; i++) {
    const s = statuses[i];
    buf[pos++] = 0x12;
    pos = writeVarint(buf, pos, statusSizes[i]);
    buf[pos++] = 0x08;
    buf[pos++] = s.code === 'OVER_LIMIT' ? CODE_NUMBER.OVER_LIMIT : CODE_NUMBER.OK;
    if (s.currentLimit !== undefined) {
      buf[pos++] = 0x12;
      pos = writeVarint(buf, pos, limitSizes[i]);
      pos = writeLimitMessage(buf, pos, s.currentLimit);
    }
    const remaining = clampUint32(s.limitRemaining);
    if (remaining !== 0) {
      buf[pos++] = 0x18;
      pos = writeVarint(buf, pos, remaining);
    }
    if (s.durationUntilResetMs !== undefined) {
      buf[pos++] = 0x22;
      pos = writeDuration(buf, pos, s.durationUntilResetMs);
    }
  }
  for (let i = 0; i < headers.length; i++) {
    const { key, value } = headers[i];
    buf[pos++] = 0x1a;
    pos = writeVarint(buf, pos, headerSize(key, value));
    pos = writeString(buf, pos, 0x0a, key);
    pos = writeString(buf, pos, 0x12, value);
  }
  if (metadata !== undefined) {
    buf[pos++] = 0x32;
    pos = writeVarint(buf, pos, metadata.length);
    metadata.copy(buf, pos);
  }
  return buf;
}

/** Encoded size of a RateLimit message (current_limit); zero fields are omitted. */
function limitMessageSize(limit: LimitShape): number {
  const rpu = clampUint32(limit.requestsPerUnit);
  let size = rpu !== 0 ? 1 + varintSize(rpu) : 0;
  if (UNIT_NUMBER[limit.unit] !== 0) size += 2;
  const name = limit.name;
  if (name !== undefined && name.length > 0) {
    const nameBytes = Buffer.byteLength(name, 'utf8');
    size += 1 + varintSize(nameBytes) + nameBytes;
  }
  return size;
}

function writeLimitMessage(buf: Buffer, pos: number, limit: LimitShape): number {
  const rpu = clampUint32(limit.requestsPerUnit);
  if (rpu !== 0) {
    buf[pos++] = 0x08;
    pos = writeVarint(buf, pos, rpu);
  }
  const unit = UNIT_NUMBER[limit.unit];
  if (unit !== 0) {
    buf[pos++] = 0x10;
    buf[pos++] = unit;
  }
  return limit.name === undefined ? pos : writeString(buf, pos, 0x1a, limit.name);
}

function wholeMs(ms: number): number {
  return ms > 0 ? Math.round(ms) : 0;
}

/** Encoded size of a google.protobuf.Duration's fields (zero fields are omitted). */
function durationBodySize(seconds: number, nanos: number): number {
  return (seconds !== 0 ? 1 + varintSize(seconds) : 0) + (nanos !== 0 ? 1 + varintSize(nanos) : 0);
}

function durationSize(ms: number): number {
  const whole = wholeMs(ms);
  const inner = durationBodySize(Math.floor(whole / 1000), (whole % 1000) * 1_000_000);
  return varintSize(inner) + inner;
}

function writeDuration(buf: Buffer, pos: number, ms: number): number {
  const whole = wholeMs(ms);
  const seconds = Math.floor(whole / 1000);
  const nanos = (whole % 1000) * 1_000_000;
  pos = writeVarint(buf, pos, durationBodySize(seconds, nanos));
  if (seconds !== 0) {
    buf[pos++] = 0x08;
    pos = writeVarint(buf, pos, seconds);
  }
  if (nanos !== 0) {
    buf[pos++] = 0x10;
    pos = writeVarint(buf, pos, nanos);
  }
  return pos;
}

function headerSize(key: string, value: string): number {
  const k = Buffer.byteLength(key, 'utf8');
  const v = Buffer.byteLength(value, 'utf8');
  return (k > 0 ? 1 + varintSize(k) + k : 0) + (v > 0 ? 1 + varintSize(v) + v : 0);
}

function writeString(buf: Buffer, pos: number, tag: number, s: string): number {
  if (s.length === 0) return pos;
  const bytes = Buffer.byteLength(s, 'utf8');
  buf[pos++] = tag;
  pos = writeVarint(buf, pos, bytes);
  return pos + buf.write(s, pos, bytes, 'utf8');
}
