import { ConfigError } from './config-error';
import { type DomainConfig, type KeyRules, type RateLimitConfig, type RuleLevel, type RuleNode } from '../limiter/rules';
import { compileWildcard, isWildcard } from './wildcard';
/**
 * Building the frozen rule tree: levels of rules keyed by descriptor key and value, domains merged
 * (MERGE_DOMAIN_CONFIG) or rejected as duplicates, the whole config frozen (shared by every request).
 */

export interface BuildOptions {
  /** One domain split across several files is merged into one (MERGE_DOMAIN_CONFIG); else a duplicate domain is an error. */
  readonly mergeDomains?: boolean;
}

/**
 * A Map that refuses writes once built: Object.freeze does not reach a Map's entries, and the
 * config is shared by every in-flight request, so a stray write must fail loudly.
 */
export class FrozenMap<K, V> extends Map<K, V> {
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

export const EMPTY_LEVEL: RuleLevel = new FrozenMap<string, KeyRules>([]);
export const NO_WARNINGS: readonly string[] = Object.freeze([]);
const EMPTY_CONFIG: RateLimitConfig = Object.freeze({ domains: new FrozenMap<string, DomainConfig>([]), warnings: NO_WARNINGS });

/** A config with no domains: every descriptor matches nothing. */
export function emptyConfig(): RateLimitConfig {
  return EMPTY_CONFIG;
}

export interface LevelBuilder {
  readonly exact: Map<string, RuleNode>;
  readonly wildcards: { readonly pattern: string; readonly test: (value: string) => boolean; readonly node: RuleNode }[];
  keyOnly?: RuleNode;
}

/** Adds `rule` to the level being built; the rule already there for its key and value, if any, is returned instead. */
export function addRule(builders: Map<string, LevelBuilder>, rule: RuleNode): RuleNode | undefined {
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

export function duplicateRule(rule: RuleNode, first: string): string {
  const what = rule.value === undefined ? 'without a value' : `and value ${JSON.stringify(rule.value)}`;
  return `duplicate rule for key ${JSON.stringify(rule.key)} ${what} (first at ${first})`;
}

export function freezeLevel(builders: Map<string, LevelBuilder>): RuleLevel {
  const level: [string, KeyRules][] = [];
  for (const [key, b] of builders) {
    level.push([key, Object.freeze({ exact: new FrozenMap(b.exact), wildcards: Object.freeze(b.wildcards), keyOnly: b.keyOnly })]);
  }
  return new FrozenMap(level);
}

/** The top-level rules of `later` added to those of `earlier` (MERGE_DOMAIN_CONFIG); a rule defined in both is an error naming `later`. */
export function mergeDomains(earlier: DomainConfig, later: DomainConfig): DomainConfig {
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
