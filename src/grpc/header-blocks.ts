import { encodeHeaderBlock } from '../http2/hpack';
import { encodeGrpcMessage } from '../wire/grpc-framing';

/**
 * The header blocks of every successful gRPC answer, HPACK-encoded once: the server sends them and the
 * client recognises them by their bytes. No `date` header: gRPC clients ignore it.
 */
export const RESPONSE_HEADERS = encodeHeaderBlock([
  [':status', '200'],
  ['content-type', 'application/grpc'],
]);
export const OK_TRAILERS = encodeHeaderBlock([['grpc-status', '0']]);

/** The trailers of a call ending with `code` (0 is OK) and `message` (percent-encoded here). */
export function statusTrailers(code: number, message: string): Buffer {
  if (code === 0 && message === '') return OK_TRAILERS;
  return encodeHeaderBlock([
    ['grpc-status', String(code)],
    ['grpc-message', encodeGrpcMessage(message)],
  ]);
}

/** A trailers-only answer: the response headers and the status in one block that ends the stream. */
export function trailersOnly(code: number, message: string): Buffer {
  return encodeHeaderBlock([
    [':status', '200'],
    ['content-type', 'application/grpc'],
    ['grpc-accept-encoding', 'identity'],
    ['grpc-status', String(code)],
    ['grpc-message', encodeGrpcMessage(message)],
  ]);
}
