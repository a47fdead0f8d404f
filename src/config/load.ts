import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { Document, isAlias, isMap, isScalar, isSeq, parseDocument, type Scalar, type YAMLError, type YAMLMap } from 'yaml';
import { counterKeyPrefix } from '../limiter/keys';
import { ALGORITHMS, isBucket, UNIT_MS, UNITS, type Algorithm, type Limit, type Unit } from '../limiter/types';
import { ConfigError } from './config-error';
import {
  RULE_SETTINGS,
  type DomainConfig,
  type KeyRules,
  type Metadata,
  type MetadataValue,
  type RateLimitConfig,
  type RuleIdentity,
  type RuleLevel,
  type RuleNode,
  type RuleSetting,
  type RuleSettings,
} from '../limiter/rules';
import { compileWildcard, isWildcard } from './wildcard';

/**
 * YAML text -> validated, deeply frozen rule tree. The format is envoyproxy/ratelimit's, read the
 * way its YAML 1.1 parser reads it (string fields keep their source text, so `value: 010` is "010"),
 * plus the `unit_multiplier` and `algorithm` extensions. Everything the matcher and the limiter
 * need per rule (window, counter key prefix, stat key, wildcard test) is computed here, once.
 */

export interface ParseOptions {
  /** Algorithm of rules that do not name one (DEFAULT_ALGORITHM). */
  readonly defaultAlgorithm: Algorithm;
}

export interface BuildOptions {
  /** One domain split across several files is merged into one (MERGE_DOMAIN_CONFIG); else a duplicate domain is an error. */
  readonly mergeDomains?: boolean;
}

export interface ListOptions {
  /** Skip files and directories whose name starts with '.' (RUNTIME_IGNOREDOTFILES). */
  readonly ignoreDotFiles?: boolean;
  /**
   * Also read what lies beside the config directory under a name starting with `prefix` (a file,
   * or every file of a folder): the reference's watched-root layout (RUNTIME_WATCH_ROOT) reads
   * `$RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY` and keeps every name starting with `$RUNTIME_APPDIRECTORY.`,
   * so a `config.yaml` beside `config/` is a config file there.
   */
  readonly beside?: { readonly dir: string; readonly prefix: string };
}

export interface LoadOptions extends ParseOptions, BuildOptions, ListOptions {}

/** One config file's name (as it appears in errors) and text. */
export interface ConfigText {
  readonly file: string;
  readonly text: string;
}

const MAX_REQUESTS_PER_UNIT = 4_294_967_295; // uint32, the wire type of requests_per_unit
const MAX_UNIT_MULTIPLIER = 1_000_000;
// Each sub-window is one counter read per decision: a bound keeps one decision O(1).
const MAX_SUB_WINDOWS = 100;

/** The core's table of per-rule flags and numbers (RULE_SETTINGS), as [field, setting] pairs in table order. */
const SETTINGS = Object.entries(RULE_SETTINGS) as [keyof RuleSettings, RuleSetting][];

const ROOT_KEYS = ['domain', 'descriptors'] as const;
const RULE_KEYS: readonly string[] = [
  'key',
  'value',
  'rate_limit',
  'descriptors',
  ...SETTINGS.map(([, s]) => s.yaml),
  'value_to_metric',
  'share_threshold',
  'metadata',
];
const LIMIT_KEYS = ['unit', 'requests_per_unit', 'unlimited', 'name', 'replaces', 'unit_multiplier', 'algorithm', 'burst', 'sub_windows', 'strict'] as const;
const REPLACES_KEYS = ['name'] as const;

/**
 * Every key the reference format knows. Its loader checks keys against this one set at every level,
 * so a known key in the wrong place (`shadow_mode` under `rate_limit`, say) loads there and does
 * nothing: here it loads too, with a warning naming it. Any other unknown key is an error in both.
 */
const REFERENCE_KEYS: ReadonlySet<string> = new Set([
  'domain',
  'key',
  'value',
  'descriptors',
  'rate_limit',
  'unit',
  'requests_per_unit',
  'unlimited',
  'name',
  'replaces',
  'value_to_metric',
  'share_threshold',
  'metadata',
  ...SETTINGS.filter(([, s]) => s.reference === true).map(([, s]) => s.yaml),
]);

