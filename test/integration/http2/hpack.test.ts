import { once } from 'node:events';
import * as http2 from 'node:http2';
import * as net from 'node:net';
import fc from 'fast-check';
import { Flag, frame, FrameReader, FrameType } from '../../../src/http2/frames';
import { encodeHeaderBlock, HpackDecoder } from '../../../src/http2/hpack';
import { HpackError } from '../../../src/http2/hpack-error';
import { huffmanDecode, huffmanEncode } from '../../../src/http2/huffman';

/**
 * HPACK against the real thing: node:http2's client (nghttp2's encoder) sends requests to a bare
 * TCP server that only collects header blocks, and one decoder per connection must reproduce every
 * field. Hand-built blocks cover the RFC 7541 examples and every decoding error.
 */

const PREFACE_BYTES = 24;
const SETTINGS_HEADER_TABLE_SIZE = 0x1;

interface HeaderBlock {
  readonly streamId: number;
  readonly block: Buffer;
}

/**
 * Speaks just enough HTTP/2 to collect a client's request header blocks in wire order: answers
 * the client's SETTINGS with its own and an ACK, joins HEADERS and CONTINUATION fragments, and
 * never answers a request.
 */
class HeaderBlockCollector {
  readonly blocks: HeaderBlock[] = [];
  continuationFrames = 0;
  connections = 0;
  private readonly server = net.createServer((socket) => this.accept(socket));
  private readonly sockets = new Set<net.Socket>();
  private waiter: { count: number; resolve: () => void } | undefined;

  /** `settings`: the parameters of the server's SETTINGS frame, as [identifier, value] pairs. */
  constructor(private readonly settings: ReadonlyArray<readonly [number, number]> = []) {}

  async listen(): Promise<number> {
    this.server.listen(0, '127.0.0.1');
    await once(this.server, 'listening');
    return (this.server.address() as net.AddressInfo).port;
  }

  /** Resolves once `count` header blocks have arrived. */
  waitForBlocks(count: number): Promise<void> {
    if (this.blocks.length >= count) return Promise.resolve();
    return new Promise((resolve) => {
      this.waiter = { count, resolve };
    });
  }

