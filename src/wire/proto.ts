import * as fs from 'node:fs';
import * as path from 'node:path';
import * as protobuf from 'protobufjs';
import type { WireStruct } from './struct-codec';

/**
 * The wire format, loaded once from proto/ and shared by every edge: names, the protobufjs Root (for
 * transports and endpoints that encode by hand) and the wire shapes. grpc-js service definitions
 * are in ./grpc-definitions, so that only the grpc-js transport and clients load grpc-js.
 * Field names are lowerCamelCase, as in Envoy's JSON.
 */

export const RLS_PROTO = 'envoy/service/ratelimit/v3/rls.proto';
export const HEALTH_PROTO = 'grpc/health/v1/health.proto';
export const RLS_SERVICE = 'envoy.service.ratelimit.v3.RateLimitService';
export const HEALTH_SERVICE = 'grpc.health.v1.Health';

/** The directory holding the .proto files, found from both src/ (ts-jest) and dist/src/ (built). */
export const PROTO_DIR: string = findProtoDir();

function findProtoDir(): string {
  let dir = __dirname;
  for (let i = 0; i < 5; i++) {
    const candidate = path.join(dir, 'proto');
    if (fs.existsSync(path.join(candidate, RLS_PROTO))) return candidate;
    dir = path.dirname(dir);
  }
  throw new Error(`cannot find ${RLS_PROTO} in a proto/ directory above ${__dirname}`);
}

let root: protobuf.Root | undefined;

/** The same .proto files as a resolved protobufjs Root (camelCase fields), loaded once. */
export function protoRoot(): protobuf.Root {
  root ??= loadProtoFiles([RLS_PROTO, HEALTH_PROTO]);
  return root;
}

/**
 * A resolved protobufjs Root of `files`, paths relative to PROTO_DIR; fields are camelCase unless
 * `keepCase` (names as written, for descriptors). Each object's `filename` is its file's path under PROTO_DIR.
 */
export function loadProtoFiles(files: readonly string[], options: { readonly keepCase?: boolean } = {}): protobuf.Root {
  const r = new protobuf.Root();
  // Well-known google/protobuf types are built into protobufjs; everything else lives in PROTO_DIR.
  r.resolvePath = (_origin, target) => (target.startsWith('google/protobuf/') ? target : path.join(PROTO_DIR, target));
  r.loadSync([...files], { keepCase: options.keepCase === true });
  r.resolveAll();
  return r;
}

/* ---------- Wire shapes, as the server receives and sends them ---------- */

/** An enum field as decoded: its name, or the raw number when the value is not defined in the .proto. */
export type WireEnum<Name extends string> = Name | number;

export type WireUnitName = 'UNKNOWN' | 'SECOND' | 'MINUTE' | 'HOUR' | 'DAY' | 'MONTH' | 'YEAR' | 'WEEK';
export type WireCodeName = 'UNKNOWN' | 'OK' | 'OVER_LIMIT';

export interface WireEntry {
  key: string;
  value: string;
}

export interface WireDescriptor {
  entries: WireEntry[];
  limit?: { requestsPerUnit: number; unit: WireEnum<WireUnitName> } | null;
  hitsAddend?: { value?: number | string } | null;
}

export interface WireRateLimitRequest {
  domain: string;
  descriptors: WireDescriptor[];
  hitsAddend: number;
}

export interface WireDuration {
  seconds: number;
  nanos: number;
}

export interface WireDescriptorStatus {
  code: WireEnum<WireCodeName>;
  currentLimit?: { requestsPerUnit: number; unit: WireEnum<WireUnitName>; name: string } | null;
  limitRemaining: number;
  durationUntilReset?: WireDuration | null;
}

export interface WireHeaderValue {
  key: string;
  value: string;
}

export interface WireRateLimitResponse {
  overallCode: WireEnum<WireCodeName>;
  statuses: WireDescriptorStatus[];
  responseHeadersToAdd: WireHeaderValue[];
  requestHeadersToAdd?: WireHeaderValue[];
  dynamicMetadata?: WireStruct;
}

/** grpc.health.v1 status numbers. */
export const ServingStatusNumber = Object.freeze({ UNKNOWN: 0, SERVING: 1, NOT_SERVING: 2, SERVICE_UNKNOWN: 3 });
