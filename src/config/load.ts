import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { isAlias, isMap, isScalar, isSeq, parseDocument, type Document, type YAMLError } from 'yaml';
import { counterKeyPrefix } from '../limiter/keys';
import { ALGORITHMS, UNIT_MS, UNITS, type Algorithm, type Limit, type Unit } from '../limiter/types';
import { ConfigError } from './config-error';
import { type DomainConfig, type KeyRules, type RateLimitConfig, type RuleLevel, type RuleNode } from '../limiter/rules';
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

export interface LoadOptions extends ParseOptions {
  /** Skip files whose name starts with '.' (RUNTIME_IGNOREDOTFILES). */
  readonly ignoreDotFiles?: boolean;
}

/** One config file's name (as it appears in errors) and text. */
export interface ConfigText {
  readonly file: string;
  readonly text: string;
}

const MAX_REQUESTS_PER_UNIT = 4_294_967_295; // uint32, the wire type of requests_per_unit
const MAX_UNIT_MULTIPLIER = 1_000_000;

const ROOT_KEYS = ['domain', 'descriptors'] as const;
const RULE_KEYS = ['key', 'value', 'rate_limit', 'descriptors', 'shadow_mode', 'detailed_metric'] as const;
const LIMIT_KEYS = ['unit', 'requests_per_unit', 'unlimited', 'name', 'replaces', 'unit_multiplier', 'algorithm'] as const;
const REPLACES_KEYS = ['name'] as const;

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
const EMPTY_CONFIG: RateLimitConfig = Object.freeze({ domains: new FrozenMap<string, DomainConfig>([]) });

/** A config with no domains: every descriptor matches nothing. */
export function emptyConfig(): RateLimitConfig {
  return EMPTY_CONFIG;
}

interface Context {
  readonly file: string;
  readonly doc: Document;
  readonly defaultAlgorithm: Algorithm;
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
  const merged: unknown[] = [];
  for (const pair of node.items) {
    const key = resolve(ctx, pair.key);
    if (isScalar(key) && typeof key.value === 'symbol') {
      merged.push(pair.value);
      continue;
    }
    if (!isScalar(key)) fail(ctx, path, `keys must be plain strings, got ${describe(key)}`);
    const name = typeof key.value === 'string' ? key.value : String(key.source ?? key.value);
    if (!allowed.includes(name)) fail(ctx, child(path, name), `unknown key (expected one of: ${allowed.join(', ')})`);
    out.set(name, pair.value);
  }
  for (const source of merged) {
    const target = resolve(ctx, source);
    const bases = isSeq(target) ? target.items : [target];
    for (const base of bases) {
      for (const [k, v] of fields(ctx, resolve(ctx, base), path, allowed)) if (!out.has(k)) out.set(k, v);
    }
  }
  return out;
}

/** A string field: its source text for any scalar, as the reference reads strings; undefined when absent. */
function text(ctx: Context, node: unknown, path: string): string | undefined {
  const n = resolve(ctx, node);
  if (n === undefined) return undefined;
  if (!isScalar(n)) fail(ctx, path, `expected a string, got ${describe(n)}`);
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
  const v = isScalar(n) ? n.value : undefined;
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

  const nameText = text(ctx, f.get('name'), child(path, 'name'));
  const name = nameText === '' ? undefined : nameText;
  const replaces = readReplaces(ctx, f.get('replaces'), child(path, 'replaces'), name);

  const limit: Limit = Object.freeze({
    requestsPerUnit,
    unit,
    unitMultiplier,
    windowMs: UNIT_MS[unit] * unitMultiplier,
    algorithm,
    name,
    unlimited,
  });
  return { limit, replaces };
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

/** What a rule inherits from the rules above it. */
interface Parent {
  readonly statKey: string;
  readonly shadowMode: boolean;
}

const ROOT: Parent = { statKey: '', shadowMode: false };

function readRule(ctx: Context, node: unknown, path: string, domain: string, parent: Parent): RuleNode {
  const f = fields(ctx, resolve(ctx, node), path, RULE_KEYS);
  const key = requiredText(ctx, f.get('key'), child(path, 'key'));
  const valueText = text(ctx, f.get('value'), child(path, 'value'));
  const value = valueText === '' ? undefined : valueText; // an empty value is a key-only rule, as in the reference
  const own = value === undefined ? key : `${key}_${value}`;
  const statKey = parent.statKey === '' ? own : `${parent.statKey}.${own}`;
  const parsed = readLimit(ctx, f.get('rate_limit'), child(path, 'rate_limit'));
  // shadow_mode covers the rule's subtree, so `tenant: acme, shadow_mode: true` dry-runs every
  // limit nested under it; the reference applies it to the rule's own limit only, which this includes.
  const shadowMode = bool(ctx, f.get('shadow_mode'), child(path, 'shadow_mode')) || parent.shadowMode;
  const detailedMetric = bool(ctx, f.get('detailed_metric'), child(path, 'detailed_metric'));
  const children = readLevel(ctx, f.get('descriptors'), child(path, 'descriptors'), domain, { statKey, shadowMode });
  const limit = parsed?.limit;
  return Object.freeze({
    key,
    value,
    limit,
    shadowMode,
    detailedMetric,
    replaces: parsed?.replaces ?? Object.freeze([]),
    statKey,
    keyPrefix: limit === undefined ? undefined : counterKeyPrefix(domain, limit.algorithm, limit.windowMs),
    children,
  });
}

interface LevelBuilder {
  readonly exact: Map<string, RuleNode>;
  readonly wildcards: { readonly pattern: string; readonly test: (value: string) => boolean; readonly node: RuleNode }[];
  keyOnly?: RuleNode;
  /** Where each (value | key-only) was first defined, for duplicate errors. */
  readonly seen: Map<string | undefined, string>;
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
    let b = builders.get(rule.key);
    if (b === undefined) {
      b = { exact: new Map(), wildcards: [], seen: new Map() };
      builders.set(rule.key, b);
    }
    const first = b.seen.get(rule.value);
    if (first !== undefined) {
      const what = rule.value === undefined ? 'without a value' : `and value ${JSON.stringify(rule.value)}`;
      fail(ctx, itemPath, `duplicate rule for key ${JSON.stringify(rule.key)} ${what} (first at ${first})`);
    }
    b.seen.set(rule.value, itemPath);
    if (rule.value === undefined) b.keyOnly = rule;
    else if (isWildcard(rule.value)) {
      b.wildcards.push(Object.freeze({ pattern: rule.value, test: compileWildcard(rule.value), node: rule }));
    } else b.exact.set(rule.value, rule);
  });
  const level: [string, KeyRules][] = [];
  for (const [key, b] of builders) {
    level.push([
      key,
      Object.freeze({ exact: new FrozenMap(b.exact), wildcards: Object.freeze(b.wildcards), keyOnly: b.keyOnly }),
    ]);
  }
  return new FrozenMap(level);
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
  const ctx: Context = { file, doc, defaultAlgorithm: opts.defaultAlgorithm };
  const root = resolve(ctx, doc.contents);
  if (root === undefined) fail(ctx, '', 'the file is empty (expected a mapping with "domain" and "descriptors")');
  if (!isMap(root)) fail(ctx, '', `expected a mapping with "domain" and "descriptors", got ${describe(root)}`);
  const f = fields(ctx, root, '', ROOT_KEYS);
  const domain = requiredText(ctx, f.get('domain'), 'domain');
  const rules = readLevel(ctx, f.get('descriptors'), 'descriptors', domain, ROOT);
  return Object.freeze({ domain, file, rules });
}

