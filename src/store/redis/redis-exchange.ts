import { demandMembersCap, type DemandExchange, type ReplicaDemand, type ReplicaExchange } from '../../limiter/replica-exchange';
import { StoreUnavailableError } from '../../limiter/store';
import type { RedisClient } from './connection';
import { DEMAND_COMMAND, DEMAND_SCRIPT, demandArgs, parseDemandReply } from './demand';
import { redisErrorKind, unavailable, type RedisErrorKind } from './redis-store';
import { RedisDocuments } from './shared-documents';

export interface RedisExchangeOptions {
  /** The store's client: the exchange shares its connection, and closes nothing. */
  readonly client: RedisClient;
  /** CACHE_KEY_PREFIX. */
  readonly keyPrefix?: string;
  /** STORE_TIMEOUT_MS; the exchange's deadlines are at least the minimums below. */
  readonly timeoutMs: number;
  readonly onError?: (kind: RedisErrorKind) => void;
}

// Neither call is on the decision path: a busy Redis gets longer to answer them.
const DOCUMENT_MIN_TIMEOUT_MS = 1_000;
const DEMAND_MIN_TIMEOUT_MS = 250;

type ScriptCall = (args: (string | number)[]) => Promise<unknown>;

/**
 * The ReplicaExchange on Redis: documents (./shared-documents.ts) and one demand hash per budget
 * (./demand.ts), in the budget counter's hash slot, with Redis's clock.
 */
export class RedisExchange implements ReplicaExchange {
  private readonly client: RedisClient;
  private readonly documents: RedisDocuments;
  private readonly demandCall: ScriptCall;
  private readonly tagOpen: string;
  private readonly deadlineMs: number;
  private readonly onError: (kind: RedisErrorKind) => void;

  constructor(options: RedisExchangeOptions) {
    this.client = options.client;
    this.tagOpen = `${options.keyPrefix ?? ''}{`;
    this.documents = new RedisDocuments({ client: this.client, keyPrefix: options.keyPrefix, timeoutMs: Math.max(options.timeoutMs, DOCUMENT_MIN_TIMEOUT_MS) });
    this.deadlineMs = Math.max(options.timeoutMs, DEMAND_MIN_TIMEOUT_MS);
    this.onError = options.onError ?? (() => {});
    this.client.defineCommand(DEMAND_COMMAND, { lua: DEMAND_SCRIPT, numberOfKeys: 1 });
    const commands = this.client as unknown as Record<string, ScriptCall>;
    this.demandCall = (args) => commands[DEMAND_COMMAND](args);
  }

  put(kind: string, name: string, document: string, ttlMs: number): Promise<void> {
    return this.documents.put(kind, name, document, ttlMs);
  }

  all(kind: string, max: number): Promise<string[]> {
    return this.documents.all(kind, max);
  }

  /**
   * One script call, outside the store's batcher (one per budget sync, not per request). The hash
   * lives in the counter's slot: `{<tag>}<key>|<kind>` (`{<key>}|<kind>` without a tag of its own).
   */
  exchangeDemand(exchange: DemandExchange): Promise<ReplicaDemand[]> {
    const { tag, key: name } = exchange;
    const kind = exchange.kind ?? 'rlqs';
    const key = tag === undefined || tag === name ? `${this.tagOpen}${name}}|${kind}` : `${this.tagOpen}${tag}}${name}|${kind}`;
    return new Promise<ReplicaDemand[]>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.onError('timeout');
        reject(new StoreUnavailableError(`redis did not answer within ${this.deadlineMs} ms`));
      }, this.deadlineMs);
      this.demandCall([key, ...demandArgs(exchange, demandMembersCap(exchange))]).then(
        (reply) => {
          clearTimeout(timer);
          resolve(parseDemandReply(reply));
        },
        (err: unknown) => {
          clearTimeout(timer);
          const kind = redisErrorKind(this.client, err);
          this.onError(kind);
          reject(unavailable(kind, err));
        },
      );
    });
  }
}
