/**
 * The HPACK Huffman code (RFC 7541 5.2 and Appendix B). The code is canonical, so it is rebuilt
 * at load from the code lengths alone (huffman-lengths.generated.ts): codes are assigned in order
 * of (length, symbol).
 *
 * Decoding reads the input through a 32-bit accumulator: codes of up to PRIMARY_BITS bits (every
 * character common in header values) are one table lookup; longer ones are resolved by length with
 * the canonical firstCode/count tables, a bit at a time.
 */
import { HpackError } from './hpack-error';
import { HUFFMAN_CODE_LENGTHS } from './huffman-lengths.generated';

const EOS = 256;
const MAX_LENGTH = 30;
const PRIMARY_BITS = 10;
const PRIMARY_MASK = (1 << PRIMARY_BITS) - 1;

/** Code of each symbol, right-aligned. */
const CODES = new Int32Array(257);
/** Code length of each symbol in bits. */
const LENGTHS = Int32Array.from(HUFFMAN_CODE_LENGTHS);
/** Per length: the first code, the number of codes, and where its symbols start in SORTED. */
const FIRST_CODE = new Int32Array(MAX_LENGTH + 1);
const COUNT = new Int32Array(MAX_LENGTH + 1);
const OFFSET = new Int32Array(MAX_LENGTH + 1);
/** Symbols in canonical order. */
const SORTED = new Int32Array(257);
/** Indexed by the next PRIMARY_BITS bits: (symbol << 5) | length for a code that short, else 0. */
const PRIMARY = new Int32Array(1 << PRIMARY_BITS);

(function buildCode(): void {
  if (LENGTHS.length !== 257) throw new Error('HPACK Huffman table must have 257 code lengths');
  const order = Array.from({ length: 257 }, (_, s) => s).sort((a, b) => LENGTHS[a] - LENGTHS[b] || a - b);
  let code = 0;
  let length = LENGTHS[order[0]];
  for (let i = 0; i < order.length; i++) {
    const s = order[i];
    const L = LENGTHS[s];
    if (L < 1 || L > MAX_LENGTH) throw new Error(`bad HPACK Huffman code length ${L} for symbol ${s}`);
    code <<= L - length;
    length = L;
    if (COUNT[L] === 0) {
      FIRST_CODE[L] = code;
      OFFSET[L] = i;
    }
    COUNT[L]++;
    CODES[s] = code;
    SORTED[i] = s;
    code++;
  }
  // The code must be complete, or padding and EOS detection are meaningless.
  if (code !== 2 ** length) throw new Error('HPACK Huffman code lengths do not form a complete code');
  // Lengths with no codes still need a FIRST_CODE that keeps the canonical recurrence going.
  for (let L = 1; L <= MAX_LENGTH; L++) {
    if (COUNT[L] === 0) FIRST_CODE[L] = L === 1 ? 0 : (FIRST_CODE[L - 1] + COUNT[L - 1]) << 1;
  }
  for (let s = 0; s < 257; s++) {
    const L = LENGTHS[s];
    if (L > PRIMARY_BITS) continue;
    const shift = PRIMARY_BITS - L;
    const base = CODES[s] << shift;
    for (let j = 0; j < 1 << shift; j++) PRIMARY[base + j] = (s << 5) | L;
  }
})();

// Decoded octets are collected here and turned into one string; grown, never shrunk.
let scratch = Buffer.allocUnsafe(1024);

function trailingBitsError(bits: number, count: number): HpackError {
  const ones = count >= 31 ? -1 : (1 << count) - 1;
  return (bits & ones) === ones ? new HpackError('Huffman padding longer than 7 bits') : new HpackError('Huffman padding is not all ones (truncated code)');
}

/**
 * Decodes the Huffman-coded octets buf[start, end) into a latin1 string. Throws HpackError on an
 * EOS symbol, padding longer than 7 bits, or padding that is not a prefix of EOS (RFC 7541 5.2).
 */
