import * as descriptor from 'protobufjs/ext/descriptor';
import { GrpcStatus } from '../../../src/errors';
import { ReflectionService, type ReflectionLimits } from '../../../src/service/reflection-service';
import type { StreamingCall, StreamingHandlers } from '../../../src/service/streaming';
import { loadProtoFiles } from '../../../src/wire/proto';
import { REFLECTION_V1_PATH, REFLECTION_V1_PROTO, REFLECTION_V1ALPHA_PATH } from '../../../src/wire/reflection-codec';
import { FakeTimers } from '../../helpers/fake-timers';

/** The reflection service without a transport: request bytes in, answers and statuses out, on fake timers. */

const LIMITS: ReflectionLimits = { maxStreams: 2, maxStreamsPerConnection: 2, maxRequestBytes: 4096, maxRequestsPerStream: 5, idleTimeoutMs: 1_000 };

const root = loadProtoFiles([REFLECTION_V1_PROTO]);
const Request = root.lookupType('grpc.reflection.v1.ServerReflectionRequest');
const Response = root.lookupType('grpc.reflection.v1.ServerReflectionResponse');

const request = (message: Record<string, unknown>): Buffer => Buffer.from(Request.encode(Request.fromObject(message)).finish());

/** A call as a transport would drive it: what the service wrote, how it ended. */
class FakeCall implements StreamingCall {
  readonly written: Record<string, any>[] = [];
  ended: { code: number; details?: string } | undefined;
  writable = true;
  handlers!: StreamingHandlers;
  closed = false;
  constructor(readonly connection: unknown = {}) {}

  header(): string | undefined {
    return undefined;
  }

  write(message: Uint8Array): boolean {
    this.written.push(Response.toObject(Response.decode(message), { arrays: true }));
    return this.writable;
  }

  readonly pendingBytes = 0;

  end(code: number, details?: string): void {
    if (this.closed) return;
    this.ended = { code, details };
    this.closed = true;
    this.handlers?.onClose?.('ended');
  }

  cut(code: number, details: string): void {
    this.end(code, details);
  }

  /** The peer goes away (cancelled). */
  cancel(): void {
    this.closed = true;
    this.handlers.onClose?.('cancelled');
  }
}

/** A service whose descriptors are built (as after its first question), and its two methods. */
async function setup(limits: Partial<ReflectionLimits> = {}) {
  const timers = new FakeTimers();
  const service = new ReflectionService({ limits: { ...LIMITS, ...limits }, timers });
  const [v1, v1alpha] = service.methods();
  const open = (method = v1, connection?: unknown): FakeCall => {
    const call = new FakeCall(connection);
    call.handlers = method.open(call);
    return call;
  };
  await service.descriptors();
  return { timers, service, v1, v1alpha, open };
}

const names = (answer: Record<string, any>): string[] =>
  (answer.fileDescriptorResponse.fileDescriptorProto as Uint8Array[]).map(
    (b) => (descriptor.FileDescriptorProto.decode(b) as unknown as { name: string }).name,
  );

test('both versions are served, each capped at GRPC_REFLECTION_MAX_REQUEST_BYTES', async () => {
  const { v1, v1alpha } = await setup();
  expect([v1.path, v1alpha.path]).toEqual([REFLECTION_V1_PATH, REFLECTION_V1ALPHA_PATH]);
  expect(v1.maxMessageBytes).toBe(4096);
  expect(v1alpha.maxMessageBytes).toBe(4096);
});

test('answers name the services, serve a file with every file it imports, and find any symbol of it', async () => {
  const { service } = await setup();
  expect(await service.answer({ kind: 'list_services' })).toEqual({
    services: [
      'envoy.service.rate_limit_quota.v3.RateLimitQuotaService',
      'envoy.service.ratelimit.v3.RateLimitService',
      'grpc.health.v1.Health',
      'grpc.reflection.v1.ServerReflection',
      'grpc.reflection.v1alpha.ServerReflection',
    ],
  });
  const quota = await service.answer({ kind: 'file_by_filename', name: 'envoy/service/rate_limit_quota/v3/rlqs.proto' });
  const files = (quota as { files: Uint8Array[] }).files.map((b) => (descriptor.FileDescriptorProto.decode(b) as unknown as { name: string }).name);
  expect(files).toEqual([
    'envoy/service/rate_limit_quota/v3/rlqs.proto',
    'envoy/type/v3/ratelimit_strategy.proto',
    'envoy/type/v3/ratelimit_unit.proto',
    'envoy/type/v3/token_bucket.proto',
    'google/protobuf/duration.proto',
    'google/protobuf/wrappers.proto',
  ]);
  for (const symbol of [
    'envoy.service.ratelimit.v3.RateLimitService',
    'envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit',
    'envoy.service.ratelimit.v3.RateLimitRequest',
    'envoy.service.ratelimit.v3.RateLimitRequest.hits_addend',
    'envoy.service.ratelimit.v3.RateLimitResponse.Quota.expiration_specifier',
    'envoy.service.ratelimit.v3.RateLimitResponse.Code',
    // Enum values are scoped beside their enum.
    'envoy.service.ratelimit.v3.RateLimitResponse.OVER_LIMIT',
  ]) {
    const answer = (await service.answer({ kind: 'file_containing_symbol', symbol })) as { files: Uint8Array[] };
    expect((descriptor.FileDescriptorProto.decode(answer.files[0]) as unknown as { name: string }).name).toBe('envoy/service/ratelimit/v3/rls.proto');
  }
  expect(await service.answer({ kind: 'file_containing_symbol', symbol: 'google.protobuf.Value' })).toMatchObject({ files: [expect.any(Uint8Array)] });
});