/**
 * A Map that refuses writes once built: Object.freeze does not reach a Map's entries, and the
 * config is shared by every in-flight request, so a stray write must fail loudly.
 */
class FrozenMap<K, V> extends Map<K, V> {
  constructor(entries: Iterable<readonly [K, V]>) {
    super();
    for (const [k, v] of entries) Map.prototype.set.call(this, k, v);
    Object.freeze(this);
  }
  override set(): never {
    throw new TypeError('the rate-limit config is frozen');
  }
  override delete(): never {
    throw new TypeError('the rate-limit config is frozen');
  }
  override clear(): never {
    throw new TypeError('the rate-limit config is frozen');
  }
}

const EMPTY_LEVEL: RuleLevel = new FrozenMap<string, KeyRules>([]);
const NO_WARNINGS: readonly string[] = Object.freeze([]);
const EMPTY_CONFIG: RateLimitConfig = Object.freeze({ domains: new FrozenMap<string, DomainConfig>([]), warnings: NO_WARNINGS });

/** A config with no domains: every descriptor matches nothing. */
export function emptyConfig(): RateLimitConfig {
  return EMPTY_CONFIG;
}

interface Context {
  readonly file: string;
  readonly doc: Document;
  readonly defaultAlgorithm: Algorithm;
  /** Collected while parsing; attached to the file's DomainConfig. */
  readonly warnings: string[];
}

function fail(ctx: { readonly file: string }, path: string, detail: string): never {
  throw new ConfigError(ctx.file, path, detail);
}

function child(path: string, key: string): string {
  return path === '' ? key : `${path}.${key}`;
}

/** Follows aliases; undefined for an absent or null node. */
function resolve(ctx: Context, node: unknown): unknown {
  let n = node;
  for (let hops = 0; isAlias(n); hops++) {
    if (hops > 100) return undefined; // the parser rejects cycles; this only bounds pathological chains
    n = n.resolve(ctx.doc);
  }
  if (n === null || n === undefined) return undefined;
  if (isScalar(n) && (n.value === null || n.value === undefined)) return undefined;
  return n;
}

