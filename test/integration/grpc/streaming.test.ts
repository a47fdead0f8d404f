import * as grpc from '@grpc/grpc-js';
import { GrpcServer } from '../../../src/grpc/grpc-js-server';
import { Http2GrpcServer, type Http2GrpcServerOptions } from '../../../src/grpc/http2-server';
import { Flag, FrameType } from '../../../src/http2/frames';
import { encodeHeaderBlock } from '../../../src/http2/hpack';
import { silentLogger } from '../../../src/log';
import { HealthState } from '../../../src/service/health';
import { loadSettings } from '../../../src/settings/settings';
import { frameMessage } from '../../../src/wire/grpc-framing';
import { ECHO_PATH, EchoMethod } from '../../helpers/echo-streaming';
import { dataFrame, headersFrame, isType, RawClient } from '../../helpers/h2-raw-client';
import { TRANSPORT_DEFAULTS } from '../../helpers/transport-defaults';

/**
 * Bidirectional streaming calls (src/service/streaming.ts) from a grpc-js client, on both
 * transports: one test-only method object (an echo) served by each, as a service's is.
 */

type Transport = 'http2' | 'grpc-js';
const identity = (b: Buffer): Buffer => b;
const pause = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function until(condition: () => boolean, timeoutMs = 3000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await pause(10);
  }
}

interface Over {
  readonly idleTimeoutMs?: number;
  readonly maxConnectionAgeMs?: number;
}

async function serve(transport: Transport, method: EchoMethod, over: Over = {}) {
  const health = new HealthState();
  health.set('config', true);
  const options: Http2GrpcServerOptions = {
    limiter: { shouldRateLimit: () => Promise.resolve({ overallCode: 'OK', statuses: [], responseHeaders: [] }) },
    health,
    settings: {
      grpcHost: '127.0.0.1',
      grpcPort: 0,
      grpcMaxMessageBytes: 4 * 1024 * 1024,
      grpcTls: { enabled: false },
      grpcMaxConnectionAgeMs: over.maxConnectionAgeMs,
      grpcMaxConnectionAgeGraceMs: 10_000,
      ...TRANSPORT_DEFAULTS,
      h2: { ...loadSettings({}).h2, idleTimeoutMs: over.idleTimeoutMs ?? 300_000 },
    },
    logger: silentLogger(),
    streamingMethods: [method],
  };
  const server = transport === 'http2' ? new Http2GrpcServer(options) : new GrpcServer(options);
  const port = await server.start();
  return { server, port };
}

function openCall(client: grpc.Client, metadata = new grpc.Metadata()) {
  const call = client.makeBidiStreamRequest(ECHO_PATH, identity, identity, metadata);
  const got: Buffer[] = [];
  call.on('data', (b: Buffer) => got.push(b));
  call.on('error', () => undefined);
  const status = new Promise<grpc.StatusObject>((resolve) => call.on('status', resolve));
  const texts = (): string[] => got.map((b) => b.toString());
  return { call, got, status, texts };
}

