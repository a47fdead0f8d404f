import * as grpc from '@grpc/grpc-js';
import * as descriptor from 'protobufjs/ext/descriptor';
import { GrpcReflection } from 'grpc-js-reflection-client';
import { Flag, FrameType, Setting } from '../../../src/http2/frames';
import { encodeHeaderBlock } from '../../../src/http2/hpack';
import { frameMessage } from '../../../src/wire/grpc-framing';
import { loadProtoFiles } from '../../../src/wire/proto';
import { REFLECTION_V1_PATH, REFLECTION_V1_PROTO } from '../../../src/wire/reflection-codec';
import { dataFrame, headersFrame, isType, RawClient } from '../../helpers/h2-raw-client';
import { openReflectionStream, type ReflectionVersion } from '../../helpers/reflection-stream';
import { startTestService, type TestService } from '../../helpers/service';

/**
 * gRPC server reflection on the real service, once per gRPC transport: a reflection client
 * (grpc-js-reflection-client, as grpcurl and ghz use the protocol) lists the services, fetches the
 * RLS descriptors and makes real ShouldRateLimit calls from them alone; one stream answers many
 * questions in order; and every cap holds a hostile peer while a legit client beside it is served.
 */

const EDGE = `
domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 2}
`;

const SERVICES = [
  'envoy.service.rate_limit_quota.v3.RateLimitQuotaService',
  'envoy.service.ratelimit.v3.RateLimitService',
  'grpc.health.v1.Health',
  'grpc.reflection.v1.ServerReflection',
  'grpc.reflection.v1alpha.ServerReflection',
];

const NOT_FOUND = 5;
const pause = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function fileNames(files: readonly Buffer[]): string[] {
  return files.map((b) => descriptor.FileDescriptorProto.decode(b) as unknown as { name: string }).map((f) => f.name);
}

/** A reflection client that can be closed (the package keeps its channel private). */
function reflectionClient(addr: string, version: ReflectionVersion): { reflection: GrpcReflection; close(): void } {
  // Its own connection: grpc-js channels to one address share one unless told otherwise.
  const reflection = new GrpcReflection(addr, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 }, version);
  return { reflection, close: () => (reflection as unknown as { client: grpc.Client }).client.close() };
}

type ShouldRateLimit = (request: unknown, callback: (err: grpc.ServiceError | null, response: { overall_code: string }) => void) => void;

