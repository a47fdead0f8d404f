import type { StructFields, StructValue } from '../limiter/types';

/**
 * google.protobuf.Struct from plain data, for `dynamic_metadata`: as protobuf bytes (the http2
 * transport's hand-written encoder) and as the message object protobufjs encodes (the grpc-js
 * transport). Off the hot path: only responses with dynamic metadata use it.
 */

/** protobufjs's shape of a google.protobuf.Value. */
export interface WireValue {
  nullValue?: number;
  numberValue?: number;
  stringValue?: string;
  boolValue?: boolean;
  structValue?: WireStruct;
  listValue?: { values: WireValue[] };
}

/** protobufjs's shape of a google.protobuf.Struct. */
export interface WireStruct {
  fields: Record<string, WireValue>;
}

function valueToWire(v: StructValue): WireValue {
  if (v === null) return { nullValue: 0 };
  if (typeof v === 'number') return { numberValue: v };
  if (typeof v === 'string') return { stringValue: v };
  if (typeof v === 'boolean') return { boolValue: v };
  if (Array.isArray(v)) return { listValue: { values: (v as readonly StructValue[]).map(valueToWire) } };
  return { structValue: structToWire(v as StructFields) };
}

/** The Struct message object of `fields`, for protobufjs. */
export function structToWire(fields: StructFields): WireStruct {
  const out: Record<string, WireValue> = {};
  for (const key of Object.keys(fields)) {
    Object.defineProperty(out, key, { value: valueToWire(fields[key]), enumerable: true, writable: true, configurable: true });
  }
  return { fields: out };
}

function varint(n: number): number[] {
  const bytes: number[] = [];
  while (n >= 128) {
    bytes.push((n % 128) | 0x80);
    n = Math.floor(n / 128);
  }
  bytes.push(n);
  return bytes;
}

/** A length-delimited field: tag, length, body. */
function delimited(tag: number, body: Buffer): Buffer {
  return Buffer.concat([Buffer.from([tag, ...varint(body.length)]), body]);
}

function encodeValue(v: StructValue): Buffer {
  if (v === null) return Buffer.from([0x08, 0x00]);
  if (typeof v === 'number') {
    const b = Buffer.allocUnsafe(9);
    b[0] = 0x11;
    b.writeDoubleLE(v, 1);
    return b;
  }
  if (typeof v === 'string') return delimited(0x1a, Buffer.from(v, 'utf8'));
  if (typeof v === 'boolean') return Buffer.from([0x20, v ? 1 : 0]);
  if (Array.isArray(v)) {
    const values = (v as readonly StructValue[]).map((item) => delimited(0x0a, encodeValue(item)));
    return delimited(0x32, Buffer.concat(values));
  }
  return delimited(0x2a, encodeStruct(v as StructFields));
}

/** The protobuf bytes of the Struct message of `fields` (without a tag or length of its own). */
export function encodeStruct(fields: StructFields): Buffer {
  const entries = Object.keys(fields).map((key) =>
    delimited(0x0a, Buffer.concat([delimited(0x0a, Buffer.from(key, 'utf8')), delimited(0x12, encodeValue(fields[key]))])),
  );
  return Buffer.concat(entries);
}
