import type { H2Stream } from '../../../src/http2/connection';
import { ErrorCode, Flag, frame, FrameType, Setting, wordFrame } from '../../../src/http2/frames';
import { encodeHeaderBlock } from '../../../src/http2/hpack';
import { H2Server } from '../../../src/http2/server';
import { Http2GrpcServer } from '../../../src/grpc/http2-server';
import { InvalidRequestError } from '../../../src/limiter/errors';
import type { RateLimitRequest, RateLimitResponse } from '../../../src/limiter/types';
import { silentLogger } from '../../../src/log';
import { HealthState } from '../../../src/service/health';
import { frameMessage } from '../../../src/wire/grpc-framing';
import { protoRoot } from '../../../src/wire/proto';
import { ECHO_PATH, EchoMethod } from '../../helpers/echo-streaming';
import { dataFrame, headersFrame, isType, RawClient } from '../../helpers/h2-raw-client';
import { TRANSPORT_DEFAULTS } from '../../helpers/transport-defaults';

/**
 * How every answer ends, read as raw frames: on a HEADERS frame that carries fields (trailers, or a
 * trailers-only answer) or on a DATA frame with END_STREAM, and never on a header block without
 * fields. An empty block is legal HPACK, but clients on golang.org/x/net before September 2021
 * (h2spec 2.6.0 built at its pinned dependencies among them) reset a stream whose HEADERS frame
 * carries an empty fragment with PROTOCOL_ERROR, so the HTTP/2 layer sends none.
 */

const pause = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** A frame as the assertions read it: its type, END_STREAM, and its decoded fields or its bytes. */
type Seen = { readonly headers: string[]; readonly end: boolean } | { readonly data: string; readonly end: boolean } | { readonly rst: ErrorCode };

/**
 * Waits until the server has ended stream `id` (END_STREAM, or RST_STREAM) and returns its frames.
 * Whatever the stream, no frame of a header block on the connection is empty: the rule of the old
 * x/net framer (a HEADERS fragment of zero octets once padding and priority are taken off; this
 * server sets neither).
 */
async function ended(client: RawClient, id: number): Promise<Seen[]> {
  const last = await client.waitFor(
    (f) =>
      f.streamId === id &&
      (f.type === FrameType.RST_STREAM || ((f.type === FrameType.HEADERS || f.type === FrameType.DATA) && (f.flags & Flag.END_STREAM) !== 0)),
    3000,
  );
  expect(last).toBeDefined();
  const blocks = client.frames.filter((f) => f.type === FrameType.HEADERS || f.type === FrameType.CONTINUATION);
  expect(blocks.filter((f) => f.payload.length === 0)).toEqual([]);
  expect(blocks.filter((f) => (f.flags & (Flag.PADDED | Flag.PRIORITY)) !== 0)).toEqual([]);
  return client.frames
    .filter((f) => f.streamId === id && f.type !== FrameType.WINDOW_UPDATE)
    .map((f): Seen => {
      const end = (f.flags & Flag.END_STREAM) !== 0;
      if (f.type === FrameType.HEADERS) return { headers: client.decode(f), end };
      if (f.type === FrameType.DATA) return { data: f.payload.toString('latin1'), end };
      return { rst: f.payload.readUInt32BE(0) };
    });
}

const request = (path: string, extra: ReadonlyArray<readonly [string, string]> = [['content-type', 'application/grpc']], method = 'POST'): Buffer =>
  encodeHeaderBlock([[':method', method], [':scheme', 'http'], [':path', path], [':authority', 'localhost'], ...extra]);

