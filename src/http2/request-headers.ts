/**
 * Request header validation (RFC 9113 section 8.1.1, 8.2 and 8.3.1): what makes a request
 * malformed, which the connection answers with a stream error of type PROTOCOL_ERROR before any
 * handler sees it. Works on the decoder's flat `[name, value, ...]` list; pure.
 */

/** checkRequestHeaders: the request is well-formed and carries no content-length. */
export const NO_CONTENT_LENGTH = -1;
/** checkRequestHeaders: the request is malformed. */
export const MALFORMED = -2;

const METHOD = 1;
const SCHEME = 2;
const AUTHORITY = 4;
const PATH = 8;
const REQUIRED = METHOD | SCHEME | PATH;
const COLON = 0x3a;
// The longest content-length read exactly as a number (well beyond any body this layer accepts).
const MAX_CONTENT_LENGTH_DIGITS = 15;

/**
 * Checks a request's header list: only the four request pseudo-header fields, each at most once,
 * all before the regular fields, :method, :scheme and a non-empty :path present (CONNECT: :method
 * and :authority only), names lower-case tokens, values without NUL/CR/LF or surrounding
 * whitespace, no connection-specific fields, TE only "trailers", content-length a number (repeats
 * must agree). Returns the content-length, NO_CONTENT_LENGTH, or MALFORMED. `charactersChecked`:
 * the decoder has checked the names' and values' characters already (HpackDecoder.lastBlockForbidden).
 */
export function checkRequestHeaders(fields: readonly string[], charactersChecked = false): number {
  let seen = 0;
  let regularSeen = false;
  let method = '';
  let contentLength = NO_CONTENT_LENGTH;
  for (let i = 0; i < fields.length; i += 2) {
    const name = fields[i];
    const value = fields[i + 1];
    if (!charactersChecked && !validFieldValue(value)) return MALFORMED;
    if (name.charCodeAt(0) === COLON) {
      if (regularSeen) return MALFORMED;
      const bit = pseudoBit(name);
      if (bit === 0 || (seen & bit) !== 0) return MALFORMED;
      seen |= bit;
      if (bit === METHOD) method = value;
      else if (bit === PATH && value.length === 0) return MALFORMED;
      continue;
    }
    regularSeen = true;
    if (!charactersChecked && !validFieldName(name)) return MALFORMED;
    // Only names starting with c, k, p, t or u need a closer look.
    const c = name.charCodeAt(0);
    if (c !== 0x63 && c !== 0x6b && c !== 0x70 && c !== 0x74 && c !== 0x75) continue;
    switch (name) {
      case 'connection':
      case 'keep-alive':
      case 'proxy-connection':
      case 'transfer-encoding':
      case 'upgrade':
        return MALFORMED;
      case 'te':
        if (value !== 'trailers') return MALFORMED;
        break;
      case 'content-length': {
        const length = parseContentLength(value);
        if (length < 0 || (contentLength !== NO_CONTENT_LENGTH && length !== contentLength)) return MALFORMED;
        contentLength = length;
        break;
      }
      default:
    }
  }
  if (method === 'CONNECT') return seen === (METHOD | AUTHORITY) ? contentLength : MALFORMED;
  return (seen & REQUIRED) === REQUIRED ? contentLength : MALFORMED;
}

/** Checks a trailer section: no pseudo-header fields, names and values as in a request (see checkRequestHeaders). */
export function checkTrailers(fields: readonly string[], charactersChecked = false): boolean {
  for (let i = 0; i < fields.length; i += 2) {
    if (fields[i].charCodeAt(0) === COLON) return false;
    if (!charactersChecked && (!validFieldName(fields[i]) || !validFieldValue(fields[i + 1]))) return false;
  }
  return true;
}

function pseudoBit(name: string): number {
  switch (name) {
    case ':method':
      return METHOD;
    case ':scheme':
      return SCHEME;
    case ':authority':
      return AUTHORITY;
    case ':path':
      return PATH;
    default:
      return 0;
  }
}

/**
 * A field name HTTP/2 allows (RFC 9113 8.2.1): non-empty visible ASCII, no upper case, no colon
 * but a leading one (pseudo-header fields are then checked by name).
 */
export function validFieldName(name: string): boolean {
  const first = name.charCodeAt(0) === COLON ? 1 : 0;
  if (name.length <= first) return false;
  for (let i = first; i < name.length; i++) {
    const c = name.charCodeAt(i);
    if (c <= 0x20 || c >= 0x7f || (c >= 0x41 && c <= 0x5a) || c === COLON) return false;
  }
  return true;
}

/** A field value HTTP/2 allows: no NUL, CR or LF, no leading or trailing space or tab (RFC 9113 8.2.1). */
export function validFieldValue(value: string): boolean {
  const n = value.length;
  if (n === 0) return true;
  if (isBlank(value.charCodeAt(0)) || isBlank(value.charCodeAt(n - 1))) return false;
  for (let i = 0; i < n; i++) {
    const c = value.charCodeAt(i);
    if (c === 0x00 || c === 0x0a || c === 0x0d) return false;
  }
  return true;
}

function isBlank(c: number): boolean {
  return c === 0x20 || c === 0x09;
}

/** Decimal digits only; -1 otherwise. */
function parseContentLength(value: string): number {
  if (value.length === 0 || value.length > MAX_CONTENT_LENGTH_DIGITS) return -1;
  let n = 0;
  for (let i = 0; i < value.length; i++) {
    const d = value.charCodeAt(i) - 0x30;
    if (d < 0 || d > 9) return -1;
    n = n * 10 + d;
  }
  return n;
}
