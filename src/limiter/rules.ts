import type { Limit } from './types';

/**
 * The validated, frozen rule tree the decision walks (./match.ts): built by a config source
 * (src/config/load.ts from YAML files) and replaced as a whole on reload. Everything here is
 * computed once per load; nothing here knows where the rules came from.
 */

/** One rule (`descriptors[i]` in the YAML), with its children indexed for O(1) lookup. */
export interface RuleNode {
  readonly key: string;
  /** Exact value or wildcard pattern; undefined for a key-only rule. */
  readonly value?: string;
  readonly limit?: Limit;
  readonly shadowMode: boolean;
  readonly detailedMetric: boolean;
  /** Names of limits this rule's limit replaces (`rate_limit.replaces[].name`). */
  readonly replaces: readonly string[];
  /**
   * Metric/descriptor key path as the reference server names it:
   * `key_value` for rules with a value, `key` for key-only rules, joined by '.' from the root
   * (e.g. "tenant_acme.path"). Values of key-only levels are never part of it.
   */
  readonly statKey: string;
  /** counterKeyPrefix(domain, limit.algorithm, limit.windowMs), set when `limit` is. */
  readonly keyPrefix?: string;
  readonly children: RuleLevel;
}

/** The rules at one depth, grouped by entry key. */
export type RuleLevel = ReadonlyMap<string, KeyRules>;

export interface KeyRules {
  /** Rules with an exact value (no '*'). */
  readonly exact: ReadonlyMap<string, RuleNode>;
  /** Rules whose value contains '*', in file order; first match wins. */
  readonly wildcards: readonly { readonly pattern: string; readonly test: (value: string) => boolean; readonly node: RuleNode }[];
  /** The key-only rule (no `value`), if any. */
  readonly keyOnly?: RuleNode;
}

export interface DomainConfig {
  readonly domain: string;
  /** The file it came from, for errors and /rlconfig. */
  readonly file: string;
  readonly rules: RuleLevel;
}

/** All loaded domains. Frozen; replaced as a whole on reload. */
export interface RateLimitConfig {
  readonly domains: ReadonlyMap<string, DomainConfig>;
}

/** What a descriptor matched: the rule at the node reached by its last entry. */
export interface MatchedRule {
  readonly limit: Limit;
  readonly shadowMode: boolean;
  readonly detailedMetric: boolean;
  readonly replaces: readonly string[];
  readonly statKey: string;
  readonly keyPrefix: string;
}
