import * as path from 'node:path';
import * as protobuf from 'protobufjs';
import * as descriptor from 'protobufjs/ext/descriptor';
import { loadProtoFiles, PROTO_DIR } from './proto';

/**
 * The .proto files the server serves, as google.protobuf.FileDescriptorProto messages: what gRPC
 * server reflection answers with, so that grpcurl, ghz and the like need no .proto files.
 *
 * protobufjs parses the files (the same ones the codecs load); the descriptors are assembled here
 * from its reflection objects, one per source file, because its own Root#toDescriptor makes one per
 * package, named after it, without the `dependency` list, with relative type names and map entries
 * named unlike protoc's (`Fields`, not `FieldsEntry`): reflection clients link files by their
 * imports and Go's descriptor validation rejects such map entries. Here a file keeps its path under
 * proto/ as its name, lists the files it refers to as its dependencies, and names every type
 * fully-qualified. The well-known google/protobuf files are protobufjs' bundled copies, under their
 * usual names. Every served file is proto3.
 */

/** One file: its name (as imported) and its encoded FileDescriptorProto. */
export interface ProtoFile {
  readonly name: string;
  readonly bytes: Uint8Array;
  /** Names of the files it imports. */
  readonly dependencies: readonly string[];
}

/** What reflection looks things up in. */
export interface ProtoDescriptors {
  /** Fully-qualified service names, sorted. */
  readonly services: readonly string[];
  readonly files: ReadonlyMap<string, ProtoFile>;
  /** Every fully-qualified symbol (service, method, message, field, oneof, enum, enum value) -> its file's name. */
  readonly symbols: ReadonlyMap<string, string>;
  /** Fully-qualified message names: the types extension requests may name. */
  readonly messages: ReadonlySet<string>;
  /** A file and every file it imports, directly or not, each once: the file first, then its imports depth-first. */
  withDependencies(name: string): ProtoFile[];
}

/** The files asked for and every file they import, as descriptors. */
export function describeProtoFiles(files: readonly string[]): ProtoDescriptors {
  const root = loadProtoFiles(files, { keepCase: true });
  const bundled = bundledFiles(root);
  const fileOf = (obj: protobuf.ReflectionObject): string => {
    if (obj.filename) return path.relative(PROTO_DIR, obj.filename).split(path.sep).join('/');
    const name = bundled.get(obj.fullName);
    if (name === undefined) throw new Error(`${obj.fullName}: no file declares it`);
    return name;
  };

  const drafts = new Map<string, FileDraft>();
  const symbols = new Map<string, string>();
  const messages = new Set<string>();
  const services: string[] = [];
  const draftOf = (obj: protobuf.ReflectionObject): FileDraft => {
    const name = fileOf(obj);
    let draft = drafts.get(name);
    if (draft === undefined) {
      draft = { name, package: packageOf(obj), dependencies: new Set(), messageType: [], enumType: [], service: [] };
      drafts.set(name, draft);
    }
    return draft;
  };
  const refer = (draft: FileDraft, target: protobuf.ReflectionObject): string => {
    const file = fileOf(target);
    if (file !== draft.name) draft.dependencies.add(file);
    return target.fullName;
  };

  const describeType = (type: protobuf.Type, draft: FileDraft): descriptor.IDescriptorProto => {
    const name = symbol(type);
    symbols.set(name, draft.name);
    messages.add(name);
    const oneofs = type.oneofsArray;
    for (const oneof of oneofs) symbols.set(`${name}.${oneof.name}`, draft.name);
    const nestedType: descriptor.IDescriptorProto[] = [];
    const field = type.fieldsArray.map((f): descriptor.IFieldDescriptorProto => {
      const fieldName = f.protoName ?? f.name;
      symbols.set(`${name}.${fieldName}`, draft.name);
      if (f.options?.proto3_optional === true) throw new Error(`${name}.${fieldName}: proto3 optional fields are not described`);
      const out: descriptor.IFieldDescriptorProto = { name: fieldName, number: f.id, jsonName: jsonName(fieldName), label: f.repeated || f.map ? 3 : 1 };
      if (f instanceof protobuf.MapField) {
        // A map is a repeated field of a nested entry message, named as protoc names it.
        const entry = `${upperCamel(fieldName)}Entry`;
        symbols.set(`${name}.${entry}`, draft.name);
        messages.add(`${name}.${entry}`);
        nestedType.push({
          name: entry,
          field: [
            { name: 'key', number: 1, jsonName: 'key', label: 1, type: scalarType(f.keyType, f) },
            { name: 'value', number: 2, jsonName: 'value', label: 1, ...valueType(f, draft) },
          ],
          options: { mapEntry: true },
        });
        return { ...out, type: 11, typeName: `${type.fullName}.${entry}` };
      }
      const oneofIndex = f.partOf === null ? undefined : oneofs.indexOf(f.partOf);
      return { ...out, ...valueType(f, draft), ...(oneofIndex === undefined ? {} : { oneofIndex }) };
    });
    const enumType: descriptor.IEnumDescriptorProto[] = [];
    for (const nested of type.nestedArray) {
      if (nested instanceof protobuf.Type) nestedType.push(describeType(nested, draft));
      else if (nested instanceof protobuf.Enum) enumType.push(describeEnum(nested, draft));
      else throw new Error(`${nested.fullName}: extensions and other nested declarations are not described`);
    }
    return { name: type.name, field, nestedType, enumType, oneofDecl: oneofs.map((o) => ({ name: o.name })) };
  };

  const valueType = (f: protobuf.Field, draft: FileDraft): descriptor.IFieldDescriptorProto => {
    const resolved = f.resolvedType;
    if (resolved instanceof protobuf.Type) return { type: 11, typeName: refer(draft, resolved) };
    if (resolved instanceof protobuf.Enum) return { type: 14, typeName: refer(draft, resolved) };
    return { type: scalarType(f.type, f) };
  };

  const describeEnum = (e: protobuf.Enum, draft: FileDraft): descriptor.IEnumDescriptorProto => {
    const name = symbol(e);
    symbols.set(name, draft.name);
    // Enum values are scoped beside their enum (C++ rules), as protoc and every reflection server index them.
    const scope = name.slice(0, name.lastIndexOf('.'));
    const value = Object.entries(e.values).map(([valueName, number]) => {
      symbols.set(`${scope}.${valueName}`, draft.name);
      return { name: valueName, number };
    });
    return { name: e.name, value };
  };

  const describeService = (service: protobuf.Service, draft: FileDraft): descriptor.IServiceDescriptorProto => {
    const name = symbol(service);
    symbols.set(name, draft.name);
    services.push(name);
    const method = service.methodsArray.map((m) => {
      m.resolve();
      symbols.set(`${name}.${m.name}`, draft.name);
      // As protoc writes them: the streaming flags only when set.
      return {
        name: m.name,
        inputType: refer(draft, m.resolvedRequestType!),
        outputType: refer(draft, m.resolvedResponseType!),
        ...(m.requestStream === true ? { clientStreaming: true } : {}),
        ...(m.responseStream === true ? { serverStreaming: true } : {}),
      };
    });
    return { name: service.name, method };
  };

  const walk = (ns: protobuf.NamespaceBase): void => {
    for (const nested of ns.nestedArray) {
      if (nested instanceof protobuf.Type) draftOf(nested).messageType.push(describeType(nested, draftOf(nested)));
      else if (nested instanceof protobuf.Enum) draftOf(nested).enumType.push(describeEnum(nested, draftOf(nested)));
      else if (nested instanceof protobuf.Service) draftOf(nested).service.push(describeService(nested, draftOf(nested)));
      else if (nested instanceof protobuf.Namespace) walk(nested);
      else throw new Error(`${nested.fullName}: top-level extensions are not described`);
    }
  };
  walk(root);

  const encoded = new Map<string, ProtoFile>();
  for (const draft of drafts.values()) {
    const dependency = [...draft.dependencies].sort();
    const message = descriptor.FileDescriptorProto.fromObject({
      name: draft.name,
      package: draft.package,
      dependency,
      messageType: draft.messageType,
      enumType: draft.enumType,
      service: draft.service,
      syntax: 'proto3',
    });
    encoded.set(draft.name, { name: draft.name, bytes: descriptor.FileDescriptorProto.encode(message).finish(), dependencies: dependency });
  }
  return { services: services.sort(), files: encoded, symbols, messages, withDependencies: (name) => withDependencies(encoded, name) };
}

