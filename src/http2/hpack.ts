/**
 * HPACK (RFC 7541) for the hand-written HTTP/2 front: a decoder with its dynamic table, and a
 * stateless encoder that only uses the static table and literals "without indexing", so what we
 * send never depends on the peer's SETTINGS_HEADER_TABLE_SIZE.
 *
 * Strings are latin1 (one char per octet): HTTP/2 field octets map to chars 0..255 unchanged, and
 * a name or value's `length` is its size in octets, as the header list size rules count it.
 */
import { HpackError } from './hpack-error';
import { huffmanDecode } from './huffman';
import { validFieldName, validFieldValue } from './request-headers';

/** RFC 7541 Appendix A; index i is STATIC_TABLE[i - 1]. */
const STATIC_TABLE: ReadonlyArray<readonly [string, string]> = [
  [':authority', ''],
  [':method', 'GET'],
  [':method', 'POST'],
  [':path', '/'],
  [':path', '/index.html'],
  [':scheme', 'http'],
  [':scheme', 'https'],
  [':status', '200'],
  [':status', '204'],
  [':status', '206'],
  [':status', '304'],
  [':status', '400'],
  [':status', '404'],
  [':status', '500'],
  ['accept-charset', ''],
  ['accept-encoding', 'gzip, deflate'],
  ['accept-language', ''],
  ['accept-ranges', ''],
  ['accept', ''],
  ['access-control-allow-origin', ''],
  ['age', ''],
  ['allow', ''],
  ['authorization', ''],
  ['cache-control', ''],
  ['content-disposition', ''],
  ['content-encoding', ''],
  ['content-language', ''],
  ['content-length', ''],
  ['content-location', ''],
  ['content-range', ''],
  ['content-type', ''],
  ['cookie', ''],
  ['date', ''],
  ['etag', ''],
  ['expect', ''],
  ['expires', ''],
  ['from', ''],
  ['host', ''],
  ['if-match', ''],
  ['if-modified-since', ''],
  ['if-none-match', ''],
  ['if-range', ''],
  ['if-unmodified-since', ''],
  ['last-modified', ''],
  ['link', ''],
  ['location', ''],
  ['max-forwards', ''],
  ['proxy-authenticate', ''],
  ['proxy-authorization', ''],
  ['range', ''],
  ['referer', ''],
  ['refresh', ''],
  ['retry-after', ''],
  ['server', ''],
  ['set-cookie', ''],
  ['strict-transport-security', ''],
  ['transfer-encoding', ''],
  ['user-agent', ''],
  ['vary', ''],
  ['via', ''],
  ['www-authenticate', ''],
];
const STATIC_COUNT = STATIC_TABLE.length;
// Indexed by HPACK index (slot 0 unused), so indexed fields hand out these very strings.
const STATIC_NAMES: readonly string[] = ['', ...STATIC_TABLE.map(([name]) => name)];
const STATIC_VALUES: readonly string[] = ['', ...STATIC_TABLE.map(([, value]) => value)];

/** Octets an entry is charged beyond its name and value (RFC 7541 4.1, RFC 7540 6.5.2). */
const ENTRY_OVERHEAD = 32;
/** Larger integers are refused rather than risk precision or absurd sizes. */
const MAX_INTEGER = 0x7fffffff;
/** Continuation octets that can carry MAX_INTEGER; more is an encoding we refuse. */
const MAX_CONTINUATION_OCTETS = 5;

/** Settings of one connection's decoder. */
export interface HpackDecoderOptions {
  /** The SETTINGS_HEADER_TABLE_SIZE this endpoint advertises: the largest table a size update may ask for. */
  readonly maxTableSize: number;
  /** SETTINGS_MAX_HEADER_LIST_SIZE: a block whose decoded list is larger makes decode() return undefined. */
  readonly maxHeaderListSize: number;
}

/** Longest literal kept for reuse (see HpackDecoder.string). */
const MAX_REMEMBERED_LITERAL = 256;
/**
 * Literals kept for reuse per connection: a client repeats several on every request (nghttp2 never
 * indexes :path or content-length, so h2load and Envoy send both as literals each time), and one
 * kept string would be replaced by the other on every field.
 */
const REMEMBERED_LITERALS = 8;

