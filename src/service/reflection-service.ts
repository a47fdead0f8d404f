import { GrpcStatus, MalformedMessageError } from '../errors';
import { HEALTH_PROTO, RLS_PROTO } from '../wire/proto';
import type { ProtoDescriptors } from '../wire/proto-descriptors';
import {
  decodeReflectionRequest,
  encodeReflectionResponse,
  REFLECTION_V1_PATH,
  REFLECTION_V1_PROTO,
  REFLECTION_V1ALPHA_PATH,
  REFLECTION_V1ALPHA_PROTO,
  type ReflectionAnswer,
  type ReflectionQuestion,
  type ReflectionRequest,
} from '../wire/reflection-codec';
import { RLQS_PROTO } from '../wire/rlqs-codec';
import type { StreamingHandlers, StreamingMethod } from './streaming';

/**
 * gRPC server reflection (grpc.reflection.v1 and v1alpha ServerReflectionInfo), as every gRPC
 * transport serves it: how grpcurl, ghz, grpcui and Postman learn the services of the gRPC port,
 * and build their calls, without .proto files. The answers come from the .proto files the server
 * loads (src/wire/proto-descriptors.ts): a file comes with every file it imports, directly or not;
 * an unknown file, symbol or extension is an error_response with NOT_FOUND, and the stream goes on,
 * as grpc's own servers answer.
 *
 * One reflection stream is a bidirectional stream a peer holds open, so it is bounded as the quota
 * streams are: streams open at once, in the process and on one connection (one more is refused with
 * RESOURCE_EXHAUSTED), bytes of one
 * request (RESOURCE_EXHAUSTED from the transport), requests on one stream (past it the stream ends
 * with RESOURCE_EXHAUSTED), and time without a request, the first one included (DEADLINE_EXCEEDED).
 * A peer that does not read its answers holds at most one answer past the transport's high-water
 * mark: its next request is not taken before the answers are.
 */

/** Caps and timing of the reflection streams (settings GRPC_REFLECTION_*). */
export interface ReflectionLimits {
  /** Streams open at once, both versions together; one more is refused with RESOURCE_EXHAUSTED. */
  readonly maxStreams: number;
  /** The same on one connection (a client holds one stream at a time), so that one peer cannot take them all. */
  readonly maxStreamsPerConnection: number;
  /** Largest request message, bytes. */
  readonly maxRequestBytes: number;
  /** Requests one stream may send; the next one ends it with RESOURCE_EXHAUSTED. */
  readonly maxRequestsPerStream: number;
  /** A stream without a request for this long (from its start, then from its last request) ends with DEADLINE_EXCEEDED. */
  readonly idleTimeoutMs: number;
}

/** The timers the idle timeout runs on: Node's, or a fake clock in unit tests. */
export interface ReflectionTimers {
  setTimeout<A>(fn: (arg: A) => void, ms: number, arg: A): unknown;
  clearTimeout(handle: unknown): void;
}

/** The files of every service on the gRPC port: RLS, RLQS, health and reflection itself. */
export const SERVED_PROTOS: readonly string[] = Object.freeze([RLS_PROTO, RLQS_PROTO, HEALTH_PROTO, REFLECTION_V1_PROTO, REFLECTION_V1ALPHA_PROTO]);

export interface ReflectionServiceOptions {
  readonly limits: ReflectionLimits;
  /** The .proto files described (default SERVED_PROTOS). */
  readonly files?: readonly string[];
  readonly timers?: ReflectionTimers;
}

