import type * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { HEALTH_PROTO, HEALTH_SERVICE, PROTO_DIR, RLS_PROTO, RLS_SERVICE } from './proto';

/**
 * grpc-js service definitions of the .proto files (through proto-loader), for the grpc-js server
 * and the CLI client. Apart from ./proto so that the default transport never loads grpc-js.
 */

// Decoded requests: enum names as strings (an undefined enum value stays a number), 64-bit integers
// as numbers, absent scalars as their defaults and absent messages as null.
export const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: false,
  longs: Number,
  enums: String,
  defaults: true,
  arrays: true,
  oneofs: true,
  includeDirs: [PROTO_DIR],
};

let grpcDefinitions: { rls: grpc.ServiceDefinition; health: grpc.ServiceDefinition } | undefined;

/** grpc-js service definitions of RateLimitService and Health (loaded on first use, then cached). */
export function grpcServiceDefinitions(): { rls: grpc.ServiceDefinition; health: grpc.ServiceDefinition } {
  if (!grpcDefinitions) {
    const pkg = protoLoader.loadSync([RLS_PROTO, HEALTH_PROTO], LOADER_OPTIONS);
    grpcDefinitions = {
      rls: pkg[RLS_SERVICE] as grpc.ServiceDefinition,
      health: pkg[HEALTH_SERVICE] as grpc.ServiceDefinition,
    };
  }
  return grpcDefinitions;
}
