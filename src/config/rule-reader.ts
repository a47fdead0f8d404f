import { Document, isMap, isSeq, parseDocument, type YAMLError } from 'yaml';
import { limitKeyPrefix } from '../limiter/keys';
import {
  ALGORITHMS,
  GLOBAL_MIN_WINDOW_SYNCS,
  isBucket,
  MAX_WINDOW_MS,
  UNIT_MS,
  UNITS,
  type Algorithm,
  type Limit,
  type LimitScope,
  type Unit,
} from '../limiter/types';
import { DEFAULT_REGION_SYNC_INTERVAL_MS } from '../settings/settings';
import { ConfigError } from './config-error';
import {
  MAX_RULE_LIMITS,
  type DomainConfig,
  type Metadata,
  type RuleIdentity,
  type RuleLevel,
  type RuleLimit,
  type RuleNode,
  type RuleSettings,
} from '../limiter/rules';
import { isWildcard } from './wildcard';
import { Context, fail, child, resolve, describe, fields, readMetadata, text, bool, integer, requiredText } from './yaml-reader';
import { EMPTY_LEVEL, NO_WARNINGS, LevelBuilder, addRule, duplicateRule, freezeLevel } from './rule-tree';
import { checkYamlBounds } from './yaml-bounds';
import { SETTINGS, ROOT_KEYS, RULE_KEYS, LIMIT_KEYS, REPLACES_KEYS } from './format-keys';
/**
 * YAML text -> one validated, deeply frozen domain. The format is envoyproxy/ratelimit's plus this
 * service's extensions (`unit_multiplier`, `algorithm` and its shape). Everything the matcher and the
 * limiter need per rule (window, counter key prefix, stat key, wildcard test) is computed here, once.
 */

export interface ParseOptions {
  /** Algorithm of rules that do not name one (DEFAULT_ALGORITHM). */
  readonly defaultAlgorithm: Algorithm;
  /** REGION_SYNC_INTERVAL, ms (default DEFAULT_REGION_SYNC_INTERVAL_MS): a `scope: global` limit's window holds ten of them. */
  readonly regionSyncIntervalMs?: number;
}

const MAX_REQUESTS_PER_UNIT = 4_294_967_295; // uint32, the wire type of requests_per_unit
const MAX_UNIT_MULTIPLIER = 1_000_000;
// Each sub-window is one counter read per decision: a bound keeps one decision O(1).
const MAX_SUB_WINDOWS = 100;
// Reservations in flight on one descriptor: each is an entry its book keeps (RESERVATIONS_MAX_PER_KEY bounds them too).
const MAX_CONCURRENCY = 1_000_000;
/** The keys of a rate_limit mapping that an in-flight limit (`concurrency`) has no use for. */
const WINDOW_KEYS = [
  'unit',
  'requests_per_unit',
  'unlimited',
  'unit_multiplier',
  'algorithm',
  'burst',
  'sub_windows',
  'strict',
  'calendar',
  'lease',
  'scope',
] as const;

/** One `rate_limit` mapping, read: its limit, and the names it replaces. */
export interface ParsedLimit {
  readonly limit: Limit;
  readonly replaces: readonly string[];
}