/** Combines parsed files into one config. Two files with the same domain are a ConfigError naming the second. */
export function buildConfig(domains: readonly DomainConfig[]): RateLimitConfig {
  const byName = new Map<string, DomainConfig>();
  for (const d of domains) {
    const previous = byName.get(d.domain);
    if (previous !== undefined) {
      throw new ConfigError(d.file, 'domain', `duplicate domain ${JSON.stringify(d.domain)} (already defined in ${previous.file})`);
    }
    byName.set(d.domain, d);
  }
  return Object.freeze({ domains: new FrozenMap(byName) });
}

/** parseConfigText over every file, then buildConfig. */
export function configFromTexts(files: readonly ConfigText[], opts: ParseOptions): RateLimitConfig {
  return buildConfig(files.map((f) => parseConfigText(f.file, f.text, opts)));
}

const CONFIG_FILE = /\.ya?ml$/i;

function readFailure(file: string, err: unknown): ConfigError {
  // Node's fs messages end with ", <syscall> '<path>'"; the path is already the error's file.
  const message = typeof err === 'object' && err !== null && 'message' in err ? String(err.message) : String(err);
  return new ConfigError(file, '', `cannot read: ${message.replace(/, \w+ '.*'$/, '')}`);
}

/**
 * The config files at `path`: the path itself when it is a file, else every *.yaml / *.yml directly
 * inside the directory (symlinks followed), sorted by name. Names starting with '..' are always
 * skipped: they are the Kubernetes ConfigMap's `..data` and timestamped directories, whose files
 * also appear as top-level symlinks. Throws ConfigError when the path or a listed file is unreadable.
 */
export async function listConfigFiles(path: string, opts: { readonly ignoreDotFiles?: boolean } = {}): Promise<string[]> {
  let info;
  try {
    info = await stat(path);
  } catch (err) {
    throw readFailure(path, err);
  }
  if (info.isFile()) return [path];
  if (!info.isDirectory()) throw new ConfigError(path, '', 'not a file or a directory');
  let names: string[];
  try {
    names = await readdir(path);
  } catch (err) {
    throw readFailure(path, err);
  }
  const files: string[] = [];
  for (const name of names.sort()) {
    if (name.startsWith('..') || (opts.ignoreDotFiles && name.startsWith('.')) || !CONFIG_FILE.test(name)) continue;
    const file = join(path, name);
    try {
      // A dangling link is an error, not a skip: dropping a domain silently would lift its limits.
      if ((await stat(file)).isFile()) files.push(file);
    } catch (err) {
      throw readFailure(file, err);
    }
  }
  return files;
}

/** Reads every file listConfigFiles finds. */
export async function readConfigTexts(path: string, opts: { readonly ignoreDotFiles?: boolean } = {}): Promise<ConfigText[]> {
  const files = await listConfigFiles(path, opts);
  return Promise.all(
    files.map(async (file) => {
      try {
        return { file, text: await readFile(file, 'utf8') };
      } catch (err) {
        throw readFailure(file, err);
      }
    }),
  );
}

/** Loads a config file, or every config file in a directory. Throws ConfigError. */
export async function loadConfigPath(path: string, opts: LoadOptions): Promise<RateLimitConfig> {
  return configFromTexts(await readConfigTexts(path, opts), opts);
}
