import { BoundedCache, entryBytes, type CacheEntry } from './bounded-cache';
import { monotonicClock, type Clock, type LimiterObserver, type LocalDenial, type LocalDenialListener, type RateLimitResponse } from './types';

/**
 * The replay of local denials: the one module that owns the fast path of attack traffic.
 *
 * Under attack, proxies send the same request over and over (the same domain and descriptors from
 * the same client), and every copy would otherwise be decoded, validated, matched and turned into
 * counter keys only to meet the same remembered denial. When the limiter answers a request wholly
 * from remembered denials it says so with a LocalDenial event (RateLimiter.shouldRateLimit's
 * listener, fed by the denial cache's local answer); this module keeps that event under a name the
 * edge gives the request (its exact wire bytes) and answers repeats from it: the same statuses,
 * resets that keep counting down, the same headers for them, the same reports to the observer, in
 * the edge's encoding (made at most once per name and millisecond: attack traffic repeats a request
 * many times a millisecond).
 *
 * An answer is only as good as what it was built from: it holds until the earliest of its denials
 * expires, and only under the config it was matched under (a reload changes the rules and empties
 * the denial cache). Bounded in entries and estimated bytes (./bounded-cache): beyond either the
 * least recently remembered entry is dropped; expired entries are dropped when met and swept a few
 * per remembered request.
 */

export interface ReplaysOptions<F> {
  /** Most requests remembered. */
  readonly maxKeys: number;
  /** Most estimated bytes of remembered requests (names, answers and reports). Default 16 MiB. */
  readonly maxBytes?: number;
  /** The current config (the limiter's). */
  readonly config: () => object | undefined;
  /** The edge's encoding of an answer. */
  readonly encode: (response: RateLimitResponse) => F;
  /** Receives each replay's reports, as the limiter's observer receives the calls it answers. */
  readonly observer?: LimiterObserver;
  /** Local time: the denial cache's clock, which its deniedUntilMs are read on. */
  readonly clock?: Clock;
}

interface Remembered<F> extends CacheEntry {
  readonly denial: LocalDenial;
  /** The earliest of its denials' expiries. */
  readonly expiresAtMs: number;
  /** The last encoding handed out, and the local millisecond it was made for. */
  encoded: F | undefined;
  encodedAtMs: number;
}

export const DEFAULT_REPLAY_MAX_BYTES = 16 * 1024 * 1024;

/** What a remembered request costs besides its name, estimated: the entry and its answer ... */
const REMEMBERED_BYTES = 400;
/** ... and per status (the status, its outcome report and its countdown). */
const STATUS_BYTES = 240;

/** Requests answered from remembered denials, by name, answered again in the edge's encoding. */
export class Replays<F> {
  private readonly entries: BoundedCache<Remembered<F>>;
  private readonly config: () => object | undefined;
  private readonly encode: (response: RateLimitResponse) => F;
  private readonly observer: LimiterObserver | undefined;
  private readonly clock: Clock;

  constructor(options: ReplaysOptions<F>) {
    if (!Number.isInteger(options.maxKeys) || options.maxKeys < 1) throw new RangeError(`maxKeys must be a positive integer, got ${options.maxKeys}`);
    this.entries = new BoundedCache({ maxEntries: options.maxKeys, maxBytes: options.maxBytes ?? DEFAULT_REPLAY_MAX_BYTES });
    this.config = options.config;
    this.encode = options.encode;
    this.observer = options.observer;
    this.clock = options.clock ?? monotonicClock;
  }

  /** Number of requests remembered (expired ones included until met or evicted). */
  get size(): number {
    return this.entries.size;
  }

  /** Estimated bytes of the requests remembered. */
  get bytes(): number {
    return this.entries.bytes;
  }

  /**
   * The encoded answer to the request named `key` when it is remembered and still holds (reported
   * as the limiter would report it); undefined otherwise: then decide it, with remembering(key).
   */
  answer(key: string): F | undefined {
    const now = this.clock.nowMs();
    const entry = this.entries.peek(key, now);
    if (entry === undefined) return undefined;
    const denial = entry.denial;
    if (denial.config !== this.config()) {
      this.entries.delete(key);
      return undefined;
    }
    const observer = this.observer;
    if (observer !== undefined) {
      observer.onReplay?.();
      const outcomes = denial.outcomes;
      for (let i = 0; i < outcomes.length; i++) observer.onDescriptor(outcomes[i]);
      if (denial.shadowed) observer.onGlobalShadowMode?.(denial.domain);
    }
    if (entry.encoded === undefined || entry.encodedAtMs !== now) {
      entry.encoded = this.encode(responseAt(denial, now));
      entry.encodedAtMs = now;
    }
    return entry.encoded;
  }

  /**
   * Forgets every remembered request: the limits they were denied under changed without a new
   * config (a runtime override set or removed, ./overrides.ts).
   */
  clear(): void {
    this.entries.clear();
  }

  /** The listener to decide the request named `key` with: it remembers the request's LocalDenial. */
  remembering(key: string): LocalDenialListener {
    return (denial) => this.remember(key, denial);
  }

  /** Remembers `denial` as the answer to the request named `key`. */
  remember(key: string, denial: LocalDenial): void {
    let untilMs = Infinity;
    for (const until of denial.deniedUntilMs) if (until < untilMs) untilMs = until;
    let own = REMEMBERED_BYTES + STATUS_BYTES * denial.deniedUntilMs.length;
    for (const outcome of denial.outcomes) own += outcome.statKey.length;
    this.entries.set(key, { denial, expiresAtMs: untilMs, encoded: undefined, encodedAtMs: 0, bytes: entryBytes(key, own) });
    this.entries.tidy(this.clock.nowMs());
  }
}

/** The answer of `denial` at local time `nowMs`: each denial's reset counted down, and the headers made for it. */
function responseAt(denial: LocalDenial, nowMs: number): RateLimitResponse {
  const { response, deniedUntilMs } = denial;
  const statuses = response.statuses.map((status, i) => {
    const until = deniedUntilMs[i];
    return Number.isNaN(until) ? status : { ...status, durationUntilResetMs: until - nowMs };
  });
  const responseHeaders = denial.headers === undefined ? response.responseHeaders : denial.headers(statuses);
  const replayed: RateLimitResponse = { overallCode: response.overallCode, statuses, responseHeaders };
  return response.dynamicMetadata === undefined ? replayed : { ...replayed, dynamicMetadata: response.dynamicMetadata };
}