function readLimit(ctx: Context, node: unknown, path: string): ParsedLimit | undefined {
  const n = resolve(ctx, node);
  if (n === undefined) return undefined; // `rate_limit:` with nothing under it: no limit, as the reference reads it
  const f = fields(ctx, n, path, LIMIT_KEYS);
  if (resolve(ctx, f.get('concurrency')) !== undefined) return readConcurrency(ctx, f, path);
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

  const calendar = bool(ctx, f.get('calendar'), child(path, 'calendar'));
  // A calendar window is a fixed one: a rule that names no algorithm needs none.
  let algorithm: Algorithm = calendar ? 'fixed_window' : ctx.defaultAlgorithm;
  const algorithmText = text(ctx, f.get('algorithm'), child(path, 'algorithm'));
  if (algorithmText !== undefined) {
    const folded = algorithmText.toLowerCase();
    if (!(ALGORITHMS as readonly string[]).includes(folded)) {
      fail(ctx, child(path, 'algorithm'), `unknown algorithm ${JSON.stringify(algorithmText)} (expected one of: ${ALGORITHMS.join(', ')})`);
    }
    algorithm = folded as Algorithm;
  }
  if (calendar) checkCalendar(ctx, path, { algorithm, unlimited, unitMultiplier });
  const windowMs = UNIT_MS[unit] * unitMultiplier;
  if (windowMs > MAX_WINDOW_MS) {
    fail(
      ctx,
      child(path, 'unit_multiplier'),
      `${unitMultiplier} x ${unit} is a window of ${windowMs} ms, over the longest allowed (${MAX_WINDOW_MS} ms, 100 years)`,
    );
  }
  const shape = readAlgorithmShape(ctx, f, path, { algorithm, requestsPerUnit, windowMs, unlimited });
  const leased = readLease(ctx, f, path, { algorithm, unlimited, strict: shape.strict });
  const scope = readScope(ctx, f, path, { algorithm, unlimited, strict: shape.strict, unit, unitMultiplier, windowMs, calendar });
  // A global limit is leased within its region: its part is what the region's replicas share.
  const lease = leased || scope === 'global';

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
    ...(calendar ? { calendar } : {}),
    ...(lease ? { lease } : {}),
    ...(scope === 'global' ? { scope } : {}),
    name,
    unlimited,
  });
  return { limit, replaces };
}

/**
 * `concurrency: N`: at most N reservations of a descriptor held at once, no window (README,
 * Budgets). None of the window's keys go with it.
 */
function readConcurrency(ctx: Context, f: Map<string, unknown>, path: string): ParsedLimit {
  for (const key of WINDOW_KEYS) {
    if (resolve(ctx, f.get(key)) !== undefined) fail(ctx, child(path, key), 'not allowed with concurrency (an in-flight limit has no window)');
  }
  const concurrency = integer(ctx, f.get('concurrency'), child(path, 'concurrency'), 1, MAX_CONCURRENCY, 1);
  const nameText = text(ctx, f.get('name'), child(path, 'name'));
  const name = nameText === '' ? undefined : nameText;
  const replaces = readReplaces(ctx, f.get('replaces'), child(path, 'replaces'), name);
  const limit: Limit = Object.freeze({
    requestsPerUnit: concurrency,
    unit: 'second',
    unitMultiplier: 1,
    windowMs: UNIT_MS.second,
    algorithm: ctx.defaultAlgorithm,
    burst: concurrency,
    subWindows: 1,
    strict: false,
    name,
    unlimited: false,
    concurrency,
  });
  return { limit, replaces };
}

/**
 * `calendar: true`: windows that follow the calendar are fixed windows of one unit (a number of
 * months would need a month to count from; see README, Calendar windows).
 */
function checkCalendar(ctx: Context, path: string, o: { algorithm: Algorithm; unlimited: boolean; unitMultiplier: number }): void {
  const at = child(path, 'calendar');
  if (o.unlimited) fail(ctx, at, 'not allowed with unlimited: true');
  if (o.algorithm !== 'fixed_window') fail(ctx, at, `only with algorithm fixed_window (this rule uses ${o.algorithm})`);
  if (o.unitMultiplier !== 1) fail(ctx, at, `only with unit_multiplier 1 (this rule has ${o.unitMultiplier})`);
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
  // A bucket's state lasts as long as it takes to refill: bounded as a window is.
  const refillMs = o.requestsPerUnit === 0 ? 0 : Math.ceil((burst * o.windowMs) / o.requestsPerUnit);
  if (bucket && refillMs > MAX_WINDOW_MS) {
    fail(
      ctx,
      child(path, 'burst'),
      `${burst} at ${o.requestsPerUnit} per ${o.windowMs} ms takes ${refillMs} ms to refill, over the longest allowed (${MAX_WINDOW_MS} ms, 100 years)`,
    );
  }
  const subWindows = sliding ? integer(ctx, f.get('sub_windows'), child(path, 'sub_windows'), 1, MAX_SUB_WINDOWS, 1) : 1;
  if (o.windowMs % subWindows !== 0) {
    fail(ctx, child(path, 'sub_windows'), `${subWindows} does not divide the window of ${o.windowMs} ms into whole milliseconds`);
  }
  const strict = sliding ? bool(ctx, f.get('strict'), child(path, 'strict')) : false;
  return { burst, subWindows, strict };
}

