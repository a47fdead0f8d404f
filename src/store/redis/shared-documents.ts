import type { SharedDocuments } from '../../limiter/replica-exchange';
import type { RedisClient } from './connection';

/** Members one kind may have: far more processes than a deployment runs, few enough to read at once. */
export const MAX_MEMBERS = 1_024;

export interface RedisDocumentsOptions {
  readonly client: RedisClient;
  /** CACHE_KEY_PREFIX. */
  readonly keyPrefix?: string;
  /** Deadline of one put or read, ms. */
  readonly timeoutMs: number;
}

/**
 * SharedDocuments on Redis: per kind, one sorted set of member names (scored by expiry) and one
 * string per member with its own TTL, written together in one MULTI. Every key of a kind shares the
 * hash tag `{kind}`, so on a Cluster they live in one slot and a read is one ZRANGE and one MGET.
 * Bounded: expired names leave the set on every write, the set itself expires when nobody writes,
 * and a read returns at most `max` documents. Plain commands, no script: these calls are not
 * decisions, and a document that expired before its name left the set simply reads as absent.
 */
export class RedisDocuments implements SharedDocuments {
  private readonly client: RedisClient;
  private readonly prefix: string;
  private readonly timeoutMs: number;

  constructor(options: RedisDocumentsOptions) {
    this.client = options.client;
    this.prefix = options.keyPrefix ?? '';
    this.timeoutMs = options.timeoutMs;
  }

  async put(kind: string, name: string, document: string, ttlMs: number): Promise<void> {
    const ttl = Math.max(1, Math.ceil(ttlMs));
    const now = Date.now();
    const members = this.membersKey(kind);
    const replies = await this.within(
      this.client
        .multi()
        .zremrangebyscore(members, '-inf', now)
        .zcard(members)
        .set(this.documentKey(kind, name), document, 'PX', ttl)
        .zadd(members, now + ttl, name)
        .pexpire(members, ttl)
        .exec(),
    );
    const failed = replies?.find(([err]) => err !== null)?.[0];
    if (replies === null || failed) throw failed ?? new Error('the transaction was discarded');
    // The count before this member was added: past MAX_MEMBERS, readers see only the first MAX_MEMBERS.
    if (Number(replies[1][1]) > MAX_MEMBERS) throw new Error(`${kind}: more than ${MAX_MEMBERS} members publish; readers see ${MAX_MEMBERS}`);
  }

  async all(kind: string, max: number): Promise<string[]> {
    const names = await this.within(this.client.zrange(this.membersKey(kind), 0, String(Math.min(max, MAX_MEMBERS) - 1)));
    if (names.length === 0) return [];
    const documents = await this.within(this.client.mget(...names.map((name) => this.documentKey(kind, name))));
    return documents.filter((d): d is string => d !== null);
  }

  private membersKey(kind: string): string {
    return `${this.prefix}{${kind}}|members`;
  }

  private documentKey(kind: string, name: string): string {
    return `${this.prefix}{${kind}}|member|${name}`;
  }

  private within<T>(pending: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`redis did not answer within ${this.timeoutMs} ms`)), this.timeoutMs);
      pending.then(
        (value) => {
          clearTimeout(timer);
          resolve(value);
        },
        (err: unknown) => {
          clearTimeout(timer);
          reject(err instanceof Error ? err : new Error(String(err)));
        },
      );
    });
  }
}
