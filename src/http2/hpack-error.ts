/**
 * A header block that cannot be decoded (RFC 7541): a COMPRESSION_ERROR, after which the
 * connection must be closed because the two HPACK contexts can no longer be trusted to agree.
 * In its own file so huffman.ts and hpack.ts can both throw it without importing each other.
 */
export class HpackError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'HpackError';
  }
}
