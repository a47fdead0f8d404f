import { checkRequestHeaders, checkTrailers, MALFORMED, NO_CONTENT_LENGTH } from '../../../src/http2/request-headers';

const GRPC = [
  ':method',
  'POST',
  ':scheme',
  'http',
  ':path',
  '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit',
  ':authority',
  'rls',
  'content-type',
  'application/grpc',
  'te',
  'trailers',
  'grpc-timeout',
  '20m',
];

describe('checkRequestHeaders', () => {
  it('accepts what gRPC clients and Envoy send', () => {
    expect(checkRequestHeaders(GRPC)).toBe(NO_CONTENT_LENGTH);
    expect(checkRequestHeaders([':method', 'GET', ':scheme', 'https', ':path', '/', 'accept', '*/*'])).toBe(NO_CONTENT_LENGTH);
  });

  it('returns the content-length, repeated values agreeing', () => {
    expect(checkRequestHeaders([...GRPC, 'content-length', '42'])).toBe(42);
    expect(checkRequestHeaders([...GRPC, 'content-length', '0', 'content-length', '0'])).toBe(0);
  });

  it('accepts CONNECT with :authority and without :scheme and :path', () => {
    expect(checkRequestHeaders([':method', 'CONNECT', ':authority', 'example.com:443'])).toBe(NO_CONTENT_LENGTH);
    expect(checkRequestHeaders([':method', 'CONNECT', ':authority', 'example.com:443', ':path', '/'])).toBe(MALFORMED);
  });

  const malformed: Array<[string, string[]]> = [
    ['an upper-case name', [...GRPC, 'X-Upper', 'a']],
    ['a name with a space', [...GRPC, 'x upper', 'a']],
    ['a name with a colon inside', [...GRPC, 'x:y', 'a']],
    ['an empty name', [...GRPC, '', 'a']],
    ['a value with CR LF', [...GRPC, 'x-v', 'a\r\nb']],
    ['a value with NUL', [...GRPC, 'x-v', 'a\u0000b']],
    ['a value with leading space', [...GRPC, 'x-v', ' a']],
    ['a value with trailing tab', [...GRPC, 'x-v', 'a\t']],
    ['an unknown pseudo-header', [':bogus', 'x', ...GRPC]],
    ['a response pseudo-header', [':status', '200', ...GRPC]],
    ['a pseudo-header after a regular field', ['content-type', 'application/grpc', ...GRPC.slice(0, 8)]],
    ['no :method', GRPC.slice(2)],
    ['no :scheme', [...GRPC.slice(0, 2), ...GRPC.slice(4)]],
    ['no :path', [...GRPC.slice(0, 4), ...GRPC.slice(6)]],
    ['an empty :path', [':method', 'POST', ':scheme', 'http', ':path', '', ...GRPC.slice(6)]],
    ['two :method', [':method', 'POST', ...GRPC]],
    ['two :authority', [':authority', 'x', ...GRPC]],
    ['connection', [...GRPC, 'connection', 'close']],
    ['keep-alive', [...GRPC, 'keep-alive', '5']],
    ['proxy-connection', [...GRPC, 'proxy-connection', 'x']],
    ['transfer-encoding', [...GRPC, 'transfer-encoding', 'chunked']],
    ['upgrade', [...GRPC, 'upgrade', 'h2c']],
    ['TE other than trailers', [...GRPC.slice(0, 10), 'te', 'gzip']],
    ['a content-length not a number', [...GRPC, 'content-length', '4a']],
    ['a negative content-length', [...GRPC, 'content-length', '-1']],
    ['content-lengths that disagree', [...GRPC, 'content-length', '1', 'content-length', '2']],
  ];
  it.each(malformed)('finds %s malformed', (_name, fields) => {
    expect(checkRequestHeaders(fields)).toBe(MALFORMED);
  });
});

describe('checkTrailers', () => {
  it('accepts regular fields', () => {
    expect(checkTrailers(['x-checksum', 'abc', 'grpc-status', '0'])).toBe(true);
    expect(checkTrailers([])).toBe(true);
  });

  it.each([
    ['a pseudo-header', [':method', 'POST']],
    ['an upper-case name', ['X-Checksum', 'abc']],
    ['a value with LF', ['x-checksum', 'a\nb']],
  ])('refuses %s', (_name, fields) => {
    expect(checkTrailers(fields)).toBe(false);
  });
});
