import type { Entry } from './types';
import type { KeyRules, MatchedRule, RateLimitConfig, RuleLevel, RuleNode } from './rules';

/**
 * Descriptor -> rule, the reference server's way. Runs once per descriptor on the hot path, so it
 * allocates nothing: it walks the frozen tree and returns a node of it.
 */

function pick(rules: KeyRules, value: string): RuleNode | undefined {
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
  const d = config.domains.get(domain);
  if (d === undefined || entries.length === 0) return undefined;
  let level: RuleLevel = d.rules;
  let node: RuleNode | undefined;
  for (let i = 0; i < entries.length; i++) {
    const rules = level.get(entries[i].key);
    if (rules === undefined) return undefined;
    node = pick(rules, entries[i].value);
    if (node === undefined) return undefined;
    level = node.children;
  }
  // A node with a limit carries every MatchedRule field (load.ts sets keyPrefix with limit).
  return node === undefined || node.limit === undefined ? undefined : (node as MatchedRule);
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
