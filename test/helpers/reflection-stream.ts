import * as grpc from '@grpc/grpc-js';
import { REFLECTION_V1_PATH, REFLECTION_V1ALPHA_PATH, reflectionTypes } from '../../src/wire/reflection-codec';

/**
 * One gRPC server reflection stream from a grpc-js client, as grpcurl and ghz hold one: questions
 * written one after another on the same stream, each answer read in order. Messages as plain
 * objects (camelCase fields, bytes as Buffers).
 */

export type ReflectionVersion = 'v1' | 'v1alpha';

export interface ReflectionResponse {
  validHost?: string;
  originalRequest?: Record<string, unknown>;
  fileDescriptorResponse?: { fileDescriptorProto: Buffer[] };
  listServicesResponse?: { service: { name: string }[] };
  allExtensionNumbersResponse?: { baseTypeName: string; extensionNumber: number[] };
  errorResponse?: { errorCode: number; errorMessage: string };
}

export interface ReflectionStream {
  /** Writes one request; resolves to its answer (answers arrive in order). */
  ask(request: Record<string, unknown>): Promise<ReflectionResponse>;
  /** Writes raw bytes as one request message (for malformed or oversized ones). */
  writeRaw(bytes: Buffer): void;
  /** Answers received so far. */
  readonly received: ReflectionResponse[];
  /** The call's status, once it ends. */
  readonly status: Promise<grpc.StatusObject>;
  end(): void;
  cancel(): void;
}

/** Opens one reflection stream on `client`. */
export function openReflectionStream(client: grpc.Client, version: ReflectionVersion = 'v1'): ReflectionStream {
  const { request, response } = reflectionTypes();
  const call = client.makeBidiStreamRequest(
    version === 'v1' ? REFLECTION_V1_PATH : REFLECTION_V1ALPHA_PATH,
    (b: Buffer) => b,
    (b: Buffer) => b,
  );
  const received: ReflectionResponse[] = [];
  const waiting: { resolve: (r: ReflectionResponse) => void; reject: (e: Error) => void }[] = [];
  call.on('data', (bytes: Buffer) => {
    const answer = response.toObject(response.decode(bytes), { defaults: false, arrays: true, longs: Number }) as ReflectionResponse;
    received.push(answer);
    waiting.shift()?.resolve(answer);
  });
  call.on('error', () => undefined);
  const status = new Promise<grpc.StatusObject>((resolve) =>
    call.on('status', (s: grpc.StatusObject) => {
      for (const w of waiting.splice(0)) w.reject(new Error(`stream ended: ${s.code} ${s.details}`));
      resolve(s);
    }),
  );
  return {
    ask: (message) =>
      new Promise((resolve, reject) => {
        waiting.push({ resolve, reject });
        call.write(Buffer.from(request.encode(request.fromObject(message)).finish()));
      }),
    writeRaw: (bytes) => {
      call.write(bytes);
    },
    received,
    status,
    end: () => call.end(),
    cancel: () => call.cancel(),
  };
}
