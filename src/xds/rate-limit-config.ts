import type { Type } from 'protobufjs';
import { buildConfig, type BuildOptions } from '../config/rule-tree';
import { parseConfigValue, type ParseOptions } from '../config/rule-reader';
import { ConfigError } from '../config/config-error';
import { RULE_SETTINGS, type RateLimitConfig } from '../limiter/rules';
import { loadProtoFiles } from '../wire/proto';

/**
 * RateLimitConfig xDS resources -> the validated rule tree. Each resource is turned into the plain
 * structure a config file's YAML reads as (`domain`, `descriptors`, `rate_limit: {unit: second, ...}`)
 * and validated by the file loader itself (parseConfigValue), so both sources accept and reject the
 * same rules with the same messages. Errors name the resource: `RateLimitConfig "default/eg/http":
 * descriptors[0].descriptors[1].rate_limit.unit: required (or unlimited: true)`.
 */

/**
 * What the xDS source cannot carry, said once at its start: the RateLimitConfig proto has one
 * `rate_limit` per descriptor and no count_denied_requests field (both are config-file features).
 */
export const XDS_FORMAT_NOTE =
  'xDS RateLimitConfig resources hold one rate_limit per descriptor: several limits on one key (rate_limits) and count_denied_requests are read from config files only';

export const RATE_LIMIT_CONFIG_PROTO = 'ratelimit/config/ratelimit/v3/rls_conf.proto';
export const RATE_LIMIT_CONFIG_TYPE = 'ratelimit.config.ratelimit.v3.RateLimitConfig';
export const RATE_LIMIT_CONFIG_TYPE_URL = `type.googleapis.com/${RATE_LIMIT_CONFIG_TYPE}`;

/** A google.protobuf.Any as the ADS stream delivers it. */
export interface AnyResource {
  readonly typeUrl: string;
  readonly value: Uint8Array;
}

/* The decoded message (protobufjs toObject: camelCase, enums by name, absent fields left out). */
interface PolicyMessage {
  unit?: string | number;
  requestsPerUnit?: number;
  unlimited?: boolean;
  name?: string;
  replaces?: { name?: string }[];
}
interface DescriptorMessage {
  key?: string;
  value?: string;
  rateLimit?: PolicyMessage;
  descriptors?: DescriptorMessage[];
  metadata?: StructMessage;
  /** The RULE_SETTINGS fields the proto has (shadowMode, quotaMode, ...). */
  readonly [setting: string]: unknown;
}
interface ConfigMessage {
  name?: string;
  domain?: string;
  descriptors?: DescriptorMessage[];
}
interface StructMessage {
  fields?: Record<string, ValueMessage>;
}
interface ValueMessage {
  nullValue?: unknown;
  numberValue?: number;
  stringValue?: string;
  boolValue?: boolean;
  structValue?: StructMessage;
  listValue?: { values?: ValueMessage[] };
}

/**
 * The per-rule flags and numbers of the core's table, as [proto field, file key] pairs: protobufjs
 * names a field in camelCase (`quota_mode` -> `quotaMode`). A key the proto does not have is never set.
 */
const SETTING_FIELDS: readonly (readonly [string, string])[] = Object.values(RULE_SETTINGS).map((s) => [
  s.yaml.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase()),
  s.yaml,
]);

let configType: Type | undefined;

function messageType(): Type {
  configType ??= loadProtoFiles([RATE_LIMIT_CONFIG_PROTO]).lookupType(RATE_LIMIT_CONFIG_TYPE);
  return configType;
}

/** How errors name a resource. */
export function resourceLabel(name: string): string {
  return `RateLimitConfig ${JSON.stringify(name)}`;
}

/** A google.protobuf.Struct as plain data. */
function structToPlain(struct: StructMessage): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(struct.fields ?? {})) out[key] = valueToPlain(value);
  return out;
}