test('unknown files, symbols and extensions are NOT_FOUND answers; a known message has no extension numbers', async () => {
  const { service } = await setup();
  expect(await service.answer({ kind: 'file_by_filename', name: 'rls.proto' })).toEqual({
    error: { code: GrpcStatus.NOT_FOUND, message: 'file not found: rls.proto' },
  });
  expect(await service.answer({ kind: 'file_containing_symbol', symbol: 'envoy.service.ratelimit.v3' })).toEqual({
    error: { code: GrpcStatus.NOT_FOUND, message: 'symbol not found: envoy.service.ratelimit.v3' },
  });
  expect(await service.answer({ kind: 'file_containing_extension', type: 'grpc.health.v1.HealthCheckRequest', number: 1000 })).toEqual({
    error: { code: GrpcStatus.NOT_FOUND, message: 'extension not found: grpc.health.v1.HealthCheckRequest 1000' },
  });
  expect(await service.answer({ kind: 'all_extension_numbers_of_type', type: 'grpc.health.v1.HealthCheckRequest' })).toEqual({
    extensionsOf: 'grpc.health.v1.HealthCheckRequest',
    numbers: [],
  });
  expect(await service.answer({ kind: 'all_extension_numbers_of_type', type: 'grpc.health.v1.Health' })).toEqual({
    error: { code: GrpcStatus.NOT_FOUND, message: 'type not found: grpc.health.v1.Health' },
  });
});

test('a stream answers each request in order, echoing it and its host; the half-close ends it with OK', async () => {
  const { open } = await setup();
  const call = open();
  call.handlers.onMessage(request({ host: 'h:1', listServices: '*' }));
  call.handlers.onMessage(request({ fileByFilename: 'nope' }));
  call.handlers.onMessage(request({ fileContainingSymbol: 'grpc.health.v1.Health.Watch' }));
  expect(call.written.map((w) => Object.keys(w).filter((k) => k.endsWith('Response')))).toEqual([
    ['listServicesResponse'],
    ['errorResponse'],
    ['fileDescriptorResponse'],
  ]);
  expect(call.written[0]).toMatchObject({ validHost: 'h:1', originalRequest: { host: 'h:1', listServices: '*' } });
  expect(names(call.written[2])).toEqual(['grpc/health/v1/health.proto']);
  call.handlers.onHalfClose!();
  expect(call.ended).toEqual({ code: GrpcStatus.OK, details: undefined });
});

test('a request that is not one, or asks nothing, ends its stream with INVALID_ARGUMENT', async () => {
  const { open } = await setup();
  const garbage = open();
  garbage.handlers.onMessage(Buffer.from([0x22, 0x09, 0x01]));
  expect(garbage.ended).toMatchObject({ code: GrpcStatus.INVALID_ARGUMENT, details: expect.stringContaining('cannot decode ServerReflectionRequest') });
  const empty = open();
  empty.handlers.onMessage(request({ host: 'h' }));
  expect(empty.ended).toMatchObject({ code: GrpcStatus.INVALID_ARGUMENT, details: expect.stringContaining('must ask one of') });
  expect(empty.written).toEqual([]);
});

test('streams past GRPC_REFLECTION_MAX_STREAMS (both versions together) are refused with RESOURCE_EXHAUSTED until one closes', async () => {
  const { service, open, v1alpha } = await setup();
  const a = open();
  open(v1alpha);
  expect(service.openStreams).toBe(2);
  const refused = open();
  expect(refused.ended).toEqual({ code: GrpcStatus.RESOURCE_EXHAUSTED, details: 'more than 2 reflection streams open (GRPC_REFLECTION_MAX_STREAMS)' });
  expect(service.openStreams).toBe(2);
  a.cancel();
  expect(service.openStreams).toBe(1);
  expect(open().ended).toBeUndefined();
});