  async close(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(socket: net.Socket): void {
    this.connections++;
    this.sockets.add(socket);
    socket.on('close', () => this.sockets.delete(socket));
    socket.on('error', () => undefined);
    let preface = Buffer.alloc(0);
    let pending: { streamId: number; fragments: Buffer[] } | undefined;
    const reader = new FrameReader((type, flags, streamId, payload) => {
      if (type === FrameType.SETTINGS && (flags & Flag.ACK) === 0) {
        const params = Buffer.alloc(6 * this.settings.length);
        this.settings.forEach(([id, value], i) => {
          params.writeUInt16BE(id, 6 * i);
          params.writeUInt32BE(value, 6 * i + 2);
        });
        socket.write(Buffer.concat([frame(FrameType.SETTINGS, 0, 0, params), frame(FrameType.SETTINGS, Flag.ACK, 0, Buffer.alloc(0))]));
      } else if (type === FrameType.HEADERS) {
        let start = 0;
        let end = payload.length;
        if (flags & Flag.PADDED) {
          end -= payload[0];
          start = 1;
        }
        if (flags & Flag.PRIORITY) start += 5;
        pending = { streamId, fragments: [payload.subarray(start, end)] };
      } else if (type === FrameType.CONTINUATION && pending !== undefined) {
        this.continuationFrames++;
        pending.fragments.push(payload);
      } else {
        return;
      }
      if (flags & Flag.END_HEADERS && pending !== undefined) {
        this.blocks.push({ streamId: pending.streamId, block: Buffer.concat(pending.fragments) });
        pending = undefined;
        if (this.waiter !== undefined && this.blocks.length >= this.waiter.count) this.waiter.resolve();
      }
    });
    socket.on('data', (chunk: Buffer) => {
      if (preface.length < PREFACE_BYTES) {
        preface = Buffer.concat([preface, chunk]);
        if (preface.length < PREFACE_BYTES) return;
        chunk = preface.subarray(PREFACE_BYTES);
      }
      reader.push(chunk);
    });
  }
}

/**
 * A node:http2 client on `port`. Requests made before it connects are queued; it may have them all
 * in flight, as the collector never limits concurrent streams.
 */
function connect(port: number): http2.ClientHttp2Session {
  const client = http2.connect(`http://127.0.0.1:${port}`, { peerMaxConcurrentStreams: 10_000 });
  client.on('error', () => undefined);
  return client;
}

/** Fires a request that will never be answered; destroying the session later cancels it quietly. */
function fire(client: http2.ClientHttp2Session, headers: http2.OutgoingHttpHeaders): void {
  const request = client.request(headers, { endStream: true });
  request.on('error', () => undefined);
}

async function destroy(client: http2.ClientHttp2Session): Promise<void> {
  const closed = once(client, 'close');
  client.destroy();
  await closed;
}

// Field values are octets: HTAB, visible ASCII and space, and obs-text (0x80-0xff).
const valueChar = fc
  .oneof(
    { weight: 12, arbitrary: fc.integer({ min: 0x20, max: 0x7e }) },
    { weight: 1, arbitrary: fc.constant(0x09) },
    { weight: 3, arbitrary: fc.integer({ min: 0x80, max: 0xff }) },
  )
  .map((c) => String.fromCharCode(c));
// Long values need multi-octet length integers; mixed with obs-text some are sent raw, some Huffman-coded.
const fieldValue = fc.oneof(
  { weight: 6, arbitrary: fc.string({ unit: valueChar, maxLength: 30 }) },
  { weight: 1, arbitrary: fc.string({ unit: valueChar, minLength: 127, maxLength: 600 }) },
);
const extensionName = fc.stringMatching(/^x-[a-z0-9][a-z0-9-]{0,24}$/);
// Static-table names; nghttp2 never indexes authorization, so it also brings never-indexed literals.
const knownName = fc.constantFrom('user-agent', 'accept', 'content-type', 'authorization', 'grpc-timeout', 'cache-control');
const fieldName = fc.oneof({ weight: 3, arbitrary: extensionName }, { weight: 1, arbitrary: knownName });

type Field = readonly [string, string];

interface SentRequest {
  readonly headers: http2.OutgoingHttpHeaders;
  /** The fields as node puts them on the wire after its pseudo-headers. */
  readonly fields: string[];
}

/**
 * Node takes headers as an object: repeats of a name become an array (allowed for extension
 * names only, node refuses them for single-value headers), sent consecutively where the name first appeared.
 */
function toRequest(fields: readonly Field[], sensitive: boolean): SentRequest {
  const grouped = new Map<string, string[]>();
  for (const [name, value] of fields) {
    const values = grouped.get(name);
    if (values === undefined) grouped.set(name, [value]);
    else if (name.startsWith('x-')) values.push(value);
  }
  const headers: http2.OutgoingHttpHeaders = {};
  const flat: string[] = [];
  for (const [name, values] of grouped) {
    headers[name] = values.length === 1 ? values[0] : values;
    for (const value of values) flat.push(name, value);
  }
  // Marked sensitive, nghttp2 sends the field as a never-indexed literal.
  if (sensitive && grouped.size > 0) (headers as Record<symbol, unknown>)[http2.sensitiveHeaders] = [grouped.keys().next().value];
  return { headers, fields: flat };
}

/** 300 requests from a pool of fields repeated often enough to fill and churn a 4 KiB table. */
function randomRequests(seed: number): SentRequest[] {
  const [pool] = fc.sample(fc.array(fc.tuple(fieldName, fieldValue), { minLength: 60, maxLength: 60 }), { seed, numRuns: 1 });
  const poolNames = pool.map(([name]) => name);
  const requestFields = fc.array(
    fc.oneof(
      { weight: 4, arbitrary: fc.constantFrom(...pool) },
      { weight: 2, arbitrary: fc.tuple(fc.constantFrom(...poolNames), fieldValue) },
      { weight: 1, arbitrary: fc.tuple(fieldName, fieldValue) },
    ),
    { maxLength: 14 },
  );
  const [sampled] = fc.sample(fc.array(requestFields, { minLength: 300, maxLength: 300 }), { seed: seed + 1, numRuns: 1 });
  const lists: Field[][] = sampled;
  // Two blocks larger than a 16 KiB frame, so they arrive as HEADERS + CONTINUATION.
  const [huge] = fc.sample(fc.array(fc.string({ unit: valueChar, minLength: 5000, maxLength: 5000 }), { minLength: 8, maxLength: 8 }), {
    seed: seed + 2,
    numRuns: 1,
  });
  lists[100] = huge.slice(0, 4).map((value, i): Field => [`x-huge-${i}`, value]);
  lists[200] = huge.slice(4).map((value, i): Field => [`x-huge-${i}`, value]);
  return lists.map((fields, i) => toRequest(fields, i % 7 === 3));
}

/** Decodes the blocks in wire order with one decoder and lines each up with the request of its stream. */
function decodeAll(blocks: readonly HeaderBlock[], requests: readonly SentRequest[], authority: string): { decoded: string[][]; expected: string[][] } {
  const decoder = new HpackDecoder({ maxTableSize: 4096, maxHeaderListSize: 1 << 20 });
  const decoded: string[][] = [];
  const expected: string[][] = [];
  for (const { streamId, block } of blocks) {
    decoded.push(decoder.decode(block) ?? ['<header list too large>']);
    const request = requests[(streamId - 1) / 2];
    expected.push([':method', 'GET', ':authority', authority, ':scheme', 'http', ':path', '/', ...request.fields]);
  }
  return { decoded, expected };
}

describe('HpackDecoder against nghttp2 (node:http2 client)', () => {
  let collector: HeaderBlockCollector | undefined;
  let client: http2.ClientHttp2Session | undefined;

  afterEach(async () => {
    if (client !== undefined) await destroy(client);
    if (collector !== undefined) await collector.close();
    client = undefined;
    collector = undefined;
  });

  it('decodes 300 random requests on one connection exactly as they were sent', async () => {
    collector = new HeaderBlockCollector();
    const port = await collector.listen();
    client = connect(port);
    const requests = randomRequests(7541);
    for (const request of requests) fire(client, request.headers);
    await collector.waitForBlocks(requests.length);

    const { decoded, expected } = decodeAll(collector.blocks, requests, `127.0.0.1:${port}`);
    expect(decoded).toEqual(expected);
    expect(collector.connections).toBe(1);
    expect(collector.continuationFrames).toBeGreaterThan(0);
  });

  it('follows the size updates a real encoder sends after a smaller SETTINGS_HEADER_TABLE_SIZE', async () => {
    collector = new HeaderBlockCollector([[SETTINGS_HEADER_TABLE_SIZE, 256]]);
    const port = await collector.listen();
    client = connect(port);
    const requests = randomRequests(1337);
    const settled = once(client, 'remoteSettings');
    for (const request of requests.slice(0, 150)) fire(client, request.headers);
    await settled;
    for (const request of requests.slice(150)) fire(client, request.headers);
    await collector.waitForBlocks(requests.length);

    const { decoded, expected } = decodeAll(collector.blocks, requests, `127.0.0.1:${port}`);
    expect(decoded).toEqual(expected);
    // 001xxxxx opening a block: nghttp2 announced its smaller table.
    expect(collector.blocks.some(({ block }) => (block[0] & 0xe0) === 0x20)).toBe(true);
  });

  it('agrees with nghttp2 on every static table entry a client can send', async () => {
    collector = new HeaderBlockCollector();
    const port = await collector.listen();
    client = connect(port);
    // Index 1..61 as this decoder reads them.
    const entries = Array.from({ length: 61 }, (_, i) => new HpackDecoder({ maxTableSize: 0, maxHeaderListSize: 1 << 20 }).decode(Buffer.from([0x81 + i]))!);
    const checked: Array<{ index: number; name: string; value: string }> = [];
    entries.forEach(([name, value], i) => {
      const index = i + 1;
      // A request cannot carry :status, and node refuses connection-specific headers.
      if (name === ':status' || name === 'transfer-encoding') return;
      const pseudo: http2.OutgoingHttpHeaders = { ':authority': 'a.test', ':method': 'GET', ':scheme': 'http', ':path': '/' };
      // The field under test goes last, so its representation ends the block.
      delete pseudo[name];
      fire(client!, { ...pseudo, [name]: value });
      checked.push({ index, name, value });
    });
    await collector.waitForBlocks(checked.length);

    const decoder = new HpackDecoder({ maxTableSize: 4096, maxHeaderListSize: 1 << 20 });
    const seen = collector.blocks.map(({ streamId, block }) => {
      const { index, name } = checked[(streamId - 1) / 2];
      const fields = decoder.decode(block)!;
      // nghttp2 never indexes authorization and short cookies: a never-indexed literal naming the entry.
      const tail = name === 'authorization' || name === 'cookie' ? [0x1f, index - 15, 0x00] : [0x80 | index];
      return { index, endsWithIndex: block.subarray(block.length - tail.length).equals(Buffer.from(tail)), last: fields.slice(-2) };
    });
    expect(seen).toEqual(checked.map(({ index, name, value }) => ({ index, endsWithIndex: true, last: [name, value] })));
    expect(checked).toHaveLength(53);
  });
});

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s+/g, ''), 'hex');
const decoderOf = (maxTableSize = 4096, maxHeaderListSize = 1 << 20): HpackDecoder => new HpackDecoder({ maxTableSize, maxHeaderListSize });

