import * as fs from 'node:fs';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protobuf from 'protobufjs';

/**
 * The request data of test/load/ghz.json, read the way ghz reads it: protobuf JSON with the
 * .proto field names, Go template actions (`{{.WorkerID}}`) evaluated per call. Shared by the
 * integration test and `run-ghz.sh --smoke`, which sends each message once without ghz.
 */

/** The repository root, found from test/load (ts-jest) and from dist/test/load (built) alike. */
export const REPO_ROOT: string = findRepoRoot(__dirname);

function findRepoRoot(from: string): string {
  for (let dir = from; dir !== path.dirname(dir); dir = path.dirname(dir)) {
    if (fs.existsSync(path.join(dir, 'package.json')) && fs.existsSync(path.join(dir, 'test', 'load', 'ghz.json'))) return dir;
  }
  throw new Error(`no repository root above ${from}`);
}

export const GHZ_CONFIG_PATH = path.join(REPO_ROOT, 'test', 'load', 'ghz.json');

export interface GhzConfig {
  readonly proto: string;
  readonly 'import-paths': readonly string[];
  readonly call: string;
  readonly host: string;
  readonly insecure: boolean;
  readonly data: Record<string, unknown> | readonly Record<string, unknown>[];
  readonly [option: string]: unknown;
}

/** Reads a ghz JSON config (default: test/load/ghz.json). */
export function loadGhzConfig(file: string = GHZ_CONFIG_PATH): GhzConfig {
  return JSON.parse(fs.readFileSync(file, 'utf8')) as GhzConfig;
}

/** The messages ghz cycles through: `data` as an array, a single object being a one-element cycle. */
export function ghzMessages(config: GhzConfig): Record<string, unknown>[] {
  return Array.isArray(config.data) ? [...config.data] : [config.data as Record<string, unknown>];
}

/** Values for ghz's call template variables, fixed so that a test's requests are reproducible. */
export interface CallTemplateValues {
  readonly WorkerID?: string;
  readonly RequestNumber?: number;
  readonly [name: string]: string | number | undefined;
}

/**
 * Evaluates the `{{.Name}}` actions in every string of a message, as ghz does per call.
 * Throws on an action it does not know, so a typo in ghz.json fails here rather than under load.
 */
export function renderCallTemplate<T>(message: T, values: CallTemplateValues): T {
  const render = (s: string): string =>
    s.replace(/\{\{\s*\.(\w+)\s*\}\}/g, (_m, name: string) => {
      const v = values[name];
      if (v === undefined) throw new Error(`ghz data uses {{.${name}}}, which has no value here`);
      return String(v);
    });
  const walk = (v: unknown): unknown => {
    if (typeof v === 'string') {
      const out = render(v);
      if (out.includes('{{')) throw new Error(`unsupported template action in "${v}"`);
      return out;
    }
    if (Array.isArray(v)) return v.map(walk);
    if (v !== null && typeof v === 'object') {
      return Object.fromEntries(Object.entries(v as Record<string, unknown>).map(([k, x]) => [k, walk(x)]));
    }
    return v;
  };
  return walk(message) as T;
}

/**
 * Loads the config's proto file with its import paths as protobufjs does not on its own: paths
 * relative to the repository root, google/protobuf/* from protobufjs' built-in copies.
 * Field names stay as written in the .proto (snake_case), like ghz's JSON.
 */
export function loadGhzProto(config: GhzConfig): protobuf.Root {
  const importPaths = config['import-paths'].map((p) => path.resolve(REPO_ROOT, p));
  const root = new protobuf.Root();
  root.resolvePath = (origin, target) => {
    if (target.startsWith('google/protobuf/')) return target;
    if (path.isAbsolute(target) && fs.existsSync(target)) return target;
    for (const dir of importPaths) {
      const candidate = path.join(dir, target);
      if (fs.existsSync(candidate)) return candidate;
    }
    return protobuf.util.path.resolve(origin, target);
  };
  root.loadSync(path.resolve(REPO_ROOT, config.proto), { keepCase: true });
  root.resolveAll();
  return root;
}

/** The request and response types of `config.call` ("package.Service.Method"). */
export function callTypes(root: protobuf.Root, call: string): { request: protobuf.Type; response: protobuf.Type; path: string } {
  const cut = call.lastIndexOf('.');
  const service = root.lookupService(call.slice(0, cut));
  const method = service.methods[call.slice(cut + 1)];
  if (!method) throw new Error(`${call}: no such method in ${service.fullName}`);
  method.resolve();
  return {
    request: method.resolvedRequestType as protobuf.Type,
    response: method.resolvedResponseType as protobuf.Type,
    path: `/${service.fullName.replace(/^\./, '')}/${method.name}`,
  };
}

const WRAPPERS = new Set(['Double', 'Float', 'Int64', 'UInt64', 'Int32', 'UInt32', 'Bool', 'String', 'Bytes'].map((t) => `.google.protobuf.${t}Value`));