/** How a node reads in an error message. */
function describe(node: unknown): string {
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
function fields(ctx: Context, node: unknown, path: string, allowed: readonly string[]): Map<string, unknown> {
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
function mappingParts(ctx: Context, node: YAMLMap, path: string): { pairs: [string, unknown][]; bases: unknown[] } {
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
function checkIgnored(ctx: Context, node: unknown, path: string, name: string): void {
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
function readMetadata(ctx: Context, node: unknown, path: string): Metadata | undefined {
  const n = resolve(ctx, node);
  if (n === undefined) return undefined;
  if (!isMap(n)) fail(ctx, path, `expected a mapping, got ${describe(n)}`);
  const value = metadataValue(ctx, n, path, 0) as Metadata;
  return Object.keys(value).length === 0 ? undefined : value;
}

const MAX_METADATA_DEPTH = 32;

function metadataValue(ctx: Context, node: unknown, path: string, depth: number): MetadataValue {
  if (depth > MAX_METADATA_DEPTH) fail(ctx, path, `nested deeper than ${MAX_METADATA_DEPTH} levels`);
  const n = resolve(ctx, node);
  if (n === undefined) return null;
  if (isMap(n)) {
    const { pairs, bases } = mappingParts(ctx, n, path);
    const entries: [string, MetadataValue][] = pairs.map(([name, value]) => [name, metadataValue(ctx, value, child(path, name), depth + 1)]);
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
function isFloat(n: Scalar): boolean {
  if (typeof n.value !== 'number') return false;
  if (!Number.isInteger(n.value)) return true;
  return n.type === 'PLAIN' && n.source !== undefined && FLOAT_SOURCE.test(n.source) && !INTEGER_SOURCE.test(n.source);
}

/** A string field: its source text for any scalar, as the reference reads strings; undefined when absent. */
function text(ctx: Context, node: unknown, path: string): string | undefined {
  const n = resolve(ctx, node);
  if (n === undefined) return undefined;
  if (!isScalar(n)) fail(ctx, path, `expected a string, got ${describe(n)}`);
  // The reference rejects a float anywhere outside `metadata` (its key check knows strings, integers and booleans).
  if (isFloat(n)) fail(ctx, path, `expected a string, got ${describe(n)} (quote it)`);
  return typeof n.value === 'string' ? n.value : String(n.source ?? n.value);
}

function bool(ctx: Context, node: unknown, path: string): boolean {
  const n = resolve(ctx, node);
  if (n === undefined) return false;
  if (!isScalar(n) || typeof n.value !== 'boolean') fail(ctx, path, `expected true or false, got ${describe(n)}`);
  return n.value;
}

function integer(ctx: Context, node: unknown, path: string, min: number, max: number, fallback: number): number {
  const n = resolve(ctx, node);
  if (n === undefined) return fallback;
  const v = isScalar(n) && !isFloat(n) ? n.value : undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    fail(ctx, path, `expected an integer from ${min} to ${max}, got ${describe(n)}`);
  }
  return v;
}

function requiredText(ctx: Context, node: unknown, path: string): string {
  const v = text(ctx, node, path);
  if (v === undefined) fail(ctx, path, 'required');
  if (v === '') fail(ctx, path, 'must not be empty');
  return v;
}

interface ParsedLimit {
  readonly limit: Limit;
  readonly replaces: readonly string[];
}

function readLimit(ctx: Context, node: unknown, path: string): ParsedLimit | undefined {
  const n = resolve(ctx, node);
  if (n === undefined) return undefined; // `rate_limit:` with nothing under it: no limit, as the reference reads it
  const f = fields(ctx, n, path, LIMIT_KEYS);
  const unlimited = bool(ctx, f.get('unlimited'), child(path, 'unlimited'));
  const unitText = text(ctx, f.get('unit'), child(path, 'unit'));
  let unit: Unit = 'second'; // an unlimited rule has no window; this placeholder is never used to count
  if (unlimited) {
    if (unitText !== undefined && unitText !== '') fail(ctx, child(path, 'unit'), 'not allowed with unlimited: true');
    if (resolve(ctx, f.get('unit_multiplier')) !== undefined) {
      fail(ctx, child(path, 'unit_multiplier'), 'not allowed with unlimited: true');
    }
  } else {
    if (unitText === undefined || unitText === '') fail(ctx, child(path, 'unit'), 'required (or unlimited: true)');
    const folded = unitText.toLowerCase();
    if (!(UNITS as readonly string[]).includes(folded)) fail(ctx, child(path, 'unit'), `unknown unit ${JSON.stringify(unitText)}`);
    unit = folded as Unit;
  }
  // Absent requests_per_unit is 0 (deny everything), as in the reference format.
  const requestsPerUnit = integer(ctx, f.get('requests_per_unit'), child(path, 'requests_per_unit'), 0, MAX_REQUESTS_PER_UNIT, 0);
  const unitMultiplier = integer(ctx, f.get('unit_multiplier'), child(path, 'unit_multiplier'), 1, MAX_UNIT_MULTIPLIER, 1);

  let algorithm = ctx.defaultAlgorithm;
  const algorithmText = text(ctx, f.get('algorithm'), child(path, 'algorithm'));
  if (algorithmText !== undefined) {
    const folded = algorithmText.toLowerCase();
    if (!(ALGORITHMS as readonly string[]).includes(folded)) {
      fail(ctx, child(path, 'algorithm'), `unknown algorithm ${JSON.stringify(algorithmText)} (expected one of: ${ALGORITHMS.join(', ')})`);
    }
    algorithm = folded as Algorithm;
  }
  const windowMs = UNIT_MS[unit] * unitMultiplier;
  const shape = readAlgorithmShape(ctx, f, path, { algorithm, requestsPerUnit, windowMs, unlimited });

  const nameText = text(ctx, f.get('name'), child(path, 'name'));
  const name = nameText === '' ? undefined : nameText;
  const replaces = readReplaces(ctx, f.get('replaces'), child(path, 'replaces'), name);

  const limit: Limit = Object.freeze({
    requestsPerUnit,
    unit,
    unitMultiplier,
    windowMs,
    algorithm,
    ...shape,
    name,
    unlimited,
  });
  return { limit, replaces };
}

/** `burst` (buckets), `sub_windows` and `strict` (sliding_window): each only where its algorithm reads it. */
function readAlgorithmShape(
  ctx: Context,
  f: Map<string, unknown>,
  path: string,
  o: { algorithm: Algorithm; requestsPerUnit: number; windowMs: number; unlimited: boolean },
): Pick<Limit, 'burst' | 'subWindows' | 'strict'> {
  const only = (key: string, allowed: boolean, which: string): void => {
    if (!allowed && resolve(ctx, f.get(key)) !== undefined) fail(ctx, child(path, key), `only with algorithm ${which} (this rule uses ${o.algorithm})`);
  };
  const bucket = isBucket(o.algorithm) && !o.unlimited;
  const sliding = o.algorithm === 'sliding_window' && !o.unlimited;
  only('burst', bucket, 'token_bucket or leaky_bucket');
  only('sub_windows', sliding, 'sliding_window');
  only('strict', sliding, 'sliding_window');
  const burst = bucket ? integer(ctx, f.get('burst'), child(path, 'burst'), 1, MAX_REQUESTS_PER_UNIT, o.requestsPerUnit) : o.requestsPerUnit;
  const subWindows = sliding ? integer(ctx, f.get('sub_windows'), child(path, 'sub_windows'), 1, MAX_SUB_WINDOWS, 1) : 1;
  if (o.windowMs % subWindows !== 0) {
    fail(ctx, child(path, 'sub_windows'), `${subWindows} does not divide the window of ${o.windowMs} ms into whole milliseconds`);
  }
  const strict = sliding ? bool(ctx, f.get('strict'), child(path, 'strict')) : false;
  return { burst, subWindows, strict };
}

function readReplaces(ctx: Context, node: unknown, path: string, ownName: string | undefined): readonly string[] {
  const n = resolve(ctx, node);
  if (n === undefined) return Object.freeze([]);
  if (!isSeq(n)) fail(ctx, path, `expected a list, got ${describe(n)}`);
  const names = n.items.map((item, i) => {
    const itemPath = `${path}[${i}]`;
    const f = fields(ctx, resolve(ctx, item), itemPath, REPLACES_KEYS);
    const name = requiredText(ctx, f.get('name'), child(itemPath, 'name'));
    if (name === ownName) fail(ctx, child(itemPath, 'name'), `a rule cannot replace its own name ${JSON.stringify(name)}`);
    return name;
  });
  return Object.freeze(names);
}

/**
 * The RULE_SETTINGS fields of the rule at `path`, each read by its setting's type: absent, its
 * default, or for an inherited setting the value `above`; set to other than the default, checked.
 */
function readSettings(ctx: Context, f: Map<string, unknown>, path: string, rule: RuleIdentity, above: RuleSettings): RuleSettings {
  const out: Record<string, boolean | number> = {};
  for (const [field, setting] of SETTINGS) {
    const at = child(path, setting.yaml);
    const node = f.get(setting.yaml);
    if (setting.type === 'boolean') {
      const own = bool(ctx, node, at);
      checkSetting(ctx, setting, own, at, rule);
      out[field] = own || (setting.inherited && above[field] === true);
    } else {
      const own = resolve(ctx, node) === undefined ? undefined : integer(ctx, node, at, setting.min, setting.max, setting.default);
      checkSetting(ctx, setting, own, at, rule);
      out[field] = own ?? (setting.inherited ? above[field] : setting.default);
    }
  }
  return out as RuleSettings;
}

function checkSetting<V>(
  ctx: Context,
  setting: { readonly default: V; readonly check?: (value: V, rule: RuleIdentity) => string | undefined },
  own: V | undefined,
  at: string,
  rule: RuleIdentity,
): void {
  if (own === undefined || own === setting.default || setting.check === undefined) return;
  const problem = setting.check(own, rule);
  if (problem !== undefined) fail(ctx, at, problem);
}

/** What a rule inherits from the rules above it. */
interface Parent {
  readonly statKey: string;
  readonly requestKeyed: boolean;
  /** The parent's settings; a child reads the `inherited` ones. */
  readonly settings: RuleSettings;
}

const ROOT: Parent = { statKey: '', requestKeyed: false, settings: Object.fromEntries(SETTINGS.map(([field, s]) => [field, s.default])) as RuleSettings };

function readRule(ctx: Context, node: unknown, path: string, domain: string, parent: Parent): RuleNode {
  const f = fields(ctx, resolve(ctx, node), path, RULE_KEYS);
  const key = requiredText(ctx, f.get('key'), child(path, 'key'));
  const valueText = text(ctx, f.get('value'), child(path, 'value'));
  const value = valueText === '' ? undefined : valueText; // an empty value is a key-only rule, as in the reference
  const own = value === undefined ? key : `${key}_${value}`;
  const statKey = parent.statKey === '' ? own : `${parent.statKey}.${own}`;
  const parsed = readLimit(ctx, f.get('rate_limit'), child(path, 'rate_limit'));
  const settings = readSettings(ctx, f, path, { key, value }, parent.settings);
  const valueToMetric = bool(ctx, f.get('value_to_metric'), child(path, 'value_to_metric'));
  const shareThreshold = bool(ctx, f.get('share_threshold'), child(path, 'share_threshold'));
  if (shareThreshold && (value === undefined || !isWildcard(value))) {
    fail(ctx, child(path, 'share_threshold'), "only allowed on a rule whose value is a wildcard (contains '*')");
  }
  const metadata = readMetadata(ctx, f.get('metadata'), child(path, 'metadata'));
  const requestKeyed = parent.requestKeyed || valueToMetric || shareThreshold;
  const children = readLevel(ctx, f.get('descriptors'), child(path, 'descriptors'), domain, { statKey, requestKeyed, settings });
  const limit = parsed?.limit;
  const fixed: FixedFields = {
    key,
    path,
    value,
    limit,
    shareThreshold,
    valueToMetric,
    requestKeyed,
    metadata,
    replaces: parsed?.replaces ?? Object.freeze([]),
    statKey,
    keyPrefix: limit === undefined ? undefined : counterKeyPrefix(domain, limit.algorithm, limit.windowMs, limit.subWindows),
    children,
  };
  return new BuiltRule(fixed, settings) as unknown as RuleNode;
}

/** A RuleNode's fields other than its RULE_SETTINGS ones. */
type FixedFields = Omit<RuleNode, keyof RuleSettings>;

/**
 * A frozen RuleNode. Built by a constructor rather than an object literal so that V8 keeps every
 * field inside the object, the table's ones included: matching and the decision read them on every
 * request, and a literal with `...settings` in it keeps fields after the spread in a separate array.
 */
class BuiltRule implements FixedFields {
  declare readonly key: string;
  declare readonly path: string;
  declare readonly value?: string;
  declare readonly limit?: Limit;
  declare readonly shareThreshold: boolean;
  declare readonly valueToMetric: boolean;
  declare readonly requestKeyed: boolean;
  declare readonly metadata?: Metadata;
  declare readonly replaces: readonly string[];
  declare readonly statKey: string;
  declare readonly keyPrefix?: string;
  declare readonly children: RuleLevel;

  constructor(fixed: FixedFields, settings: RuleSettings) {
    // Plain `this.x =` assignments: V8 sizes the object by counting them (plus slack the settings fill).
    this.key = fixed.key;
    this.path = fixed.path;
    this.value = fixed.value;
    this.limit = fixed.limit;
    for (const [field] of SETTINGS) (this as unknown as Record<string, unknown>)[field] = settings[field];
    this.shareThreshold = fixed.shareThreshold;
    this.valueToMetric = fixed.valueToMetric;
    this.requestKeyed = fixed.requestKeyed;
    this.metadata = fixed.metadata;
    this.replaces = fixed.replaces;
    this.statKey = fixed.statKey;
    this.keyPrefix = fixed.keyPrefix;
    this.children = fixed.children;
    Object.freeze(this);
  }
}

interface LevelBuilder {
  readonly exact: Map<string, RuleNode>;
  readonly wildcards: { readonly pattern: string; readonly test: (value: string) => boolean; readonly node: RuleNode }[];
  keyOnly?: RuleNode;
}

/** Adds `rule` to the level being built; the rule already there for its key and value, if any, is returned instead. */
function addRule(builders: Map<string, LevelBuilder>, rule: RuleNode): RuleNode | undefined {
  let b = builders.get(rule.key);
  if (b === undefined) {
    b = { exact: new Map(), wildcards: [] };
    builders.set(rule.key, b);
  }
  if (rule.value === undefined) {
    if (b.keyOnly !== undefined) return b.keyOnly;
    b.keyOnly = rule;
  } else if (isWildcard(rule.value)) {
    const same = b.wildcards.find((w) => w.pattern === rule.value);
    if (same !== undefined) return same.node;
    b.wildcards.push(Object.freeze({ pattern: rule.value, test: compileWildcard(rule.value), node: rule }));
  } else {
    const same = b.exact.get(rule.value);
    if (same !== undefined) return same;
    b.exact.set(rule.value, rule);
  }
  return undefined;
}

function duplicateRule(rule: RuleNode, first: string): string {
  const what = rule.value === undefined ? 'without a value' : `and value ${JSON.stringify(rule.value)}`;
  return `duplicate rule for key ${JSON.stringify(rule.key)} ${what} (first at ${first})`;
}

function freezeLevel(builders: Map<string, LevelBuilder>): RuleLevel {
  const level: [string, KeyRules][] = [];
  for (const [key, b] of builders) {
    level.push([key, Object.freeze({ exact: new FrozenMap(b.exact), wildcards: Object.freeze(b.wildcards), keyOnly: b.keyOnly })]);
  }
  return new FrozenMap(level);
}

function readLevel(ctx: Context, node: unknown, path: string, domain: string, parent: Parent): RuleLevel {
  const n = resolve(ctx, node);
  if (n === undefined) return EMPTY_LEVEL;
  if (!isSeq(n)) fail(ctx, path, `expected a list, got ${describe(n)}`);
  if (n.items.length === 0) return EMPTY_LEVEL;
  const builders = new Map<string, LevelBuilder>();
  n.items.forEach((item, i) => {
    const itemPath = `${path}[${i}]`;
    const rule = readRule(ctx, item, itemPath, domain, parent);
    const first = addRule(builders, rule);
    if (first !== undefined) fail(ctx, itemPath, duplicateRule(rule, first.path));
  });
  return freezeLevel(builders);
}

/** The top-level rules of `later` added to those of `earlier` (MERGE_DOMAIN_CONFIG); a rule defined in both is an error naming `later`. */
function mergeDomains(earlier: DomainConfig, later: DomainConfig): DomainConfig {
  const builders = new Map<string, LevelBuilder>();
  for (const level of [earlier.rules, later.rules]) {
    for (const rules of level.values()) {
      const nodes = [...rules.exact.values(), ...rules.wildcards.map((w) => w.node)];
      if (rules.keyOnly !== undefined) nodes.push(rules.keyOnly);
      for (const rule of nodes) {
        const first = addRule(builders, rule);
        if (first !== undefined) {
          throw new ConfigError(later.file, rule.path, duplicateRule(rule, `${first.path} of ${earlier.file}, domain ${JSON.stringify(later.domain)}`));
        }
      }
    }
  }
  return Object.freeze({
    domain: earlier.domain,
    file: earlier.file,
    rules: freezeLevel(builders),
    warnings: Object.freeze([...earlier.warnings, ...later.warnings]),
  });
}

function syntaxError(file: string, err: YAMLError): ConfigError {
  const pos = err.linePos?.[0];
  // The parser's message repeats the position and quotes the source; keep the first sentence.
  const first = err.message.split('\n')[0].replace(/ at line \d+, column \d+:?\s*$/, '');
  return new ConfigError(file, pos ? `line ${pos.line}, column ${pos.col}` : '', `invalid YAML: ${first}`);
}

/** Parses and validates one file. Throws ConfigError naming `file` and the path inside it. */
export function parseConfigText(file: string, text: string, opts: ParseOptions): DomainConfig {
  // YAML 1.1, as the reference's parser: `on`/`yes` are booleans there too.
  const doc = parseDocument(text, { version: '1.1' });
  if (doc.errors.length > 0) throw syntaxError(file, doc.errors[0]);
  return parseConfigDocument(file, doc, opts);
}

/**
 * Validates a config given as plain data in the file's shape (an xDS resource, see src/xds) by the
 * same rules as a file's text. Throws ConfigError naming `source` and the path inside it.
 */
export function parseConfigValue(source: string, value: unknown, opts: ParseOptions): DomainConfig {
  return parseConfigDocument(source, new Document(value, { version: '1.1' }), opts);
}

function parseConfigDocument(file: string, doc: Document, opts: ParseOptions): DomainConfig {
  const ctx: Context = { file, doc, defaultAlgorithm: opts.defaultAlgorithm, warnings: [] };
  const root = resolve(ctx, doc.contents);
  if (root === undefined) fail(ctx, '', 'the file is empty (expected a mapping with "domain" and "descriptors")');
  if (!isMap(root)) fail(ctx, '', `expected a mapping with "domain" and "descriptors", got ${describe(root)}`);
  const f = fields(ctx, root, '', ROOT_KEYS);
  const domain = requiredText(ctx, f.get('domain'), 'domain');
  const rules = readLevel(ctx, f.get('descriptors'), 'descriptors', domain, ROOT);
  return Object.freeze({ domain, file, rules, warnings: ctx.warnings.length === 0 ? NO_WARNINGS : Object.freeze(ctx.warnings) });
}

/**
 * Combines parsed files into one config. Two files with the same domain are a ConfigError naming
 * the second, unless `mergeDomains`: then their rules are merged, and a rule both define is the error.
 * `warnings` (from listing the files) come first in the config's warnings.
 */
export function buildConfig(domains: readonly DomainConfig[], opts: BuildOptions = {}, warnings: readonly string[] = NO_WARNINGS): RateLimitConfig {
  const byName = new Map<string, DomainConfig>();
  for (const d of domains) {
    const previous = byName.get(d.domain);
    if (previous === undefined) byName.set(d.domain, d);
    else if (opts.mergeDomains === true) byName.set(d.domain, mergeDomains(previous, d));
    else {
      throw new ConfigError(
        d.file,
        'domain',
        `duplicate domain ${JSON.stringify(d.domain)} (already defined in ${previous.file}; MERGE_DOMAIN_CONFIG=true merges them)`,
      );
    }
  }
  const all = [...warnings];
  for (const d of domains) all.push(...d.warnings);
  if (!domains.some((d) => d.rules.size > 0)) {
    const from = domains.length === 0 ? 'no config file found' : `no rule in ${domains.map((d) => d.file).join(', ')}`;
    all.push(`${from}: every request is allowed`);
  }
  return Object.freeze({ domains: new FrozenMap(byName), warnings: all.length === 0 ? NO_WARNINGS : Object.freeze(all) });
}

/** parseConfigText over every file, then buildConfig. */
export function configFromTexts(files: readonly ConfigText[], opts: ParseOptions & BuildOptions, warnings?: readonly string[]): RateLimitConfig {
  return buildConfig(
    files.map((f) => parseConfigText(f.file, f.text, opts)),
    opts,
    warnings,
  );
}

function readFailure(file: string, err: unknown): ConfigError {
  // Node's fs messages end with ", <syscall> '<path>'"; the path is already the error's file.
  const message = typeof err === 'object' && err !== null && 'message' in err ? String(err.message) : String(err);
  return new ConfigError(file, '', `cannot read: ${message.replace(/, \w+ '.*'$/, '')}`);
}

/** The files listConfigFiles found, and what it skipped that deserves a warning. */
export interface ConfigListing {
  readonly files: readonly string[];
  readonly warnings: readonly string[];
}

/**
 * The config files at `path`: the path itself when it is a file, else every file under the
 * directory, recursively, whatever its name or extension, in name order (a ConfigMap key such as
 * `ratelimit` or `rules.conf` is a config file like any other). As the reference's runtime loader:
 * links to files are followed, links to directories are not (skipped with a warning), and with
 * `ignoreDotFiles` names starting with '.' are skipped, directories included. Names starting with
 * '..' are always skipped: they are the Kubernetes ConfigMap's `..data` link and timestamped
 * directories, whose files also appear as top-level links. Throws ConfigError when the path, a
 * directory or a listed file is unreadable, a dangling link included: dropping a domain silently
 * would lift its limits.
 */
export async function findConfigFiles(path: string, opts: ListOptions = {}): Promise<ConfigListing> {
  const files: string[] = [];
  const warnings: string[] = [];
  let unreadable: ConfigError | undefined;
  let info;
  try {
    info = await stat(path);
  } catch (err) {
    unreadable = readFailure(path, err);
  }
  if (info?.isFile()) files.push(path);
  else if (info?.isDirectory()) await walkDirectory(path, opts, files, warnings);
  else if (info !== undefined) throw new ConfigError(path, '', 'not a file or a directory');
  const beside = opts.beside;
  if (
    beside !== undefined &&
    (await stat(beside.dir).then(
      (s) => s.isDirectory(),
      () => false,
    ))
  ) {
    await walkDirectory(beside.dir, opts, files, warnings, (name) => name.startsWith(beside.prefix));
  }
  // A missing config directory is an error unless something beside it was found.
  if (unreadable !== undefined && files.length === 0) throw unreadable;
  return { files, warnings };
}

/** Every file under `dir` (see findConfigFiles); `accept` filters the names of its own entries, not of deeper ones. */
async function walkDirectory(
  dir: string,
  opts: ListOptions,
  files: string[],
  warnings: string[],
  accept: (name: string) => boolean = () => true,
): Promise<void> {
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch (err) {
    throw readFailure(dir, err);
  }
  entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const entry of entries) {
    const name = entry.name;
    if (!accept(name) || name.startsWith('..') || (opts.ignoreDotFiles === true && name.startsWith('.'))) continue;
    const full = join(dir, name);
    if (entry.isDirectory()) {
      await walkDirectory(full, opts, files, warnings);
      continue;
    }
    let target;
    try {
      target = entry.isSymbolicLink() ? await stat(full) : entry;
    } catch (err) {
      throw readFailure(full, err);
    }
    if (target.isFile()) files.push(full);
    else if (target.isDirectory()) warnings.push(`${full}: skipped: a link to a directory is not followed (link its files instead)`);
    else warnings.push(`${full}: skipped: not a regular file`);
  }
}

/** The files findConfigFiles finds, without its warnings. */
export async function listConfigFiles(path: string, opts: ListOptions = {}): Promise<string[]> {
  return [...(await findConfigFiles(path, opts)).files];
}

/** The texts of every file findConfigFiles finds, and its warnings. */
export interface ConfigTexts {
  readonly texts: readonly ConfigText[];
  readonly warnings: readonly string[];
}

/** Reads every file findConfigFiles finds. */
export async function readConfigTexts(path: string, opts: ListOptions = {}): Promise<ConfigTexts> {
  const listing = await findConfigFiles(path, opts);
  const texts = await Promise.all(
    listing.files.map(async (file) => {
      try {
        return { file, text: await readFile(file, 'utf8') };
      } catch (err) {
        throw readFailure(file, err);
      }
    }),
  );
  return { texts, warnings: listing.warnings };
}

/** Loads a config file, or every config file under a directory. Throws ConfigError. */
export async function loadConfigPath(path: string, opts: LoadOptions): Promise<RateLimitConfig> {
  const read = await readConfigTexts(path, opts);
  return configFromTexts(read.texts, opts, read.warnings);
}