/** A string literal's octets as sent (Huffman-coded or not), its text, and whether HTTP/2 allows it in a value. */
interface RememberedLiteral {
  readonly octets: Buffer;
  readonly huffman: boolean;
  readonly text: string;
  readonly allowed: boolean;
}

/**
 * The decoding context of one HTTP/2 connection: feed it every header block of the connection in
 * order (one HpackDecoder per connection).
 */
export class HpackDecoder {
  private readonly maxTableSize: number;
  private readonly maxHeaderListSize: number;
  /** The table size limit in force: the last size update, at first the advertised maximum. */
  private capacity: number;
  /** Sum of the entries' sizes. */
  private size = 0;
  // The dynamic table as a ring (power-of-two length): `count` entries from `oldest`, newest last.
  private names: string[] = new Array<string>(16).fill('');
  private values: string[] = new Array<string>(16).fill('');
  // Whether each entry's name and value are allowed in HTTP/2 (checked once, when it was inserted).
  private allowed: boolean[] = new Array<boolean>(16).fill(true);
  private mask = 15;
  private oldest = 0;
  private count = 0;
  /** Read position in the block being decoded. */
  private pos = 0;
  /** The literals last decoded (at most REMEMBERED_LITERALS, replaced in turn), see string(). */
  private readonly remembered: RememberedLiteral[] = [];
  private nextRemembered = 0;
  /**
   * The fields of the block being decoded; decode() hands out a copy of exactly their number. A list
   * of its own grown by push from an empty literal went wrong once V8 pretenured that literal (its
   * allocation site: the start-up warm-up's first calls can tip it): every list was then made in the
   * old generation, and the backing store push grew for it, young and referenced from an old
   * object, was kept by every young collection and promoted, about 170 bytes per request left for a
   * full collection. A copy made by slice() has no allocation site: it dies young.
   */
  private readonly fields: string[] = [];
  /** Set by name() and string(): whether what they returned is allowed in a field name / value. */
  private nameAllowed = true;
  private stringAllowed = true;
  private forbidden = false;

  constructor(opts: HpackDecoderOptions) {
    this.maxTableSize = opts.maxTableSize;
    this.maxHeaderListSize = opts.maxHeaderListSize;
    this.capacity = opts.maxTableSize;
  }

  /**
   * Whether the last block decoded had a field name or value HTTP/2 does not allow (RFC 9113
   * 8.2.1: upper case or separators in a name, NUL/CR/LF or surrounding whitespace in a value).
   * Not a decoding error: the request is malformed. Literals are checked as they are decoded, and
   * table entries once, when inserted, so indexed fields cost nothing.
   */
  get lastBlockForbidden(): boolean {
    return this.forbidden;
  }

  /**
   * Decodes one complete header block (HEADERS plus CONTINUATIONs joined) into
   * [name0, value0, name1, value1, ...]. Returns undefined when the header list is larger than
   * maxHeaderListSize: the block is still decoded to the end, so the table stays in step and only
   * that stream needs refusing. Throws HpackError when the block is malformed (a connection error).
   */
  decode(block: Buffer): string[] | undefined {
    const end = block.length;
    const fields = this.fields;
    let count = 0;
    let listSize = 0;
    let fieldSeen = false;
    let forbidden = false;
    this.pos = 0;
    while (this.pos < end) {
      const first = block[this.pos];
      let name: string;
      let value: string;
      if (first & 0x80) {
        const index = this.integer(block, 7);
        if (index === 0) throw new HpackError('indexed field with index 0');
        if (index <= STATIC_COUNT) {
          name = STATIC_NAMES[index];
          value = STATIC_VALUES[index];
        } else {
          const slot = this.slot(index);
          name = this.names[slot];
          value = this.values[slot];
          if (!this.allowed[slot]) forbidden = true;
        }
      } else if (first & 0x40) {
        name = this.name(block, 6);
        value = this.string(block);
        const allowed = this.nameAllowed && this.stringAllowed;
        if (!allowed) forbidden = true;
        this.insert(name, value, allowed);
      } else if (first & 0x20) {
        // RFC 7541 4.2: size updates come first in a block.
        if (fieldSeen) throw new HpackError('dynamic table size update after a header field');
        const size = this.integer(block, 5);
        if (size > this.maxTableSize) throw new HpackError(`dynamic table size update to ${size} exceeds ${this.maxTableSize}`);
        this.capacity = size;
        this.evictDownTo(size);
        continue;
      } else {
        // 0000xxxx (without indexing) and 0001xxxx (never indexed) differ only for intermediaries.
        name = this.name(block, 4);
        value = this.string(block);
        if (!this.nameAllowed || !this.stringAllowed) forbidden = true;
      }
      fieldSeen = true;
      listSize += name.length + value.length + ENTRY_OVERHEAD;
      if (listSize <= this.maxHeaderListSize) {
        fields[count++] = name;
        fields[count++] = value;
      }
    }
    this.forbidden = forbidden;
    const decoded = listSize <= this.maxHeaderListSize ? fields.slice(0, count) : undefined;
    // The decoder holds no string of the block past it (a large value would wait for the next block).
    fields.fill('', 0, count);
    return decoded;
  }

