/**
 * Just enough of the RateLimitService wire format to build request bodies and answer them, written
 * by hand so the load tools depend on nothing but the field numbers (which are facts of Envoy's API).
 */

/** gRPC method path of ShouldRateLimit. */
export const SHOULD_RATE_LIMIT_PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';

export interface BenchDescriptor {
  readonly entries: readonly (readonly [key: string, value: string])[];
}

function varint(n: number): number[] {
  const out: number[] = [];
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80);
    n >>>= 7;
  }
  out.push(n);
  return out;
}

function lengthDelimited(field: number, payload: Buffer): Buffer {
  return Buffer.concat([Buffer.from([(field << 3) | 2, ...varint(payload.length)]), payload]);
}

/** Encodes a RateLimitRequest {domain = 1, descriptors = 2 {entries = 1 {key = 1, value = 2}}}; hits_addend left unset (1). */
export function encodeRateLimitRequest(domain: string, descriptors: readonly BenchDescriptor[]): Buffer {
  const parts = [lengthDelimited(1, Buffer.from(domain))];
  for (const d of descriptors) {
    const entries = d.entries.map(([k, v]) => lengthDelimited(1, Buffer.concat([lengthDelimited(1, Buffer.from(k)), lengthDelimited(2, Buffer.from(v))])));
    parts.push(lengthDelimited(2, Buffer.concat(entries)));
  }
  return Buffer.concat(parts);
}

/** Wraps a message in the 5-byte gRPC length-prefixed frame (uncompressed). */
export function grpcFrame(message: Buffer): Buffer {
  const header = Buffer.alloc(5);
  header.writeUInt8(0, 0);
  header.writeUInt32BE(message.length, 1);
  return Buffer.concat([header, message]);
}

/** Splits concatenated gRPC frames (the bodies file format) back into messages, or into whole frames with `keepPrefix`. */
export function splitGrpcFrames(data: Buffer, options: { keepPrefix?: boolean } = {}): Buffer[] {
  const out: Buffer[] = [];
  let at = 0;
  while (at + 5 <= data.length) {
    const end = at + 5 + data.readUInt32BE(at + 1);
    if (end > data.length) throw new Error('truncated gRPC frame');
    out.push(data.subarray(options.keepPrefix === true ? at : at + 5, end));
    at = end;
  }
  return out;
}

/** Counts the descriptors (field 2) of an encoded RateLimitRequest, skipping every other field. */
export function countDescriptors(message: Buffer): number {
  let at = 0;
  let count = 0;
  const readVarint = (): number => {
    let result = 0;
    let shift = 0;
    for (let i = 0; i < 10; i++) {
      const b = message[at++];
      if (b === undefined) throw new Error('truncated varint');
      result += (b & 0x7f) * 2 ** shift;
      if (b < 0x80) return result;
      shift += 7;
    }
    throw new Error('varint too long');
  };
  while (at < message.length) {
    const tag = readVarint();
    const wire = tag & 7;
    if (wire === 0) readVarint();
    else if (wire === 2) {
      const len = readVarint();
      if (tag >>> 3 === 2) count++;
      at += len;
    } else if (wire === 1) at += 8;
    else if (wire === 5) at += 4;
    else throw new Error(`unsupported wire type ${wire}`);
  }
  return count;
}

const OK_STATUS = Buffer.from([0x12, 0x02, 0x08, 0x01]); // statuses (2) {code (1) = OK}

/** A RateLimitResponse {overall_code = OK, one OK status per descriptor}. */
export function encodeOkResponse(descriptors: number): Buffer {
  const parts = [Buffer.from([0x08, 0x01])];
  for (let i = 0; i < descriptors; i++) parts.push(OK_STATUS);
  return Buffer.concat(parts);
}

/** Reads overall_code (field 1) of a RateLimitResponse; 0 when absent. */
export function overallCode(message: Buffer): number {
  return message.length >= 2 && message[0] === 0x08 ? message[1] : 0;
}
