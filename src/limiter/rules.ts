import type { Limit, StructFields } from './types';

export type { StructValue as MetadataValue } from './types';

/**
 * The validated, frozen rule tree the decision walks (./match.ts): built by a config source
 * (src/config/load.ts from YAML files) and replaced as a whole on reload. Everything here is
 * computed once per load; nothing here knows where the rules came from.
 */

/** A rule's `metadata` mapping, deeply frozen. */
export type Metadata = StructFields;

/** One rule (`descriptors[i]` in the YAML), with its children indexed for O(1) lookup. */
export interface RuleNode {
  readonly key: string;
  /** Where the rule is in its file ("descriptors[2].descriptors[0]"), for errors. */
  readonly path: string;
  /** Exact value or wildcard pattern; undefined for a key-only rule. */
  readonly value?: string;
  readonly limit?: Limit;
  readonly shadowMode: boolean;
  readonly detailedMetric: boolean;
  /** `quota_mode`: over its limit, this rule alone does not make the overall code OVER_LIMIT. */
  readonly quotaMode: boolean;
  /** `share_threshold` (wildcard rules only): every value matching the pattern counts on one counter. */
  readonly shareThreshold: boolean;
  /** `value_to_metric`: the request's value, not the pattern or nothing, names this level in metrics. */
  readonly valueToMetric: boolean;
  /**
   * True when a rule on the path down to this one (itself included) has share_threshold or
   * value_to_metric, so the counter key or stat key depends on the request (see requestKeys in match.ts).
   * False for every rule of a config that uses neither: the hot path then never re-walks.
   */
  readonly requestKeyed: boolean;
  /** `metadata`, reported in the response's dynamic metadata (RESPONSE_DYNAMIC_METADATA). */
  readonly metadata?: Metadata;
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
  /** Ignored keys and the like, each naming file and path. */
  readonly warnings: readonly string[];
}

/** All loaded domains. Frozen; replaced as a whole on reload. */
export interface RateLimitConfig {
  readonly domains: ReadonlyMap<string, DomainConfig>;
  /** What loaded but deserves a look (ignored keys, skipped files, no rule at all), each naming file and path. */
  readonly warnings: readonly string[];
}

/** What a descriptor matched: the rule at the node reached by its last entry. */
export interface MatchedRule {
  readonly limit: Limit;
  readonly shadowMode: boolean;
  readonly detailedMetric: boolean;
  readonly quotaMode: boolean;
  readonly requestKeyed: boolean;
  readonly metadata?: Metadata;
  readonly replaces: readonly string[];
  readonly statKey: string;
  readonly keyPrefix: string;
}
