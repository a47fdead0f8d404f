import { isAlias, isMap, isScalar, isSeq, type Scalar, type YAMLMap } from 'yaml';
import { type Algorithm } from '../limiter/types';
import { ConfigError } from './config-error';
import type { Metadata } from '../limiter/rules';
import type { StructValue } from '../limiter/types';
import { REFERENCE_KEYS } from './format-keys';
import type { AliasTargets } from './yaml-bounds';
/**
 * Reading YAML nodes the way the reference's YAML 1.1 parser reads them: aliases followed, string
 * fields kept as their source text (`value: 010` is "010"), floats told from integers, unknown keys and
 * wrong types reported with the file and the path inside it.
 */

export interface Context {
  readonly file: string;
  /** The node each alias names (./yaml-bounds.ts found them, once). */
  readonly aliases: AliasTargets;
  readonly defaultAlgorithm: Algorithm;
  /** REGION_SYNC_INTERVAL, ms: a `scope: global` limit's window holds at least GLOBAL_MIN_WINDOW_SYNCS of them. */
  readonly regionSyncIntervalMs: number;
  /** Collected while parsing; attached to the file's DomainConfig. */
  readonly warnings: string[];
}

export function fail(ctx: { readonly file: string }, path: string, detail: string): never {
  throw new ConfigError(ctx.file, path, detail);
}

export function child(path: string, key: string): string {
  return path === '' ? key : `${path}.${key}`;
}

/** Follows aliases; undefined for an absent or null node. */
export function resolve(ctx: Context, node: unknown): unknown {
  // An alias names a collection or a scalar, never another alias: one step.
  const n = isAlias(node) ? ctx.aliases.get(node) : node;
  if (n === null || n === undefined) return undefined;
  if (isScalar(n) && (n.value === null || n.value === undefined)) return undefined;
  return n;
}

/** How a node reads in an error message. */
export function describe(node: unknown): string {
  if (node === undefined) return 'nothing';
  if (isMap(node)) return 'a mapping';
  if (isSeq(node)) return 'a list';
  if (isScalar(node)) {
    const v = node.value;
    return typeof v === 'string' ? JSON.stringify(v) : String(node.source ?? v);
  }
  return 'an unsupported value';
}

/**
 * The pairs of a mapping, by key, with YAML merge keys (`<<: *base`) expanded under the explicit
 * ones. Any key outside `allowed` is an error naming that key.
 */
export function fields(ctx: Context, node: unknown, path: string, allowed: readonly string[]): Map<string, unknown> {
  if (!isMap(node)) fail(ctx, path, `expected a mapping, got ${describe(node)}`);
  const out = new Map<string, unknown>();
  const { pairs, bases } = mappingParts(ctx, node, path);
  for (const [name, value] of pairs) {
    if (!allowed.includes(name)) {
      if (!REFERENCE_KEYS.has(name)) fail(ctx, child(path, name), `unknown key (expected one of: ${allowed.join(', ')})`);
      checkIgnored(ctx, value, child(path, name), name);
      ctx.warnings.push(`${ctx.file}: ${child(path, name)}: ignored (not a setting at this level; expected one of: ${allowed.join(', ')})`);
      continue;
    }
    out.set(name, value);
  }
  for (const base of bases) {
    for (const [k, v] of fields(ctx, base, path, allowed)) if (!out.has(k)) out.set(k, v);
  }
  return out;
}

/**
 * A mapping's explicit pairs (key text, value node), and the mappings its YAML merge keys
 * (`<<: *base`) name, in order. Non-string keys read as their source text, as the reference prints them.
 */
export function mappingParts(ctx: Context, node: YAMLMap, path: string): { pairs: [string, unknown][]; bases: unknown[] } {
  const pairs: [string, unknown][] = [];
  const bases: unknown[] = [];
  for (const pair of node.items) {
    const key = resolve(ctx, pair.key);
    if (isScalar(key) && typeof key.value === 'symbol') {
      const target = resolve(ctx, pair.value);
      for (const base of isSeq(target) ? target.items : [target]) bases.push(resolve(ctx, base));
      continue;
    }
    if (!isScalar(key)) fail(ctx, path, `keys must be plain strings, got ${describe(key)}`);
    pairs.push([typeof key.value === 'string' ? key.value : String(key.source ?? key.value), pair.value]);
  }
  return { pairs, bases };
}

/**
 * What the reference still checks inside a key it ignores: mappings hold only known keys (anything
 * under `metadata` goes), lists hold only mappings, scalars are strings, integers or booleans.
 */