const RLS_PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';
const CHECK_PATH = '/grpc.health.v1.Health/Check';
const WATCH_PATH = '/grpc.health.v1.Health/Watch';
const RequestType = protoRoot().lookupType('envoy.service.ratelimit.v3.RateLimitRequest');
const ResponseType = protoRoot().lookupType('envoy.service.ratelimit.v3.RateLimitResponse');
const HealthRequest = protoRoot().lookupType('grpc.health.v1.HealthCheckRequest');
const HealthResponse = protoRoot().lookupType('grpc.health.v1.HealthCheckResponse');
const rlsMessage = (domain: string): Buffer => frameMessage(RequestType.encode({ domain, descriptors: [{ entries: [{ key: 'k', value: 'v' }] }] }).finish());
const healthMessage = (service: string): Buffer => frameMessage(HealthRequest.encode({ service }).finish());
const latin1 = (message: Uint8Array): string => Buffer.from(message).toString('latin1');

const OK: RateLimitResponse = { overallCode: 'OK', statuses: [{ code: 'OK', limitRemaining: 7 }], responseHeaders: [] };
const RESPONSE_HEADERS = [':status', '200', 'content-type', 'application/grpc'];
const trailersOnly = (code: number, message: string): string[] => [
  ...RESPONSE_HEADERS,
  'grpc-accept-encoding',
  'identity',
  'grpc-status',
  String(code),
  'grpc-message',
  message,
];
const METHOD_NOT_ALLOWED = [':status', '405', 'allow', 'POST', 'content-type', 'text/plain'];
const METHOD_NOT_ALLOWED_TEXT = 'gRPC calls are POST requests\n';
const UNSUPPORTED_MEDIA_TYPE = [':status', '415', 'content-type', 'text/plain'];
const UNSUPPORTED_MEDIA_TYPE_TEXT = 'gRPC calls have content-type application/grpc\n';

interface ServiceCase {
  readonly does: string;
  readonly send: (client: RawClient) => void;
  readonly expect: Seen[];
}

