import * as protobuf from 'protobufjs';
import * as descriptor from 'protobufjs/ext/descriptor';
import { SERVED_PROTOS } from '../../../src/service/reflection-service';
import { loadProtoFiles, RLS_PROTO } from '../../../src/wire/proto';
import { describeProtoFiles } from '../../../src/wire/proto-descriptors';

/** The served .proto files as FileDescriptorProto messages, as reflection clients link and use them. */

const described = describeProtoFiles(SERVED_PROTOS);

interface FieldLike {
  name: string;
  typeName?: string;
  jsonName?: string;
}
interface MessageLike {
  name: string;
  field: FieldLike[];
  nestedType: MessageLike[];
  options?: { mapEntry?: boolean };
}
interface FileLike {
  name: string;
  package: string;
  dependency: string[];
  messageType: MessageLike[];
  service: { method: { inputType: string; outputType: string }[] }[];
  syntax: string;
}

const decode = (bytes: Uint8Array): FileLike =>
  descriptor.FileDescriptorProto.toObject(descriptor.FileDescriptorProto.decode(bytes), { arrays: true }) as FileLike;

test('each file is named by its import path, with its package, and proto3', () => {
  const rls = decode(described.files.get(RLS_PROTO)!.bytes);
  expect(rls).toMatchObject({ name: 'envoy/service/ratelimit/v3/rls.proto', package: 'envoy.service.ratelimit.v3', syntax: 'proto3' });
  expect(rls.messageType.map((m) => m.name)).toEqual(['RateLimitRequest', 'RateLimitResponse']);
  expect(decode(described.files.get('google/protobuf/struct.proto')!.bytes).package).toBe('google.protobuf');
});

test("a file's dependencies are the files its types refer to, and every reference is fully-qualified", () => {
  for (const file of described.files.values()) {
    const fd = decode(file.bytes);
    const referenced = new Set<string>();
    const visit = (m: MessageLike): void => {
      for (const f of m.field) if (f.typeName !== undefined) referenced.add(f.typeName);
      m.nestedType.forEach(visit);
    };
    fd.messageType.forEach(visit);
    for (const s of fd.service) for (const m of s.method) referenced.add(m.inputType).add(m.outputType);
    const files = new Set<string>();
    for (const name of referenced) {
      expect(name.startsWith('.')).toBe(true);
      const owner = described.symbols.get(name.slice(1));
      expect(owner).toBeDefined();
      if (owner !== fd.name) files.add(owner!);
    }
    expect(fd.dependency).toEqual([...files].sort());
  }
});

test('map fields are repeated entries named as protoc names them; field names stay as written, with their JSON names', () => {
  const struct = decode(described.files.get('google/protobuf/struct.proto')!.bytes).messageType.find((m) => m.name === 'Struct')!;
  expect(struct.field[0]).toMatchObject({ name: 'fields', typeName: '.google.protobuf.Struct.FieldsEntry', label: 3 });
  expect(struct.nestedType[0]).toMatchObject({ name: 'FieldsEntry', options: { mapEntry: true } });
  const value = decode(described.files.get('google/protobuf/struct.proto')!.bytes).messageType.find((m) => m.name === 'Value')!;
  expect(value.field.map((f) => [f.name, f.jsonName])).toContainEqual(['null_value', 'nullValue']);
  const request = decode(described.files.get(RLS_PROTO)!.bytes).messageType[0];
  expect(request.field.map((f) => [f.name, f.jsonName])).toEqual([
    ['domain', 'domain'],
    ['descriptors', 'descriptors'],
    ['hits_addend', 'hitsAddend'],
  ]);
});

test('a root rebuilt from the descriptors alone encodes and decodes as the codecs do', () => {
  const set = descriptor.FileDescriptorSet.fromObject({
    file: described.withDependencies(RLS_PROTO).map((f) => descriptor.FileDescriptorProto.decode(f.bytes)),
  });
  const rebuilt = (protobuf.Root as unknown as { fromDescriptor(set: protobuf.Message): protobuf.Root }).fromDescriptor(set);
  rebuilt.resolveAll();
  const original = loadProtoFiles([RLS_PROTO]);
  const request = {
    domain: 'edge',
    descriptors: [{ entries: [{ key: 'api_key', value: 'alice' }], limit: { requestsPerUnit: 5, unit: 'MINUTE' }, hitsAddend: { value: 3 } }],
    hitsAddend: 2,
  };
  const response = {
    overallCode: 'OVER_LIMIT',
    statuses: [{ code: 'OVER_LIMIT', currentLimit: { requestsPerUnit: 5, unit: 'MINUTE', name: 'n' }, limitRemaining: 0, durationUntilReset: { seconds: 12 } }],
    responseHeadersToAdd: [{ key: 'x', value: 'y' }],
    dynamicMetadata: { fields: { limitedBy: { stringValue: 'api_key' } } },
  };
  for (const [name, message] of [
    ['envoy.service.ratelimit.v3.RateLimitRequest', request],
    ['envoy.service.ratelimit.v3.RateLimitResponse', response],
  ] as const) {
    const want = original.lookupType(name);
    const got = rebuilt.lookupType(name);
    const bytes = want.encode(want.fromObject(message)).finish();
    expect(Buffer.from(got.encode(got.fromObject(message)).finish())).toEqual(Buffer.from(bytes));
    expect(got.toObject(got.decode(bytes), { enums: String })).toEqual(want.toObject(want.decode(bytes), { enums: String }));
  }
});
