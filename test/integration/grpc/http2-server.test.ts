import * as fs from 'node:fs';
import * as http2 from 'node:http2';
import { createRlsClient } from '../../../src/cli/rls-client';
import { InvalidRequestError } from '../../../src/limiter/errors';
import type { LocalDenial, RateLimitResponse } from '../../../src/limiter/types';
import { silentLogger } from '../../../src/log';
import type { RateLimitDecider } from '../../../src/limiter/types';
import { HealthState } from '../../../src/service/health';
import { Http2GrpcServer } from '../../../src/grpc/http2-server';
import { protoRoot } from '../../../src/wire/proto';
import type { ServiceReplays } from '../../../src/service/rls-service';
import { frameResponse } from '../../../src/wire/rls-codec';
import { makeTestCerts, type CertFiles } from '../../helpers/certs';
import { descriptor, grpc, grpcCode } from '../../helpers/grpc-client';
import { TRANSPORT_DEFAULTS } from '../../helpers/transport-defaults';

/**
 * The node:http2 transport seen from a raw HTTP/2 client: what a grpc-js client never sends
 * (truncated frames, garbage protobuf, compressed messages, wrong methods and content types),
 * deadlines, percent-encoded messages, GOAWAY on shutdown, and TLS / mutual TLS.
 */

const RLS_PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';
const OK: RateLimitResponse = { overallCode: 'OK', statuses: [{ code: 'OK', limitRemaining: 7 }], responseHeaders: [] };
const RequestType = protoRoot().lookupType('envoy.service.ratelimit.v3.RateLimitRequest');
const ResponseType = protoRoot().lookupType('envoy.service.ratelimit.v3.RateLimitResponse');

const validRequest = Buffer.from(RequestType.encode({ domain: 'd', descriptors: [{ entries: [{ key: 'k', value: 'v' }] }] }).finish());

function frame(payload: Buffer, flag = 0, declaredLength = payload.length): Buffer {
  const prefix = Buffer.alloc(5);
  prefix[0] = flag;
  prefix.writeUInt32BE(declaredLength, 1);
  return Buffer.concat([prefix, payload]);
}

interface RawReply {
  headers: http2.IncomingHttpHeaders;
  trailers: http2.IncomingHttpHeaders;
  body: Buffer;
}

/** Status and message of a reply, from its trailers or, for a trailers-only reply, its headers. */
function grpcStatus(reply: RawReply): { code: number; message?: string } {
  const source = reply.trailers['grpc-status'] !== undefined ? reply.trailers : reply.headers;
  const message = source['grpc-message'];
  return { code: Number(source['grpc-status']), message: typeof message === 'string' ? message : undefined };
}

/** One call over `session`, collected whole. */
function rawCall(session: http2.ClientHttp2Session, headers: http2.OutgoingHttpHeaders, body?: Buffer, opts: { end?: boolean } = {}): Promise<RawReply> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ':method': 'POST', ':path': RLS_PATH, 'content-type': 'application/grpc', te: 'trailers', ...headers });
    let replyHeaders: http2.IncomingHttpHeaders = {};
    let trailers: http2.IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    stream.on('response', (h) => (replyHeaders = h));
    stream.on('trailers', (t) => (trailers = t));
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => resolve({ headers: replyHeaders, trailers, body: Buffer.concat(chunks) }));
    stream.on('error', reject);
    if (body !== undefined) stream.write(body);
    if (opts.end !== false) stream.end();
  });
}

async function serve(
  limiter: RateLimitDecider,
  tls: { enabled: boolean; certPath?: string; keyPath?: string; clientCaPath?: string } = { enabled: false },
  replays?: ServiceReplays,
) {
  const health = new HealthState();
  health.set('config', true);
  const server = new Http2GrpcServer({
    limiter,
    replays,
    health,
    settings: { grpcHost: '127.0.0.1', grpcPort: 0, grpcMaxMessageBytes: 1024, grpcTls: tls, ...TRANSPORT_DEFAULTS },
    logger: silentLogger(),
  });
  const port = await server.start();
  return { server, port };
}

