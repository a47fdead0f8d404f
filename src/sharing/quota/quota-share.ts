/**
 * Quota shares (RLQS): what of one rule's budget the proxies may share (the division itself is the
 * sharing engine's, ../division.ts), and how a proxy's share becomes the assignment Envoy's
 * rate_limit_quota filter applies. Pure: numbers in, numbers out; time is a parameter. The budgets
 * (./quota-budgets.ts) feed it what the proxies report and what the store and the other replicas
 * say of the counter and demand.
 *
 * What Envoy's filter does with an assignment, and why the numbers below look as they do:
 * - it applies a token bucket with fill rate tokens_per_fill / (whole seconds of fill_interval):
 *   the fill interval is always whole seconds >= 1, and tokens_per_fill >= 1;
 * - it keeps a bucket whose max_tokens, tokens_per_fill and fill_interval.nanos are unchanged, so a
 *   change of fill_interval.seconds alone would be ignored (see distinguishable());
 * - a changed bucket starts at the old one's remaining/max ratio of the new max_tokens: max_tokens is
 *   the most a proxy can admit above its rate, and the shares keep the sum of them small;
 * - the assignment's TTL counts whole seconds only (see ttlSeconds()).
 */

/** What a proxy is told to do with a bucket. */
export type QuotaStrategy =
  | { readonly kind: 'allow_all' }
  | { readonly kind: 'deny_all' }
  | { readonly kind: 'token_bucket'; readonly maxTokens: number; readonly tokensPerFill: number; readonly fillIntervalSeconds: number };

export const ALLOW_ALL: QuotaStrategy = Object.freeze({ kind: 'allow_all' });
export const DENY_ALL: QuotaStrategy = Object.freeze({ kind: 'deny_all' });

/**
 * Usage of the counter by others than the reporting proxies (RLS calls on the same descriptor)
 * below this fraction of the limit is taken for the lag between admitting and reporting, not for
 * traffic of its own.
 */
export const OTHER_USAGE_TOLERANCE = 0.2;

/** The finest a token bucket is cut: at least this many tokens per fill, when the fill interval allows it. */
export const MIN_TOKENS_PER_FILL = 10;
/** The longest fill interval an assignment uses; a share below one request per this long is no share (DENY_ALL). */
export const MAX_FILL_INTERVAL_SECONDS = 3_600;
/** max_tokens is this fraction of a proxy's share of one window: the sum over proxies stays a tenth of the limit. */
export const BURST_FRACTION = 0.1;

/** Assignment TTL: this many observed report intervals, so that one late or lost report never lets it expire. */
export const TTL_INTERVALS = 3;
/** The longest TTL sent, seconds. */
export const MAX_TTL_SECONDS = 300;

/** A rule's budget and what the counter says of the current window. */
export interface BudgetInput {
  /** Requests per window (the rule's requests_per_unit). */
  readonly limit: number;
  readonly windowMs: number;
  /** The counter's usage of the current window after the last charge (limit - remaining; the limit when over). */
  readonly used: number;
  /** Requests the proxies of every replica report admitting over the last window (what they charged to the counter). */
  readonly admitted: number;
}

/**
 * The rate (requests per second) the proxies of a bucket may admit together: the limit per window,
 * less what others (RLS calls) use of the same counter. Others' usage is what the counter holds
 * beyond what the proxies admitted over the window; below OTHER_USAGE_TOLERANCE of the limit it is
 * taken for the lag between admitting and charging.
 */
export function proxiesCapacity(input: BudgetInput): number {
  const { limit, windowMs, used, admitted } = input;
  const others = Math.max(0, used - admitted);
  const counted = others > OTHER_USAGE_TOLERANCE * limit ? others : 0;
  return Math.max(0, limit - counted) / (windowMs / 1000);
}

/**
 * The token bucket that admits `share` requests per second under a rule of window `windowMs`:
 * fill interval one window (whole seconds), longer for a small share so that a fill holds at
 * least MIN_TOKENS_PER_FILL tokens, tokens rounded down (a share is never exceeded); DENY_ALL when
 * not one token fits in MAX_FILL_INTERVAL_SECONDS.
 */
export function strategyForShare(share: number, windowMs: number): QuotaStrategy {
  if (!(share > 0)) return DENY_ALL;
  const windowSeconds = Math.max(1, Math.round(windowMs / 1000));
  let fill = windowSeconds;
  if (share * fill < MIN_TOKENS_PER_FILL) fill = Math.min(MAX_FILL_INTERVAL_SECONDS, Math.max(windowSeconds, Math.ceil(MIN_TOKENS_PER_FILL / share)));
  // The epsilon keeps a share that is a whole number of tokens from rounding down through float error.
  const tokensPerFill = Math.floor(share * fill + 1e-9);
  if (tokensPerFill < 1) return DENY_ALL;
  const maxTokens = Math.max(1, Math.floor(share * windowSeconds * BURST_FRACTION));
  return { kind: 'token_bucket', maxTokens, tokensPerFill, fillIntervalSeconds: fill };
}

/** True when two strategies are the same assignment (every field). */
export function sameStrategy(a: QuotaStrategy, b: QuotaStrategy): boolean {
  if (a.kind !== b.kind) return false;
  if (a.kind !== 'token_bucket' || b.kind !== 'token_bucket') return true;
  return a.maxTokens === b.maxTokens && a.tokensPerFill === b.tokensPerFill && a.fillIntervalSeconds === b.fillIntervalSeconds;
}

/**
 * `next`, changed if need be so that Envoy sees it as a change from `previous`: Envoy compares
 * token buckets without fill_interval.seconds, so a bucket differing from the previous one only
 * there gets max_tokens one lower (one higher when it is 1).
 */
export function distinguishable(previous: QuotaStrategy | undefined, next: QuotaStrategy): QuotaStrategy {
  if (previous?.kind !== 'token_bucket' || next.kind !== 'token_bucket') return next;
  if (previous.fillIntervalSeconds === next.fillIntervalSeconds) return next;
  if (previous.maxTokens !== next.maxTokens || previous.tokensPerFill !== next.tokensPerFill) return next;
  return { ...next, maxTokens: next.maxTokens > 1 ? next.maxTokens - 1 : next.maxTokens + 1 };
}

/**
 * Assignment TTL in whole seconds: TTL_INTERVALS report intervals, rounded up, at least 1 (Envoy
 * reads only the seconds: an unset or sub-second TTL expires at once), at most MAX_TTL_SECONDS.
 */
export function ttlSeconds(reportIntervalMs: number): number {
  return Math.min(MAX_TTL_SECONDS, Math.max(1, Math.ceil((TTL_INTERVALS * reportIntervalMs) / 1000)));
}

/**
 * Requests per second of a report: `count` over the time since the bucket's previous report as the
 * server received it (`elapsedMs`), or, when there is none, over the report's own time_elapsed
 * (whole seconds, often 0). Undefined when neither is usable.
 */
export function reportRate(count: number, elapsedMs: number | undefined, timeElapsedSeconds: number): number | undefined {
  if (elapsedMs !== undefined && elapsedMs > 0) return (count * 1000) / elapsedMs;
  if (timeElapsedSeconds >= 1) return count / timeElapsedSeconds;
  return undefined;
}