/** An HPACK integer (RFC 7541 5.1) with an N-bit prefix under `pattern`, written independently of the encoder. */
function integer(pattern: number, prefixBits: number, value: number): number[] {
  const max = 2 ** prefixBits - 1;
  if (value < max) return [pattern | value];
  const out = [pattern | max];
  let rest = value - max;
  while (rest >= 128) {
    out.push((rest % 128) | 0x80);
    rest = Math.floor(rest / 128);
  }
  out.push(rest);
  return out;
}

/** A raw (not Huffman-coded) string literal. */
const raw = (s: string): number[] => [...integer(0, 7, s.length), ...Buffer.from(s, 'latin1')];
/** Literal with incremental indexing, new name. */
const indexedLiteral = (name: string, value: string): number[] => [0x40, ...raw(name), ...raw(value)];

describe('HpackDecoder on hand-built blocks', () => {
  it('adds a literal with incremental indexing and then serves it as index 62 (RFC 7541 C.2.1)', () => {
    const decoder = decoderOf();
    expect(decoder.decode(hex('400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572'))).toEqual(['custom-key', 'custom-header']);
    expect(decoder.decode(Buffer.from([0xbe]))).toEqual(['custom-key', 'custom-header']);
  });

  it('decodes a literal without indexing and a never-indexed literal without adding them to the table (C.2.2, C.2.3)', () => {
    const decoder = decoderOf();
    expect(decoder.decode(hex('040c 2f73 616d 706c 652f 7061 7468'))).toEqual([':path', '/sample/path']);
    expect(decoder.decode(hex('1008 7061 7373 776f 7264 0673 6563 7265 74'))).toEqual(['password', 'secret']);
    expect(() => decoder.decode(Buffer.from([0xbe]))).toThrow(HpackError);
  });

  it('decodes an indexed static field (C.2.4)', () => {
    expect(decoderOf().decode(Buffer.from([0x82]))).toEqual([':method', 'GET']);
  });

  it.each([
    [
      'without Huffman (C.3)',
      [
        '8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d',
        '8286 84be 5808 6e6f 2d63 6163 6865',
        '8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65',
      ],
    ],
    [
      'with Huffman (C.4)',
      ['8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff', '8286 84be 5886 a8eb 1064 9cbf', '8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf'],
    ],
  ])('decodes the three requests of RFC 7541 %s on one connection', (_, blocks) => {
    const decoder = decoderOf();
    const base = [':method', 'GET', ':scheme', 'http', ':path', '/', ':authority', 'www.example.com'];
    expect(decoder.decode(hex(blocks[0]))).toEqual(base);
    expect(decoder.decode(hex(blocks[1]))).toEqual([...base, 'cache-control', 'no-cache']);
    expect(decoder.decode(hex(blocks[2]))).toEqual([
      ':method',
      'GET',
      ':scheme',
      'https',
      ':path',
      '/index.html',
      ':authority',
      'www.example.com',
      'custom-key',
      'custom-value',
    ]);
  });

  it('hands every block a list of its own: a shorter block decoded next leaves the longer list as it was', () => {
    const decoder = decoderOf();
    const longer = decoder.decode(hex('8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d'))!;
    const shorter = decoder.decode(Buffer.from([0x82]))!;
    expect(longer).toEqual([':method', 'GET', ':scheme', 'http', ':path', '/', ':authority', 'www.example.com']);
    expect(shorter).toEqual([':method', 'GET']);
  });

  it('evicts the oldest entries when the table is full', () => {
    // Each entry is 32 + 1 + 17 = 50 octets: two fit in 100.
    const decoder = decoderOf(100);
    const value = (c: string): string => c.repeat(17);
    decoder.decode(Buffer.from([...indexedLiteral('a', value('1')), ...indexedLiteral('b', value('2'))]));
    expect(decoder.decode(Buffer.from([0xbe, 0xbf]))).toEqual(['b', value('2'), 'a', value('1')]);
    decoder.decode(Buffer.from(indexedLiteral('c', value('3'))));
    expect(decoder.decode(Buffer.from([0xbe, 0xbf]))).toEqual(['c', value('3'), 'b', value('2')]);
    expect(() => decoder.decode(Buffer.from([0xc0]))).toThrow(HpackError);
  });

  it('keeps a new entry whose name refers to the entry it evicts', () => {
    const decoder = decoderOf(100);
    decoder.decode(Buffer.from(indexedLiteral('a', 'x'.repeat(40))));
    // 01 + index 62: name from the entry that must go to make room.
    decoder.decode(Buffer.from([0x40 | 62, ...raw('y'.repeat(40))]));
    expect(decoder.decode(Buffer.from([0xbe]))).toEqual(['a', 'y'.repeat(40)]);
    expect(() => decoder.decode(Buffer.from([0xbf]))).toThrow(HpackError);
  });

  it('empties the table when an entry larger than the whole table is added', () => {
    const decoder = decoderOf(100);
    decoder.decode(Buffer.from(indexedLiteral('a', 'b')));
    expect(decoder.decode(Buffer.from(indexedLiteral('big', 'v'.repeat(70))))).toEqual(['big', 'v'.repeat(70)]);
    expect(() => decoder.decode(Buffer.from([0xbe]))).toThrow(HpackError);
  });

  it('keeps hundreds of entries in order as the table grows and wraps', () => {
    const decoder = decoderOf(64 * 1024);
    for (let i = 0; i < 1000; i++) decoder.decode(Buffer.from(indexedLiteral(`n${i}`, `v${i}`)));
    // 1000 entries of at most 40 octets all fit in 64 KiB.
    expect(decoder.decode(Buffer.from([0xbe]))).toEqual(['n999', 'v999']);
    expect(decoder.decode(Buffer.from(integer(0x80, 7, 62 + 500)))).toEqual(['n499', 'v499']);
  });

  it('empties the table on a size update to 0, after which index 62 is an error', () => {
    const decoder = decoderOf();
    decoder.decode(Buffer.from(indexedLiteral('k', 'v')));
    expect(decoder.decode(Buffer.from([0x20]))).toEqual([]);
    expect(() => decoder.decode(Buffer.from([0xbe]))).toThrow(HpackError);
  });

  it('accepts size updates at the start of a block and uses the new size', () => {
    const decoder = decoderOf(4096);
    // Two updates (RFC 7541 4.2), then a field: the table is 50 octets, enough for one small entry.
    const block = [0x20, ...integer(0x20, 5, 50), ...indexedLiteral('k', '1'), ...indexedLiteral('k', '2')];
    expect(decoder.decode(Buffer.from(block))).toEqual(['k', '1', 'k', '2']);
    expect(decoder.decode(Buffer.from([0xbe]))).toEqual(['k', '2']);
    expect(() => decoder.decode(Buffer.from([0xbf]))).toThrow(HpackError);
  });

  it('reads a multi-octet integer (RFC 7541 C.1.2: 1337 with a 5-bit prefix)', () => {
    expect(integer(0x20, 5, 1337)).toEqual([0x3f, 0x9a, 0x0a]);
    expect(decoderOf(1337).decode(Buffer.from([0x3f, 0x9a, 0x0a]))).toEqual([]);
    expect(() => decoderOf(1336).decode(Buffer.from([0x3f, 0x9a, 0x0a]))).toThrow(/exceeds/);
  });

  it('accepts integers up to 2^31-1', () => {
    expect(decoderOf(2 ** 31 - 1).decode(Buffer.from(integer(0x20, 5, 2 ** 31 - 1)))).toEqual([]);
  });

  it.each([
    ['index 0', [0x80], /index 0/],
    ['an index past the empty dynamic table', [0xbe], /out of range/],
    ['a literal name index past the table', [0x0f, 0x30, 0x00], /out of range/],
    ['an integer above 2^31-1', integer(0x20, 5, 2 ** 31), /overflow/],
    ['an integer with more than 5 continuation octets', [0x3f, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00], /too long/],
    ['an integer cut off by the end of the block', [0x3f, 0x80], /integer runs past/],
    ['a string running past the end of the block', [0x00, 0x05, 0x61, 0x62], /runs past/],
    ['a field missing its value', [0x00, 0x01, 0x61], /missing/],
    ['a Huffman string whose padding is not all ones', [0x00, 0x81, 0x18, 0x00], /not all ones/],
    ['a Huffman string with padding longer than 7 bits', [0x00, 0x82, 0x1f, 0xff, 0x00], /longer than 7 bits/],
    ['a Huffman string containing EOS', [0x00, 0x84, 0xff, 0xff, 0xff, 0xff, 0x00], /EOS/],
    ['a size update larger than the advertised table size', integer(0x20, 5, 4097), /exceeds/],
    ['a size update after a header field', [0x82, 0x20], /after a header field/],
  ])('throws HpackError on %s', (_, block, message) => {
    const attempt = (): unknown => decoderOf(4096).decode(Buffer.from(block));
    expect(attempt).toThrow(HpackError);
    expect(attempt).toThrow(message);
  });

  it('returns undefined for a header list over the limit but keeps the table in step', () => {
    // 32 + 1 + 100 octets alone exceed the limit of 100.
    const decoder = decoderOf(4096, 100);
    const refused = [0x00, ...raw('b'), ...raw('v'.repeat(100)), ...indexedLiteral('k', 'kept')];
    expect(decoder.decode(Buffer.from(refused))).toBeUndefined();
    expect(decoder.decode(Buffer.from([0xbe]))).toEqual(['k', 'kept']);
  });

  it('counts 32 octets per field towards the header list size, accepting a list exactly at the limit', () => {
    // ':method' + 'GET' is 10 octets, 42 with the overhead.
    expect(decoderOf(4096, 84).decode(Buffer.from([0x82, 0x82]))).toEqual([':method', 'GET', ':method', 'GET']);
    expect(decoderOf(4096, 83).decode(Buffer.from([0x82, 0x82]))).toBeUndefined();
  });
});