/** Algorithms a lease may decide in process: their state adds up across replicas (README, Leases). */
const LEASABLE: readonly Algorithm[] = ['sliding_window', 'fixed_window', 'token_bucket', 'leaky_bucket'];

/**
 * `lease: true`: decided in process against this replica's part of the limit (src/sharing/leases).
 * Refused where a replica's part would not add up to the limit: a log of timestamps, the strict
 * sliding window (each replica would keep its own oldest sub-window), and no limit at all.
 */
function readLease(ctx: Context, f: Map<string, unknown>, path: string, o: LeaseShape): boolean {
  const lease = bool(ctx, f.get('lease'), child(path, 'lease'));
  if (!lease) return false;
  if (o.unlimited) fail(ctx, child(path, 'lease'), 'not allowed with unlimited: true (nothing to lease)');
  const problem = leaseProblem(o);
  if (problem !== undefined) fail(ctx, child(path, 'lease'), problem);
  return true;
}

/** What decides whether a limit can be leased. */
interface LeaseShape {
  readonly algorithm: Algorithm;
  readonly unlimited: boolean;
  readonly strict: boolean;
}

/** Why a limit with a window cannot be leased, or undefined when it can. */
function leaseProblem(o: LeaseShape): string | undefined {
  if (!LEASABLE.includes(o.algorithm)) return `not available with algorithm ${o.algorithm} (leasable: ${LEASABLE.join(', ')})`;
  if (o.strict) return 'not available with strict: true (each replica would keep its own oldest sub-window)';
  return undefined;
}

const SCOPES: readonly LimitScope[] = ['global', 'regional'];

/**
 * `scope: global`: one limit across every region (README, Regions), divided among them by demand
 * every REGION_SYNC_INTERVAL and leased within each: so only a limit that can be leased (`lease`
 * may be left out; `lease: false` contradicts it), and only a window of at least
 * GLOBAL_MIN_WINDOW_SYNCS syncs, where what a sync late or lost lets through is a small share of
 * the window. `regional` (the default) is every other limit.
 */
