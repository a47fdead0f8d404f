import { MalformedMessageError } from '../errors';
import { OldestKey } from '../limiter/bounded-cache';
import { InvalidRequestError } from '../limiter/errors';
import type { Descriptor, Entry, LimitOverride, RateLimitRequest, RateLimitResponse } from '../limiter/types';
import { CODE_NUMBER, UINT32_MAX, UNIT_NUMBER, unitFromWire } from './convert';
import { MESSAGE_PREFIX_BYTES } from './grpc-framing';
import { encodeStruct } from './struct-codec';

/**
 * Protobuf wire codec of the two hot messages, written by hand, used by both gRPC transports
 * (src/service/rls-service.ts): RateLimitRequest bytes straight into the limiter's RateLimitRequest, and a
 * RateLimitResponse straight into a framed gRPC message. Skipping the generic decoded-object layer
 * halves the allocations per call. Semantics are those of protobufjs (with ./convert.ts for the
 * request), which test/unit/wire/rls-codec.test.ts checks against on random messages:
 * unknown fields are skipped, the last value of a repeated scalar wins, messages merge.
 */

/** The bytes are not a valid protobuf encoding of the message (answered INTERNAL, like grpc-js; see src/errors.ts). */
export { MalformedMessageError };

/** A cursor over one message's bytes (also the quota reports' decoder's, ./rlqs-codec.ts). */
export class Reader {
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

/**
 * Values named by their encoded bytes, kept from their second sighting on: a value seen once is
 * remembered by its bytes only (as many as are kept), so traffic that never repeats pays one set
 * entry per value, not the keeping of values nobody sends again. At most `maxEntries` kept (and as
 * many seen once), the oldest dropped first (insertion order: a hit costs no reordering).
 */
class KeptFromSecondSighting<V> {
  private readonly kept = new Map<string, V>();
  private readonly seenOnce = new Set<string>();
  private readonly oldestKept = new OldestKey(() => this.kept.keys());
  private readonly oldestSeen = new OldestKey(() => this.seenOnce.values());

  constructor(private readonly maxEntries: number) {}

  get size(): number {
    return this.kept.size;
  }

  get(bytes: string): V | undefined {
    return this.kept.get(bytes);
  }

  /** Records a sighting of `bytes` (not kept); true when it is the second one: keep() its value then. */
  sightedBefore(bytes: string): boolean {
    if (this.seenOnce.delete(bytes)) return true;
    this.seenOnce.add(bytes);
    if (this.seenOnce.size > this.maxEntries) this.seenOnce.delete(this.oldestSeen.next()!);
    return false;
  }