describe.each(['http2', 'grpc-js'])('server reflection over the %s transport', (transport) => {
  let svc: TestService;
  const clients: grpc.Client[] = [];
  const closers: (() => void)[] = [];

  const start = async (env: Record<string, string> = {}): Promise<void> => {
    svc = await startTestService({ config: { 'edge.yaml': EDGE }, env: { GRPC_TRANSPORT: transport, WARM_UP_CALLS: '0', ...env } });
  };
  const channel = (): grpc.Client => {
    const client = new grpc.Client(svc.addr, grpc.credentials.createInsecure());
    clients.push(client);
    return client;
  };

  afterEach(async () => {
    for (const close of closers.splice(0)) close();
    for (const client of clients.splice(0)) client.close();
    await svc?.stop();
  });

  test.each<ReflectionVersion>(['v1', 'v1alpha'])(
    'a %s client lists every service, and the RLS descriptors it fetches make calls the service answers',
    async (version) => {
      await start();
      const { reflection, close } = reflectionClient(svc.addr, version);
      closers.push(close);
      expect((await reflection.listServices()).sort()).toEqual(SERVICES);

      // No .proto file on this side: the request type and the client come from the server's descriptors.
      const described = await reflection.getDescriptorBySymbol('envoy.service.ratelimit.v3.RateLimitService');
      const pkg = described.getPackageObject({ keepCase: true, enums: String, longs: String, defaults: true }) as unknown as {
        envoy: { service: { ratelimit: { v3: { RateLimitService: grpc.ServiceClientConstructor } } } };
      };
      const Rls = pkg.envoy.service.ratelimit.v3.RateLimitService;
      const rls = new Rls(svc.addr, grpc.credentials.createInsecure()) as unknown as grpc.Client & { ShouldRateLimit: ShouldRateLimit };
      clients.push(rls);
      const call = (): Promise<string> =>
        new Promise((resolve, reject) =>
          rls.ShouldRateLimit(
            { domain: 'edge', descriptors: [{ entries: [{ key: 'api_key', value: `reflected-${version}` }] }], hits_addend: 1 },
            (err, res) => (err ? reject(err) : resolve(res.overall_code)),
          ),
        );
      expect([await call(), await call(), await call()]).toEqual(['OK', 'OK', 'OVER_LIMIT']);

      const methods = await reflection.listMethods('envoy.service.rate_limit_quota.v3.RateLimitQuotaService');
      expect(methods.map((m) => m.name)).toEqual(['StreamRateLimitQuotas']);
    },
  );

  test('one stream answers many questions in order: files with their imports, symbols, NOT_FOUND, extension numbers', async () => {
    await start();
    const stream = openReflectionStream(channel(), 'v1');
    const list = await stream.ask({ host: 'example', listServices: '*' });
    expect(list.validHost).toBe('example');
    expect(list.listServicesResponse!.service.map((s) => s.name)).toEqual(SERVICES);

    const method = await stream.ask({ fileContainingSymbol: 'envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit' });
    expect(method.originalRequest).toEqual({ fileContainingSymbol: 'envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit' });
    const names = fileNames(method.fileDescriptorResponse!.fileDescriptorProto);
    expect(names[0]).toBe('envoy/service/ratelimit/v3/rls.proto');
    expect(names.sort()).toEqual(
      [
        'envoy/config/core/v3/base.proto',
        'envoy/extensions/common/ratelimit/v3/ratelimit.proto',
        'envoy/service/ratelimit/v3/rls.proto',
        'envoy/type/v3/ratelimit_unit.proto',
        'google/protobuf/duration.proto',
        'google/protobuf/struct.proto',
        'google/protobuf/timestamp.proto',
        'google/protobuf/wrappers.proto',
      ].sort(),
    );

    const health = await stream.ask({ fileByFilename: 'grpc/health/v1/health.proto' });
    expect(fileNames(health.fileDescriptorResponse!.fileDescriptorProto)).toEqual(['grpc/health/v1/health.proto']);
    const nested = await stream.ask({ fileContainingSymbol: 'envoy.service.ratelimit.v3.RateLimitResponse.DescriptorStatus' });
    expect(fileNames(nested.fileDescriptorResponse!.fileDescriptorProto)[0]).toBe('envoy/service/ratelimit/v3/rls.proto');

    expect((await stream.ask({ fileByFilename: 'nope.proto' })).errorResponse).toEqual({ errorCode: NOT_FOUND, errorMessage: 'file not found: nope.proto' });
    expect((await stream.ask({ fileContainingSymbol: 'no.Such' })).errorResponse).toEqual({ errorCode: NOT_FOUND, errorMessage: 'symbol not found: no.Such' });
    const extension = await stream.ask({ fileContainingExtension: { containingType: 'envoy.service.ratelimit.v3.RateLimitRequest', extensionNumber: 100 } });
    expect(extension.errorResponse?.errorCode).toBe(NOT_FOUND);
    const numbers = await stream.ask({ allExtensionNumbersOfType: 'envoy.service.ratelimit.v3.RateLimitRequest' });
    expect(numbers.allExtensionNumbersResponse).toEqual({ baseTypeName: 'envoy.service.ratelimit.v3.RateLimitRequest', extensionNumber: [] });
    expect((await stream.ask({ allExtensionNumbersOfType: 'no.Such' })).errorResponse?.errorCode).toBe(NOT_FOUND);

    // After NOT_FOUND answers the stream still serves; the client's half-close ends it with OK.
    expect((await stream.ask({ listServices: '' })).listServicesResponse!.service).toHaveLength(SERVICES.length);
    stream.end();
    expect((await stream.status).code).toBe(grpc.status.OK);
  });

  test('a request asking nothing, or bytes that are not a request, end the stream with INVALID_ARGUMENT', async () => {
    await start();
    const empty = openReflectionStream(channel(), 'v1alpha');
    void empty.ask({ host: 'h' }).catch(() => undefined);
    expect(await empty.status).toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: expect.stringContaining('must ask one of') });
    const garbage = openReflectionStream(channel(), 'v1');
    garbage.writeRaw(Buffer.from([0x1a, 0x05, 0x61]));
    expect(await garbage.status).toMatchObject({ code: grpc.status.INVALID_ARGUMENT, details: expect.stringContaining('ServerReflectionRequest') });
  });

  test('GRPC_REFLECTION=false: both versions are UNIMPLEMENTED, the other services unchanged', async () => {
    await start({ GRPC_REFLECTION: 'false' });
    for (const version of ['v1', 'v1alpha'] as const) {
      const stream = openReflectionStream(channel(), version);
      void stream.ask({ listServices: '*' }).catch(() => undefined);
      expect((await stream.status).code).toBe(grpc.status.UNIMPLEMENTED);
    }
    expect((await svc.client.shouldRateLimit({ domain: 'edge', descriptors: [{ entries: [{ key: 'api_key', value: 'off' }] }] })).overallCode).toBe('OK');
  });

  test('silent streams hold GRPC_REFLECTION_MAX_STREAMS: one more is refused at once, and they are ended after GRPC_REFLECTION_IDLE_TIMEOUT, then a legit client is served', async () => {
    await start({ GRPC_REFLECTION_MAX_STREAMS: '4', GRPC_REFLECTION_IDLE_TIMEOUT: '600ms' });
    const hostile = channel();
    const silent = Array.from({ length: 4 }, () => openReflectionStream(hostile, 'v1'));
    // On the same connection, so that it arrives after the four.
    const fifth = openReflectionStream(hostile, 'v1');
    void fifth.ask({ listServices: '*' }).catch(() => undefined);
    const refused = await fifth.status;
    expect(refused).toMatchObject({ code: grpc.status.RESOURCE_EXHAUSTED, details: expect.stringContaining('GRPC_REFLECTION_MAX_STREAMS') });
    // The decisions are not held up by them.
    expect((await svc.client.shouldRateLimit({ domain: 'edge', descriptors: [{ entries: [{ key: 'api_key', value: 'beside' }] }] })).overallCode).toBe('OK');

    const ended = await Promise.all(silent.map((s) => s.status));
    for (const s of ended) expect(s).toMatchObject({ code: grpc.status.DEADLINE_EXCEEDED, details: 'no reflection request for 600 ms' });
    const again = openReflectionStream(channel(), 'v1');
    expect((await again.ask({ listServices: '*' })).listServicesResponse!.service).toHaveLength(SERVICES.length);
    // A stream that keeps asking is not idle, however long it lives.
    for (let i = 0; i < 4; i++) {
      await pause(250);
      expect((await again.ask({ fileByFilename: 'grpc/health/v1/health.proto' })).fileDescriptorResponse).toBeDefined();
    }
    again.end();
    expect((await again.status).code).toBe(grpc.status.OK);
  });

  test('silent streams on one connection stop at GRPC_REFLECTION_MAX_STREAMS_PER_CONNECTION; a legit client on its own connection is served at once', async () => {
    await start({ GRPC_REFLECTION_MAX_STREAMS_PER_CONNECTION: '2' });
    const hostile = channel();
    const silent = [openReflectionStream(hostile, 'v1'), openReflectionStream(hostile, 'v1alpha')];
    const third = openReflectionStream(hostile, 'v1');
    void third.ask({ listServices: '*' }).catch(() => undefined);
    expect(await third.status).toMatchObject({
      code: grpc.status.RESOURCE_EXHAUSTED,
      details: expect.stringContaining('GRPC_REFLECTION_MAX_STREAMS_PER_CONNECTION'),
    });
    const { reflection, close } = reflectionClient(svc.addr, 'v1');
    closers.push(close);
    expect((await reflection.listServices()).sort()).toEqual(SERVICES);
    for (const s of silent) s.cancel();
  });

  test('a stream flooding requests is ended at GRPC_REFLECTION_MAX_REQUESTS_PER_STREAM; an oversized request at GRPC_REFLECTION_MAX_REQUEST_BYTES; a legit client beside both is served', async () => {
    await start({ GRPC_REFLECTION_MAX_REQUESTS_PER_STREAM: '20', GRPC_REFLECTION_MAX_REQUEST_BYTES: '1024' });
    const flood = openReflectionStream(channel(), 'v1');
    const floodAnswers = Array.from({ length: 60 }, () =>
      flood.ask({ fileContainingSymbol: 'envoy.service.ratelimit.v3.RateLimitService' }).catch(() => undefined),
    );
    const big = openReflectionStream(channel(), 'v1alpha');
    void big.ask({ fileContainingSymbol: 'x'.repeat(2000) }).catch(() => undefined);

    const { reflection, close } = reflectionClient(svc.addr, 'v1');
    closers.push(close);
    expect((await reflection.listServices()).sort()).toEqual(SERVICES);
    expect(
      (await reflection.getDescriptorBySymbol('grpc.health.v1.Health')).getProtobufJsRoot().lookupService('grpc.health.v1.Health').methodsArray,
    ).toHaveLength(2);

    expect(await flood.status).toMatchObject({ code: grpc.status.RESOURCE_EXHAUSTED, details: expect.stringContaining('more than 20 requests') });
    await Promise.all(floodAnswers);
    expect(flood.received).toHaveLength(20);
    expect((await big.status).code).toBe(grpc.status.RESOURCE_EXHAUSTED);
  });
});