  /** An integer with an N-bit prefix (RFC 7541 5.1) starting at this.pos. */
  private integer(block: Buffer, prefixBits: number): number {
    const max = (1 << prefixBits) - 1;
    let value = block[this.pos++] & max;
    if (value < max) return value;
    let multiplier = 1;
    for (let octets = 0; octets < MAX_CONTINUATION_OCTETS; octets++) {
      if (this.pos >= block.length) throw new HpackError('integer runs past the end of the header block');
      const b = block[this.pos++];
      value += (b & 0x7f) * multiplier;
      if (value > MAX_INTEGER) throw new HpackError('integer overflow');
      if ((b & 0x80) === 0) return value;
      multiplier *= 128;
    }
    throw new HpackError('integer encoding too long');
  }

  /** A string literal (RFC 7541 5.2) starting at this.pos. */
  private string(block: Buffer): string {
    if (this.pos >= block.length) throw new HpackError('string literal missing at the end of the header block');
    const huffman = (block[this.pos] & 0x80) !== 0;
    const length = this.integer(block, 7);
    const start = this.pos;
    const stop = start + length;
    if (stop > block.length) throw new HpackError('string literal runs past the end of the header block');
    this.pos = stop;
    // Clients repeat a few literals on every request: each is kept with its octets and reused
    // when they come again, neither decoded nor checked again.
    const remembered = this.remembered;
    for (let i = 0; i < remembered.length; i++) {
      const r = remembered[i];
      if (r.huffman === huffman && sameOctets(r.octets, block, start, length)) {
        this.stringAllowed = r.allowed;
        return r.text;
      }
    }
    const text = huffman ? huffmanDecode(block, start, stop) : block.toString('latin1', start, stop);
    const allowed = validFieldValue(text);
    this.stringAllowed = allowed;
    if (length <= MAX_REMEMBERED_LITERAL) {
      remembered[this.nextRemembered] = { octets: Buffer.from(block.subarray(start, stop)), huffman, text, allowed };
      this.nextRemembered = (this.nextRemembered + 1) % REMEMBERED_LITERALS;
    }
    return text;
  }

  /** The name of a literal field: an index with an N-bit prefix, or 0 and a string literal. */
  private name(block: Buffer, prefixBits: number): string {
    const index = this.integer(block, prefixBits);
    if (index === 0) {
      const literal = this.string(block);
      this.nameAllowed = validFieldName(literal);
      return literal;
    }
    if (index <= STATIC_COUNT) {
      this.nameAllowed = true;
      return STATIC_NAMES[index];
    }
    const slot = this.slot(index);
    this.nameAllowed = this.allowed[slot];
    return this.names[slot];
  }

  /** Ring slot of dynamic table index `index` (62 is the newest entry). */
  private slot(index: number): number {
    const fromNewest = index - STATIC_COUNT - 1;
    if (fromNewest >= this.count) throw new HpackError(`header table index ${index} out of range`);
    return (this.oldest + this.count - 1 - fromNewest) & this.mask;
  }

