/**
 * A Space-Saving summary (Metwally, Agrawal and El Abbadi, 2005) of one count of the descriptors of
 * one rule over one slice of the window: their denied hits, or their allowed hits (with the
 * near-limit hits among them carried along). At most `capacity` entries. While it has room every
 * descriptor is counted exactly; once full, a new descriptor takes the place of an entry with the
 * lowest count m and starts from m + its weight, with error m: it may have had up to m before.
 *
 * What a reader may rely on (W: the weight recorded, `total`; k: capacity):
 * - a kept entry's count is never below its true count and at most `error` above it; the same
 *   holds for `near` (near-limit hits are allowed hits, so they too were at most m before);
 * - `error` <= floor() <= W / k, and a descriptor that is not kept has at most floor(): one with
 *   more than W / k is always kept;
 * - the counts add up to W (what the merge of summaries relies on, ./summary.ts).
 *
 * Stream-summary layout: entries of equal count share a bucket, buckets form a list by count, and
 * everything lives in typed arrays and one Map allocated once. A unit increment moves an entry to
 * the next bucket and an eviction takes an entry of the lowest one, both O(1); an increment by w
 * walks past the buckets between (at most k). Recording allocates nothing but the Map entry of a
 * new descriptor.
 */

const NONE = -1;

export class SpaceSaving {
  readonly capacity: number;
  /** Weight recorded, and the near-limit hits among it. */
  total = 0;
  nearTotal = 0;
  private size_ = 0;
  private readonly slotOf = new Map<string, number>();
  private readonly ids: (string | undefined)[];
  /** Per slot: what its count may be above the truth, and its near-limit hits (over-estimated alike). */
  readonly error: Float64Array;
  readonly near: Float64Array;
  /** Per slot: its bucket, and its neighbours in that bucket. */
  private readonly bucketOf: Int32Array;
  private readonly nextInBucket: Int32Array;
  private readonly prevInBucket: Int32Array;
  /** Per bucket: its count, its first slot, the buckets above and below; capacity + 1 of them (a move makes the new one before freeing the old). */
  private readonly value: Float64Array;
  private readonly first: Int32Array;
  private readonly above: Int32Array;
  private readonly below: Int32Array;
  private readonly freeBuckets: Int32Array;
  private freeCount = 0;
  private lowest = NONE;

  constructor(capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`capacity must be a positive integer, got ${capacity}`);
    this.capacity = capacity;
    this.ids = new Array<string | undefined>(capacity).fill(undefined);
    this.error = new Float64Array(capacity);
    this.near = new Float64Array(capacity);
    this.bucketOf = new Int32Array(capacity);
    this.nextInBucket = new Int32Array(capacity);
    this.prevInBucket = new Int32Array(capacity);
    this.value = new Float64Array(capacity + 1);
    this.first = new Int32Array(capacity + 1);
    this.above = new Int32Array(capacity + 1);
    this.below = new Int32Array(capacity + 1);
    this.freeBuckets = new Int32Array(capacity + 1);
    this.clear();
  }

  /** Entries kept. */
  get size(): number {
    return this.size_;
  }

  /** The most a descriptor that is not kept can have: the lowest count once full, else 0. */
  floor(): number {
    return this.size_ < this.capacity ? 0 : this.value[this.lowest];
  }

  /** Counts `weight` (> 0) for `id`, `near` of it near-limit hits. */
  add(id: string, weight: number, near: number): void {
    this.total += weight;
    this.nearTotal += near;
    let slot = this.slotOf.get(id);
    if (slot !== undefined) {
      this.near[slot] += near;
      this.raise(slot, weight);
      return;
    }
    if (this.size_ < this.capacity) {
      slot = this.size_++;
      this.error[slot] = 0;
      this.near[slot] = near;
      this.insert(slot, weight, NONE, this.lowest);
    } else {
      // Any entry of the lowest bucket makes room; the newcomer may have had up to its count before.
      slot = this.first[this.lowest];
      const m = this.value[this.lowest];
      this.slotOf.delete(this.ids[slot]!);
      this.error[slot] = m;
      this.near[slot] = m + near;
      this.raise(slot, weight);
    }
    this.ids[slot] = id;
    this.slotOf.set(id, slot);
  }

  /** The id held in slot `slot` (0 <= slot < size). */
  idAt(slot: number): string {
    return this.ids[slot]!;
  }

  /** The count of slot `slot` (0 <= slot < size). */
  countAt(slot: number): number {
    return this.value[this.bucketOf[slot]];
  }

  /** Forgets everything (its slice left the window). */
  clear(): void {
    this.size_ = 0;
    this.total = 0;
    this.nearTotal = 0;
    this.lowest = NONE;
    this.slotOf.clear();
    this.ids.fill(undefined);
    this.freeCount = this.capacity + 1;
    for (let b = 0; b < this.freeCount; b++) this.freeBuckets[b] = b;
  }

  /** Moves a kept slot's count up by `weight`, past the buckets between. */
  private raise(slot: number, weight: number): void {
    if (weight === 0) return;
    const from = this.bucketOf[slot];
    this.detach(slot);
    this.insert(slot, this.value[from] + weight, from, this.above[from]);
    if (this.first[from] === NONE) this.freeBucket(from);
  }

  /** Puts `slot` in the bucket of `count` (made if need be), searched upwards from between `lower` and `upper` (NONE: the ends). */
  private insert(slot: number, count: number, lower: number, upper: number): void {
    while (upper !== NONE && this.value[upper] < count) {
      lower = upper;
      upper = this.above[upper];
    }
    let bucket = upper;
    if (upper === NONE || this.value[upper] !== count) {
      bucket = this.freeBuckets[--this.freeCount];
      this.value[bucket] = count;
      this.first[bucket] = NONE;
      this.below[bucket] = lower;
      this.above[bucket] = upper;
      if (lower === NONE) this.lowest = bucket;
      else this.above[lower] = bucket;
      if (upper !== NONE) this.below[upper] = bucket;
    }
    const head = this.first[bucket];
    this.nextInBucket[slot] = head;
    this.prevInBucket[slot] = NONE;
    if (head !== NONE) this.prevInBucket[head] = slot;
    this.first[bucket] = slot;
    this.bucketOf[slot] = bucket;
  }

  private detach(slot: number): void {
    const prev = this.prevInBucket[slot];
    const next = this.nextInBucket[slot];
    if (prev === NONE) this.first[this.bucketOf[slot]] = next;
    else this.nextInBucket[prev] = next;
    if (next !== NONE) this.prevInBucket[next] = prev;
  }

  private freeBucket(bucket: number): void {
    const lower = this.below[bucket];
    const upper = this.above[bucket];
    if (lower === NONE) this.lowest = upper;
    else this.above[lower] = upper;
    if (upper !== NONE) this.below[upper] = lower;
    this.freeBuckets[this.freeCount++] = bucket;
  }
}