export function huffmanDecode(buf: Buffer, start: number, end: number): string {
  // Every code is at least 5 bits long.
  const maxOut = Math.floor(((end - start) * 8) / 5);
  if (scratch.length < maxOut) scratch = Buffer.allocUnsafe(Math.max(maxOut, scratch.length * 2));
  const out = scratch;
  let n = 0;
  let i = start;
  // The unconsumed bits are the low `nbits` bits of `acc`; bits above them are stale.
  let acc = 0;
  let nbits = 0;
  const hotEnd = end - 1;
  for (;;) {
    // Hot loop, kept minimal for speed: two octets ahead and codes of up to PRIMARY_BITS only.
    while (i < hotEnd) {
      if (nbits < 16) {
        acc = (acc << 16) | (buf[i] << 8) | buf[i + 1];
        i += 2;
        nbits += 16;
      }
      const entry = PRIMARY[(acc >>> (nbits - PRIMARY_BITS)) & PRIMARY_MASK];
      if (entry === 0) break;
      out[n++] = entry >>> 5;
      nbits -= entry & 31;
    }
    // One symbol the hot loop cannot take: a long code, or one near the end of the input.
    if (nbits < 16) {
      // Two octets at a time keep the refill off most iterations; acc never exceeds 31 bits.
      if (i + 1 < end) {
        acc = (acc << 16) | (buf[i] << 8) | buf[i + 1];
        i += 2;
        nbits += 16;
      } else if (i < end) {
        acc = (acc << 8) | buf[i++];
        nbits += 8;
      }
      if (i >= end) {
        if (nbits === 0) break;
        // A prefix of EOS (all ones) of at most 7 bits is padding; no shorter code is all ones.
        if (nbits <= 7 && (acc & ((1 << nbits) - 1)) === (1 << nbits) - 1) break;
      }
    }
    const entry =
      nbits >= PRIMARY_BITS
        ? PRIMARY[(acc >>> (nbits - PRIMARY_BITS)) & PRIMARY_MASK]
        : PRIMARY[((acc << (PRIMARY_BITS - nbits)) | ((1 << (PRIMARY_BITS - nbits)) - 1)) & PRIMARY_MASK];
    if (entry !== 0) {
      const L = entry & 31;
      // Only possible at the end of the input: the bits left are an incomplete code.
      if (L > nbits) throw trailingBitsError(acc, nbits);
      out[n++] = entry >>> 5;
      nbits -= L;
      continue;
    }
    if (nbits < PRIMARY_BITS) throw trailingBitsError(acc, nbits);
    let code = (acc >>> (nbits - PRIMARY_BITS)) & PRIMARY_MASK;
    nbits -= PRIMARY_BITS;
    let L = PRIMARY_BITS;
    let symbol = -1;
    while (symbol < 0) {
      if (nbits === 0) {
        if (i >= end) throw trailingBitsError(code, L);
        acc = buf[i++];
        nbits = 8;
      }
      nbits--;
      code = (code << 1) | ((acc >>> nbits) & 1);
      L++;
      // Canonical: a code not matched at a shorter length is >= FIRST_CODE[L] (k >= 0 is a guard).
      const k = code - FIRST_CODE[L];
      if (k >= 0 && k < COUNT[L]) symbol = SORTED[OFFSET[L] + k];
    }
    if (symbol === EOS) throw new HpackError('Huffman-coded string contains EOS');
    out[n++] = symbol;
  }
  return out.toString('latin1', 0, n);
}

function huffmanEncodedLength(s: string): number {
  let bits = 0;
  for (let i = 0; i < s.length; i++) bits += LENGTHS[s.charCodeAt(i) & 0xff];
  return (bits + 7) >>> 3;
}

/** Huffman-codes the latin1 string `s` (every char code <= 0xff), padded with ones to an octet. */
export function huffmanEncode(s: string): Buffer {
  const out = Buffer.allocUnsafe(huffmanEncodedLength(s));
  let o = 0;
  let acc = 0;
  let nbits = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c > 0xff) throw new RangeError(`huffmanEncode: char code ${c} at ${i} is not latin1`);
    let code = CODES[c];
    let L = LENGTHS[c];
    // Keep acc within 32 bits: at most 7 pending bits plus 24 new ones.
    if (L > 24) {
      acc = (acc << (L - 16)) | (code >>> 16);
      nbits += L - 16;
      while (nbits >= 8) {
        nbits -= 8;
        out[o++] = acc >>> nbits;
      }
      code &= 0xffff;
      L = 16;
    }
    acc = (acc << L) | code;
    nbits += L;
    while (nbits >= 8) {
      nbits -= 8;
      out[o++] = acc >>> nbits;
    }
  }
  if (nbits > 0) out[o++] = (acc << (8 - nbits)) | ((1 << (8 - nbits)) - 1);
  return out;
}