describe('encodeHeaderBlock', () => {
  it('encodes :status 200 as the single octet 0x88', () => {
    expect([...encodeHeaderBlock([[':status', '200']])]).toEqual([0x88]);
  });

  it('uses the static name index for a known name and a new name otherwise, never indexing', () => {
    const block = encodeHeaderBlock([
      ['content-type', 'application/grpc'],
      ['grpc-status', '0'],
    ]);
    expect([...block]).toEqual([0x0f, 0x10, ...raw('application/grpc'), 0x00, ...raw('grpc-status'), ...raw('0')]);
  });

  it('writes lengths of 127 and more as multi-octet integers', () => {
    const value = 'm'.repeat(300);
    expect([...encodeHeaderBlock([['grpc-message', value]])]).toEqual([0x00, ...raw('grpc-message'), 0x7f, 0xad, 0x01, ...Buffer.from(value)]);
  });

  it('produces blocks that decode back to the same fields and leave the dynamic table empty', () => {
    const staticNames = [':status', ':path', 'content-type', 'accept-encoding', 'www-authenticate', 'allow', 'date'];
    const name = fc.oneof(fc.constantFrom(...staticNames), fc.stringMatching(/^[a-z0-9-]{1,300}$/));
    const value = fc.oneof(
      fc.constantFrom('', '200', '404', '/', 'gzip, deflate'),
      fc.string({ unit: fc.integer({ min: 0, max: 255 }).map((c) => String.fromCharCode(c)), maxLength: 400 }),
    );
    fc.assert(
      fc.property(fc.array(fc.tuple(name, value), { maxLength: 20 }), (fields) => {
        const decoder = decoderOf(4096);
        expect(decoder.decode(encodeHeaderBlock(fields))).toEqual(fields.flat());
        expect(() => decoder.decode(Buffer.from([0xbe]))).toThrow(HpackError);
      }),
    );
  });
});

