/** A decoded google.protobuf.Struct (protobufjs or proto-loader object form) as the plain data it holds. */
export function plainStruct(struct: unknown): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const fields = (struct as { fields?: Record<string, unknown> } | null | undefined)?.fields ?? {};
  for (const [k, v] of Object.entries(fields)) Object.defineProperty(out, k, { value: plainValue(v), enumerable: true });
  return out;
}

interface DecodedValue {
  kind?: string;
  nullValue?: unknown;
  numberValue?: number;
  stringValue?: string;
  boolValue?: boolean;
  structValue?: unknown;
  listValue?: { values?: unknown[] };
}

function plainValue(v: unknown): unknown {
  const value = v as DecodedValue;
  // proto-loader with `oneofs` names the member that is set; protobufjs leaves the others out.
  const kind =
    value.kind ??
    ['numberValue', 'stringValue', 'boolValue', 'structValue', 'listValue'].find((k) => k in value && value[k as keyof DecodedValue] !== undefined);
  switch (kind) {
    case 'numberValue':
      return value.numberValue === 0 ? 0 : value.numberValue; // -0 reads as 0, as in JSON
    case 'stringValue':
      return value.stringValue;
    case 'boolValue':
      return value.boolValue;
    case 'structValue':
      return plainStruct(value.structValue);
    case 'listValue':
      return (value.listValue?.values ?? []).map(plainValue);
    default:
      return null;
  }
}
