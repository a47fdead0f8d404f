import type { DemandExchange, ReplicaDemand, ReplicaExchange } from '../limiter/replica-exchange';
import type { SharingKind } from '../limiter/sharing-kind';
import type { CounterRequest, SettleAnswer, Settlements } from '../limiter/store';
import { divideAmong, ownPart } from './division';
import { Peers } from './peers';
import { settleCallOf, type LedgerName, type Unsettled } from './settlement';

/**
 * One member's part of one shared limit: what it tells the others (its demand, through the
 * ReplicaExchange port), what it hears of them (Peers), its settlements (once per member and seq,
 * through the Settlements port) and the division of the limit among them. The users drive it:
 * leases (members: replicas, the part decided in process), quota budgets (members: replicas,
 * the part divided again among their proxies), regions (members: regions, through the global store).
 * Each kind keeps its demand entries and ledgers apart from the others'.
 */

export interface SharedPartOptions {
  readonly kind: SharingKind;
  /** The shared counter's key, and its hash tag when it has one of its own (the entries and the ledger live in its slot). */
  readonly key: string;
  readonly tag?: string;
  /** This member's name (unique among the members). */
  readonly member: string;
  /** The demand exchange; absent: this member divides alone. */
  readonly exchange?: ReplicaExchange;
  /** Where settlements go; absent: the user charges the counter itself. */
  readonly ledger?: Settlements;
  /** Members the exchange and the ledger record at most; absent: the ports' own cap. */
  readonly maxMembers?: number;
  /** When the others were last heard of at the start (default: never). */
  readonly heardAtMs?: number;
}

export class SharedPart {
  readonly kind: SharingKind;
  readonly key: string;
  readonly tag: string | undefined;
  readonly peers: Peers;
  private readonly exchangePort: ReplicaExchange | undefined;
  private readonly ledgerPort: Settlements | undefined;
  private readonly maxMembers: number | undefined;

  constructor(options: SharedPartOptions) {
    this.kind = options.kind;
    this.key = options.key;
    this.tag = options.tag;
    this.peers = new Peers(options.member, options.heardAtMs);
    this.exchangePort = options.exchange;
    this.ledgerPort = options.ledger;
    this.maxMembers = options.maxMembers;
  }

  get member(): string {
    return this.peers.member;
  }

  /** The other members, as the last exchange said. */
  get others(): readonly ReplicaDemand[] {
    return this.peers.others;
  }

  /**
   * Publishes this member's entry (`publish`, living `ttlMs`), or withdraws it (undefined), and
   * returns every live entry; undefined without an exchange.
   */
  exchange(publish: ReplicaDemand | undefined, ttlMs: number): Promise<ReplicaDemand[]> | undefined {
    if (this.exchangePort === undefined) return undefined;
    const call: DemandExchange = {
      key: this.key,
      ...(this.tag === undefined ? {} : { tag: this.tag }),
      // Quota budgets' entries are the adapters' default kind.
      ...(this.kind === 'rlqs' ? {} : { kind: this.kind }),
      ...(publish === undefined ? { withdraw: this.member } : { publish }),
      ttlMs,
      ...(this.maxMembers === undefined || publish === undefined ? {} : { maxMembers: this.maxMembers }),
    };
    return this.exchangePort.exchangeDemand(call);
  }

  /** Settles `sent` on this member's ledger of the counter (charging `counter` its hits); rejects without a ledger. */
  settle(sent: Unsettled, counter: CounterRequest): Promise<SettleAnswer> {
    if (this.ledgerPort === undefined) return Promise.reject(new Error(`${this.kind} part of ${this.key}: no settlements`));
    return this.ledgerPort.settle(settleCallOf(this.ledgerName(), sent, counter));
  }

  /** `capacity` divided between this member (`own` demand, first) and the others. */
  divide(capacity: number, own: number): number[] {
    return divideAmong(capacity, own, this.peers.others);
  }

  /** This member's part of `capacity` (see divide). */
  part(capacity: number, own: number): number {
    return ownPart(capacity, own, this.peers.others);
  }

  private ledgerName(): LedgerName {
    return { kind: this.kind, key: this.key, tag: this.tag, member: this.member, maxMembers: this.maxMembers };
  }
}
