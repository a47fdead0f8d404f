/**
 * Answers remembered by the exact bytes of a request, for calls the local denial cache answered in
 * full. Under attack, proxies send the same request over and over (the same domain and descriptors
 * from the same client), and every copy would otherwise be decoded, validated, matched and turned
 * into counter keys only to meet the same cached denial. An entry is only as good as what it was
 * built from: it holds until the earliest of its denials expires, and only under the config it was
 * planned with (a reload changes the rules and empties the denial cache).
 *
 * Bounded: beyond `maxKeys` the oldest entry is dropped; expired entries are dropped when met.
 */
export class ReplayCache<T> {
  private readonly entries = new Map<string, Replay<T>>();

  constructor(private readonly maxKeys: number) {
    if (!Number.isInteger(maxKeys) || maxKeys < 1) throw new RangeError(`maxKeys must be a positive integer, got ${maxKeys}`);
  }

  /** Number of entries (expired ones included until met or evicted). */
  get size(): number {
    return this.entries.size;
  }

  /** The value remembered for `key` under `config`, while it holds at `nowMs`. */
  get(key: string, config: object | undefined, nowMs: number): T | undefined {
    const entry = this.entries.get(key);
    if (entry === undefined) return undefined;
    if (entry.config !== config || entry.untilMs <= nowMs) {
      this.entries.delete(key);
      return undefined;
    }
    return entry.value;
  }

  /** Remembers `value` for `key` under `config` until `untilMs`. */
  set(key: string, config: object, untilMs: number, value: T): void {
    this.entries.delete(key);
    this.entries.set(key, { config, untilMs, value });
    if (this.entries.size > this.maxKeys) {
      const oldest = this.entries.keys().next();
      if (oldest.done !== true) this.entries.delete(oldest.value);
    }
  }
}

interface Replay<T> {
  readonly config: object;
  readonly untilMs: number;
  readonly value: T;
}