test('a peer that floods requests and never reads its answers is held by flow control, then ended by the idle timeout; a legit client is served meanwhile (http2 transport)', async () => {
  const svc = await startTestService({
    config: { 'edge.yaml': EDGE },
    env: { WARM_UP_CALLS: '0', GRPC_REFLECTION_MAX_STREAMS: '1', GRPC_REFLECTION_IDLE_TIMEOUT: '800ms' },
  });
  const legitChannel = new grpc.Client(svc.addr, grpc.credentials.createInsecure());
  // A stream window of 0: the server may send this peer no answer byte at all.
  const hostile = await RawClient.connect(svc.service.grpcPort, [[Setting.INITIAL_WINDOW_SIZE, 0]]);
  try {
    const Request = loadProtoFiles([REFLECTION_V1_PROTO]).lookupType('grpc.reflection.v1.ServerReflectionRequest');
    const ask = frameMessage(Request.encode(Request.fromObject({ fileContainingSymbol: 'envoy.service.ratelimit.v3.RateLimitService' })).finish());
    const headers = encodeHeaderBlock([
      [':method', 'POST'],
      [':scheme', 'http'],
      [':path', REFLECTION_V1_PATH],
      [':authority', 'localhost'],
      ['content-type', 'application/grpc'],
    ]);
    hostile.send(headersFrame(1, Flag.END_HEADERS, headers));
    // 500 requests (28 KB, within the stream's receive window), each asking for the RLS files (4.5 KB of answer).
    hostile.send(...Array.from({ length: 500 }, () => dataFrame(1, ask, 0)));
    const taken = (): number => hostile.frames.filter(isType(FrameType.WINDOW_UPDATE, 1)).reduce((sum, f) => sum + f.payload.readUInt32BE(0), 0) / ask.length;
    // Until the server stops taking them (however slow the machine).
    const waitFrom = Date.now();
    for (let last = -1, since = Date.now(); (Date.now() - since < 300 || taken() === 0) && Date.now() - waitFrom < 5_000; await pause(50)) {
      if (taken() !== last) [last, since] = [taken(), Date.now()];
    }
    // The server took requests only while their answers (4.5 KB each) fitted the held-output mark (64 KiB,
    // plus the one answer past it): about 15 of the 500.
    expect(taken()).toBeGreaterThan(0);
    expect(taken()).toBeLessThanOrEqual(20);
    const takenThen = taken();

    // The stalled stream is the one stream allowed: a legit client is refused until the idle timeout ends it.
    const { reflection, close } = reflectionClient(svc.addr, 'v1');
    try {
      let served: string[] | undefined;
      const started = Date.now();
      while (served === undefined && Date.now() - started < 5_000) {
        served = await reflection.listServices().catch(() => undefined);
        if (served === undefined) await pause(100);
      }
      expect(served?.sort()).toEqual(SERVICES);
      // Decisions went on beside it.
      expect((await svc.client.shouldRateLimit({ domain: 'edge', descriptors: [{ entries: [{ key: 'api_key', value: 'stalled' }] }] })).overallCode).toBe('OK');
      // No further request of the stalled peer was taken.
      expect(taken()).toBe(takenThen);
    } finally {
      close();
    }
  } finally {
    hostile.close();
    legitChannel.close();
    await svc.stop();
  }
});