test('the request past GRPC_REFLECTION_MAX_REQUESTS_PER_STREAM ends the stream with RESOURCE_EXHAUSTED, unanswered', async () => {
  const { open } = await setup();
  const call = open();
  for (let i = 0; i < 5; i++) call.handlers.onMessage(request({ listServices: '' }));
  expect(call.ended).toBeUndefined();
  call.handlers.onMessage(request({ listServices: '' }));
  expect(call.written).toHaveLength(5);
  expect(call.ended).toEqual({
    code: GrpcStatus.RESOURCE_EXHAUSTED,
    details: 'more than 5 requests on one reflection stream (GRPC_REFLECTION_MAX_REQUESTS_PER_STREAM)',
  });
});

test('a stream without a request for GRPC_REFLECTION_IDLE_TIMEOUT ends with DEADLINE_EXCEEDED, the first request included; each request restarts the wait', async () => {
  const { timers, service, open } = await setup();
  const silent = open();
  timers.advance(999);
  expect(silent.ended).toBeUndefined();
  timers.advance(1);
  expect(silent.ended).toEqual({ code: GrpcStatus.DEADLINE_EXCEEDED, details: 'no reflection request for 1000 ms' });
  expect(service.openStreams).toBe(0);

  const asking = open();
  for (let i = 0; i < 4; i++) {
    timers.advance(900);
    asking.handlers.onMessage(request({ listServices: '' }));
  }
  expect(asking.ended).toBeUndefined();
  timers.advance(1_000);
  expect(asking.ended?.code).toBe(GrpcStatus.DEADLINE_EXCEEDED);
  // A closed stream leaves no timer behind.
  const cancelled = open();
  cancelled.cancel();
  expect(timers.pendingTimers).toBe(0);
});

test('while the peer does not read, the next request is held until it does (or the stream closes)', async () => {
  const { open } = await setup();
  const call = open();
  call.writable = false;
  const held = call.handlers.onMessage(request({ listServices: '' }));
  expect(held).toBeInstanceOf(Promise);
  let released = false;
  void (held as Promise<void>).then(() => (released = true));
  await Promise.resolve();
  expect(released).toBe(false);
  call.writable = true;
  call.handlers.onWritable!();
  await held;
  expect(released).toBe(true);
  expect(call.handlers.onMessage(request({ listServices: '' }))).toBeUndefined();

  call.writable = false;
  const closing = call.handlers.onMessage(request({ listServices: '' }));
  call.cancel();
  await expect(closing).resolves.toBeUndefined();
});

test('the first question waits for the descriptors, built once for every stream', async () => {
  const service = new ReflectionService({ limits: LIMITS, timers: new FakeTimers() });
  const [v1, v1alpha] = service.methods();
  const a = new FakeCall();
  a.handlers = v1.open(a);
  const b = new FakeCall();
  b.handlers = v1alpha.open(b);
  const first = a.handlers.onMessage(request({ listServices: '' }));
  const second = b.handlers.onMessage(request({ fileByFilename: 'grpc/health/v1/health.proto' }));
  expect(first).toBeInstanceOf(Promise);
  expect(a.written).toEqual([]);
  await Promise.all([first, second]);
  expect(a.written[0].listServicesResponse.service).toHaveLength(5);
  expect(names(b.written[0])).toEqual(['grpc/health/v1/health.proto']);
  expect(await service.descriptors()).toBe(await service.descriptors());
  // Built: answered at once.
  expect(a.handlers.onMessage(request({ listServices: '' }))).toBeUndefined();
  expect(a.written).toHaveLength(2);
});

test('streams past GRPC_REFLECTION_MAX_STREAMS_PER_CONNECTION on one connection are refused, while another connection opens its own', async () => {
  const { service, open, v1alpha } = await setup({ maxStreams: 10, maxStreamsPerConnection: 2 });
  const peer = {};
  const first = open(undefined, peer);
  open(v1alpha, peer);
  const refused = open(undefined, peer);
  expect(refused.ended).toEqual({
    code: GrpcStatus.RESOURCE_EXHAUSTED,
    details: 'more than 2 reflection streams open on one connection (GRPC_REFLECTION_MAX_STREAMS_PER_CONNECTION)',
  });
  expect(open(undefined, {}).ended).toBeUndefined();
  expect(service.openStreams).toBe(3);
  first.cancel();
  expect(open(undefined, peer).ended).toBeUndefined();
});