const NODE_TIMERS: ReflectionTimers = {
  setTimeout: (fn, ms, arg) => setTimeout(fn, ms, arg).unref(),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

const NO_HANDLERS: StreamingHandlers = { onMessage: () => undefined };

export class ReflectionService {
  private readonly limits: ReflectionLimits;
  private readonly timers: ReflectionTimers;
  private readonly protoFiles: readonly string[];
  private built: ProtoDescriptors | undefined = undefined;
  private building: Promise<ProtoDescriptors> | undefined = undefined;
  private streams = 0;
  /** Open streams per connection (only connections with one). */
  private readonly perConnection = new Map<unknown, number>();

  constructor(options: ReflectionServiceOptions) {
    this.limits = options.limits;
    this.timers = options.timers ?? NODE_TIMERS;
    this.protoFiles = options.files ?? SERVED_PROTOS;
  }

  /**
   * The served files' descriptors, built on first use: the parsing (about 100 ms) and protobufjs'
   * descriptor types (0.5 MiB of heap) are spent only by a server someone inspects.
   */
  descriptors(): Promise<ProtoDescriptors> {
    this.building ??= import('../wire/proto-descriptors').then((m) => (this.built = m.describeProtoFiles(this.protoFiles)));
    return this.building;
  }

  /** Reflection streams open now. */
  get openStreams(): number {
    return this.streams;
  }

  /** The answer to one question. */
  async answer(question: ReflectionQuestion): Promise<ReflectionAnswer> {
    return answerFrom(await this.descriptors(), question);
  }

  /** The service as its two streaming methods (v1, v1alpha), for whichever gRPC transport serves them (./streaming.ts). */
  methods(): StreamingMethod[] {
    return [REFLECTION_V1_PATH, REFLECTION_V1ALPHA_PATH].map((path) => ({
      path,
      maxMessageBytes: this.limits.maxRequestBytes,
      open: (call) => this.open(call),
    }));
  }

  private open(call: Parameters<StreamingMethod['open']>[0]): StreamingHandlers {
    const { maxStreams, maxStreamsPerConnection, maxRequestsPerStream, idleTimeoutMs } = this.limits;
    if (this.streams >= maxStreams) {
      call.end(GrpcStatus.RESOURCE_EXHAUSTED, `more than ${maxStreams} reflection streams open (GRPC_REFLECTION_MAX_STREAMS)`);
      return NO_HANDLERS;
    }
    const connection = call.connection;
    const onConnection = this.perConnection.get(connection) ?? 0;
    if (onConnection >= maxStreamsPerConnection) {
      call.end(
        GrpcStatus.RESOURCE_EXHAUSTED,
        `more than ${maxStreamsPerConnection} reflection streams open on one connection (GRPC_REFLECTION_MAX_STREAMS_PER_CONNECTION)`,
      );
      return NO_HANDLERS;
    }
    this.streams++;
    this.perConnection.set(connection, onConnection + 1);
    const timers = this.timers;
    let requests = 0;
    let idle: unknown = undefined;
    // Set while an answer waits for the peer to read: the next request is held back until then.
    let drained: (() => void) | undefined = undefined;
    const timedOut = (): void => call.end(GrpcStatus.DEADLINE_EXCEEDED, `no reflection request for ${idleTimeoutMs} ms`);
    const arm = (): void => {
      if (idle !== undefined) timers.clearTimeout(idle);
      idle = timers.setTimeout(timedOut, idleTimeoutMs, undefined);
    };
    const release = (): void => {
      const resume = drained;
      drained = undefined;
      resume?.();
    };
    arm();
    return {
      onMessage: (bytes) => {
        if (++requests > maxRequestsPerStream) {
          call.end(
            GrpcStatus.RESOURCE_EXHAUSTED,
            `more than ${maxRequestsPerStream} requests on one reflection stream (GRPC_REFLECTION_MAX_REQUESTS_PER_STREAM)`,
          );
          return undefined;
        }
        arm();
        let request: ReflectionRequest;
        try {
          request = decodeReflectionRequest(bytes);
        } catch (err) {
          if (!(err instanceof MalformedMessageError)) throw err;
          call.end(GrpcStatus.INVALID_ARGUMENT, err.message);
          return undefined;
        }
        if (request.question.kind === 'none') {
          call.end(
            GrpcStatus.INVALID_ARGUMENT,
            'a reflection request must ask one of file_by_filename, file_containing_symbol, file_containing_extension, all_extension_numbers_of_type, list_services',
          );
          return undefined;
        }
        const respond = (d: ProtoDescriptors): void | Promise<void> => {
          if (call.closed || call.write(encodeReflectionResponse(request, answerFrom(d, request.question)))) return undefined;
          return new Promise<void>((resolve) => {
            drained = resolve;
          });
        };
        // The first question of the process waits for the descriptors to be built.
        return this.built === undefined ? this.descriptors().then(respond) : respond(this.built);
      },
      onWritable: release,
      // The client asks nothing more: every question has been answered (answers go out in order).
      onHalfClose: () => call.end(GrpcStatus.OK),
      onClose: () => {
        if (idle !== undefined) timers.clearTimeout(idle);
        this.streams--;
        const left = (this.perConnection.get(connection) ?? 1) - 1;
        if (left > 0) this.perConnection.set(connection, left);
        else this.perConnection.delete(connection);
        release();
      },
    };
  }
}

/** The answer to one question from the served files. */
function answerFrom(d: ProtoDescriptors, question: ReflectionQuestion): ReflectionAnswer {
  const files = (name: string): ReflectionAnswer => ({ files: d.withDependencies(name).map((f) => f.bytes) });
  switch (question.kind) {
    case 'list_services':
      return { services: d.services };
    case 'file_by_filename':
      return d.files.has(question.name) ? files(question.name) : notFound(`file not found: ${question.name}`);
    case 'file_containing_symbol': {
      const file = d.symbols.get(question.symbol);
      return file === undefined ? notFound(`symbol not found: ${question.symbol}`) : files(file);
    }
    case 'file_containing_extension':
      // The served files declare no extensions.
      return notFound(`extension not found: ${question.type} ${question.number}`);
    case 'all_extension_numbers_of_type':
      return d.messages.has(question.type) ? { extensionsOf: question.type, numbers: [] } : notFound(`type not found: ${question.type}`);
    case 'none':
      throw new Error('a reflection request without a question has no answer');
  }
}

function notFound(message: string): ReflectionAnswer {
  return { error: { code: GrpcStatus.NOT_FOUND, message } };
}