describe('the http2 transport, from a raw HTTP/2 client', () => {
  let server: Http2GrpcServer;
  let session: http2.ClientHttp2Session;
  let delayMs = 0;

  beforeAll(async () => {
    const s = await serve({
      shouldRateLimit: async (req) => {
        if (req.domain === 'bad') throw new InvalidRequestError('bad domain: ü 100%\nnext');
        if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs));
        return OK;
      },
    });
    server = s.server;
    session = http2.connect(`http://127.0.0.1:${s.port}`);
  });

  afterAll(async () => {
    session?.close();
    await server?.stop(500);
  });

  const call = (headers: http2.OutgoingHttpHeaders, body?: Buffer, opts: { end?: boolean } = {}): Promise<RawReply> => rawCall(session, headers, body, opts);

  it('answers a well-formed call with one framed RateLimitResponse and status 0', async () => {
    const reply = await call({}, frame(validRequest));
    expect(reply.headers[':status']).toBe(200);
    expect(reply.headers['content-type']).toBe('application/grpc');
    expect(grpcStatus(reply).code).toBe(0);
    expect(reply.body.readUInt32BE(1)).toBe(reply.body.length - 5);
    const decoded = ResponseType.toObject(ResponseType.decode(reply.body.subarray(5)), { enums: String });
    expect(decoded).toMatchObject({ overallCode: 'OK', statuses: [{ code: 'OK', limitRemaining: 7 }] });
  });

  it('answers a call the replays hold from its message bytes, without deciding it again', async () => {
    const denied: RateLimitResponse = {
      overallCode: 'OVER_LIMIT',
      statuses: [{ code: 'OVER_LIMIT', limitRemaining: 0, durationUntilResetMs: 1_500 }],
      responseHeaders: [],
    };
    const keys: (string | undefined)[] = [];
    let replayable: string | undefined;
    const s = await serve(
      {
        shouldRateLimit: async (_req, onLocalDenial) => {
          // As the limiter does when the denial cache answered the call: tell the listener.
          onLocalDenial?.({} as LocalDenial);
          if (onLocalDenial === undefined) keys.push(undefined);
          return OK;
        },
      },
      { enabled: false },
      {
        answer: (key) => (key === replayable ? frameResponse(denied) : undefined),
        remembering: (key) => () => {
          keys.push(key);
          replayable = key;
        },
      },
    );
    const client = http2.connect(`http://127.0.0.1:${s.port}`);
    const post = (body: Buffer): Promise<RawReply> => rawCall(client, {}, body);
    const decode = (reply: RawReply) => ResponseType.toObject(ResponseType.decode(reply.body.subarray(5)), { enums: String, longs: Number });
    try {
      expect(decode(await post(frame(validRequest)))).toMatchObject({ overallCode: 'OK' });
      expect(keys).toEqual([validRequest.toString('latin1')]);
      for (let i = 0; i < 3; i++) {
        const reply = await post(frame(validRequest));
        expect(grpcStatus(reply).code).toBe(0);
        expect(decode(reply)).toMatchObject({
          overallCode: 'OVER_LIMIT',
          statuses: [{ code: 'OVER_LIMIT', durationUntilReset: { seconds: 1, nanos: 500_000_000 } }],
        });
      }
      expect(keys).toHaveLength(1);
      // A message too large to be named by its bytes is always decided.
      const large = Buffer.from(RequestType.encode({ domain: 'd'.repeat(600), descriptors: [{ entries: [{ key: 'k', value: 'v' }] }] }).finish());
      expect(decode(await post(frame(large)))).toMatchObject({ overallCode: 'OK' });
      expect(keys).toEqual([validRequest.toString('latin1'), undefined]);
    } finally {
      client.close();
      await s.server.stop(500);
    }
  });

  it('answers INTERNAL to a frame shorter than its declared length', async () => {
    expect(grpcStatus(await call({}, frame(validRequest, 0, validRequest.length + 10))).code).toBe(grpc.status.INTERNAL);
  });

  it('answers INTERNAL to a body shorter than the 5-byte prefix, and to an empty body', async () => {
    expect(grpcStatus(await call({}, Buffer.from([0, 0, 0]))).code).toBe(grpc.status.INTERNAL);
    expect(grpcStatus(await call({})).code).toBe(grpc.status.INTERNAL);
  });

  it('answers INTERNAL to bytes that are not a RateLimitRequest', async () => {
    expect(grpcStatus(await call({}, frame(Buffer.from([0x0a, 0x7f, 0x01])))).code).toBe(grpc.status.INTERNAL);
    expect(grpcStatus(await call({}, frame(Buffer.from([0x0b, 0x01])))).code).toBe(grpc.status.INTERNAL);
  });

  it('answers UNIMPLEMENTED to a second message on a unary call', async () => {
    expect(grpcStatus(await call({}, Buffer.concat([frame(validRequest), frame(validRequest)]))).code).toBe(grpc.status.UNIMPLEMENTED);
  });

  it('refuses compressed messages: INTERNAL without grpc-encoding, UNIMPLEMENTED with one', async () => {
    expect(grpcStatus(await call({}, frame(validRequest, 1))).code).toBe(grpc.status.INTERNAL);
    const gzip = await call({ 'grpc-encoding': 'gzip' }, frame(validRequest, 1));
    expect(grpcStatus(gzip).code).toBe(grpc.status.UNIMPLEMENTED);
    expect(gzip.headers['grpc-accept-encoding']).toBe('identity');
    expect(grpcStatus(await call({ 'grpc-encoding': 'identity' }, frame(validRequest))).code).toBe(0);
  });

  it('refuses an oversized message from its prefix, before the body arrives', async () => {
    const reply = await call({}, frame(Buffer.alloc(0), 0, 1_000_000), { end: false });
    expect(grpcStatus(reply).code).toBe(grpc.status.RESOURCE_EXHAUSTED);
  });

  it('answers HTTP 405 to other methods and 415 to other content types', async () => {
    expect((await call({ ':method': 'PUT' }, frame(validRequest))).headers[':status']).toBe(405);
    expect((await call({ 'content-type': 'application/json' }, Buffer.from('{}'))).headers[':status']).toBe(415);
    expect(grpcStatus(await call({ 'content-type': 'application/grpc+proto' }, frame(validRequest))).code).toBe(0);
  });

  it('answers UNIMPLEMENTED to an unknown method', async () => {
    const reply = await call({ ':path': '/envoy.service.ratelimit.v3.RateLimitService/Other' }, frame(validRequest));
    expect(reply.headers[':status']).toBe(200);
    expect(grpcStatus(reply).code).toBe(grpc.status.UNIMPLEMENTED);
  });

  it('percent-encodes grpc-message', async () => {
    const bad = Buffer.from(RequestType.encode({ domain: 'bad', descriptors: [{ entries: [{ key: 'k', value: 'v' }] }] }).finish());
    const status = grpcStatus(await call({}, frame(bad)));
    expect(status).toEqual({ code: grpc.status.INVALID_ARGUMENT, message: 'bad domain: %C3%BC 100%25%0Anext' });
  });

  it('answers DEADLINE_EXCEEDED when the decision finishes after grpc-timeout', async () => {
    delayMs = 30;
    try {
      expect(grpcStatus(await call({ 'grpc-timeout': '5m' }, frame(validRequest))).code).toBe(grpc.status.DEADLINE_EXCEEDED);
      expect(grpcStatus(await call({ 'grpc-timeout': '2S' }, frame(validRequest))).code).toBe(0);
    } finally {
      delayMs = 0;
    }
  });
});