/**
 * Converts one protobuf-JSON message to a protobufjs message, strictly: an unknown field, an
 * undefined enum name or a wrong shape throws with its path (protobufjs' fromObject would drop them
 * silently, while ghz rejects them).
 */
export function fromProtoJson(type: protobuf.Type, json: unknown, at = type.name): protobuf.Message {
  return type.fromObject(toProtobufjsObject(type, json, at));
}

function toProtobufjsObject(type: protobuf.Type, json: unknown, at: string): Record<string, unknown> {
  if (json === null || typeof json !== 'object' || Array.isArray(json)) throw new Error(`${at}: expected an object`);
  const out: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(json as Record<string, unknown>)) {
    const field = type.fields[name] ?? type.fieldsArray.find((f) => camel(f.name) === name);
    if (!field) throw new Error(`${at}.${name}: no such field in ${type.fullName}`);
    field.resolve();
    const convert = (v: unknown, where: string): unknown => fieldValue(field, v, where);
    if (field.repeated) {
      if (!Array.isArray(value)) throw new Error(`${at}.${name}: expected an array`);
      out[field.name] = value.map((v, i) => convert(v, `${at}.${name}[${i}]`));
    } else {
      out[field.name] = convert(value, `${at}.${name}`);
    }
  }
  return out;
}

function fieldValue(field: protobuf.Field, value: unknown, at: string): unknown {
  const resolved = field.resolvedType;
  if (resolved instanceof protobuf.Enum) {
    if (typeof value === 'string' && !(value in resolved.values)) throw new Error(`${at}: "${value}" is not a ${resolved.fullName} value`);
    if (typeof value !== 'string' && typeof value !== 'number') throw new Error(`${at}: expected an enum name or number`);
    return value;
  }
  if (resolved instanceof protobuf.Type) {
    // protobuf JSON writes wrapper messages as their bare value.
    if (WRAPPERS.has(resolved.fullName) && (value === null || typeof value !== 'object')) return { value };
    return toProtobufjsObject(resolved, value, at);
  }
  const expected = field.type === 'string' || field.type === 'bytes' ? 'string' : field.type === 'bool' ? 'boolean' : 'number';
  // 64-bit integers may be strings in protobuf JSON.
  const ok = typeof value === expected || (expected === 'number' && typeof value === 'string' && /^-?\d+$/.test(value));
  if (!ok) throw new Error(`${at}: expected a ${field.type}, got ${JSON.stringify(value)}`);
  return value;
}

function camel(name: string): string {
  return name.replace(/_([a-z])/g, (_m, c: string) => c.toUpperCase());
}

/** A grpc-js client for one unary method, encoding with protobufjs so that field names stay snake_case. */
export function unaryCaller(
  host: string,
  types: { request: protobuf.Type; response: protobuf.Type; path: string },
): { call(message: protobuf.Message): Promise<Record<string, unknown>>; close(): void } {
  const definition = {
    method: {
      path: types.path,
      requestStream: false,
      responseStream: false,
      requestSerialize: (m: protobuf.Message) => Buffer.from(types.request.encode(m).finish()),
      requestDeserialize: (b: Buffer) => types.request.decode(b),
      responseSerialize: (m: protobuf.Message) => Buffer.from(types.response.encode(m).finish()),
      responseDeserialize: (b: Buffer) => types.response.toObject(types.response.decode(b), { enums: String, longs: Number, defaults: true, arrays: true }),
    },
  };
  const Client = grpc.makeGenericClientConstructor(definition, 'LoadTarget');
  const client = new Client(host, grpc.credentials.createInsecure());
  return {
    call: (message) =>
      new Promise((resolve, reject) => {
        client.method(message, { deadline: Date.now() + 5000 }, (err: grpc.ServiceError | null, res: Record<string, unknown>) =>
          err ? reject(err) : resolve(res),
        );
      }),
    close: () => client.close(),
  };
}

/** `node dist/test/load/ghz-data.js HOST [CONFIG]`: sends each message of the ghz data once and prints the answers. */
async function main(): Promise<void> {
  const [host, file] = process.argv.slice(2);
  if (!host) throw new Error('usage: ghz-data HOST [CONFIG]');
  const config = loadGhzConfig(file ?? GHZ_CONFIG_PATH);
  const types = callTypes(loadGhzProto(config), config.call);
  const caller = unaryCaller(host, types);
  try {
    for (const [i, raw] of ghzMessages(config).entries()) {
      const message = fromProtoJson(types.request, renderCallTemplate(raw, { WorkerID: 'g0c0', RequestNumber: i }), `data[${i}]`);
      const answer = await caller.call(message);
      const statuses = (answer.statuses as { code: string }[]).map((s) => s.code).join(',');
      console.log(`data[${i}] ${String(answer.overall_code)} [${statuses}]`);
    }
  } finally {
    caller.close();
  }
}

if (require.main === module) {
  main().catch((err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  });
}