describe.each<Transport>(['http2', 'grpc-js'])('bidirectional streaming over the %s transport', (transport) => {
  let method: EchoMethod;
  let server: GrpcServer | Http2GrpcServer;
  let client: grpc.Client;

  async function start(over: Over = {}, maxMessageBytes?: number): Promise<void> {
    method = new EchoMethod(maxMessageBytes);
    const served = await serve(transport, method, over);
    server = served.server;
    client = new grpc.Client(`127.0.0.1:${served.port}`, grpc.credentials.createInsecure());
  }

  afterEach(async () => {
    method.release();
    client.close();
    await server.stop(200);
  });

  it('carries messages both ways in order, reads request headers, and ends OK when the client half-closes', async () => {
    await start();
    const metadata = new grpc.Metadata();
    metadata.set('x-proxy', 'envoy-1');
    const { call, status, texts } = openCall(client, metadata);
    for (const m of ['one', 'two', 'three']) call.write(Buffer.from(m));
    await until(() => texts().length === 3);
    expect(texts()).toEqual(['one', 'two', 'three']);
    expect(method.calls[0].call.header('x-proxy')).toBe('envoy-1');
    call.end();
    expect((await status).code).toBe(grpc.status.OK);
    expect(method.calls[0].closed).toBe('ended');
  });

  it('hands messages over one at a time: a handler still busy with one holds back the next, then all follow in order', async () => {
    await start();
    const { call, status, texts } = openCall(client);
    call.write(Buffer.from('hold'));
    const big = Array.from({ length: 40 }, (_, i) => Buffer.concat([Buffer.from(`m${i} `), Buffer.alloc(16_000, 0x62)]));
    for (const m of big) call.write(m);
    await until(() => method.held === 1);
    await pause(300);
    expect(method.calls[0].received).toEqual(['hold']);
    expect(texts()).toEqual([]);
    method.release();
    await until(() => texts().length === 40);
    expect(texts().map((t) => t.split(' ')[0])).toEqual(big.map((_, i) => `m${i}`));
    call.end();
    expect((await status).code).toBe(grpc.status.OK);
  });

  it('holds its writes for a client that stops reading, and sends the rest once it reads again', async () => {
    await start();
    const { call, got, status } = openCall(client);
    call.pause();
    call.write(Buffer.from('flood 200 16384'));
    await until(() => method.calls.length === 1 && method.calls[0].refusals > 0);
    // 3.2 MB asked for; write() said stop long before, and the writes stall while nobody reads
    // (beyond what the client's own buffers and windows take in).
    await pause(300);
    const stalledAt = method.calls[0].written;
    await pause(300);
    expect(method.calls[0].written).toBe(stalledAt);
    expect(stalledAt).toBeLessThan(100);
    call.resume();
    await until(() => got.length === 200, 10_000);
    expect(got.map((b) => b.readUInt32BE(0))).toEqual(Array.from({ length: 200 }, (_, i) => i));
    expect(got.every((b) => b.length === 16_384)).toBe(true);
    expect(method.calls[0].writables).toBeGreaterThan(0);
    call.end();
    expect((await status).code).toBe(grpc.status.OK);
  });

  it('keeps a quiet call open past the idle timeout', async () => {
    await start({ idleTimeoutMs: 200 });
    const { call, status, texts } = openCall(client);
    call.write(Buffer.from('before'));
    await until(() => texts().length === 1);
    await pause(1200);
    call.write(Buffer.from('after'));
    await until(() => texts().length === 2);
    expect(texts()).toEqual(['before', 'after']);
    call.end();
    expect((await status).code).toBe(grpc.status.OK);
  });

  it('ends open calls with UNAVAILABLE at shutdown, without waiting for the grace period', async () => {
    await start();
    const { call, status, texts } = openCall(client);
    call.write(Buffer.from('hello'));
    await until(() => texts().length === 1);
    const started = Date.now();
    const stopped = server.stop(5000);
    const ended = await status;
    expect(ended.code).toBe(grpc.status.UNAVAILABLE);
    await stopped;
    expect(Date.now() - started).toBeLessThan(2000);
    expect(method.calls[0].closed).toBe('going-away');
  });

  it('ends a call whose request message is over the method cap with RESOURCE_EXHAUSTED', async () => {
    await start({}, 1000);
    const { call, status } = openCall(client);
    call.write(Buffer.alloc(2000));
    expect((await status).code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(method.calls[0].closed).toBe('failed');
  });

  it('ends the call with the status the service gives, and with INTERNAL when its handler throws', async () => {
    await start();
    const first = openCall(client);
    first.call.write(Buffer.from('end 5'));
    const ended = await first.status;
    expect([ended.code, ended.details]).toEqual([grpc.status.NOT_FOUND, 'ended on request']);
    const second = openCall(client);
    second.call.write(Buffer.from('throw'));
    expect((await second.status).code).toBe(grpc.status.INTERNAL);
    expect(method.calls.map((c) => c.closed)).toEqual(['ended', 'failed']);
  });

  it('tells the service when the client cancels', async () => {
    await start();
    const { call } = openCall(client);
    // Busy with a message, so that the half-close a cancelling client may send first does not end the call.
    call.write(Buffer.from('hold'));
    await until(() => method.held === 1);
    call.cancel();
    await until(() => method.calls[0].closed !== undefined);
    expect(method.calls[0].closed).toBe('cancelled');
  });
});

describe('bidirectional streaming on the own HTTP/2 layer, frame by frame', () => {
  let method: EchoMethod;
  let server: GrpcServer | Http2GrpcServer;
  let port: number;

  afterEach(async () => {
    method.release();
    await server.stop(200);
  });

  it('reopens the receive window only for messages the handler is done with', async () => {
    method = new EchoMethod();
    ({ server, port } = await serve('http2', method));
    const client = await RawClient.connect(port);
    const request = encodeHeaderBlock([
      [':method', 'POST'],
      [':scheme', 'http'],
      [':path', ECHO_PATH],
      [':authority', 'localhost'],
      ['content-type', 'application/grpc'],
    ]);
    const message = frameMessage(Buffer.alloc(10_000, 0x63));
    client.send(headersFrame(1, Flag.END_HEADERS, request), dataFrame(1, frameMessage(Buffer.from('hold')), 0));
    for (let i = 0; i < 5; i++) client.send(dataFrame(1, message, 0));
    await until(() => method.held === 1);
    await pause(200);
    // 50 kB sent while the handler holds the first message: no byte of the stream window comes back.
    expect(client.frames.filter(isType(FrameType.WINDOW_UPDATE, 1))).toEqual([]);
    method.release();
    await until(() => client.frames.filter(isType(FrameType.WINDOW_UPDATE, 1)).length === 6);
    const reopened = client.frames.filter(isType(FrameType.WINDOW_UPDATE, 1)).reduce((sum, f) => sum + f.payload.readUInt32BE(0), 0);
    // Every byte of the six messages, once each was handled; the stream is still open.
    expect(reopened).toBe(9 + 5 * message.length);
    expect(client.frames.filter(isType(FrameType.RST_STREAM, 1))).toEqual([]);
    client.close();
  });

  it('ends open calls with UNAVAILABLE when the connection reaches its age limit', async () => {
    method = new EchoMethod();
    ({ server, port } = await serve('http2', method, { maxConnectionAgeMs: 400 }));
    const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
    const { call, status, texts } = openCall(client);
    call.write(Buffer.from('x'));
    await until(() => texts().length === 1);
    expect((await status).code).toBe(grpc.status.UNAVAILABLE);
    expect(method.calls[0].closed).toBe('going-away');
    client.close();
  });
});
