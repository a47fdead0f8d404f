import * as grpc from '@grpc/grpc-js';
import type * as protobuf from 'protobufjs';
import { loadProtoFiles } from '../../src/wire/proto';
import { REFLECTION_V1_PATH, REFLECTION_V1_PROTO, REFLECTION_V1ALPHA_PATH } from '../../src/wire/reflection-codec';

/**
 * One gRPC server reflection stream from a grpc-js client, as grpcurl and ghz hold one: questions
 * written one after another on the same stream, each answer read in order. Messages as plain
 * objects (camelCase fields, bytes as Buffers).
 */

let types: { request: protobuf.Type; response: protobuf.Type } | undefined;

function reflectionTypes(): { request: protobuf.Type; response: protobuf.Type } {
  if (types === undefined) {
    const root = loadProtoFiles([REFLECTION_V1_PROTO]);
    types = {
      request: root.lookupType('grpc.reflection.v1.ServerReflectionRequest'),
      response: root.lookupType('grpc.reflection.v1.ServerReflectionResponse'),
    };
  }
  return types;
}

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
