import type { BudgetView, ProxyShareView, QuotaRuleTotals } from './quota-api';
import type { Budget, Subscription } from './quota-state';

/**
 * What the budgets show: each budget with its proxies and the other replicas (debug port, live view),
 * and per-rule totals (metrics). Read-only.
 */

/** Demand as division counts it (Subscriptions.demandOf). */
type DemandOf = (sub: Subscription, now: number) => number;

/** A budget in use, with at most `maxProxies` of its local proxies listed. */
export function budgetView(b: Budget, maxProxies: number, now: number, demandOf: DemandOf): BudgetView {
  // Admitted counts cover two windows: rates over them, the overshoot per window.
  const spanSeconds = (2 * b.counters[0].windowMs) / 1000;
  const proxies: ProxyShareView[] = [];
  let admitted = 0;
  for (const m of b.members) {
    const allowed = (m.admitted?.sum(now) ?? 0) / spanSeconds;
    admitted += allowed * spanSeconds;
    if (proxies.length >= maxProxies) continue;
    const demand = demandOf(m, now);
    proxies.push({
      member: m.id,
      demand: Number.isFinite(demand) ? demand : null,
      allowed,
      share: m.share,
      local: true,
      stream: m.subscriber.id,
      bucket: m.shared.pairs,
      assignment: m.sent ?? null,
      reportAgeMs: m.lastReportAtMs === undefined ? null : now - m.lastReportAtMs,
    });
  }
  b.part.others.forEach((o, i) => {
    admitted += o.admitted;
    const share = b.replicaShares[i + 1] ?? 0;
    proxies.push({
      member: o.member,
      demand: Number.isFinite(o.demand) ? o.demand : null,
      allowed: o.admitted / spanSeconds,
      share,
      local: false,
      proxies: o.proxies,
    });
  });
  return {
    domain: b.domain,
    statKey: b.statKey,
    counter: b.key,
    limit: b.counters[0].limit,
    windowMs: b.counters[0].windowMs,
    shadow: b.shadow,
    used: b.used,
    proxies,
    unlisted: b.members.size - Math.min(b.members.size, maxProxies),
    overshoot: Math.max(0, Math.round(admitted / 2 - b.counters[0].limit)),
  };
}

/** Per-rule totals over every budget in use (summed when several budgets share a rule). */
export function ruleTotals(budgets: Iterable<Budget>, now: number, demandOf: DemandOf): QuotaRuleTotals[] {
  const byRule = new Map<string, { domain: string; statKey: string; proxies: number; demand: number; assigned: number; overshoot: number }>();
  for (const b of budgets) {
    if (b.members.size === 0) continue;
    const id = `${b.domain}\u0000${b.statKey}`;
    let t = byRule.get(id);
    if (t === undefined) {
      t = { domain: b.domain, statKey: b.statKey, proxies: 0, demand: 0, assigned: 0, overshoot: 0 };
      byRule.set(id, t);
    }
    let admitted = b.charged.sum(now);
    for (const m of b.members) {
      const d = demandOf(m, now);
      if (Number.isFinite(d)) t.demand += d;
      t.assigned += m.share;
    }
    t.proxies += b.members.size;
    for (const o of b.part.others) {
      t.proxies += o.proxies;
      if (Number.isFinite(o.demand)) t.demand += o.demand;
      admitted += o.admitted;
    }
    t.overshoot += Math.max(0, Math.round(admitted / 2 - b.counters[0].limit));
  }
  return [...byRule.values()];
}