// Every answer the gRPC service gives on its own HTTP/2 layer, each on a fresh connection, stream 1.
const SERVICE_CASES: ServiceCase[] = [
  {
    does: "a GET (h2spec's own request): 405, its text ending the stream on DATA",
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS | Flag.END_STREAM, request('/', [], 'GET'))),
    expect: [
      { headers: METHOD_NOT_ALLOWED, end: false },
      { data: METHOD_NOT_ALLOWED_TEXT, end: true },
    ],
  },
  {
    does: 'a GET answered before its request ended: 405 ends on DATA all the same',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS, request('/', [], 'GET'))),
    expect: [
      { headers: METHOD_NOT_ALLOWED, end: false },
      { data: METHOD_NOT_ALLOWED_TEXT, end: true },
    ],
  },
  {
    does: 'a POST of JSON: 415, its text ending the stream on DATA',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS, request(RLS_PATH, [['content-type', 'application/json']])), dataFrame(1, Buffer.from('{}'))),
    expect: [
      { headers: UNSUPPORTED_MEDIA_TYPE, end: false },
      { data: UNSUPPORTED_MEDIA_TYPE_TEXT, end: true },
    ],
  },
  {
    does: 'a POST without a content-type: 415',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS | Flag.END_STREAM, request(RLS_PATH, []))),
    expect: [
      { headers: UNSUPPORTED_MEDIA_TYPE, end: false },
      { data: UNSUPPORTED_MEDIA_TYPE_TEXT, end: true },
    ],
  },
  {
    does: 'an unknown method: trailers-only UNIMPLEMENTED',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS | Flag.END_STREAM, request('/no.Such/Method'))),
    expect: [{ headers: trailersOnly(12, 'unknown method /no.Such/Method'), end: true }],
  },
  {
    does: 'ShouldRateLimit: headers, the message, OK trailers',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS, request(RLS_PATH)), dataFrame(1, rlsMessage('d'))),
    expect: [
      { headers: RESPONSE_HEADERS, end: false },
      { data: latin1(frameMessage(ResponseType.encode({ overallCode: 1, statuses: [{ code: 1, limitRemaining: 7 }] }).finish())), end: false },
      { headers: ['grpc-status', '0'], end: true },
    ],
  },
  {
    does: 'ShouldRateLimit refused by the limiter: trailers-only INVALID_ARGUMENT',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS, request(RLS_PATH)), dataFrame(1, rlsMessage('bad'))),
    expect: [{ headers: trailersOnly(3, 'bad domain'), end: true }],
  },
  {
    does: 'ShouldRateLimit decided past its grpc-timeout: trailers-only DEADLINE_EXCEEDED',
    send: (c) =>
      c.send(
        headersFrame(
          1,
          Flag.END_HEADERS,
          request(RLS_PATH, [
            ['content-type', 'application/grpc'],
            ['grpc-timeout', '1m'],
          ]),
        ),
        dataFrame(1, rlsMessage('slow')),
      ),
    expect: [{ headers: trailersOnly(4, 'deadline exceeded'), end: true }],
  },
  {
    does: 'a message over the size limit, refused from its prefix: trailers-only RESOURCE_EXHAUSTED',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS, request(RLS_PATH)), dataFrame(1, Buffer.from([0, 0, 0, 0x10, 0]), 0)),
    expect: [{ headers: trailersOnly(8, 'received message larger than max (4096 vs. 1024)'), end: true }],
  },
  {
    does: 'a truncated message: trailers-only INTERNAL',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS, request(RLS_PATH)), dataFrame(1, Buffer.from([0, 0, 0]))),
    expect: [{ headers: trailersOnly(13, 'truncated message prefix'), end: true }],
  },
  {
    does: 'health Check: headers, the message, OK trailers',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS, request(CHECK_PATH)), dataFrame(1, healthMessage(''))),
    expect: [
      { headers: RESPONSE_HEADERS, end: false },
      { data: latin1(frameMessage(HealthResponse.encode({ status: 1 }).finish())), end: false },
      { headers: ['grpc-status', '0'], end: true },
    ],
  },
  {
    does: 'health Check of an unknown service: trailers-only NOT_FOUND',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS, request(CHECK_PATH)), dataFrame(1, healthMessage('nope'))),
    expect: [{ headers: trailersOnly(5, 'unknown service "nope"'), end: true }],
  },
  {
    does: 'a streaming call half-closed by its client: headers, the echo, OK trailers',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS, request(ECHO_PATH)), dataFrame(1, frameMessage(Buffer.from('hi')))),
    expect: [
      { headers: RESPONSE_HEADERS, end: false },
      { data: latin1(frameMessage(Buffer.from('hi'))), end: false },
      { headers: ['grpc-status', '0'], end: true },
    ],
  },
  {
    does: 'a streaming call ended by its handler after a message: trailers with the status',
    send: (c) =>
      c.send(
        headersFrame(1, Flag.END_HEADERS, request(ECHO_PATH)),
        dataFrame(1, Buffer.concat([frameMessage(Buffer.from('hi')), frameMessage(Buffer.from('end 9'))]), 0),
      ),
    expect: [
      { headers: RESPONSE_HEADERS, end: false },
      { data: latin1(frameMessage(Buffer.from('hi'))), end: false },
      { headers: ['grpc-status', '9', 'grpc-message', 'ended on request'], end: true },
    ],
  },
  {
    does: 'a streaming call ended by its handler before any message: trailers-only',
    send: (c) => c.send(headersFrame(1, Flag.END_HEADERS, request(ECHO_PATH)), dataFrame(1, frameMessage(Buffer.from('end 9')), 0)),
    expect: [{ headers: trailersOnly(9, 'ended on request'), end: true }],
  },
];

