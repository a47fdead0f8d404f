import { markedRule } from '../../limiter/lease-mark';
import type { Clock } from '../../limiter/types';
import { syncShare, type PartSyncOptions } from '../part-sync';
import { SettlementSequence } from '../settlement';
import type { Lease, LeaseLimits, LeaseObserver } from './lease';
import type { LeaseTable } from './lease-table';

/**
 * The leases' background work, every `syncIntervalMs`: each lease is a settled share of its counter
 * among the replicas (../part-sync.ts, kind `lease`): it settles what it admitted, exchanges its
 * demand and is divided again; a lease unused for two TTLs with nothing pending withdraws its demand
 * and is dropped.
 */
export interface LeaseSyncOptions {
  readonly table: LeaseTable;
  readonly clock: Clock;
  readonly limits: LeaseLimits;
  readonly observer: LeaseObserver;
}

export class LeaseSync {
  private readonly table: LeaseTable;
  private readonly clock: Clock;
  private readonly limits: LeaseLimits;
  private readonly observer: LeaseObserver;
  private readonly parts: PartSyncOptions<Lease>;
  private ticking: Promise<void> | undefined;

  constructor(options: LeaseSyncOptions) {
    this.table = options.table;
    this.clock = options.clock;
    this.limits = options.limits;
    this.observer = options.observer;
    const { observer, table } = options;
    this.parts = {
      seqs: new SettlementSequence(),
      ttlMs: options.limits.ttlMs,
      syncIntervalMs: options.limits.syncIntervalMs,
      // The exchange's reply names every replica holding the counter: the lease's traffic, estimated again.
      onExchanged: (lease) => table.resizeSync(lease, lease.part.others),
      onSettled: (lease, hits) => {
        if (observer.onSettled === undefined) return;
        const { domain, statKey } = markedRule(lease.rule);
        observer.onSettled(domain, statKey, hits);
      },
      onStoreError: (err) => observer.onStoreError?.(err),
    };
  }

  /** Every syncIntervalMs: each lease syncs, an idle one withdraws. Never rejects. */
  tick(): Promise<void> {
    if (this.ticking !== undefined) return this.ticking;
    const now = this.clock.nowMs();
    const syncs: Promise<void>[] = [];
    for (const lease of this.table.values()) {
      const idle = now - lease.lastUsedMs > 2 * this.limits.ttlMs && lease.pending === 0 && lease.unsettled === undefined;
      syncs.push(idle ? this.withdraw(lease) : this.sync(lease, now));
    }
    if (syncs.length === 0) return Promise.resolve();
    this.ticking = Promise.all(syncs).then(() => {
      this.ticking = undefined;
    });
    return this.ticking;
  }

  /** Settles what is pending and withdraws this replica's demand from every lease (at shutdown). */
  async shutdown(): Promise<void> {
    await this.ticking;
    const now = this.clock.nowMs();
    await Promise.all([...this.table.values()].map((l) => this.sync(l, now)));
    await Promise.all([...this.table.values()].map((l) => this.withdraw(l)));
  }

  /** One sync of the lease (../part-sync.ts syncShare). */
  sync(lease: Lease, now: number): Promise<void> {
    return syncShare(lease, this.parts, now);
  }

  /** Withdraws this replica's demand and drops the lease (its hits are all settled). */
  private withdraw(lease: Lease): Promise<void> {
    this.table.drop(lease);
    return lease.part.exchange(undefined, this.limits.ttlMs)!.then(
      () => undefined,
      (err: unknown) => this.observer.onStoreError?.(err),
    );
  }
}
