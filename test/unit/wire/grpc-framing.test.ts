import { checkPrefix, decodeGrpcMessage, encodeGrpcMessage, frameMessage, GrpcStatus, parseGrpcTimeout, unaryMessage } from '../../../src/wire/grpc-framing';

const prefix = (flag: number, length: number): Buffer => {
  const b = Buffer.alloc(5);
  b[0] = flag;
  b.writeUInt32BE(length, 1);
  return b;
};

describe('gRPC message framing', () => {
  it('prefixes a message with a zero flag and its big-endian length', () => {
    expect([...frameMessage(Buffer.from([7, 8, 9]))]).toEqual([0, 0, 0, 0, 3, 7, 8, 9]);
  });

  it('extracts the single message of a complete body', () => {
    const body = frameMessage(Buffer.from('abc'));
    expect(unaryMessage(body)).toEqual(Buffer.from('abc'));
    expect(unaryMessage(frameMessage(Buffer.alloc(0)))).toEqual(Buffer.alloc(0));
  });

  it('reports truncated, missing and extra messages', () => {
    expect(unaryMessage(Buffer.alloc(0))).toMatchObject({ code: GrpcStatus.INTERNAL });
    expect(unaryMessage(Buffer.from([0, 0]))).toMatchObject({ code: GrpcStatus.INTERNAL });
    expect(unaryMessage(Buffer.concat([prefix(0, 4), Buffer.from('ab')]))).toMatchObject({ code: GrpcStatus.INTERNAL, message: 'truncated message' });
    expect(unaryMessage(Buffer.concat([frameMessage(Buffer.from('a')), Buffer.from([0])]))).toMatchObject({ code: GrpcStatus.UNIMPLEMENTED });
  });

  it('refuses compressed messages: INTERNAL without a declared encoding, UNIMPLEMENTED with one', () => {
    expect(checkPrefix(prefix(1, 3), 100, true)).toMatchObject({ code: GrpcStatus.INTERNAL });
    expect(checkPrefix(prefix(1, 3), 100, false)).toMatchObject({ code: GrpcStatus.UNIMPLEMENTED });
    expect(checkPrefix(prefix(2, 3), 100, false)).toMatchObject({ code: GrpcStatus.INTERNAL });
  });

  it('refuses a declared length over the limit with RESOURCE_EXHAUSTED and accepts one at the limit', () => {
    expect(checkPrefix(prefix(0, 101), 100, true)).toMatchObject({ code: GrpcStatus.RESOURCE_EXHAUSTED });
    expect(checkPrefix(prefix(0, 100), 100, true)).toBeUndefined();
  });
});

describe('grpc-timeout', () => {
  it.each([
    ['20m', 20],
    ['1S', 1000],
    ['2M', 120_000],
    ['1H', 3_600_000],
    ['1500u', 1.5],
    ['3000000n', 3],
    ['99999999m', 99_999_999],
  ])('reads %s as %d ms', (header, ms) => {
    expect(parseGrpcTimeout(header)).toBeCloseTo(ms);
  });

  it.each([undefined, '', 'm', '20', '20x', '-1m', '123456789m', '1.5S'])('ignores the malformed value %j', (header) => {
    expect(parseGrpcTimeout(header)).toBeUndefined();
  });
});

describe('grpc-message percent-encoding', () => {
  it('leaves printable ASCII alone', () => {
    expect(encodeGrpcMessage('domain must not be empty')).toBe('domain must not be empty');
  });

  it('escapes percent signs, control characters and UTF-8 bytes', () => {
    expect(encodeGrpcMessage('100% ü\n')).toBe('100%25 %C3%BC%0A');
  });

  it('round-trips any text', () => {
    for (const text of ['', 'a%b', 'émoji 🚦', '\r\n\t', '%%%']) expect(decodeGrpcMessage(encodeGrpcMessage(text))).toBe(text);
  });
});