  keep(bytes: string, value: V): void {
    this.kept.set(bytes, value);
    if (this.kept.size > this.maxEntries) this.kept.delete(this.oldestKept.next()!);
  }
}

function checkBounds(options: object): void {
  for (const [name, v] of Object.entries(options)) {
    if (!Number.isInteger(v) || v < 1) throw new RangeError(`${name} must be a positive integer, got ${v}`);
  }
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
 * (KeptDescriptor, src/limiter/plan.ts). A descriptor is kept from its second sighting on. Bounded in
 * entries and in bytes: only descriptors of at most `maxDescriptorBytes` are kept, at most
 * `maxEntries` of them (and as many seen once).
 */
export class DescriptorCache {
  private readonly byBytes: KeptFromSecondSighting<Descriptor>;
  private readonly maxDescriptorBytes: number;

  constructor(options: DescriptorCacheOptions) {
    checkBounds(options);
    this.byBytes = new KeptFromSecondSighting(options.maxEntries);
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
    if (!this.byBytes.sightedBefore(bytes)) return decodeDescriptor(r, end, index);
    const d = freezeDescriptor(decodeDescriptor(r, end, index));
    this.byBytes.keep(bytes, d);
    return d;
  }
}

/** RequestCache bounds: the requests kept (each named by at most REQUEST_KEY_MAX_BYTES). */
export interface RequestCacheOptions {
  readonly maxEntries: number;
  /** The cache of the descriptors of requests it does not hold. */
  readonly descriptors: DescriptorCache;
}

/**
 * Requests messages are named by at most this many bytes (the request cache, and the replays of
 * src/limiter/replay.ts): Envoy's requests are far smaller, and the bound caps what is kept.
 */
export const REQUEST_KEY_MAX_BYTES = 512;

/** The name of a request message in the request cache and the replays: its bytes as latin1; undefined past REQUEST_KEY_MAX_BYTES. */
export function requestKey(message: Buffer): string | undefined {
  return message.length <= REQUEST_KEY_MAX_BYTES ? message.toString('latin1') : undefined;
}

/**
 * Decoded requests by their bytes, kept from their second sighting on (as DescriptorCache keeps
 * descriptors): a proxy sends the same request (these descriptors, this domain) for every call of
 * one client on one route, and a request seen before costs one lookup, not one per descriptor. A
 * kept request is frozen, its descriptors too, so that the limiter may keep what it derives from
 * them (KeptRequest, src/limiter/plan.ts). Requests not kept are decoded with the descriptor cache.
 */
export class RequestCache {
  private readonly byBytes: KeptFromSecondSighting<RateLimitRequest>;
  private readonly descriptors: DescriptorCache;

  constructor(options: RequestCacheOptions) {
    checkBounds({ maxEntries: options.maxEntries });
    this.byBytes = new KeptFromSecondSighting(options.maxEntries);
    this.descriptors = options.descriptors;
  }

  /** Requests kept. */
  get size(): number {
    return this.byBytes.size;
  }

  /** The request in `message`, whose requestKey() is `key` (undefined: too large to be kept). */
  decode(message: Buffer, key: string | undefined): RateLimitRequest {
    if (key === undefined) return decodeRateLimitRequest(message, this.descriptors);
    const known = this.byBytes.get(key);
    if (known !== undefined) return known;
    const request = decodeRateLimitRequest(message, this.descriptors);
    if (this.byBytes.sightedBefore(key)) {
      for (const d of request.descriptors) freezeDescriptor(d);
      Object.freeze(request.descriptors);
      this.byBytes.keep(key, Object.freeze(request));
    }
    return request;
  }
}

function freezeDescriptor(d: Descriptor): Descriptor {
  if (Object.isFrozen(d)) return d;
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

/**
 * Where responses are written before they are copied out at their size: one pass over the
 * response, each length-prefixed field written after a one-byte length it fills in once known
 * (and shifts for in the rare field of 128 bytes or more). Grows when a response needs more.
 */
let scratch = Buffer.allocUnsafe(16 * 1024);

/** `scratch`, at least `pos + more` bytes long (its first `pos` bytes kept). */
function room(pos: number, more: number): Buffer {
  if (pos + more > scratch.length) {
    const larger = Buffer.allocUnsafe(Math.max(2 * scratch.length, pos + more));
    scratch.copy(larger, 0, 0, pos);
    scratch = larger;
  }
  return scratch;
}

function varintSize(n: number): number {
  let size = 1;
  while (n >= 128) {
    n = Math.floor(n / 128);
    size++;
  }
  return size;
}

function writeVarint(buf: Buffer, pos: number, n: number): number {
  if (n < 0x80000000) {
    // Small enough for 32-bit integer arithmetic (remaining counts and limits always are).
    while (n >= 128) {
      buf[pos++] = (n & 0x7f) | 0x80;
      n >>>= 7;
    }
    buf[pos++] = n;
    return pos;
  }
  while (n >= 128) {
    buf[pos++] = (n % 128) | 0x80;
    n = Math.floor(n / 128);
  }
  buf[pos++] = n;
  return pos;
}

/**
 * Fills in the length of the field whose content was written at [start + 1, end), after the one byte
 * left for it at `start`; returns the new end (content moved right when the length takes more bytes).
 */
function closeField(buf: Buffer, start: number, end: number): number {
  const length = end - start - 1;
  if (length < 128) {
    buf[start] = length;
    return end;
  }
  const extra = varintSize(length) - 1;
  buf.copyWithin(start + 1 + extra, start + 1, end);
  writeVarint(buf, start, length);
  return end + extra;
}

function clampUint32(n: number): number {
  if (!(n > 0)) return 0;
  return n >= UINT32_MAX ? UINT32_MAX : Math.floor(n);
}

type LimitShape = NonNullable<RateLimitResponse['statuses'][number]['currentLimit']>;

/** Most bytes a status takes beyond its limit's name (tags, lengths, varints of at most 10 bytes). */
const STATUS_MAX_BYTES = 64;

/** The response as one framed gRPC message (5-byte prefix included), in one buffer. */
export function frameResponse(response: RateLimitResponse): Buffer {
  const statuses = response.statuses;
  let buf = room(0, MESSAGE_PREFIX_BYTES + 2);
  let pos = MESSAGE_PREFIX_BYTES;
  // overall_code is never 0 (UNKNOWN), so it is always present.
  buf[pos++] = 0x08;
  buf[pos++] = response.overallCode === 'OVER_LIMIT' ? CODE_NUMBER.OVER_LIMIT : CODE_NUMBER.OK;
  for (let i = 0; i < statuses.length; i++) {
    const s = statuses[i];
    const limit = s.currentLimit;
    const name = limit?.name;
    buf = room(pos, STATUS_MAX_BYTES + (name === undefined ? 0 : 3 * name.length));
    buf[pos++] = 0x12;
    const start = pos++;
    buf[pos++] = 0x08;
    buf[pos++] = s.code === 'OVER_LIMIT' ? CODE_NUMBER.OVER_LIMIT : CODE_NUMBER.OK;
    if (limit !== undefined) {
      buf[pos++] = 0x12;
      const limitStart = pos++;
      pos = closeField(buf, limitStart, writeLimitMessage(buf, pos, limit));
    }
    const remaining = clampUint32(s.limitRemaining);
    if (remaining !== 0) {
      buf[pos++] = 0x18;
      pos = writeVarint(buf, pos, remaining);
    }
    if (s.durationUntilResetMs !== undefined) {
      buf[pos++] = 0x22;
      const durationStart = pos++;
      pos = closeField(buf, durationStart, writeDuration(buf, pos, s.durationUntilResetMs));
    }
    pos = closeField(buf, start, pos);
  }
  const headers = response.responseHeaders;
  for (let i = 0; i < headers.length; i++) {
    const { key, value } = headers[i];
    buf = room(pos, 24 + 3 * (key.length + value.length));
    buf[pos++] = 0x1a;
    const start = pos++;
    pos = writeString(buf, pos, 0x0a, key);
    pos = closeField(buf, start, writeString(buf, pos, 0x12, value));
  }
  if (response.dynamicMetadata !== undefined) {
    const metadata = encodeStruct(response.dynamicMetadata);
    buf = room(pos, 11 + metadata.length);
    buf[pos++] = 0x32;
    pos = writeVarint(buf, pos, metadata.length);
    pos += metadata.copy(buf, pos);
  }
  buf[0] = 0;
  buf.writeUInt32BE(pos - MESSAGE_PREFIX_BYTES, 1);
  const framed = Buffer.allocUnsafe(pos);
  buf.copy(framed, 0, 0, pos);
  return framed;
}

/** A RateLimit message's fields (current_limit); zero fields are omitted. */
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

/** A google.protobuf.Duration's fields (zero fields are omitted), from whole milliseconds. */
function writeDuration(buf: Buffer, pos: number, ms: number): number {
  const whole = ms > 0 ? Math.round(ms) : 0;
  const seconds = Math.floor(whole / 1000);
  const nanos = (whole % 1000) * 1_000_000;
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

function writeString(buf: Buffer, pos: number, tag: number, s: string): number {
  if (s.length === 0) return pos;
  buf[pos++] = tag;
  const start = pos++;
  return closeField(buf, start, pos + buf.write(s, pos, 'utf8'));
}
