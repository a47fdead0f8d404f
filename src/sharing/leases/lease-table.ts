import type { ReplicaDemand, ReplicaExchange } from '../../limiter/replica-exchange';
import { counterIdentity, type CounterRequest, type Settlements } from '../../limiter/store';
import { SharedPart } from '../shared-part';
import { newLease, type Lease, type LeaseLimits, type LeaseObserver, type LeaseRefusal } from './lease';

/**
 * The leases this process holds, bounded: in number (maxLeases), in estimated bytes (maxBytes) and
 * in the estimated traffic of their syncs (maxSyncBytesPerSecond). A counter beyond is refused a
 * lease and decided by the store.
 */

/** Estimated bytes of one lease beyond its key (objects, map entries, the state). */
const LEASE_BYTES = 1_024;
/**
 * Estimated bytes of one sync's two Redis calls (a settlement and a demand exchange, each naming the
 * counter once) beside the names: framing, the scripts' hashes, the numbers, the counter's spec,
 * the demand and both replies' fixed parts; and of each replica's entry in the exchange's reply
 * beside its name.
 */
const SYNC_CALL_BYTES = 512;
const SYNC_ENTRY_BYTES = 48;

export interface LeaseTableOptions {
  readonly limits: LeaseLimits;
  /** This process's name among the replicas. */
  readonly replicaId: string;
  readonly exchange: ReplicaExchange;
  readonly ledger: Settlements;
  readonly observer: LeaseObserver;
  /** A lease just opened (its first sync publishes its demand). */
  readonly onOpen: (lease: Lease, now: number) => void;
}

export class LeaseTable {
  private readonly leases = new Map<string, Lease>();
  /** The lease of a counter object (a kept plan's counters are the same objects on every call). */
  private readonly byCounter = new WeakMap<CounterRequest, Lease>();
  private readonly limits: LeaseLimits;
  private readonly replicaId: string;
  private readonly memberBytes: number;
  private readonly exchange: ReplicaExchange;
  private readonly ledger: Settlements;
  private readonly observer: LeaseObserver;
  private readonly onOpen: LeaseTableOptions['onOpen'];
  private usedBytes = 0;
  private usedSyncBytes = 0;

  constructor(options: LeaseTableOptions) {
    this.limits = options.limits;
    this.replicaId = options.replicaId;
    this.memberBytes = Buffer.byteLength(options.replicaId);
    this.exchange = options.exchange;
    this.ledger = options.ledger;
    this.observer = options.observer;
    this.onOpen = options.onOpen;
  }

  get size(): number {
    return this.leases.size;
  }

  /** Estimated bytes of the leases held. */
  get bytes(): number {
    return this.usedBytes;
  }

  /** Estimated bytes per second the leases' syncs send and read back. */
  get syncBytes(): number {
    return this.usedSyncBytes;
  }

  values(): IterableIterator<Lease> {
    return this.leases.values();
  }

  /** The counter's lease if it has one; none is opened. */
  held(c: CounterRequest): Lease | undefined {
    const lease = this.byCounter.get(c);
    if (lease !== undefined && !lease.dropped) return lease;
    const held = this.leases.get(counterIdentity(c));
    if (held !== undefined) this.byCounter.set(c, held);
    return held;
  }

  /** The counter's lease (made when there is room), or undefined. */
  leaseOf(c: CounterRequest, now: number): Lease | undefined {
    const held = this.held(c);
    if (held !== undefined) return held;
    const lease = this.open(counterIdentity(c), c, now);
    if (lease !== undefined) this.byCounter.set(c, lease);
    return lease;
  }

  /** The lease leaves the table (its demand withdrawn by the caller). */
  drop(lease: Lease): void {
    if (this.leases.get(lease.id) !== lease) return;
    lease.dropped = true;
    this.leases.delete(lease.id);
    this.usedBytes -= lease.bytes;
    this.usedSyncBytes -= lease.syncBytes;
  }

  /** The lease's sync traffic, estimated again now that its exchange named `others`. */
  resizeSync(lease: Lease, others: readonly ReplicaDemand[]): void {
    const syncBytes = this.syncBytesOf(lease.nameBytes, others);
    if (!lease.dropped) this.usedSyncBytes += syncBytes - lease.syncBytes;
    lease.syncBytes = syncBytes;
  }

  private open(id: string, c: CounterRequest, now: number): Lease | undefined {
    const bytes = LEASE_BYTES + 2 * id.length + 8 * (c.subWindows ?? 1);
    const tag = c.tag === undefined || c.tag === c.key ? undefined : c.tag;
    const nameBytes = Buffer.byteLength(c.key) + (tag === undefined ? 0 : Buffer.byteLength(tag));
    const syncBytes = this.syncBytesOf(nameBytes, undefined);
    const refusal: LeaseRefusal | undefined =
      this.leases.size >= this.limits.maxLeases
        ? 'keys'
        : this.usedBytes + bytes > this.limits.maxBytes
          ? 'memory'
          : this.usedSyncBytes + syncBytes > this.limits.maxSyncBytesPerSecond
            ? 'traffic'
            : undefined;
    if (refusal !== undefined) {
      this.observer.onLeaseRefused?.(refusal);
      return undefined;
    }
    const part = new SharedPart({
      kind: 'lease',
      key: c.key,
      tag,
      member: this.replicaId,
      exchange: this.exchange,
      ledger: this.ledger,
      maxMembers: this.limits.maxReplicas,
    });
    const lease = newLease(id, c, part, bytes, nameBytes, syncBytes, now);
    this.leases.set(id, lease);
    this.usedBytes += bytes;
    this.usedSyncBytes += syncBytes;
    // The first sync publishes its demand, the second makes it live; until then its calls go to the store.
    this.onOpen(lease, now);
    return lease;
  }

  /**
   * Estimated bytes per second of a lease's syncs: each of its two calls names the counter once,
   * with this replica's name; the exchange's reply names every replica holding it (`others`, none
   * known yet when undefined).
   */
  private syncBytesOf(nameBytes: number, others: readonly ReplicaDemand[] | undefined): number {
    let entries = SYNC_ENTRY_BYTES + this.memberBytes;
    if (others !== undefined) for (const o of others) entries += SYNC_ENTRY_BYTES + Buffer.byteLength(o.member);
    const perSync = 2 * (nameBytes + this.memberBytes) + SYNC_CALL_BYTES + entries;
    return Math.ceil((perSync * 1000) / this.limits.syncIntervalMs);
  }
}
