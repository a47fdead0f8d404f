/**
 * gRPC over HTTP/2, the parts a server writes by hand: length-prefixed messages, the `grpc-timeout`
 * header, and the percent-encoding of `grpc-message`. Pure functions over bytes and strings.
 *
 * A message on the wire is a 5-byte prefix (1 byte compressed flag, 4 bytes big-endian length)
 * followed by that many bytes of protobuf.
 */

import { GrpcStatus } from '../errors';

/** gRPC status codes (the error catalogue's). */
export { GrpcStatus };

/** Bytes of the length prefix in front of every message. */
export const MESSAGE_PREFIX_BYTES = 5;

/** One message with its 5-byte prefix (uncompressed), in a single buffer ready to write. */
export function frameMessage(payload: Uint8Array): Buffer {
  const out = Buffer.allocUnsafe(MESSAGE_PREFIX_BYTES + payload.length);
  out[0] = 0;
  out.writeUInt32BE(payload.length, 1);
  out.set(payload, MESSAGE_PREFIX_BYTES);
  return out;
}

/** Why a request body is not exactly one acceptable message. */
export interface FramingError {
  readonly code: number;
  readonly message: string;
}

/**
 * Checks the prefix of a unary request body as soon as it is known, so an oversized message is
 * refused before it is buffered. `prefix` holds at least MESSAGE_PREFIX_BYTES bytes.
 * `identityOnly`: the client declared no (or identity) grpc-encoding.
 */
export function checkPrefix(prefix: Buffer, maxMessageBytes: number, identityOnly: boolean): FramingError | undefined {
  const flag = prefix[0];
  if (flag !== 0) {
    if (flag !== 1) return { code: GrpcStatus.INTERNAL, message: `invalid compressed flag ${flag}` };
    // A compressed message with no declared encoding is a protocol violation; a declared one we do not speak is unimplemented.
    return identityOnly
      ? { code: GrpcStatus.INTERNAL, message: 'compressed message without grpc-encoding' }
      : { code: GrpcStatus.UNIMPLEMENTED, message: 'compressed messages are not supported; use identity' };
  }
  const length = prefix.readUInt32BE(1);
  if (length > maxMessageBytes) {
    return { code: GrpcStatus.RESOURCE_EXHAUSTED, message: `received message larger than max (${length} vs. ${maxMessageBytes})` };
  }
  return undefined;
}

/**
 * The single message of a complete unary request body, or why there is none. The prefix must
 * already have passed checkPrefix when the body is at least 5 bytes long.
 */
export function unaryMessage(body: Buffer): Buffer | FramingError {
  if (body.length < MESSAGE_PREFIX_BYTES) {
    return { code: GrpcStatus.INTERNAL, message: body.length === 0 ? 'request message missing' : 'truncated message prefix' };
  }
  const end = MESSAGE_PREFIX_BYTES + body.readUInt32BE(1);
  if (body.length < end) return { code: GrpcStatus.INTERNAL, message: 'truncated message' };
  if (body.length > end) return { code: GrpcStatus.UNIMPLEMENTED, message: 'more than one message on a unary call' };
  return body.subarray(MESSAGE_PREFIX_BYTES, end);
}

const TIMEOUT_UNIT_MS: Readonly<Record<string, number>> = Object.freeze({
  H: 3_600_000,
  M: 60_000,
  S: 1_000,
  m: 1,
  u: 0.001,
  n: 0.000_001,
});

/**
 * Milliseconds of a `grpc-timeout` header value (up to 8 digits and a unit: H M S m u n);
 * undefined when absent or malformed (a malformed timeout is ignored, as no deadline).
 */
export function parseGrpcTimeout(value: string | string[] | undefined): number | undefined {
  if (typeof value !== 'string') return undefined;
  const n = value.length;
  if (n < 2 || n > 9) return undefined;
  const unit = TIMEOUT_UNIT_MS[value[n - 1]];
  if (unit === undefined) return undefined;
  let amount = 0;
  for (let i = 0; i < n - 1; i++) {
    const d = value.charCodeAt(i) - 48;
    if (d < 0 || d > 9) return undefined;
    amount = amount * 10 + d;
  }
  return amount * unit;
}

/**
 * `grpc-message` as the gRPC spec asks: UTF-8, with every byte outside printable ASCII
 * (0x20-0x7E) and '%' itself written as %XX.
 */
export function encodeGrpcMessage(text: string): string {
  let plain = true;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x20 || c > 0x7e || c === 0x25) {
      plain = false;
      break;
    }
  }
  if (plain) return text;
  let out = '';
  for (const byte of Buffer.from(text, 'utf8')) {
    out += byte < 0x20 || byte > 0x7e || byte === 0x25 ? `%${byte.toString(16).toUpperCase().padStart(2, '0')}` : String.fromCharCode(byte);
  }
  return out;
}

/** Inverse of encodeGrpcMessage (malformed escapes are kept as they are). */
export function decodeGrpcMessage(text: string): string {
  if (!text.includes('%')) return text;
  const bytes: number[] = [];
  for (let i = 0; i < text.length; i++) {
    if (text[i] === '%' && /^[0-9A-Fa-f]{2}$/.test(text.slice(i + 1, i + 3))) {
      bytes.push(parseInt(text.slice(i + 1, i + 3), 16));
      i += 2;
    } else {
      bytes.push(text.charCodeAt(i) & 0xff);
    }
  }
  return Buffer.from(bytes).toString('utf8');
}