  /** RFC 7541 4.4: evict until the entry fits; an entry larger than the table empties it. */
  private insert(name: string, value: string, allowed: boolean): void {
    const entrySize = name.length + value.length + ENTRY_OVERHEAD;
    if (entrySize > this.capacity) {
      this.evictDownTo(0);
      return;
    }
    this.evictDownTo(this.capacity - entrySize);
    if (this.count === this.names.length) this.grow();
    const slot = (this.oldest + this.count) & this.mask;
    this.names[slot] = name;
    this.values[slot] = value;
    this.allowed[slot] = allowed;
    this.count++;
    this.size += entrySize;
  }

  private evictDownTo(limit: number): void {
    while (this.size > limit) {
      const slot = this.oldest;
      this.size -= this.names[slot].length + this.values[slot].length + ENTRY_OVERHEAD;
      // Drop the references so evicted strings can be collected.
      this.names[slot] = '';
      this.values[slot] = '';
      this.oldest = (this.oldest + 1) & this.mask;
      this.count--;
    }
  }

  private grow(): void {
    const length = this.names.length * 2;
    const names = new Array<string>(length).fill('');
    const values = new Array<string>(length).fill('');
    const allowed = new Array<boolean>(length).fill(true);
    for (let i = 0; i < this.count; i++) {
      const slot = (this.oldest + i) & this.mask;
      names[i] = this.names[slot];
      values[i] = this.values[slot];
      allowed[i] = this.allowed[slot];
    }
    this.names = names;
    this.values = values;
    this.allowed = allowed;
    this.mask = length - 1;
    this.oldest = 0;
  }
}

interface StaticName {
  /** Lowest index with this name. */
  readonly index: number;
  /** Index of each (name, value) entry by value. */
  readonly values: Map<string, number>;
}

const STATIC_BY_NAME = new Map<string, StaticName>();
for (let i = 1; i <= STATIC_COUNT; i++) {
  let entry = STATIC_BY_NAME.get(STATIC_NAMES[i]);
  if (entry === undefined) {
    entry = { index: i, values: new Map() };
    STATIC_BY_NAME.set(STATIC_NAMES[i], entry);
  }
  if (!entry.values.has(STATIC_VALUES[i])) entry.values.set(STATIC_VALUES[i], i);
}

function writeInteger(out: Buffer, pos: number, pattern: number, prefixBits: number, value: number): number {
  const max = (1 << prefixBits) - 1;
  if (value < max) {
    out[pos] = pattern | value;
    return pos + 1;
  }
  out[pos++] = pattern | max;
  let rest = value - max;
  while (rest >= 0x80) {
    out[pos++] = (rest & 0x7f) | 0x80;
    rest >>>= 7;
  }
  out[pos] = rest;
  return pos + 1;
}

function writeString(out: Buffer, pos: number, s: string): number {
  const at = writeInteger(out, pos, 0x00, 7, s.length);
  return at + out.write(s, at, s.length, 'latin1');
}

/**
 * Encodes a header block without touching any dynamic table: an exact static-table match is an
 * indexed field, anything else a raw literal "without indexing" (with the static name index when
 * there is one). Names must be lower-case; names and values latin1.
 */
export function encodeHeaderBlock(fields: ReadonlyArray<readonly [string, string]>): Buffer {
  // Per field: representation octet + name index or literal, each length at most 6 octets.
  let bound = 0;
  for (const [name, value] of fields) bound += 13 + name.length + value.length;
  const out = Buffer.allocUnsafe(bound);
  let pos = 0;
  for (const [name, value] of fields) {
    const known = STATIC_BY_NAME.get(name);
    const exact = known?.values.get(value);
    if (exact !== undefined) {
      pos = writeInteger(out, pos, 0x80, 7, exact);
      continue;
    }
    if (known !== undefined) {
      pos = writeInteger(out, pos, 0x00, 4, known.index);
    } else {
      out[pos++] = 0x00;
      pos = writeString(out, pos, name);
    }
    pos = writeString(out, pos, value);
  }
  return out.subarray(0, pos);
}

/**
 * Whether `a` equals block[start, start + length). A loop, not Buffer#compare: for the short
 * strings of a header block, the native call's argument checks cost more than the comparison.
 */
function sameOctets(a: Buffer, block: Buffer, start: number, length: number): boolean {
  if (a.length !== length) return false;
  for (let i = 0; i < length; i++) if (a[i] !== block[start + i]) return false;
  return true;
}