function withDependencies(files: ReadonlyMap<string, ProtoFile>, name: string): ProtoFile[] {
  const out: ProtoFile[] = [];
  const seen = new Set<string>();
  const visit = (fileName: string): void => {
    if (seen.has(fileName)) return;
    seen.add(fileName);
    const file = files.get(fileName);
    if (file === undefined) return;
    out.push(file);
    for (const dependency of file.dependencies) visit(dependency);
  };
  visit(name);
  return out;
}

interface FileDraft {
  readonly name: string;
  readonly package: string;
  readonly dependencies: Set<string>;
  readonly messageType: descriptor.IDescriptorProto[];
  readonly enumType: descriptor.IEnumDescriptorProto[];
  readonly service: descriptor.IServiceDescriptorProto[];
}

/** `.a.b.C` -> `a.b.C`. */
function symbol(obj: protobuf.ReflectionObject): string {
  return obj.fullName.slice(1);
}

/** The package of a top-level declaration: its enclosing namespaces. */
function packageOf(obj: protobuf.ReflectionObject): string {
  const name = symbol(obj);
  const cut = name.lastIndexOf('.');
  return cut < 0 ? '' : name.slice(0, cut);
}

/** protobufjs' bundled google/protobuf files hold no file name: the file of each of their types, from the bundle itself. */
function bundledFiles(root: protobuf.Root): Map<string, string> {
  const out = new Map<string, string>();
  for (const file of root.files) {
    if (!file.startsWith('google/protobuf/')) continue;
    const json = protobuf.common.get(file) as { nested?: { google?: { nested?: { protobuf?: { nested?: Record<string, unknown> } } } } } | null;
    for (const name of Object.keys(json?.nested?.google?.nested?.protobuf?.nested ?? {})) out.set(`.google.protobuf.${name}`, file);
  }
  return out;
}

/** FieldDescriptorProto.Type numbers of the scalar types. */
const SCALAR_TYPES: Readonly<Record<string, number>> = {
  double: 1,
  float: 2,
  int64: 3,
  uint64: 4,
  int32: 5,
  fixed64: 6,
  fixed32: 7,
  bool: 8,
  string: 9,
  bytes: 12,
  uint32: 13,
  sfixed32: 15,
  sfixed64: 16,
  sint32: 17,
  sint64: 18,
};

function scalarType(name: string, field: protobuf.Field): number {
  const type = SCALAR_TYPES[name];
  if (type === undefined) throw new Error(`${field.fullName}: unknown type ${name}`);
  return type;
}

/** protoc's json_name: underscores dropped, the letter after each upper-cased. */
function jsonName(name: string): string {
  return name.replace(/_+([a-z0-9])?/g, (_m, c: string | undefined) => (c === undefined ? '' : c.toUpperCase()));
}

/** A map entry's message name: the field name in CamelCase. */
function upperCamel(name: string): string {
  const camel = jsonName(name);
  return camel.charAt(0).toUpperCase() + camel.slice(1);
}