function valueToPlain(v: ValueMessage): unknown {
  if (v.structValue !== undefined) return structToPlain(v.structValue);
  if (v.listValue !== undefined) return (v.listValue.values ?? []).map(valueToPlain);
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.numberValue !== undefined) return v.numberValue;
  if (v.boolValue !== undefined) return v.boolValue;
  return null;
}

/** `rate_limit` as a file writes it. An unset unit is left out (allowed only with unlimited, as in a file). */
function policyShape(p: PolicyMessage): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (p.unit !== undefined && p.unit !== 'UNKNOWN' && p.unit !== 0) out.unit = typeof p.unit === 'string' ? p.unit.toLowerCase() : String(p.unit);
  out.requests_per_unit = p.requestsPerUnit ?? 0;
  if (p.unlimited === true) out.unlimited = true;
  if (p.name !== undefined && p.name !== '') out.name = p.name;
  if (p.replaces !== undefined && p.replaces.length > 0) out.replaces = p.replaces.map((r) => ({ name: r.name ?? '' }));
  return out;
}

/** One rule as a file writes it; proto3 defaults (false, empty) are left out as a file leaves them out. */
function descriptorShape(d: DescriptorMessage): Record<string, unknown> {
  const out: Record<string, unknown> = { key: d.key ?? '' };
  if (d.value !== undefined && d.value !== '') out.value = d.value;
  if (d.rateLimit !== undefined) out.rate_limit = policyShape(d.rateLimit);
  if (d.descriptors !== undefined && d.descriptors.length > 0) out.descriptors = d.descriptors.map(descriptorShape);
  for (const [field, key] of SETTING_FIELDS) {
    const v = d[field];
    if (v !== undefined && v !== false && v !== 0) out[key] = v;
  }
  if (d.metadata !== undefined) out.metadata = structToPlain(d.metadata);
  return out;
}

/** A decoded RateLimitConfig message as the plain structure of a config file. */
export function configShape(message: ConfigMessage): Record<string, unknown> {
  return { domain: message.domain ?? '', descriptors: (message.descriptors ?? []).map(descriptorShape) };
}

/** Decodes one resource; throws ConfigError naming its position when it is not a readable RateLimitConfig. */
export function decodeRateLimitConfig(resource: AnyResource, index: number): ConfigMessage {
  if (resource.typeUrl !== RATE_LIMIT_CONFIG_TYPE_URL) {
    throw new ConfigError(`resources[${index}]`, '', `unexpected type ${JSON.stringify(resource.typeUrl)} (expected ${RATE_LIMIT_CONFIG_TYPE_URL})`);
  }
  const type = messageType();
  try {
    return type.toObject(type.decode(resource.value), { enums: String, longs: Number, arrays: true }) as ConfigMessage;
  } catch (err) {
    throw new ConfigError(`resources[${index}]`, '', `cannot decode ${RATE_LIMIT_CONFIG_TYPE}: ${err instanceof Error ? err.message : String(err)}`);
  }
}

/** The names of the resources in a response (for logs), `resources[i]` for one that cannot be decoded. */
export function resourceNames(resources: readonly AnyResource[]): string[] {
  return resources.map((r, i) => {
    try {
      return decodeRateLimitConfig(r, i).name ?? '';
    } catch {
      return `resources[${i}]`;
    }
  });
}

/** Every resource of one response, validated as files are, combined into one config (MERGE_DOMAIN_CONFIG as for files). Throws ConfigError. */
export function configFromResources(resources: readonly AnyResource[], opts: ParseOptions & BuildOptions): RateLimitConfig {
  return buildConfig(
    resources.map((resource, i) => {
      const message = decodeRateLimitConfig(resource, i);
      return parseConfigValue(resourceLabel(message.name ?? ''), configShape(message), opts);
    }),
    opts,
  );
}

/** Encodes a RateLimitConfig message given in protobufjs's camelCase form (control planes in tests, tools). */
export function encodeRateLimitConfig(message: Record<string, unknown>): Uint8Array {
  const type = messageType();
  return type.encode(type.fromObject(message)).finish();
}
