import type { CounterRequest } from './store';
import type { MatchedRule, RateLimitConfig, RuleLevel, RuleNode } from './rules';
import { counterKey } from './keys';
import { pickRule, requestKeys } from './match';
import type { Entry } from './types';

/**
 * A quota bucket (RLQS BucketId: pairs without an order) matched to a rule: the pairs are put in
 * the order the domain's rule tree needs, so that bucket `{path: /a, tenant: acme}` matches the rule
 * `tenant=acme` -> nested `path` as the descriptor `(tenant=acme, path=/a)` would, on the same counter.
 */

/** What a bucket matched: its pairs as a descriptor, the rule and the counters an RLS call on that descriptor uses. */
export interface BucketMatch {
  readonly entries: readonly Entry[];
  readonly rule: MatchedRule;
  /**
   * The rule's counters with hits 0, one per limit (one for `rate_limit`, every limit of
   * `rate_limits` in file order, tagged with the first one's key as the limiter tags them).
   */
  readonly counters: readonly CounterRequest[];
  /** The rule's metric key path. */
  readonly statKey: string;
}

/** Depth-first: at each level, the first remaining pair (in key order) that has a rule there. */
function order(level: RuleLevel, pairs: readonly Entry[], used: boolean[], path: Entry[]): RuleNode | undefined {
  let found: RuleNode | undefined;
  for (let i = 0; i < pairs.length && found === undefined; i++) {
    if (used[i]) continue;
    const rules = level.get(pairs[i].key);
    const node = rules === undefined ? undefined : pickRule(rules, pairs[i].value);
    if (node === undefined) continue;
    used[i] = true;
    path.push(pairs[i]);
    if (path.length === pairs.length) found = node.limit !== undefined ? node : undefined;
    else found = order(node.children, pairs, used, path);
    if (found === undefined) {
      used[i] = false;
      path.pop();
    }
  }
  return found;
}

/**
 * The rule `pairs` match in `domain` when taken as one descriptor in some order of their keys
 * (every pair used; the first order found, trying keys in sorted order at each level), and the
 * counter of that descriptor. Undefined when the domain is unknown or no order reaches a rule with
 * a limit. The caller bounds the number of pairs (the search tries orders). `calendarOffsetMs` is
 * the calendar of `calendar: true` limits (CALENDAR_TIMEZONE), as the limiter counts them.
 */
export function matchBucket(config: RateLimitConfig, domain: string, pairs: readonly Entry[], calendarOffsetMs = 0): BucketMatch | undefined {
  const d = config.domains.get(domain);
  if (d === undefined || pairs.length === 0) return undefined;
  const sorted = [...pairs].sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  const entries: Entry[] = [];
  const node = order(d.rules, sorted, new Array<boolean>(sorted.length).fill(false), entries);
  if (node === undefined) return undefined;
  // A node with a limit carries every MatchedRule field (src/config/rule-reader.ts sets keyPrefix with limit).
  const rule = node as MatchedRule;
  const keys = rule.requestKeyed ? requestKeys(config, domain, entries, rule) : undefined;
  const entriesKeyed = keys === undefined ? entries : keys.entries;
  const limits = rule.limits ?? [{ limit: rule.limit, keyPrefix: rule.keyPrefix }];
  const tag = counterKey(limits[0].keyPrefix, entriesKeyed);
  return {
    entries,
    rule,
    statKey: keys?.statKey ?? rule.statKey,
    counters: limits.map(({ limit, keyPrefix }, j) => ({
      key: j === 0 ? tag : counterKey(keyPrefix, entriesKeyed),
      limit: limit.requestsPerUnit,
      windowMs: limit.windowMs,
      algorithm: limit.algorithm,
      hits: 0,
      burst: limit.burst,
      subWindows: limit.subWindows,
      strict: limit.strict,
      calendar: limit.calendar === true ? { unit: limit.unit, offsetMs: calendarOffsetMs } : undefined,
      tag: rule.limits === undefined ? undefined : tag,
    })),
  };
}
