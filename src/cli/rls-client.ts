import * as grpc from '@grpc/grpc-js';
import { grpcServiceDefinitions } from '../wire/grpc-definitions';
import type { WireCodeName, WireDuration, WireUnitName } from '../wire/proto';

/**
 * A typed grpc-js client for RateLimitService and grpc.health.v1, used by `slidegate client`
 * and by the integration tests. Responses are decoded with enum names and numeric 64-bit values.
 */

export interface RlsRequestInput {
  domain: string;
  descriptors: {
    entries: { key: string; value: string }[];
    limit?: { requestsPerUnit: number; unit: WireUnitName | number };
    /** Set (even to 0) to give this descriptor its own hit count. */
    hitsAddend?: { value: number | string };
  }[];
  hitsAddend?: number;
}

export interface DecodedDescriptorStatus {
  code: WireCodeName;
  currentLimit: { requestsPerUnit: number; unit: WireUnitName; name: string } | null;
  limitRemaining: number;
  durationUntilReset: WireDuration | null;
}

export interface DecodedRateLimitResponse {
  overallCode: WireCodeName;
  statuses: DecodedDescriptorStatus[];
  responseHeadersToAdd: { key: string; value: string }[];
  requestHeadersToAdd: { key: string; value: string }[];
  /** google.protobuf.Struct in proto-loader's object form; null when absent. */
  dynamicMetadata: { fields: Record<string, unknown> } | null;
}

export type HealthStatusName = 'UNKNOWN' | 'SERVING' | 'NOT_SERVING' | 'SERVICE_UNKNOWN';

/** A Watch stream: statuses in arrival order. */
export interface HealthWatch {
  /** The next status sent by the server; rejects after `timeoutMs` or when the stream fails. */
  next(timeoutMs?: number): Promise<HealthStatusName>;
  /** True once the server has ended the stream. */
  ended(): boolean;
  cancel(): void;
}

export interface RlsClient {
  shouldRateLimit(request: RlsRequestInput, options?: { deadlineMs?: number }): Promise<DecodedRateLimitResponse>;
  healthCheck(service: string, options?: { deadlineMs?: number }): Promise<HealthStatusName>;
  healthWatch(service: string): HealthWatch;
  close(): void;
}

export interface RlsClientOptions {
  /** host:port */
  readonly address: string;
  /** Plaintext when omitted. */
  readonly credentials?: grpc.ChannelCredentials;
  /** Largest response accepted, bytes (grpc-js default when omitted). */
  readonly maxReceiveBytes?: number;
}

type UnaryMethod = (req: unknown, meta: grpc.Metadata, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res: unknown) => void) => void;
type StreamMethod = (req: unknown, opts?: grpc.CallOptions) => grpc.ClientReadableStream<{ status: HealthStatusName }>;

/** Opens a channel to `address`; call close() when done. */
export function createRlsClient(options: RlsClientOptions): RlsClient {
  const { rls, health } = grpcServiceDefinitions();
  const credentials = options.credentials ?? grpc.credentials.createInsecure();
  const channelOptions: grpc.ChannelOptions = {};
  if (options.maxReceiveBytes !== undefined) channelOptions['grpc.max_receive_message_length'] = options.maxReceiveBytes;
  const RlsCtor = grpc.makeGenericClientConstructor(rls, 'RateLimitService');
  const HealthCtor = grpc.makeGenericClientConstructor(health, 'Health');
  const rlsClient = new RlsCtor(options.address, credentials, channelOptions) as unknown as Record<string, UnaryMethod> & grpc.Client;
  // Share one channel between both services.
  const healthClient = new HealthCtor(options.address, credentials, {
    ...channelOptions,
    channelOverride: rlsClient.getChannel(),
  }) as unknown as Record<string, UnaryMethod | StreamMethod> & grpc.Client;

  const unary = <T>(client: Record<string, unknown>, method: string, req: unknown, deadlineMs?: number): Promise<T> =>
    new Promise((resolve, reject) => {
      const opts: grpc.CallOptions = deadlineMs === undefined ? {} : { deadline: Date.now() + deadlineMs };
      (client[method] as UnaryMethod).call(client, req, new grpc.Metadata(), opts, (err, res) => (err ? reject(err) : resolve(res as T)));
    });

  return {
    shouldRateLimit: (request, opts) => unary<DecodedRateLimitResponse>(rlsClient, 'shouldRateLimit', request, opts?.deadlineMs),
    healthCheck: async (service, opts) => (await unary<{ status: HealthStatusName }>(healthClient, 'check', { service }, opts?.deadlineMs)).status,
    healthWatch: (service) => watchStream((healthClient.watch as StreamMethod).call(healthClient, { service })),
    close: () => {
      healthClient.close();
      rlsClient.close();
    },
  };
}

function watchStream(stream: grpc.ClientReadableStream<{ status: HealthStatusName }>): HealthWatch {
  const queue: HealthStatusName[] = [];
  const waiters: { resolve: (s: HealthStatusName) => void; reject: (e: Error) => void }[] = [];
  let failure: Error | undefined;
  let isEnded = false;
  stream.on('data', (msg: { status: HealthStatusName }) => {
    const waiter = waiters.shift();
    if (waiter) waiter.resolve(msg.status);
    else queue.push(msg.status);
  });
  const fail = (err: Error): void => {
    failure ??= err;
    for (const w of waiters.splice(0)) w.reject(failure);
  };
  stream.on('error', (err: Error) => fail(err));
  stream.on('end', () => {
    isEnded = true;
    fail(new Error('watch stream ended'));
  });
  return {
    next: (timeoutMs = 5_000) => {
      const queued = queue.shift();
      if (queued !== undefined) return Promise.resolve(queued);
      if (failure) return Promise.reject(failure);
      return new Promise<HealthStatusName>((resolve, reject) => {
        const timer = setTimeout(() => {
          const i = waiters.indexOf(waiter);
          if (i >= 0) waiters.splice(i, 1);
          reject(new Error(`no health update within ${timeoutMs} ms`));
        }, timeoutMs);
        const waiter = {
          resolve: (s: HealthStatusName) => {
            clearTimeout(timer);
            resolve(s);
          },
          reject: (e: Error) => {
            clearTimeout(timer);
            reject(e);
          },
        };
        waiters.push(waiter);
      });
    },
    ended: () => isEnded,
    cancel: () => stream.cancel(),
  };
}
