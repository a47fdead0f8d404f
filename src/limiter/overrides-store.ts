/**
 * The overrides port: where runtime overrides (./overrides.ts) are kept, shared by every replica
 * of one store. It holds overrides only (the counters are the Store port's, what replicas tell each
 * other the ReplicaExchange's). Every write takes the store's next change number (its version), so
 * that a replica follows by asking one number and, when it moved, the changes since the one it has.
 *
 * Contract (every adapter, checked by test/contract/overrides-contract.ts):
 * - versions start at 1 and grow by one per write or removal; version() is the last one given;
 * - put() is decided and written in one step: past `maxCount` overrides (a new id) or `maxBytes`
 *   (the stored bytes after it) it writes nothing and names the cap;
 * - changes(since) gives every live override written after `since` and every removal after it, in
 *   version order, at most `max` of each; `upTo` is the version up to which the answer is complete
 *   (every change in (since, upTo] is in it, none after);
 * - removals are remembered at most MAX_REMEMBERED_REMOVALS back: `floor` is the last one forgotten,
 *   and a reader whose `since` is below it must read everything again (from 0);
 * - purgeExpired() removes overrides whose expiry is at or before `nowMs`, as remove() does;
 * - a call that cannot be answered rejects with StoreUnavailableError within its deadline.
 */

/** An override as the store holds it: its identity (overrideId), the change number of its last write, its JSON. */
export interface StoredOverride {
  readonly id: string;
  readonly version: number;
  readonly json: string;
}

export interface OverrideWrite {
  readonly id: string;
  /** The record (overrideJson). */
  readonly json: string;
  /** When it expires (ms since the epoch); undefined: never. */
  readonly expiresAtMs: number | undefined;
  /** Now, on the writer's wall clock: overrides expired by then are purged first (they count against no cap). */
  readonly nowMs: number;
  /** OVERRIDES_MAX: overrides kept at most. */
  readonly maxCount: number;
  /** OVERRIDES_MAX_BYTES: bytes of every override kept (storedBytes) at most. */
  readonly maxBytes: number;
}

/**
 * What a write did: its change number, the override it replaced, and the expired ones it purged
 * first; or the cap that refused it (nothing written, expired ones purged all the same).
 */
export type PutOutcome =
  | { readonly ok: true; readonly version: number; readonly previous: StoredOverride | undefined; readonly purged: readonly RemovedOverride[] }
  | { readonly ok: false; readonly cap: 'count' | 'bytes'; readonly count: number; readonly bytes: number; readonly purged: readonly RemovedOverride[] };

/** A removal: the override removed and the change number of its removal. */
export interface RemovedOverride {
  readonly version: number;
  readonly previous: StoredOverride;
}

export interface OverrideChanges {
  /** The store's version when it answered. */
  readonly version: number;
  /** Every override written after `since` and still live, up to `upTo`, in version order. */
  readonly changed: readonly StoredOverride[];
  /** Every removal after `since`, up to `upTo`, in version order. */
  readonly removed: readonly { readonly id: string; readonly version: number }[];
  /** The answer covers every change up to this version; ask again from it when below `version`. */
  readonly upTo: number;
  /** The last removal forgotten (0: none): a reader below it has missed some. */
  readonly floor: number;
}

export interface OverridesStore {
  /** Writes one override, or refuses it past a cap (see OverrideWrite). */
  put(write: OverrideWrite): Promise<PutOutcome>;
  /** Removes one override; undefined when there is none. */
  remove(id: string, nowMs: number): Promise<RemovedOverride | undefined>;
  /** The last change number (0 before any write): what a replica polls. */
  version(): Promise<number>;
  /** The changes after `since`, at most `max` writes and `max` removals. */
  changes(since: number, max: number): Promise<OverrideChanges>;
  /** Removes up to `max` overrides expired at `nowMs`, and returns what it removed (each with its removal's number). */
  purgeExpired(nowMs: number, max: number): Promise<RemovedOverride[]>;
  /** Releases what the adapter holds (the memory adapter's file; Redis is the counters' connection, closed with it). */
  close(): Promise<void>;
}

/** Removals remembered for readers that are behind: more removals between two of a reader's polls make it read everything again. */
export const MAX_REMEMBERED_REMOVALS = 100_000;

/** Bytes an override counts against OVERRIDES_MAX_BYTES: its id and its JSON, in UTF-8. */
export function storedBytes(id: string, json: string): number {
  return Buffer.byteLength(id) + Buffer.byteLength(json);
}
