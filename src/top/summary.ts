/**
 * Window views of the heavy hitters, and how views merge: the slices of one process's window, the
 * workers of one replica, and the replicas sharing a store all combine the same way (mergeable
 * summaries: counts add up, and so do the bounds of what a part did not keep).
 */

/** One kept descriptor: its counts and the most each may be short by. */
export interface EntryView {
  /** The descriptor's identity (a counter key, bounded: see boundedId). */
  readonly id: string;
  readonly allowed: number;
  readonly denied: number;
  readonly nearLimit: number;
  readonly errorAllowed: number;
  readonly errorDenied: number;
}

/** The kept descriptors of a summary, and the most a descriptor it did not keep can have. */
export interface Summary {
  readonly entries: readonly EntryView[];
  readonly floorAllowed: number;
  readonly floorDenied: number;
}

interface Accumulated {
  allowed: number;
  denied: number;
  nearLimit: number;
  errorAllowed: number;
  errorDenied: number;
  /** The floors of the parts that kept it (the others add theirs to its errors). */
  keptFloorAllowed: number;
  keptFloorDenied: number;
}

/** Ranks by denied hits, then allowed hits, each counted with its error (what the entry may have had). */
export function rankUpper(a: EntryView, b: EntryView): number {
  return b.denied + b.errorDenied - (a.denied + a.errorDenied) || b.allowed + b.errorAllowed - (a.allowed + a.errorAllowed);
}

/** The parts combined into one summary of at most `keep` entries, ranked as the summaries rank them. */
export function mergeSummaries(parts: readonly Summary[], keep: number): Summary {
  const byId = new Map<string, Accumulated>();
  let floorAllowed = 0;
  let floorDenied = 0;
  for (const part of parts) {
    floorAllowed += part.floorAllowed;
    floorDenied += part.floorDenied;
    for (const e of part.entries) {
      const a = byId.get(e.id);
      if (a === undefined) {
        byId.set(e.id, {
          allowed: e.allowed,
          denied: e.denied,
          nearLimit: e.nearLimit,
          errorAllowed: e.errorAllowed,
          errorDenied: e.errorDenied,
          keptFloorAllowed: part.floorAllowed,
          keptFloorDenied: part.floorDenied,
        });
      } else {
        a.allowed += e.allowed;
        a.denied += e.denied;
        a.nearLimit += e.nearLimit;
        a.errorAllowed += e.errorAllowed;
        a.errorDenied += e.errorDenied;
        a.keptFloorAllowed += part.floorAllowed;
        a.keptFloorDenied += part.floorDenied;
      }
    }
  }
  const merged: EntryView[] = [];
  for (const [id, a] of byId) {
    merged.push({
      id,
      allowed: a.allowed,
      denied: a.denied,
      nearLimit: a.nearLimit,
      errorAllowed: a.errorAllowed + floorAllowed - a.keptFloorAllowed,
      errorDenied: a.errorDenied + floorDenied - a.keptFloorDenied,
    });
  }
  merged.sort(rankUpper);
  // What is dropped here may have had up to its own upper counts: the new floors cover them.
  for (let i = keep; i < merged.length; i++) {
    const e = merged[i];
    floorAllowed = Math.max(floorAllowed, e.allowed + e.errorAllowed);
    floorDenied = Math.max(floorDenied, e.denied + e.errorDenied);
  }
  if (merged.length > keep) merged.length = keep;
  return { entries: merged, floorAllowed, floorDenied };
}
