import type { Entry } from './types';
import type { KeyRules, MatchedRule, RateLimitConfig, RuleLevel, RuleNode } from './rules';

/**
 * Descriptor -> rule, the reference server's way. Runs once per descriptor on the hot path, so it
 * allocates nothing: it walks the frozen tree and returns a node of it.
 */

/** The rule one entry's value picks among a key's rules: exact, else the first matching wildcard, else key-only. */
export function pickRule(rules: KeyRules, value: string): RuleNode | undefined {
  const exact = rules.exact.get(value);
  if (exact !== undefined) return exact;
  const wildcards = rules.wildcards;
  for (let i = 0; i < wildcards.length; i++) {
    if (wildcards[i].test(value)) return wildcards[i].node;
  }
  return rules.keyOnly;
}

/**
 * The rule for `entries` in `domain`: per entry, the exact value, else the first matching
 * wildcard, else the key-only rule; the limit is the one on the node reached by the last entry
 * (no fallback to a shallower rule). Undefined when the domain is unknown, an entry matches
 * nothing, or the last node has no limit.
 */
export function matchDescriptor(config: RateLimitConfig, domain: string, entries: readonly Entry[]): MatchedRule | undefined {
  const node = reachRule(config, domain, entries);
  // A node with a limit carries every MatchedRule field (src/config/rule-reader.ts sets keyPrefix with limit).
  return node === undefined || node.limit === undefined ? undefined : (node as MatchedRule);
}

/**
 * The node `entries` reach in `domain`, entry by entry as matchDescriptor walks, whether or not it
 * has a limit: where a runtime override of the descriptor (./overrides.ts) takes its settings from.
 * Undefined when the domain is unknown or an entry matches no rule.
 */
export function reachRule(config: RateLimitConfig, domain: string, entries: readonly Entry[]): RuleNode | undefined {
  const d = config.domains.get(domain);
  if (d === undefined || entries.length === 0) return undefined;
  let level: RuleLevel = d.rules;
  let node: RuleNode | undefined;
  for (let i = 0; i < entries.length; i++) {
    const rules = level.get(entries[i].key);
    if (rules === undefined) return undefined;
    node = pickRule(rules, entries[i].value);
    if (node === undefined) return undefined;
    level = node.children;
  }
  return node;
}

/**
 * The stat key of a `detailed_metric` rule: every entry with its value (`key_value`, or `key` when
 * the value is empty), joined by '.'. Rules without detailed_metric keep their configured statKey,
 * so metric cardinality grows only where the operator asked for it.
 */
export function detailedStatKey(rule: MatchedRule, entries: readonly Entry[]): string {
  return rule.detailedMetric ? entriesStatKey(entries) : rule.statKey;
}

/** The reference server's key path of a descriptor's entries: `key_value` per entry (`key` when the value is empty), '.'-joined. */
export function entriesStatKey(entries: readonly Entry[]): string {
  let key = '';
  for (let i = 0; i < entries.length; i++) {
    const e = entries[i];
    if (i > 0) key += '.';
    key += e.value === '' ? e.key : `${e.key}_${e.value}`;
  }
  return key;
}

/**
 * The key path of a descriptor without its values (`key1.key2`): what a request-supplied limit
 * override is reported under. Its values are the caller's to pick, one new series each would let a
 * caller grow the metrics without bound (the reference names overrides by their values).
 */
export function keysStatKey(entries: readonly Entry[]): string {
  let key = '';
  for (let i = 0; i < entries.length; i++) key += i > 0 ? `.${entries[i].key}` : entries[i].key;
  return key;
}

/** What a descriptor matched to a `requestKeyed` rule counts on and reports under. */
export interface RequestKeys {
  /** The entries its counter is keyed by: where a share_threshold rule matched, the value is that rule's pattern. */
  readonly entries: readonly Entry[];
  /** Its metric key path, without the domain. */
  readonly statKey: string;
}

/**
 * The counter entries and stat key of `entries`, matched to `rule` (a `requestKeyed` rule that
 * matchDescriptor returned for them), as the reference computes them:
 * - share_threshold: the entry matched by such a wildcard rule is counted, and named in metrics,
 *   as the pattern, so every value the pattern covers shares one counter;
 * - value_to_metric (unless detailed_metric, which names every entry by its value anyway): the
 *   level is named by the request's value where the rule matched by wildcard or by key only.
 * Walks the tree a second time; only rules that use these keys pay for it.
 */
export function requestKeys(config: RateLimitConfig, domain: string, entries: readonly Entry[], rule: MatchedRule): RequestKeys {
  let level: RuleLevel = config.domains.get(domain)!.rules;
  const counted: Entry[] = new Array<Entry>(entries.length);
  let statKey = '';
  for (let i = 0; i < entries.length; i++) {
    const entry = entries[i];
    const rules = level.get(entry.key)!;
    const node = pickRule(rules, entry.value)!;
    const byWildcard = node.value !== undefined && rules.exact.get(entry.value) !== node;
    const shared = byWildcard && node.shareThreshold;
    counted[i] = shared ? { key: entry.key, value: node.value! } : entry;
    let named: string;
    if (shared) named = node.value!;
    else if (byWildcard) named = node.valueToMetric ? entry.value : node.value!;
    else if (node.value !== undefined) named = entry.value;
    else named = node.valueToMetric ? entry.value : '';
    if (i > 0) statKey += '.';
    statKey += named === '' ? entry.key : `${entry.key}_${named}`;
    level = node.children;
  }
  return { entries: counted, statKey: rule.detailedMetric ? entriesStatKey(counted) : statKey };
}
