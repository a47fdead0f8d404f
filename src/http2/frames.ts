/**
 * HTTP/2 frame layout (RFC 9113 section 4 and 6): the numbers the connection speaks, and the few
 * frame builders it needs. A frame is a 9-octet header (24-bit length, type, flags, 31-bit stream
 * id) and its payload.
 */

export const FRAME_HEADER_BYTES = 9;
export const CONNECTION_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

export enum FrameType {
  DATA = 0x0,
  HEADERS = 0x1,
  PRIORITY = 0x2,
  RST_STREAM = 0x3,
  SETTINGS = 0x4,
  PUSH_PROMISE = 0x5,
  PING = 0x6,
  GOAWAY = 0x7,
  WINDOW_UPDATE = 0x8,
  CONTINUATION = 0x9,
}

export enum Flag {
  END_STREAM = 0x1,
  ACK = 0x1,
  END_HEADERS = 0x4,
  PADDED = 0x8,
  PRIORITY = 0x20,
}

export enum ErrorCode {
  NO_ERROR = 0x0,
  PROTOCOL_ERROR = 0x1,
  INTERNAL_ERROR = 0x2,
  FLOW_CONTROL_ERROR = 0x3,
  SETTINGS_TIMEOUT = 0x4,
  STREAM_CLOSED = 0x5,
  FRAME_SIZE_ERROR = 0x6,
  REFUSED_STREAM = 0x7,
  CANCEL = 0x8,
  COMPRESSION_ERROR = 0x9,
  ENHANCE_YOUR_CALM = 0xb,
}

export enum Setting {
  HEADER_TABLE_SIZE = 0x1,
  ENABLE_PUSH = 0x2,
  MAX_CONCURRENT_STREAMS = 0x3,
  INITIAL_WINDOW_SIZE = 0x4,
  MAX_FRAME_SIZE = 0x5,
  MAX_HEADER_LIST_SIZE = 0x6,
}

/** Protocol defaults before any SETTINGS is exchanged. */
export const DEFAULT_WINDOW = 65_535;
export const DEFAULT_MAX_FRAME_SIZE = 16_384;
export const MAX_WINDOW = 0x7fff_ffff;
export const MAX_ALLOWED_FRAME_SIZE = 0xff_ffff;

/** A frame whose payload is `payload` (copied in). */
export function frame(type: FrameType, flags: number, streamId: number, payload?: Buffer): Buffer {
  const length = payload === undefined ? 0 : payload.length;
  const out = Buffer.allocUnsafe(FRAME_HEADER_BYTES + length);
  writeFrameHeader(out, 0, length, type, flags, streamId);
  if (payload !== undefined) payload.copy(out, FRAME_HEADER_BYTES);
  return out;
}

/** Writes a frame header at `at` in `out`. */
export function writeFrameHeader(out: Buffer, at: number, length: number, type: FrameType, flags: number, streamId: number): void {
  out[at] = (length >>> 16) & 0xff;
  out[at + 1] = (length >>> 8) & 0xff;
  out[at + 2] = length & 0xff;
  out[at + 3] = type;
  out[at + 4] = flags;
  out.writeUInt32BE(streamId & MAX_WINDOW, at + 5);
}

/** A frame with one 32-bit payload word: RST_STREAM's error code or WINDOW_UPDATE's increment. */
export function wordFrame(type: FrameType.RST_STREAM | FrameType.WINDOW_UPDATE, streamId: number, word: number): Buffer {
  const out = Buffer.allocUnsafe(FRAME_HEADER_BYTES + 4);
  writeFrameHeader(out, 0, 4, type, 0, streamId);
  out.writeUInt32BE(word >>> 0, FRAME_HEADER_BYTES);
  return out;
}

export function settingsFrame(settings: ReadonlyArray<readonly [Setting, number]>): Buffer {
  const payload = Buffer.allocUnsafe(settings.length * 6);
  settings.forEach(([id, value], i) => {
    payload.writeUInt16BE(id, i * 6);
    payload.writeUInt32BE(value, i * 6 + 2);
  });
  return frame(FrameType.SETTINGS, 0, 0, payload);
}

export function goawayFrame(lastStreamId: number, code: ErrorCode, debug = ''): Buffer {
  const text = Buffer.from(debug, 'utf8');
  const payload = Buffer.allocUnsafe(8 + text.length);
  payload.writeUInt32BE(lastStreamId & MAX_WINDOW, 0);
  payload.writeUInt32BE(code, 4);
  text.copy(payload, 8);
  return frame(FrameType.GOAWAY, 0, 0, payload);
}

/** Receives one frame: its header fields and its payload (a view into received bytes). */
export type FrameHandler = (type: number, flags: number, streamId: number, payload: Buffer) => void;

const NO_BYTES = Buffer.alloc(0);

/**
 * Cuts a received byte stream into frames: each chunk goes to push() as it arrives, every complete
 * frame to the handler in order, and an incomplete tail waits for the next chunk. No frame size
 * limit is checked (a peer's own limits are its business). Payloads are views: copy what must
 * outlive the handler's call.
 */
export class FrameReader {
  private buffered: Buffer = NO_BYTES;

  constructor(private readonly onFrame: FrameHandler) {}

  /** Bytes of an incomplete frame held back for the next chunk. */
  get pendingBytes(): number {
    return this.buffered.length;
  }

  push(chunk: Buffer): void {
    // Only a frame split across chunks costs a copy; whole frames are read in place.
    const buf = this.buffered.length === 0 ? chunk : Buffer.concat([this.buffered, chunk]);
    let at = 0;
    while (buf.length - at >= FRAME_HEADER_BYTES) {
      const length = (buf[at] << 16) | (buf[at + 1] << 8) | buf[at + 2];
      const end = at + FRAME_HEADER_BYTES + length;
      if (buf.length < end) break;
      const type = buf[at + 3];
      const flags = buf[at + 4];
      const streamId = buf.readUInt32BE(at + 5) & MAX_WINDOW;
      at = end;
      this.onFrame(type, flags, streamId, buf.subarray(end - length, end));
    }
    this.buffered = at === buf.length ? NO_BYTES : buf.subarray(at);
  }
}
