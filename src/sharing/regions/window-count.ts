/**
 * Hits counted per slot of `slotMs` over the last `windowMs`: what of a count is still inside a
 * sliding window. A ring of slots, fixed in size (windowMs / slotMs + 1, at most MAX_SLOTS).
 */
const MAX_SLOTS = 4_096;

export class WindowCount {
  private readonly slotMs: number;
  private readonly counts: Float64Array;
  /** The slot number (time / slotMs) each ring entry holds. */
  private readonly slots: Float64Array;

  constructor(windowMs: number, slotMs: number) {
    const n = Math.min(MAX_SLOTS, Math.ceil(windowMs / Math.max(1, slotMs)) + 1);
    this.slotMs = Math.max(1, Math.ceil(windowMs / (n - 1 || 1)));
    this.counts = new Float64Array(n);
    this.slots = new Float64Array(n).fill(-1);
  }

  add(hits: number, nowMs: number): void {
    const slot = Math.floor(nowMs / this.slotMs);
    const i = slot % this.counts.length;
    if (this.slots[i] !== slot) {
      this.slots[i] = slot;
      this.counts[i] = 0;
    }
    this.counts[i] += hits;
  }

  /** Hits added in the slots that overlap the last window (the current slot and the ones before it). */
  total(nowMs: number): number {
    const slot = Math.floor(nowMs / this.slotMs);
    const oldest = slot - this.counts.length + 1;
    let sum = 0;
    for (let i = 0; i < this.counts.length; i++) if (this.slots[i] >= oldest && this.slots[i] <= slot) sum += this.counts[i];
    return sum;
  }
}
