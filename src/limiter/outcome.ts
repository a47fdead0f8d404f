import { detailedStatKey } from './match';
import type { Counted } from './plan';
import type { CounterDecision } from './store';
import type { DescriptorOutcome, Entry } from './types';

/**
 * What one counted descriptor reports to the observer (metrics, /top, replays): its hits as over,
 * near or within the limit, shadowed, or denied from remembered denials (`cached`). A limit of a
 * `rate_limits` rule reports its own outcome, under the rule's stat key and the limit's suffix.
 */
export function outcomeOf(
  domain: string,
  entries: readonly Entry[],
  counted: Counted,
  decision: CounterDecision,
  cached: boolean,
  nearLimitRatio: number,
): DescriptorOutcome {
  const { rule, counter } = counted;
  const hits = counter.hits;
  const statKey = counted.statKey ?? (rule.detailedMetric ? detailedStatKey(rule, entries) : rule.statKey);
  // requests_per_unit, or a bucket's burst: what `remaining` counts down from.
  const limit = (counted.limit ?? rule).limit.burst;
  let overLimit = 0;
  let nearLimit = 0;
  let withinLimit = 0;
  let shadowMode = 0;
  let overLimitWithLocalCache = 0;
  if (decision.allowed) {
    withinLimit = hits;
    // As the reference server: usage after this request above floor(L x ratio) makes the hits
    // beyond that threshold (all of them if usage was already above it) near-limit hits.
    const threshold = Math.floor(limit * nearLimitRatio);
    const after = limit - decision.remaining;
    if (after > threshold) {
      const before = after - hits;
      nearLimit = before >= threshold ? hits : after - threshold;
    }
  } else {
    overLimit = hits;
    if (rule.shadowMode) shadowMode = hits;
    if (cached) overLimitWithLocalCache = hits;
  }
  return { domain, statKey, hits, overLimit, nearLimit, withinLimit, shadowMode, overLimitWithLocalCache, rule: counted.limit ?? rule, key: counter.key };
}