describe('no header block without fields: every answer of the gRPC service on its own HTTP/2 layer', () => {
  let server: Http2GrpcServer;
  let port: number;
  const health = new HealthState();

  beforeAll(async () => {
    health.set('config', true);
    server = new Http2GrpcServer({
      limiter: {
        shouldRateLimit: async (req: RateLimitRequest) => {
          if (req.domain === 'bad') throw new InvalidRequestError('bad domain');
          if (req.domain === 'slow') await pause(30);
          return OK;
        },
      },
      health,
      settings: { grpcHost: '127.0.0.1', grpcPort: 0, grpcMaxMessageBytes: 1024, grpcTls: { enabled: false }, ...TRANSPORT_DEFAULTS },
      logger: silentLogger(),
      streamingMethods: [new EchoMethod()],
    });
    port = await server.start();
  });

  afterAll(() => server.stop(100));

  it.each(SERVICE_CASES.map((c) => [c.does, c] as const))('%s', async (_does, c) => {
    const client = await RawClient.connect(port);
    try {
      c.send(client);
      expect(await ended(client, 1)).toEqual(c.expect);
      expect(client.goaway()).toBeUndefined();
    } finally {
      client.close();
    }
  });

  it("ends a 405 held back by the client's window on its last DATA frame, once the window lets the text out", async () => {
    const client = await RawClient.connect(port, [[Setting.INITIAL_WINDOW_SIZE, 0]]);
    try {
      client.send(headersFrame(1, Flag.END_HEADERS | Flag.END_STREAM, request('/', [], 'GET')));
      await client.waitFor(isType(FrameType.HEADERS, 1));
      // 29 octets of text through a window opened 10 at a time: 10, 10, 9, END_STREAM on the last.
      for (let sent = 1; sent <= 3; sent++) {
        client.send(wordFrame(FrameType.WINDOW_UPDATE, 1, 10));
        await client.waitFor(() => client.frames.filter(isType(FrameType.DATA, 1)).length === sent);
      }
      expect(await ended(client, 1)).toEqual([
        { headers: METHOD_NOT_ALLOWED, end: false },
        { data: METHOD_NOT_ALLOWED_TEXT.slice(0, 10), end: false },
        { data: METHOD_NOT_ALLOWED_TEXT.slice(10, 20), end: false },
        { data: METHOD_NOT_ALLOWED_TEXT.slice(20), end: true },
      ]);
      // The stream is over: a further window opens nothing more.
      client.send(wordFrame(FrameType.WINDOW_UPDATE, 1, 100));
      client.send(frame(FrameType.PING, 0, 0, Buffer.from('stillok!')));
      await client.waitFor((f) => f.type === FrameType.PING && (f.flags & Flag.ACK) !== 0);
      expect(client.frames.filter((f) => f.streamId === 1)).toHaveLength(4);
    } finally {
      client.close();
    }
  });

  it('ends a health Watch cut by shutdown with OK trailers', async () => {
    const client = await RawClient.connect(port);
    try {
      client.send(headersFrame(1, Flag.END_HEADERS, request(WATCH_PATH)), dataFrame(1, healthMessage('')));
      await client.waitFor(isType(FrameType.DATA, 1));
      await server.stop(100);
      expect(await ended(client, 1)).toEqual([
        { headers: RESPONSE_HEADERS, end: false },
        { data: latin1(frameMessage(HealthResponse.encode({ status: 1 }).finish())), end: false },
        { data: latin1(frameMessage(HealthResponse.encode({ status: 2 }).finish())), end: false },
        { headers: ['grpc-status', '0'], end: true },
      ]);
    } finally {
      client.close();
    }
  });
});