describe('Huffman code', () => {
  it.each([
    ['www.example.com', 'f1e3 c2e5 f23a 6ba0 ab90 f4ff'],
    ['no-cache', 'a8eb 1064 9cbf'],
    ['custom-key', '25a8 49e9 5ba9 7d7f'],
    ['custom-value', '25a8 49e9 5bb8 e8b4 bf'],
    ['', ''],
  ])('encodes %j as in RFC 7541 C.4', (text, encoded) => {
    expect(huffmanEncode(text).toString('hex')).toBe(hex(encoded).toString('hex'));
    expect(huffmanDecode(hex(encoded), 0, hex(encoded).length)).toBe(text);
  });

  it('decodes what it encodes for any latin1 string', () => {
    const anyOctet = fc.integer({ min: 0, max: 255 }).map((c) => String.fromCharCode(c));
    // Mostly short codes with the odd long one, as in real values, and uniformly random octets.
    const mostlyAscii = fc.oneof(
      { weight: 10, arbitrary: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)) },
      { weight: 1, arbitrary: anyOctet },
    );
    const latin1 = fc.oneof(fc.string({ unit: anyOctet, maxLength: 200 }), fc.string({ unit: mostlyAscii, maxLength: 300 }));
    fc.assert(
      fc.property(latin1, (s) => {
        const encoded = huffmanEncode(s);
        expect(huffmanDecode(encoded, 0, encoded.length)).toBe(s);
      }),
      { numRuns: 1000 },
    );
  });

  it('decodes only the given range of a larger buffer', () => {
    const encoded = huffmanEncode('grpc-timeout');
    const framed = Buffer.concat([Buffer.from([0xaa, 0x55]), encoded, Buffer.from([0x00])]);
    expect(huffmanDecode(framed, 2, 2 + encoded.length)).toBe('grpc-timeout');
  });

  it('rejects padding that is not all ones', () => {
    // 'a' is 00011; 000 after it is no prefix of EOS.
    expect(() => huffmanDecode(Buffer.from([0x18]), 0, 1)).toThrow(/not all ones/);
    expect(huffmanDecode(Buffer.from([0x1f]), 0, 1)).toBe('a');
  });

  it('rejects padding of 8 bits or more', () => {
    expect(() => huffmanDecode(Buffer.from([0x1f, 0xff]), 0, 2)).toThrow(HpackError);
    expect(() => huffmanDecode(Buffer.from([0xff]), 0, 1)).toThrow(/longer than 7 bits/);
  });

  it('rejects the EOS symbol, even followed by valid padding', () => {
    expect(() => huffmanDecode(Buffer.from([0xff, 0xff, 0xff, 0xff]), 0, 4)).toThrow(/EOS/);
    // EOS (30 ones) then 'a' (00011) and 5 bits of padding.
    expect(() => huffmanDecode(Buffer.from([0xff, 0xff, 0xff, 0xfc, 0x7f]), 0, 5)).toThrow(HpackError);
  });

  it('refuses to encode a char above 0xff', () => {
    expect(() => huffmanEncode('\u0100')).toThrow(RangeError);
  });
});

