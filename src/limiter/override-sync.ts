import type { ActiveOverride, OverrideRemoval, OverrideTable } from './overrides';
import type { OverridesStore, RemovedOverride, StoredOverride } from './overrides-store';
import type { Clock } from './types';

/**
 * Following the store's overrides: a replica keeps every override in its own table
 * (./overrides.ts) and polls the store's version (one number, ./overrides-store.ts); only when it
 * moved are the changes since the last one read, a page at a time, and applied to the table at
 * once (one new generation, however many changed). A replica that fell behind the removals the
 * store remembers, or a store whose version went back (flushed, or another one), is read whole.
 * Expiry is kept by each replica's own table (tick(): within one tick of `expires_at`, store or
 * no store); the replica that notices first removes the expired ones from the store.
 */

export interface OverrideSyncOptions {
  readonly store: OverridesStore;
  readonly table: OverrideTable;
  /** An override as this process counts with it; throws on a record it cannot read (written by a newer version, say). */
  readonly read: (stored: StoredOverride) => ActiveOverride;
  /** The wall clock: `expires_at` is a time of day. */
  readonly clock: Clock;
  /** Changes read per store call; default 1,000. */
  readonly pageSize?: number;
  /** Called whenever the table changed: what was decided under the old overrides is dropped (cached denials, replays). */
  readonly onApplied?: () => void;
  /** An override this process cannot read: left out, said once per version. */
  readonly onUnreadable?: (stored: StoredOverride, err: Error) => void;
  /** An expired override this process removed from the store (every replica stops applying it on its own). */
  readonly onExpired?: (removed: RemovedOverride) => void;
}

const DEFAULT_PAGE = 1_000;
/** Expired overrides removed from the store per tick at most (the rest at the next ones). */
const PURGE_PER_TICK = 1_000;

export class OverrideSync {
  private readonly store: OverridesStore;
  private readonly table: OverrideTable;
  private readonly read: (stored: StoredOverride) => ActiveOverride;
  private readonly clock: Clock;
  private readonly pageSize: number;
  private readonly options: OverrideSyncOptions;
  /** The store's change number the table reflects. */
  private applied = 0;
  private running: Promise<void> | undefined;
  private queued: Promise<void> | undefined;
  /** Some override the store holds had expired when read: the store has some to purge. */
  private expiredInStore = false;
  /** The id and version of the last unreadable override told, so that one is told once. */
  private readonly unreadable = new Map<string, number>();

  constructor(options: OverrideSyncOptions) {
    this.options = options;
    this.store = options.store;
    this.table = options.table;
    this.read = options.read;
    this.clock = options.clock;
    this.pageSize = options.pageSize ?? DEFAULT_PAGE;
  }

  /** The store's change number the table reflects (0 before the first sync). */
  get version(): number {
    return this.applied;
  }

  /**
   * Brings the table up to the store. A run started before the caller's write may have missed it,
   * so a call while one runs waits for the next run (shared by every caller meanwhile): when it
   * resolves, the table holds every change made before the call.
   */
  sync(): Promise<void> {
    if (this.running === undefined) return this.begin();
    this.queued ??= this.running
      .then(
        () => undefined,
        () => undefined,
      )
      .then(() => {
        this.queued = undefined;
        return this.begin();
      });
    return this.queued;
  }

  /**
   * One period: overrides past their expiry leave the table (whatever the store's state), the
   * store is asked to remove the ones it still holds, and the table follows the store.
   */
  async tick(): Promise<void> {
    const now = this.clock.nowMs();
    const expired = this.table.sweep(now);
    if (expired.length > 0) this.options.onApplied?.();
    if (expired.length > 0 || this.expiredInStore) await this.purge(now);
    await this.sync();
  }

  private async purge(nowMs: number): Promise<void> {
    const removed = await this.store.purgeExpired(nowMs, PURGE_PER_TICK);
    this.expiredInStore = removed.length === PURGE_PER_TICK;
    for (const r of removed) this.options.onExpired?.(r);
  }

  private begin(): Promise<void> {
    const run = this.syncOnce();
    this.running = run;
    const done = (): void => {
      if (this.running === run) this.running = undefined;
    };
    run.then(done, done);
    return run;
  }

  private async syncOnce(): Promise<void> {
    const version = await this.store.version();
    if (version === this.applied) return;
    // Behind the store's version: a flushed store, or another one. Read whole.
    if (version < this.applied) return this.readAll();
    let since = this.applied;
    const upserts: ActiveOverride[] = [];
    const removals: OverrideRemoval[] = [];
    for (;;) {
      const changes = await this.store.changes(since, this.pageSize);
      // Removals this replica has not seen were forgotten: the table may hold overrides the store no longer has.
      if (since < changes.floor) return this.readAll();
      this.collect(changes.changed, upserts, removals);
      for (const r of changes.removed) removals.push(r);
      since = changes.upTo;
      if (since >= changes.version) break;
    }
    this.applied = since;
    if (this.table.apply(upserts, removals)) this.options.onApplied?.();
  }

  /** Every override of the store, read from version 0 and put in the table at once. */
  private async readAll(): Promise<void> {
    for (;;) {
      const byId = new Map<string, ActiveOverride>();
      let since = 0;
      let floor: number | undefined;
      let restart = false;
      for (;;) {
        const changes = await this.store.changes(since, this.pageSize);
        // Removals forgotten while this read went on: one of them may be of an override read earlier.
        if (floor !== undefined && changes.floor > floor && changes.floor > 0) {
          restart = true;
          break;
        }
        floor ??= changes.floor;
        const upserts: ActiveOverride[] = [];
        const removals: OverrideRemoval[] = [];
        this.collect(changes.changed, upserts, removals);
        for (const o of upserts) byId.set(o.id, o);
        for (const r of [...removals, ...changes.removed]) {
          const held = byId.get(r.id);
          if (held !== undefined && held.version < r.version) byId.delete(r.id);
        }
        since = changes.upTo;
        if (since >= changes.version) break;
      }
      if (restart) continue;
      this.applied = since;
      if (this.table.replaceAll([...byId.values()])) this.options.onApplied?.();
      return;
    }
  }

  /** Reads `stored` into `upserts`; an expired one is a removal (of an older version this table may hold). */
  private collect(stored: readonly StoredOverride[], upserts: ActiveOverride[], removals: OverrideRemoval[]): void {
    const now = this.clock.nowMs();
    for (const s of stored) {
      let o: ActiveOverride;
      try {
        o = this.read(s);
      } catch (err) {
        if (this.unreadable.get(s.id) !== s.version) {
          if (this.unreadable.size >= 1_000) this.unreadable.clear();
          this.unreadable.set(s.id, s.version);
          this.options.onUnreadable?.(s, err instanceof Error ? err : new Error(String(err)));
        }
        // Whatever this process held of it is older: it no longer applies here either.
        removals.push({ id: s.id, version: s.version });
        continue;
      }
      if (o.expiresAtMs <= now) {
        this.expiredInStore = true;
        removals.push({ id: s.id, version: s.version });
      } else upserts.push(o);
    }
  }
}
