import { encodeHeaderBlock } from '../http2/hpack';

/**
 * The header blocks of every successful gRPC answer, HPACK-encoded once: the server sends them and the
 * client recognises them by their bytes. No `date` header: gRPC clients ignore it.
 */
export const RESPONSE_HEADERS = encodeHeaderBlock([
  [':status', '200'],
  ['content-type', 'application/grpc'],
]);
export const OK_TRAILERS = encodeHeaderBlock([['grpc-status', '0']]);