describe('HpackDecoder.lastBlockForbidden', () => {
  const lit = (text: string): Buffer => Buffer.concat([Buffer.from([text.length]), Buffer.from(text, 'latin1')]);
  const decoder = (): HpackDecoder => new HpackDecoder({ maxTableSize: 4096, maxHeaderListSize: 1 << 20 });

  it('is false for indexed fields and allowed literals, again when a literal repeats', () => {
    const d = decoder();
    const block = Buffer.concat([Buffer.from([0x83, 0x86, 0x04]), lit('/a/b'), Buffer.from([0x00]), lit('x-ok'), lit('fine')]);
    expect(d.decode(block)).toEqual([':method', 'POST', ':scheme', 'http', ':path', '/a/b', 'x-ok', 'fine']);
    expect(d.lastBlockForbidden).toBe(false);
    d.decode(block);
    expect(d.lastBlockForbidden).toBe(false);
  });

  it.each([
    ['an upper-case literal name', Buffer.concat([Buffer.from([0x00]), lit('X-Up'), lit('v')])],
    ['a colon inside a name', Buffer.concat([Buffer.from([0x00]), lit('x:y'), lit('v')])],
    ['CR LF in a value', Buffer.concat([Buffer.from([0x04]), lit('/a\r\nb')])],
    ['a leading space in a value', Buffer.concat([Buffer.from([0x00]), lit('x-v'), lit(' v')])],
  ])('is true for %s, and stays true when the same literal comes again', (_name, block) => {
    const d = decoder();
    d.decode(block);
    expect(d.lastBlockForbidden).toBe(true);
    d.decode(block);
    expect(d.lastBlockForbidden).toBe(true);
    d.decode(Buffer.from([0x83]));
    expect(d.lastBlockForbidden).toBe(false);
  });

  it('reuses each of several literals repeated in turn (:path and content-length on every request), each with its own verdict', () => {
    const d = decoder();
    // Without indexing, name by static index: :path (4), content-length (28 = 0x0f 0x0d), and a forbidden value.
    const path = (p: string): Buffer => Buffer.concat([Buffer.from([0x04]), lit(p)]);
    const length = (n: string): Buffer => Buffer.concat([Buffer.from([0x0f, 0x0d]), lit(n)]);
    const bad = Buffer.concat([Buffer.from([0x00]), lit('x-v'), lit('a\rb')]);
    for (let round = 0; round < 3; round++) {
      for (const p of ['/svc/A', '/svc/B']) {
        expect(d.decode(Buffer.concat([Buffer.from([0x83]), path(p), length('107')]))).toEqual([':method', 'POST', ':path', p, 'content-length', '107']);
        expect(d.lastBlockForbidden).toBe(false);
        expect(d.decode(Buffer.concat([path(p), bad]))).toEqual([':path', p, 'x-v', 'a\rb']);
        expect(d.lastBlockForbidden).toBe(true);
      }
    }
    // More distinct literals than are kept: each still decodes to itself.
    for (let i = 0; i < 40; i++) expect(d.decode(path(`/p/${i % 20}`))).toEqual([':path', `/p/${i % 20}`]);
    expect(d.lastBlockForbidden).toBe(false);
  });

  it('follows a forbidden field into the dynamic table: referencing the entry later is forbidden too', () => {
    const d = decoder();
    d.decode(Buffer.concat([Buffer.from([0x40]), lit('x-bad'), lit('a\nb')]));
    expect(d.lastBlockForbidden).toBe(true);
    expect(d.decode(Buffer.from([0x83, 0xbe]))).toEqual([':method', 'POST', 'x-bad', 'a\nb']);
    expect(d.lastBlockForbidden).toBe(true);
    d.decode(Buffer.concat([Buffer.from([0x40]), lit('x-good'), lit('ab')]));
    // 62 is now x-good, 63 x-bad.
    d.decode(Buffer.from([0xbe]));
    expect(d.lastBlockForbidden).toBe(false);
    d.decode(Buffer.from([0xbf]));
    expect(d.lastBlockForbidden).toBe(true);
  });
});
