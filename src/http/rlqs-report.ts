import type { ProxyShareView, RlqsView } from '../service/rlqs-service';
import { descriptorOf, displayText } from '../top/top-report';

/**
 * The quota streams (RLQS) as the live page shows them, in /top/rules under `rlqs`: one table per
 * budget (a rule's counter divided among the proxies reporting it), each proxy's demand, assigned
 * share, assignment and last report. Bounded whatever the fleet: at most MAX_BUDGETS budgets of
 * MAX_PROXIES proxies (the rest counted), names and bucket values cut as descriptor values are.
 * Other replicas are one line each: their proxies' demand and share together.
 */

export const MAX_BUDGETS = 20;
export const MAX_PROXIES = 20;

/** A proxy on a budget. */
export interface RlqsProxyReport {
  /** The name the proxy sent (cut), else its stream's id; another replica's: its id in the store. */
  readonly proxy: string;
  /** This replica's stream id, null for another replica's proxy. */
  readonly stream: string | null;
  readonly bucket: [string, string][] | null;
  /** Requests per second it asks (allowed + denied); null before its rate is measured. */
  readonly demand: number | null;
  /** Requests per second assigned. */
  readonly share: number;
  readonly assignment:
    | { readonly kind: 'token_bucket'; readonly max_tokens: number; readonly tokens_per_fill: number; readonly fill_interval_s: number }
    | { readonly kind: 'allow_all' | 'deny_all' }
    | null;
  readonly report_age_s: number | null;
  readonly local: boolean;
}

export interface RlqsBudgetReport {
  readonly domain: string;
  readonly rule: string;
  /** The counter's descriptor, values cut as /top cuts them. */
  readonly descriptor: [string, string][];
  readonly limit: number;
  readonly window_s: number;
  readonly shadow_mode: boolean;
  readonly used: number;
  readonly overshoot: number;
  readonly proxies: RlqsProxyReport[];
  /** Proxies not listed (past MAX_PROXIES). */
  readonly more_proxies: number;
}

/** The budgets in use, by domain and rule, this replica's proxies first, then by demand; empty when no stream reports a limited bucket. */
export function rlqsReport(view: RlqsView): RlqsBudgetReport[] {
  const rules = [...view.rules].sort((a, b) =>
    a.domain < b.domain ? -1 : a.domain > b.domain ? 1 : a.statKey < b.statKey ? -1 : a.statKey > b.statKey ? 1 : 0,
  );
  return rules.slice(0, MAX_BUDGETS).map((r) => {
    const proxies = [...r.proxies].sort((a, b) => Number(b.local) - Number(a.local) || (b.demand ?? Infinity) - (a.demand ?? Infinity));
    return {
      domain: r.domain,
      rule: r.statKey,
      descriptor: descriptorOf(r.counter),
      limit: r.limit,
      window_s: r.windowMs / 1000,
      shadow_mode: r.shadow,
      used: r.used,
      overshoot: r.overshoot,
      proxies: proxies.slice(0, MAX_PROXIES).map(proxyReport),
      more_proxies: Math.max(0, proxies.length - MAX_PROXIES) + r.unlisted,
    };
  });
}

function proxyReport(p: ProxyShareView): RlqsProxyReport {
  const a = p.assignment ?? null;
  return {
    proxy: displayText(p.proxy ?? p.member),
    stream: p.stream ?? null,
    bucket: p.bucket === undefined ? null : p.bucket.map((e): [string, string] => [displayText(e.key), displayText(e.value)]),
    demand: p.demand,
    share: p.share,
    assignment:
      a === null
        ? null
        : a.kind === 'token_bucket'
          ? { kind: a.kind, max_tokens: a.maxTokens, tokens_per_fill: a.tokensPerFill, fill_interval_s: a.fillIntervalSeconds }
          : { kind: a.kind },
    report_age_s: p.reportAgeMs === undefined || p.reportAgeMs === null ? null : p.reportAgeMs / 1000,
    local: p.local,
  };
}
