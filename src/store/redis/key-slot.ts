/**
 * Redis Cluster's hash slot of a key: CRC16-XMODEM of its UTF-8 bytes, or of the part inside the
 * first non-empty `{...}` hash tag, modulo 16384. The store groups a call's counters by it; the
 * counter identities (src/limiter/keys.ts) are free of braces, so the tag the store adds decides.
 */

const SLOTS = 16384;

// CRC16-XMODEM table.
const CRC16 = (() => {
  const table = new Uint16Array(256);
  for (let i = 0; i < 256; i++) {
    let c = i << 8;
    for (let j = 0; j < 8; j++) c = c & 0x8000 ? (c << 1) ^ 0x1021 : c << 1;
    table[i] = c & 0xffff;
  }
  return table;
})();

// Keys are encoded into this buffer, reused: no allocation per key unless one is longer.
let scratch = Buffer.allocUnsafe(1024);

/** Redis Cluster hash slot of a key (hash tag rules included), over its UTF-8 bytes. */
export function keySlot(key: string): number {
  // A UTF-8 encoding takes at most 3 bytes per UTF-16 code unit.
  if (key.length * 3 > scratch.length) scratch = Buffer.allocUnsafe(key.length * 3);
  const length = scratch.write(key, 0, 'utf8');
  let start = 0;
  let end = length;
  const open = scratch.indexOf(0x7b); // '{'
  if (open >= 0 && open < length) {
    const close = scratch.indexOf(0x7d, open + 1); // '}'
    if (close > open + 1 && close < length) {
      start = open + 1;
      end = close;
    }
  }
  let crc = 0;
  for (let i = start; i < end; i++) crc = ((crc << 8) & 0xffff) ^ CRC16[((crc >> 8) ^ scratch[i]) & 0xff];
  return crc % SLOTS;
}
