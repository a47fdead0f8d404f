import type * as protobuf from 'protobufjs';
import { MalformedMessageError } from '../errors';
import { loadProtoFiles } from './proto';

/**
 * Wire codec of gRPC server reflection (grpc.reflection.v1 and v1alpha, whose messages are the same
 * on the wire): ServerReflectionRequest bytes into a plain request, answers into
 * ServerReflectionResponse bytes. A client asks a few dozen questions per session, so protobufjs
 * does the work.
 */

export const REFLECTION_V1_PROTO = 'grpc/reflection/v1/reflection.proto';
export const REFLECTION_V1ALPHA_PROTO = 'grpc/reflection/v1alpha/reflection.proto';
/** The method's HTTP/2 :path, per version. */
export const REFLECTION_V1_PATH = '/grpc.reflection.v1.ServerReflection/ServerReflectionInfo';
export const REFLECTION_V1ALPHA_PATH = '/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo';

/** One reflection question. */
export type ReflectionQuestion =
  | { readonly kind: 'file_by_filename'; readonly name: string }
  | { readonly kind: 'file_containing_symbol'; readonly symbol: string }
  | { readonly kind: 'file_containing_extension'; readonly type: string; readonly number: number }
  | { readonly kind: 'all_extension_numbers_of_type'; readonly type: string }
  | { readonly kind: 'list_services' }
  /** The request names no question (or one this server does not know). */
  | { readonly kind: 'none' };

/** A decoded request: the question, and the message to echo in the answer (original_request). */
export interface ReflectionRequest {
  readonly host: string;
  readonly question: ReflectionQuestion;
  readonly original: protobuf.Message;
}

/** One answer. */
export type ReflectionAnswer =
  /** Serialized FileDescriptorProto messages, the file asked about first. */
  | { readonly files: readonly Uint8Array[] }
  | { readonly services: readonly string[] }
  | { readonly extensionsOf: string; readonly numbers: readonly number[] }
  | { readonly error: { readonly code: number; readonly message: string } };

interface Types {
  readonly request: protobuf.Type;
  readonly response: protobuf.Type;
}

let types: Types | undefined;

/** The v1 request and response types (v1alpha's are the same messages under another package). */
export function reflectionTypes(): Types {
  if (types === undefined) {
    const root = loadProtoFiles([REFLECTION_V1_PROTO]);
    types = {
      request: root.lookupType('grpc.reflection.v1.ServerReflectionRequest'),
      response: root.lookupType('grpc.reflection.v1.ServerReflectionResponse'),
    };
  }
  return types;
}

interface DecodedRequest {
  host?: string;
  messageRequest?: string;
  fileByFilename?: string;
  fileContainingSymbol?: string;
  fileContainingExtension?: { containingType?: string; extensionNumber?: number } | null;
  allExtensionNumbersOfType?: string;
}

/** Decodes one ServerReflectionRequest; throws MalformedMessageError when the bytes are not one. */
export function decodeReflectionRequest(bytes: Uint8Array): ReflectionRequest {
  const type = reflectionTypes().request;
  let message: protobuf.Message;
  try {
    message = type.decode(bytes);
  } catch (err) {
    throw new MalformedMessageError(`cannot decode ServerReflectionRequest: ${(err as Error).message}`);
  }
  // The oneof's name is set on the decoded object through protobufjs' virtual property.
  const m = message as unknown as DecodedRequest;
  return { host: m.host ?? '', question: question(m), original: message };
}

function question(m: DecodedRequest): ReflectionQuestion {
  switch (m.messageRequest) {
    case 'fileByFilename':
      return { kind: 'file_by_filename', name: m.fileByFilename ?? '' };
    case 'fileContainingSymbol':
      return { kind: 'file_containing_symbol', symbol: m.fileContainingSymbol ?? '' };
    case 'fileContainingExtension':
      return {
        kind: 'file_containing_extension',
        type: m.fileContainingExtension?.containingType ?? '',
        number: m.fileContainingExtension?.extensionNumber ?? 0,
      };
    case 'allExtensionNumbersOfType':
      return { kind: 'all_extension_numbers_of_type', type: m.allExtensionNumbersOfType ?? '' };
    case 'listServices':
      return { kind: 'list_services' };
    default:
      return { kind: 'none' };
  }
}

/** One ServerReflectionResponse (unframed) answering `request`. */
export function encodeReflectionResponse(request: ReflectionRequest, answer: ReflectionAnswer): Uint8Array {
  const type = reflectionTypes().response;
  const body: Record<string, unknown> = { validHost: request.host, originalRequest: request.original };
  if ('files' in answer) body.fileDescriptorResponse = { fileDescriptorProto: answer.files };
  else if ('services' in answer) body.listServicesResponse = { service: answer.services.map((name) => ({ name })) };
  else if ('extensionsOf' in answer) body.allExtensionNumbersResponse = { baseTypeName: answer.extensionsOf, extensionNumber: answer.numbers };
  else body.errorResponse = { errorCode: answer.error.code, errorMessage: answer.error.message };
  return type.encode(type.create(body)).finish();
}
