import type { Limit, OutcomeRule, StructFields } from './types';
import { MAX_HOLD_SECONDS } from './reservations';

/**
 * The validated, frozen rule tree the decision walks (./match.ts): built by a config source
 * (src/config/rule-tree.ts from YAML files) and replaced as a whole on reload. Everything here is
 * computed once per load; nothing here knows where the rules came from.
 */

/** A rule's `metadata` mapping, deeply frozen. */
export type Metadata = StructFields;

/** The rule a setting's `check` looks at: its entry key, and its value (undefined for a key-only rule). */
export interface RuleIdentity {
  readonly key: string;
  readonly value: string | undefined;
}

interface RuleSettingOf<V> {
  /** The key in a config file's rule (`quota_mode`); an xDS RateLimitDescriptor carries it as the field of that name, if it has one. */
  readonly yaml: string;
  /** The value of a rule that does not set it. */
  readonly default: V;
  /**
   * A rule below one that sets it has it too: a boolean is true when the rule or any rule above it
   * says true (`shadow_mode: true` covers a subtree); a number is the rule's own when set, else the nearest one above's.
   */
  readonly inherited: boolean;
  /** The reference format knows the key: written where it means nothing (under `rate_limit`), it loads with a warning there, as in the reference. */
  readonly reference?: boolean;
  /** Validation beyond the type, of a value other than the default set on the rule itself: an error detail ("only allowed on ..."), or undefined. */
  readonly check?: (value: V, rule: RuleIdentity) => string | undefined;
}

export interface BooleanRuleSetting extends RuleSettingOf<boolean> {
  readonly type: 'boolean';
}

export interface IntegerRuleSetting extends RuleSettingOf<number> {
  readonly type: 'integer';
  readonly min: number;
  readonly max: number;
}

export type RuleSetting = BooleanRuleSetting | IntegerRuleSetting;

/**
 * The per-rule keys that change a decision and are a plain flag or number, by the field they get on
 * RuleNode and MatchedRule. This table is their one declaration: the loader (src/config/rule-reader.ts)
 * reads, validates and inherits each one from it, the xDS translation copies each from its proto
 * field, and the two types below get one field each. A new key is an entry here and its use in the
 * request's planning (./plan.ts, where the rule of a request's own limit, overrideRule, gets the field
 * too: the compiler points there). Keys with a structure or rules of their own (rate_limit,
 * descriptors, metadata, value_to_metric, share_threshold) are read by the loader by name.
 */
export const RULE_SETTINGS = {
  /**
   * `shadow_mode`: over its limit, the rule answers OK (and counts a shadow_mode hit). It covers the
   * rule's subtree, so `tenant: acme, shadow_mode: true` dry-runs every limit nested under it; the
   * reference applies it to the rule's own limit only, which this includes.
   */
  shadowMode: { yaml: 'shadow_mode', type: 'boolean', default: false, inherited: true, reference: true },
  /** `quota_mode`: over its limit, this rule alone does not make the overall code OVER_LIMIT. */
  quotaMode: { yaml: 'quota_mode', type: 'boolean', default: false, inherited: false, reference: true },
  /** `detailed_metric`: metrics name the rule by the request's entries, values included (see detailedStatKey). */
  detailedMetric: { yaml: 'detailed_metric', type: 'boolean', default: false, inherited: false, reference: true },
  /**
   * `count_denied_requests`: the rule's counters are charged even when the request is denied (by
   * them or by another descriptor), as COUNT_DENIED_REQUESTS does for every rule. A cost charged
   * after the response (Envoy's `apply_on_stream_done`) is then recorded past the limit instead of
   * lost, and later checks are denied until the usage drains. Covers the rule's subtree.
   */
  countDeniedRequests: { yaml: 'count_denied_requests', type: 'boolean', default: false, inherited: true },
  /**
   * `reservations`: the rule takes reserve and commit descriptors (./reservations.ts); a descriptor
   * ending in a reserve or commit entry on any other rule is INVALID_ARGUMENT. A rule with a
   * `concurrency` limit takes them whether it says so or not (the loader sets it). Only on a rule
   * with a limit; not inherited: each rule whose limits are reserved against says so.
   */
  reservations: { yaml: 'reservations', type: 'boolean', default: false, inherited: false },
  /**
   * `reservation_hold_seconds`: how long this rule's reserves hold, 1 s to 7 days, instead of its
   * shortest window; RESERVATION_TTL caps it. Only on a rule that takes reservations. 0: unset.
   */
  reservationHoldSeconds: { yaml: 'reservation_hold_seconds', type: 'integer', default: 0, inherited: false, min: 1, max: MAX_HOLD_SECONDS },
} as const satisfies Readonly<Record<string, RuleSetting>>;

type SettingValue<S> = S extends { readonly type: 'integer' } ? number : boolean;

/** One field per RULE_SETTINGS entry, as every RuleNode and MatchedRule carries them. */
export type RuleSettings = { readonly [F in keyof typeof RULE_SETTINGS]: SettingValue<(typeof RULE_SETTINGS)[F]> };

/** One rule (`descriptors[i]` in the YAML), with its children indexed for O(1) lookup. */
export interface RuleNode extends RuleSettings {
  readonly key: string;
  /** Where the rule is in its file ("descriptors[2].descriptors[0]"), for errors. */
  readonly path: string;
  /** Exact value or wildcard pattern; undefined for a key-only rule. */
  readonly value?: string;
  readonly limit?: Limit;
  /**
   * `rate_limits` (several limits on one node): every limit, in file order; `limit`, `keyPrefix` and
   * `replaces` are then its first limit's, and the union of their replaces. Undefined for `rate_limit`.
   */
  readonly limits?: readonly RuleLimit[];
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

/**
 * One limit of a `rate_limits` list, as the decision counts and reports it: its own counter (its
 * key prefix) and its own metrics series (the rule's stat key and its suffix), under the rule's
 * shadow mode. One frozen object per limit of a config, so the live view can group by it.
 */
export interface RuleLimit extends OutcomeRule {
  readonly limit: Limit;
  /** counterKeyPrefix(domain, limit.algorithm, limit.windowMs, limit.subWindows). */
  readonly keyPrefix: string;
  /** `.<name>`, or `.<position>` for an unnamed limit: what follows the rule's stat key (detailed or not) in metrics. */
  readonly statSuffix: string;
  /** Names this limit replaces (`replaces[].name` of its mapping). */
  readonly replaces: readonly string[];
}

/** The most limits one `rate_limits` list may hold: each is one counter per request. */
export const MAX_RULE_LIMITS = 10;

/** Where the rule of an overridden descriptor comes from (./overrides.ts): the override, and the config's rule it replaces. */
export interface OverrideOrigin {
  /** The override's identity and the store's change number of it. */
  readonly id: string;
  readonly version: number;
  /** The config's rule at the descriptor's path; undefined when that node has no limit of its own. */
  readonly configRule: MatchedRule | undefined;
}

/** What a descriptor matched: the rule at the node reached by its last entry. */
export interface MatchedRule extends RuleSettings {
  readonly limit: Limit;
  readonly limits?: readonly RuleLimit[];
  readonly requestKeyed: boolean;
  readonly metadata?: Metadata;
  readonly replaces: readonly string[];
  readonly statKey: string;
  readonly keyPrefix: string;
  /** True for the rule a request's own `limit` override makes (see OutcomeRule). */
  readonly override?: boolean;
  /** Set on the rule a runtime override makes of the config's rule (./overrides.ts). */
  readonly overridden?: OverrideOrigin;
}
