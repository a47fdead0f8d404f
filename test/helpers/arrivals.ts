/** A request of `hits` at time `t` (ms), as the algorithm tests feed them. */
export interface Arrival {
  readonly t: number;
  readonly hits: number;
}

/** Arrivals from gaps: each step comes `dt` ms after the one before, the first `dt` after `start`. */
export function arrivalsOf(steps: readonly { dt: number; hits: number }[], start = 10_000): Arrival[] {
  let t = start;
  return steps.map((s) => ({ t: (t += s.dt), hits: s.hits }));
}

/** Largest sum of admitted hits inside any interval (t - span, t] of length `span`, any alignment. */
export function maxInAnyWindow(admitted: readonly Arrival[], span: number): number {
  let best = 0;
  for (const a of admitted) {
    // Intervals ending at an admitted arrival (t - span, t] cover every worst case.
    let sum = 0;
    for (const b of admitted) if (b.t <= a.t && b.t > a.t - span) sum += b.hits;
    best = Math.max(best, sum);
  }
  return best;
}