describe('no header block without fields: the HTTP/2 layer itself', () => {
  const BODY = 'the answer';
  let server: H2Server;
  let port: number;
  const errors: string[] = [];

  // What each path's handler does once the request has ended.
  const HANDLERS: Record<string, (stream: H2Stream) => void> = {
    '/end-without-trailers': (s) => {
      s.respond(encodeHeaderBlock([[':status', '200']]), false);
      s.write(Buffer.from(BODY));
      s.end();
    },
    '/end-with-an-empty-block': (s) => {
      s.respond(encodeHeaderBlock([[':status', '200']]), false);
      s.write(Buffer.from(BODY));
      s.end(encodeHeaderBlock([]));
    },
    '/write-and-end': (s) => {
      s.respond(encodeHeaderBlock([[':status', '200']]), false);
      s.write(Buffer.from(BODY), true);
    },
    '/trailers': (s) => {
      s.respond(encodeHeaderBlock([[':status', '200']]), false);
      s.write(Buffer.from(BODY));
      s.end(encodeHeaderBlock([['x-done', '1']]));
    },
    '/headers-only': (s) => s.respond(encodeHeaderBlock([[':status', '204']]), true),
    '/empty-response-block': (s) => s.respond(Buffer.alloc(0), true),
  };

  beforeAll(async () => {
    server = new H2Server({
      maxConcurrentStreams: 10,
      initialWindowSize: 65_535,
      connectionWindowSize: 1 << 20,
      maxHeaderListSize: 64 * 1024,
      onStream: (stream, headers) => {
        const handler = HANDLERS[headers[headers.indexOf(':path') + 1]];
        stream.onEnd = () => handler(stream);
      },
      onError: (err) => errors.push((err as Error).message),
    });
    port = await server.listen('127.0.0.1', 0);
  });

  afterAll(() => server.close(100));

  const CASES: ReadonlyArray<readonly [string, Seen[]]> = [
    [
      '/end-without-trailers',
      [
        { headers: [':status', '200'], end: false },
        { data: BODY, end: false },
        { data: '', end: true },
      ],
    ],
    [
      '/end-with-an-empty-block',
      [
        { headers: [':status', '200'], end: false },
        { data: BODY, end: false },
        { data: '', end: true },
      ],
    ],
    [
      '/write-and-end',
      [
        { headers: [':status', '200'], end: false },
        { data: BODY, end: true },
      ],
    ],
    [
      '/trailers',
      [
        { headers: [':status', '200'], end: false },
        { data: BODY, end: false },
        { headers: ['x-done', '1'], end: true },
      ],
    ],
    ['/headers-only', [{ headers: [':status', '204'], end: true }]],
  ];

  it.each(CASES)('%s ends as it should, on DATA when there are no trailers', async (path, expected) => {
    const client = await RawClient.connect(port);
    try {
      client.send(headersFrame(1, Flag.END_HEADERS | Flag.END_STREAM, request(path, [])));
      expect(await ended(client, 1)).toEqual(expected);
    } finally {
      client.close();
    }
  });

  it.each(['/end-without-trailers', '/end-with-an-empty-block', '/write-and-end'])(
    '%s held back by a closed window ends on its one DATA frame, with nothing empty after it',
    async (path) => {
      const client = await RawClient.connect(port, [[Setting.INITIAL_WINDOW_SIZE, 0]]);
      try {
        client.send(headersFrame(1, Flag.END_HEADERS | Flag.END_STREAM, request(path, [])));
        await client.waitFor(isType(FrameType.HEADERS, 1));
        client.send(wordFrame(FrameType.WINDOW_UPDATE, 1, BODY.length));
        expect(await ended(client, 1)).toEqual([
          { headers: [':status', '200'], end: false },
          { data: BODY, end: true },
        ]);
      } finally {
        client.close();
      }
    },
  );

  it('refuses an empty response header block: the stream is reset with INTERNAL_ERROR and the error reported, the connection goes on', async () => {
    const client = await RawClient.connect(port);
    try {
      client.send(headersFrame(1, Flag.END_HEADERS | Flag.END_STREAM, request('/empty-response-block', [])));
      expect(await ended(client, 1)).toEqual([{ rst: ErrorCode.INTERNAL_ERROR }]);
      expect(errors).toEqual(['stream 1: an empty response header block was refused (a response carries :status)']);
      // A legitimate request beside it on the same connection is answered in full.
      client.send(headersFrame(3, Flag.END_HEADERS | Flag.END_STREAM, request('/trailers', [])));
      expect(await ended(client, 3)).toEqual([
        { headers: [':status', '200'], end: false },
        { data: BODY, end: false },
        { headers: ['x-done', '1'], end: true },
      ]);
      expect(client.goaway()).toBeUndefined();
    } finally {
      client.close();
    }
  });
});
