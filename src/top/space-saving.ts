/**
 * A Space-Saving summary (Metwally, Agrawal and El Abbadi, 2005) of the descriptors of one rule:
 * at most `capacity` entries, each holding a descriptor's counts since it entered. Entries are
 * ranked by denied hits, then allowed hits: "who is being limited" is the question, so a flood of
 * allowed one-shot values never pushes out a descriptor that is being denied. Once the summary is
 * full, a new descriptor takes the place of the lowest-ranked entry and inherits, as its error,
 * what it may have had before.
 *
 * What a reader may rely on (D: denied hits recorded, k: capacity):
 * - an entry's own counts are exact since it entered; its true counts lie between them and them
 *   plus its errors (`errorDenied` for denied, `errorAllowed` for allowed and near-limit);
 * - `errorDenied` is at most D / k, so a descriptor with more than D / k denied hits is always kept;
 * - a descriptor that is not kept has at most `floorDenied()` denied and `floorAllowed()` allowed hits.
 *
 * Everything lives in typed arrays and one Map allocated once: recording is a Map lookup and a
 * sift through a heap (O(log k)), allocating nothing but the Map entry of a new descriptor.
 */
export class SpaceSaving {
  readonly capacity: number;
  /** Allowed and denied hits recorded. */
  allowedTotal = 0;
  deniedTotal = 0;
  nearLimitTotal = 0;
  private count = 0;
  /** The most allowed hits any evicted entry may have had: bounds an absent descriptor's. */
  private evictedAllowed = 0;
  private readonly slotOf = new Map<string, number>();
  private readonly ids: (string | undefined)[];
  readonly allowed: Float64Array;
  readonly denied: Float64Array;
  readonly nearLimit: Float64Array;
  readonly errorAllowed: Float64Array;
  readonly errorDenied: Float64Array;
  /** heap[i]: the slot at heap position i; the root is the lowest-ranked entry. */
  private readonly heap: Int32Array;
  /** at[slot]: the heap position of a slot. */
  private readonly at: Int32Array;

  constructor(capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`capacity must be a positive integer, got ${capacity}`);
    this.capacity = capacity;
    this.ids = new Array<string | undefined>(capacity).fill(undefined);
    this.allowed = new Float64Array(capacity);
    this.denied = new Float64Array(capacity);
    this.nearLimit = new Float64Array(capacity);
    this.errorAllowed = new Float64Array(capacity);
    this.errorDenied = new Float64Array(capacity);
    this.heap = new Int32Array(capacity);
    this.at = new Int32Array(capacity);
  }

  /** Entries kept. */
  get size(): number {
    return this.count;
  }

  /** The most denied hits a descriptor that is not kept can have. */
  floorDenied(): number {
    if (this.count < this.capacity) return 0;
    const root = this.heap[0];
    return this.denied[root] + this.errorDenied[root];
  }

  /** The most allowed hits a descriptor that is not kept can have. */
  floorAllowed(): number {
    return this.evictedAllowed;
  }

  /** Counts `allowed` admitted and `denied` denied hits of `id`, `nearLimit` of the admitted ones past the near-limit ratio. */
  add(id: string, allowed: number, denied: number, nearLimit: number): void {
    this.allowedTotal += allowed;
    this.deniedTotal += denied;
    this.nearLimitTotal += nearLimit;
    let slot = this.slotOf.get(id);
    if (slot !== undefined) {
      this.allowed[slot] += allowed;
      this.denied[slot] += denied;
      this.nearLimit[slot] += nearLimit;
      this.siftDown(this.at[slot]);
      return;
    }
    let position: number;
    if (this.count < this.capacity) {
      slot = this.count;
      position = this.count++;
      this.heap[position] = slot;
      this.errorAllowed[slot] = 0;
      this.errorDenied[slot] = 0;
    } else {
      // The lowest-ranked entry makes room; whatever the newcomer had before is bounded by what any
      // evicted entry had (denied: the root's, which never decreases; allowed: the largest evicted).
      position = 0;
      slot = this.heap[0];
      this.slotOf.delete(this.ids[slot]!);
      const evictedAllowed = this.allowed[slot] + this.errorAllowed[slot];
      if (evictedAllowed > this.evictedAllowed) this.evictedAllowed = evictedAllowed;
      this.errorDenied[slot] += this.denied[slot];
      this.errorAllowed[slot] = this.evictedAllowed;
    }
    this.ids[slot] = id;
    this.slotOf.set(id, slot);
    this.allowed[slot] = allowed;
    this.denied[slot] = denied;
    this.nearLimit[slot] = nearLimit;
    this.at[slot] = position;
    if (position === 0) this.siftDown(0);
    else this.siftUp(position);
  }

  /** The id held in slot `slot` (0 <= slot < size). */
  idAt(slot: number): string {
    return this.ids[slot]!;
  }

  /** Forgets everything (its slice left the window). */
  clear(): void {
    this.count = 0;
    this.allowedTotal = 0;
    this.deniedTotal = 0;
    this.nearLimitTotal = 0;
    this.evictedAllowed = 0;
    this.slotOf.clear();
    this.ids.fill(undefined);
  }

  /** Slot a ranks below slot b: fewer denied hits, or as many and fewer allowed (errors included). */
  private below(a: number, b: number): boolean {
    const da = this.denied[a] + this.errorDenied[a];
    const db = this.denied[b] + this.errorDenied[b];
    return da < db || (da === db && this.allowed[a] + this.errorAllowed[a] < this.allowed[b] + this.errorAllowed[b]);
  }

  // A new entry enters at the bottom and moves up; counts only grow, so a kept entry only moves down.
  private siftUp(position: number): void {
    const { heap, at } = this;
    const slot = heap[position];
    while (position > 0) {
      const parent = (position - 1) >> 1;
      if (!this.below(slot, heap[parent])) break;
      heap[position] = heap[parent];
      at[heap[position]] = position;
      position = parent;
    }
    heap[position] = slot;
    at[slot] = position;
  }

  private siftDown(position: number): void {
    const { heap, at } = this;
    const n = this.count;
    const slot = heap[position];
    for (;;) {
      const left = 2 * position + 1;
      if (left >= n) break;
      const right = left + 1;
      const child = right < n && this.below(heap[right], heap[left]) ? right : left;
      if (!this.below(heap[child], slot)) break;
      heap[position] = heap[child];
      at[heap[position]] = position;
      position = child;
    }
    heap[position] = slot;
    at[slot] = position;
  }
}
