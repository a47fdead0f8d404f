/**
 * Summaries of one count (denied hits, or allowed hits), and how they merge: the slices of one
 * process's window, the workers of one replica and the replicas sharing a store all combine the
 * same way, as mergeable Space-Saving summaries.
 *
 * Merging parts p (each with its floor m_p: the most a descriptor it did not keep can have):
 * a descriptor's count is the sum of its counts in the parts that kept it plus the floors of the
 * parts that did not, its error likewise (its errors plus those floors), so the count stays at or
 * above the truth and at most the error above it. The merge then keeps the `keep` highest counts;
 * its floor is the larger of the floors' sum M and the highest count it dropped.
 *
 * The bound, for any tree of merges whose leaves are Space-Saving summaries of capacity k and whose
 * merges keep at least k (W: the weight of every leaf together): every summary S of weight W_S
 * satisfies  sum over its entries of (count - floor) + k x floor <= W_S  (a full leaf's counts add
 * up to W_S; a merge adds these sums up, and dropping all but the k highest keeps it). Counts are
 * never below the floor, so floor <= W / k; every error is at most the floors' sum, so at most the
 * floor: an entry's count is at most W / k above its true count, and a descriptor with more than
 * W / k is never dropped, however the parts were cut.
 */

/** One kept descriptor: its count, how much it may be above the truth, and its near-limit hits. */
export interface CountEntry {
  /** The descriptor's identity (a counter key, bounded: see boundedId). */
  readonly id: string;
  readonly count: number;
  readonly error: number;
  /** Near-limit hits, over-estimated as the count is (allowed summaries; unused in denied ones). */
  readonly near: number;
}

/** The kept descriptors, highest count first, and the most a descriptor not kept can have. */
export interface CountSummary {
  readonly entries: readonly CountEntry[];
  readonly floor: number;
}

interface Accumulated {
  count: number;
  error: number;
  near: number;
  /** The floors of the parts that kept it (the others add theirs). */
  keptFloors: number;
}

/** The parts as one summary of at most `keep` entries (at least the parts' capacity, for the bound above). */
export function mergeCounts(parts: readonly CountSummary[], keep: number): CountSummary {
  const byId = new Map<string, Accumulated>();
  let floors = 0;
  for (const part of parts) {
    floors += part.floor;
    for (const e of part.entries) {
      const a = byId.get(e.id);
      if (a === undefined) byId.set(e.id, { count: e.count, error: e.error, near: e.near, keptFloors: part.floor });
      else {
        a.count += e.count;
        a.error += e.error;
        a.near += e.near;
        a.keptFloors += part.floor;
      }
    }
  }
  const merged: CountEntry[] = [];
  for (const [id, a] of byId) {
    const missing = floors - a.keptFloors;
    merged.push({ id, count: a.count + missing, error: a.error + missing, near: a.near + missing });
  }
  merged.sort((a, b) => b.count - a.count);
  let floor = floors;
  if (merged.length > keep) {
    floor = Math.max(floor, merged[keep].count);
    merged.length = keep;
  }
  return { entries: merged, floor };
}

/** One row of a rule: a descriptor's three counts and how much each may be above the truth (near-limit's is the allowed one's). */
export interface EntryView {
  readonly id: string;
  readonly allowed: number;
  readonly denied: number;
  readonly nearLimit: number;
  readonly errorAllowed: number;
  readonly errorDenied: number;
}

/**
 * The rows of a rule: every descriptor either summary kept, by denied, then allowed hits. A count
 * the other summary did not keep is its floor, with the floor as its error (0 while it had room).
 */
export function joinCounts(denied: CountSummary, allowed: CountSummary): EntryView[] {
  const rows = new Map<string, EntryView>();
  for (const e of denied.entries) {
    rows.set(e.id, { id: e.id, denied: e.count, errorDenied: e.error, allowed: allowed.floor, nearLimit: allowed.floor, errorAllowed: allowed.floor });
  }
  for (const e of allowed.entries) {
    const row = rows.get(e.id);
    const counts = { allowed: e.count, nearLimit: e.near, errorAllowed: e.error };
    rows.set(e.id, row === undefined ? { id: e.id, denied: denied.floor, errorDenied: denied.floor, ...counts } : { ...row, ...counts });
  }
  // Ties in id order: the parts arrive in no particular order, and the page should not reshuffle equal rows.
  return [...rows.values()].sort((a, b) => b.denied - a.denied || b.allowed - a.allowed || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}