function readScope(
  ctx: Context,
  f: Map<string, unknown>,
  path: string,
  o: LeaseShape & { unit: Unit; unitMultiplier: number; windowMs: number; calendar: boolean },
): LimitScope {
  const at = child(path, 'scope');
  const scopeText = text(ctx, f.get('scope'), at);
  if (scopeText === undefined || scopeText === '') return 'regional';
  const scope = scopeText.toLowerCase() as LimitScope;
  if (!SCOPES.includes(scope)) fail(ctx, at, `unknown scope ${JSON.stringify(scopeText)} (expected global or regional)`);
  if (scope === 'regional') return scope;
  if (o.unlimited) fail(ctx, at, 'global is not allowed with unlimited: true (nothing to share)');
  if (resolve(ctx, f.get('lease')) !== undefined && !bool(ctx, f.get('lease'), child(path, 'lease'))) {
    fail(ctx, child(path, 'lease'), 'false is not allowed with scope: global (a global limit is leased within each region)');
  }
  const problem = leaseProblem(o);
  if (problem !== undefined) fail(ctx, at, `global limits are leased within each region: ${problem}`);
  const minMs = GLOBAL_MIN_WINDOW_SYNCS * ctx.regionSyncIntervalMs;
  if (o.windowMs < minMs) {
    const window = o.calendar ? `a calendar ${o.unit}` : `${o.unitMultiplier} x ${o.unit}`;
    fail(ctx, at, `global needs a window of at least ${GLOBAL_MIN_WINDOW_SYNCS} x REGION_SYNC_INTERVAL (${minMs} ms); ${window} is ${o.windowMs} ms`);
  }
  return scope;
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

/** Where a `rate_limits` list sits: its rule's domain, stat key and shadow mode (each limit reports under them). */
interface LimitListOwner {
  readonly domain: string;
  readonly statKey: string;
  readonly shadowMode: boolean;
}

/**
 * `rate_limits`: 1 to MAX_RULE_LIMITS mappings, each read by readLimit as `rate_limit` is, each on
 * its own counter and metrics series (`<statKey>.<name>`, or `.<position>` unnamed). Not allowed in
 * it: `unlimited` (a limit among others), two limits on one counter (same algorithm and window: they
 * would count each hit twice), a name twice, a limit replacing a name of its own list.
 */
function readLimitList(ctx: Context, node: unknown, path: string, owner: LimitListOwner): readonly RuleLimit[] {
  const n = resolve(ctx, node);
  const expected = `expected a list of 1 to ${MAX_RULE_LIMITS} rate_limit mappings`;
  if (!isSeq(n)) fail(ctx, path, `${expected}, got ${describe(n)}`);
  if (n.items.length === 0 || n.items.length > MAX_RULE_LIMITS) fail(ctx, path, `${expected}, got ${n.items.length}`);
  const names = new Map<string, string>();
  const counters = new Map<string, string>();
  const limits = n.items.map((item, i): RuleLimit => {
    const at = `${path}[${i}]`;
    const parsed = readLimit(ctx, item, at);
    if (parsed === undefined) fail(ctx, at, `expected a rate_limit mapping, got ${describe(resolve(ctx, item))}`);
    const { limit, replaces } = parsed;
    if (limit.unlimited) fail(ctx, child(at, 'unlimited'), 'not allowed in rate_limits (every limit of the list counts)');
    if (limit.name !== undefined) {
      const first = names.get(limit.name);
      if (first !== undefined) fail(ctx, child(at, 'name'), `duplicate name ${JSON.stringify(limit.name)} in this list (first at ${first})`);
      names.set(limit.name, at);
    }
    const keyPrefix = limitKeyPrefix(owner.domain, limit);
    const same = counters.get(keyPrefix);
    if (same !== undefined && limit.concurrency !== undefined) fail(ctx, child(at, 'concurrency'), `a second in-flight limit in this list (first at ${same})`);
    if (same !== undefined) {
      fail(ctx, at, `counts on the same counter as ${same} (${limit.algorithm} over ${limit.windowMs} ms): give one of them another window or algorithm`);
    }
    counters.set(keyPrefix, at);
    const statSuffix = `.${limit.name ?? i}`;
    return Object.freeze({ limit, keyPrefix, statSuffix, statKey: owner.statKey + statSuffix, shadowMode: owner.shadowMode, replaces });
  });
  limits.forEach((l, i) => {
    const own = l.replaces.findIndex((name) => names.has(name));
    if (own >= 0) fail(ctx, child(`${path}[${i}]`, `replaces[${own}].name`), `${JSON.stringify(l.replaces[own])} is a limit of the same list`);
  });
  return Object.freeze(limits);
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
  const read = readSettings(ctx, f, path, { key, value }, parent.settings);
  if (f.has('rate_limits') && f.has('rate_limit')) fail(ctx, child(path, 'rate_limits'), 'not allowed with rate_limit (a rule has one or the other)');
  const limits = f.has('rate_limits')
    ? readLimitList(ctx, f.get('rate_limits'), child(path, 'rate_limits'), { domain, statKey, shadowMode: read.shadowMode })
    : undefined;
  const settings = readReservations(ctx, path, read, limits?.map((l) => l.limit) ?? (parsed === undefined ? [] : [parsed.limit]));
  const valueToMetric = bool(ctx, f.get('value_to_metric'), child(path, 'value_to_metric'));
  const shareThreshold = bool(ctx, f.get('share_threshold'), child(path, 'share_threshold'));
  if (shareThreshold && (value === undefined || !isWildcard(value))) {
    fail(ctx, child(path, 'share_threshold'), "only allowed on a rule whose value is a wildcard (contains '*')");
  }
  const metadata = readMetadata(ctx, f.get('metadata'), child(path, 'metadata'));
  const requestKeyed = parent.requestKeyed || valueToMetric || shareThreshold;
  const children = readLevel(ctx, f.get('descriptors'), child(path, 'descriptors'), domain, { statKey, requestKeyed, settings });
  const limit = limits === undefined ? parsed?.limit : limits[0].limit;
  const fixed: FixedFields = {
    key,
    path,
    value,
    limit,
    limits,
    shareThreshold,
    valueToMetric,
    requestKeyed,
    metadata,
    replaces: limits === undefined ? (parsed?.replaces ?? Object.freeze([])) : Object.freeze([...new Set(limits.flatMap((l) => l.replaces))]),
    statKey,
    keyPrefix: limit === undefined ? undefined : limitKeyPrefix(domain, limit),
    children,
  };
  return new BuiltRule(fixed, settings) as unknown as RuleNode;
}

/**
 * `reservations` and `reservation_hold_seconds` against the rule's limits: reservations need a limit
 * to hold against (and a limit that counts), a hold time needs reservations, and a `concurrency`
 * limit implies them (its only use is reservations). Returns the rule's settings with that applied.
 */
function readReservations(ctx: Context, path: string, settings: RuleSettings, limits: readonly Limit[]): RuleSettings {
  const inFlight = limits.some((l) => l.concurrency !== undefined);
  if (settings.reservations && (limits.length === 0 || limits.some((l) => l.unlimited))) {
    fail(ctx, child(path, 'reservations'), 'only on a rule with a limit to reserve against (rate_limit or rate_limits, not unlimited)');
  }
  if (settings.reservationHoldSeconds > 0 && !settings.reservations && !inFlight) {
    fail(ctx, child(path, 'reservation_hold_seconds'), 'only on a rule that takes reservations (reservations: true, or a concurrency limit)');
  }
  return inFlight && !settings.reservations ? { ...settings, reservations: true } : settings;
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
  declare readonly limits?: readonly RuleLimit[];
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
    this.limits = fixed.limits;
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

/**
 * One `rate_limit` mapping given as plain data (a runtime override's, src/limiter/overrides.ts),
 * validated by the code that reads a config file's: the same keys, defaults and errors. Throws
 * ConfigError naming `source` and the path under `rate_limit` (`rate_limit.unit`).
 */
export function parseRateLimitValue(source: string, value: unknown, opts: ParseOptions): ParsedLimit {
  const path = 'rate_limit';
  const doc = new Document(value, { version: '1.1' });
  const ctx: Context = { file: source, aliases: checkYamlBounds(source, doc), ...readerOptions(opts), warnings: [] };
  const node = resolve(ctx, doc.contents);
  if (!isMap(node)) fail(ctx, path, `expected a mapping, got ${node === undefined ? 'nothing' : describe(node)}`);
  // A mapping always yields a limit (an empty one is `requests_per_unit: 0` with a required unit).
  const parsed = readLimit(ctx, node, path)!;
  // What a file may hold with a warning (a reference key in the wrong place) is refused here: an
  // override is written by one request, whose author reads the answer.
  if (ctx.warnings.length > 0) throw new ConfigError(source, '', ctx.warnings[0].slice(source.length + 2).replace(': ignored (', ': refused ('));
  return parsed;
}

/** The reader's options with their defaults filled in. */
function readerOptions(opts: ParseOptions): Pick<Context, 'defaultAlgorithm' | 'regionSyncIntervalMs'> {
  return { defaultAlgorithm: opts.defaultAlgorithm, regionSyncIntervalMs: opts.regionSyncIntervalMs ?? DEFAULT_REGION_SYNC_INTERVAL_MS };
}

function parseConfigDocument(file: string, doc: Document, opts: ParseOptions): DomainConfig {
  const ctx: Context = { file, aliases: checkYamlBounds(file, doc), ...readerOptions(opts), warnings: [] };
  const root = resolve(ctx, doc.contents);
  if (root === undefined) fail(ctx, '', 'the file is empty (expected a mapping with "domain" and "descriptors")');
  if (!isMap(root)) fail(ctx, '', `expected a mapping with "domain" and "descriptors", got ${describe(root)}`);
  const f = fields(ctx, root, '', ROOT_KEYS);
  const domain = requiredText(ctx, f.get('domain'), 'domain');
  const rules = readLevel(ctx, f.get('descriptors'), 'descriptors', domain, ROOT);
  return Object.freeze({ domain, file, rules, warnings: ctx.warnings.length === 0 ? NO_WARNINGS : Object.freeze(ctx.warnings) });
}
