/**
 * The `lease` mark of a leased counter (CounterRequest.lease): its rule's domain and stat key. The
 * planner marks the counters; the leases (src/sharing/leases) read the rule back for their views.
 */

/** The `lease` mark of a counter of the rule `statKey` of `domain`. */
export function leaseMark(domain: string, statKey: string): string {
  return `${domain}\u0000${statKey}`;
}

/** A `lease` mark's domain and stat key. */
export function markedRule(mark: string): { readonly domain: string; readonly statKey: string } {
  const at = mark.indexOf('\u0000');
  return at < 0 ? { domain: '', statKey: mark } : { domain: mark.slice(0, at), statKey: mark.slice(at + 1) };
}