export function checkIgnored(ctx: Context, node: unknown, path: string, name: string): void {
  if (name === 'metadata') return;
  const n = resolve(ctx, node);
  if (n === undefined) return;
  if (isMap(n)) {
    for (const pair of n.items) {
      const key = resolve(ctx, pair.key);
      if (!isScalar(key) || typeof key.value !== 'string') fail(ctx, path, `keys must be plain strings, got ${describe(key)}`);
      if (!REFERENCE_KEYS.has(key.value)) fail(ctx, child(path, key.value), 'unknown key');
      checkIgnored(ctx, pair.value, child(path, key.value), key.value);
    }
  } else if (isSeq(n)) {
    n.items.forEach((item, i) => {
      const element = resolve(ctx, item);
      if (!isMap(element)) fail(ctx, `${path}[${i}]`, `expected a mapping, got ${describe(element)}`);
      checkIgnored(ctx, element, `${path}[${i}]`, '');
    });
  } else if (isScalar(n)) {
    if (isFloat(n)) fail(ctx, path, `expected a string, an integer or true/false, got ${describe(n)}`);
  }
}

/** A `metadata` mapping as plain, deeply frozen data; undefined when absent or empty (as the reference). */
export function readMetadata(ctx: Context, node: unknown, path: string): Metadata | undefined {
  const n = resolve(ctx, node);
  if (n === undefined) return undefined;
  if (!isMap(n)) fail(ctx, path, `expected a mapping, got ${describe(n)}`);
  const value = metadataValue(ctx, n, path, 0) as Metadata;
  return Object.keys(value).length === 0 ? undefined : value;
}

const MAX_METADATA_DEPTH = 32;

function metadataValue(ctx: Context, node: unknown, path: string, depth: number): StructValue {
  if (depth > MAX_METADATA_DEPTH) fail(ctx, path, `nested deeper than ${MAX_METADATA_DEPTH} levels`);
  const n = resolve(ctx, node);
  if (n === undefined) return null;
  if (isMap(n)) {
    const { pairs, bases } = mappingParts(ctx, n, path);
    const entries: [string, StructValue][] = pairs.map(([name, value]) => [name, metadataValue(ctx, value, child(path, name), depth + 1)]);
    const seen = new Set(pairs.map(([name]) => name));
    for (const base of bases) {
      const values = metadataValue(ctx, base, path, depth + 1);
      if (values === null || typeof values !== 'object' || Array.isArray(values)) fail(ctx, path, 'a merge key (<<) must name a mapping');
      for (const [k, v] of Object.entries(values)) {
        if (!seen.has(k)) {
          seen.add(k);
          entries.push([k, v]);
        }
      }
    }
    return Object.freeze(Object.fromEntries(entries));
  }
  if (isSeq(n)) return Object.freeze(n.items.map((item, i) => metadataValue(ctx, item, `${path}[${i}]`, depth + 1)));
  if (isScalar(n)) {
    const v = n.value;
    if (typeof v === 'string' || typeof v === 'boolean' || typeof v === 'number') return v;
    if (typeof v === 'bigint') return Number(v);
  }
  fail(ctx, path, `unsupported value ${describe(n)}`);
}

// The reference's YAML 1.1 parser reads a plain number written with a point or an exponent (1.0, 1e3,
// .5) as a float, and its key check rejects a float anywhere outside `metadata`; YAML 1.2 reads 1.0 and
// 1e3 as integers, so the scalar's source decides.
const FLOAT_SOURCE = /^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$/;
const INTEGER_SOURCE = /^[-+]?\d+$/;

/** True for a plain scalar the reference reads as a float. */
export function isFloat(n: Scalar): boolean {
  if (typeof n.value !== 'number') return false;
  if (!Number.isInteger(n.value)) return true;
  return n.type === 'PLAIN' && n.source !== undefined && FLOAT_SOURCE.test(n.source) && !INTEGER_SOURCE.test(n.source);
}

/** A string field: its source text for any scalar, as the reference reads strings; undefined when absent. */
export function text(ctx: Context, node: unknown, path: string): string | undefined {
  const n = resolve(ctx, node);
  if (n === undefined) return undefined;
  if (!isScalar(n)) fail(ctx, path, `expected a string, got ${describe(n)}`);
  // The reference rejects a float anywhere outside `metadata` (its key check knows strings, integers and booleans).
  if (isFloat(n)) fail(ctx, path, `expected a string, got ${describe(n)} (quote it)`);
  return typeof n.value === 'string' ? n.value : String(n.source ?? n.value);
}

export function bool(ctx: Context, node: unknown, path: string): boolean {
  const n = resolve(ctx, node);
  if (n === undefined) return false;
  if (!isScalar(n) || typeof n.value !== 'boolean') fail(ctx, path, `expected true or false, got ${describe(n)}`);
  return n.value;
}

export function integer(ctx: Context, node: unknown, path: string, min: number, max: number, fallback: number): number {
  const n = resolve(ctx, node);
  if (n === undefined) return fallback;
  const v = isScalar(n) && !isFloat(n) ? n.value : undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    fail(ctx, path, `expected an integer from ${min} to ${max}, got ${describe(n)}`);
  }
  return v;
}

export function requiredText(ctx: Context, node: unknown, path: string): string {
  const v = text(ctx, node, path);
  if (v === undefined) fail(ctx, path, 'required');
  if (v === '') fail(ctx, path, 'must not be empty');
  return v;
}