describe('the http2 transport shutting down', () => {
  it('sends GOAWAY and lets the in-flight call finish', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let started = 0;
    const { server, port } = await serve({
      shouldRateLimit: async () => {
        started++;
        await gate;
        return OK;
      },
    });
    const client = createRlsClient({ address: `127.0.0.1:${port}` });
    const inFlight = client.shouldRateLimit({ domain: 'd', descriptors: [descriptor([['k', 'v']])] });
    while (started === 0) await new Promise((r) => setImmediate(r));
    const raw = http2.connect(`http://127.0.0.1:${port}`);
    await new Promise((r) => raw.once('connect', r));
    const goaway = new Promise((r) => raw.once('goaway', r));
    const stopped = server.stop(5_000);
    await goaway;
    release();
    expect((await inFlight).overallCode).toBe('OK');
    await stopped;
    client.close();
    raw.destroy();
  });
});

describe('the http2 transport over TLS', () => {
  let certs: CertFiles;
  const request = { domain: 'd', descriptors: [descriptor([['k', 'v']])] };
  const read = (file: string): Buffer => fs.readFileSync(file);

  beforeAll(() => {
    certs = makeTestCerts();
  });
  afterAll(() => certs?.remove());

  it('serves TLS to a client that trusts the server certificate, and refuses plaintext', async () => {
    const { server, port } = await serve({ shouldRateLimit: async () => OK }, { enabled: true, certPath: certs.serverCert, keyPath: certs.serverKey });
    const secure = createRlsClient({ address: `localhost:${port}`, credentials: grpc.credentials.createSsl(read(certs.caCert)) });
    const plain = createRlsClient({ address: `localhost:${port}`, credentials: grpc.credentials.createInsecure() });
    try {
      expect((await secure.shouldRateLimit(request, { deadlineMs: 5_000 })).overallCode).toBe('OK');
      expect(await grpcCode(plain.shouldRateLimit(request, { deadlineMs: 2_000 }))).toBe(grpc.status.UNAVAILABLE);
    } finally {
      secure.close();
      plain.close();
      await server.stop(500);
    }
  });

  it('requires a client certificate signed by GRPC_CLIENT_TLS_CACERT', async () => {
    const tls = { enabled: true, certPath: certs.serverCert, keyPath: certs.serverKey, clientCaPath: certs.caCert };
    const { server, port } = await serve({ shouldRateLimit: async () => OK }, tls);
    const trusted = createRlsClient({
      address: `localhost:${port}`,
      credentials: grpc.credentials.createSsl(read(certs.caCert), read(certs.clientKey), read(certs.clientCert)),
    });
    const anonymous = createRlsClient({ address: `localhost:${port}`, credentials: grpc.credentials.createSsl(read(certs.caCert)) });
    try {
      expect((await trusted.shouldRateLimit(request, { deadlineMs: 5_000 })).overallCode).toBe('OK');
      expect(await grpcCode(anonymous.shouldRateLimit(request, { deadlineMs: 2_000 }))).toBe(grpc.status.UNAVAILABLE);
    } finally {
      trusted.close();
      anonymous.close();
      await server.stop(500);
    }
  });
});
