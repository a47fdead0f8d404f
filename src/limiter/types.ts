import type { HoldOutcome } from './hold';

/**
 * The limiter's own vocabulary. Nothing here knows about protobuf, gRPC or Redis:
 * the edges (src/wire, src/store) convert to and from these types.
 */

/** Time units of the config format and of the wire protocol. */
export type Unit = 'second' | 'minute' | 'hour' | 'day' | 'week' | 'month' | 'year';

export const UNITS: readonly Unit[] = ['second', 'minute', 'hour', 'day', 'week', 'month', 'year'];

/** Length of one unit in milliseconds (month = 30 days, year = 365 days, as the reference server). */
export const UNIT_MS: Readonly<Record<Unit, number>> = Object.freeze({
  second: 1_000,
  minute: 60_000,
  hour: 3_600_000,
  day: 86_400_000,
  week: 604_800_000,
  month: 2_592_000_000,
  year: 31_536_000_000,
});

/**
 * The longest window a limit may have (unit x unit_multiplier), and the longest a full bucket may
 * take to refill: 100 years of 365 days. Every reset, TTL and bucket TAT derived from it stays far
 * inside what Redis keeps (64-bit ms expiry times) and what doubles hold exactly.
 */
export const MAX_WINDOW_MS = 100 * UNIT_MS.year;

/**
 * Every counting algorithm by its config name, and the facts other modules read about it: `code`,
 * its name in counter keys (./keys.ts) and in the Redis script's arguments; `bucket`, whether its
 * state is one GCRA timestamp and its capacity `burst`. An algorithm is an entry here, its arithmetic
 * and in-process state in ./algorithms.ts, and its Lua twin in src/store/redis/script.ts.
 */
const ALGORITHM_FACTS = {
  sliding_window: { code: 'sw', bucket: false },
  sliding_log: { code: 'sl', bucket: false },
  fixed_window: { code: 'fw', bucket: false },
  token_bucket: { code: 'tb', bucket: true },
  leaky_bucket: { code: 'lb', bucket: true },
} as const satisfies Record<string, { readonly code: string; readonly bucket: boolean }>;

export type Algorithm = keyof typeof ALGORITHM_FACTS;

/** Every algorithm's name, in the order of the table. */
export const ALGORITHMS: readonly Algorithm[] = Object.freeze(Object.keys(ALGORITHM_FACTS) as Algorithm[]);

/** An algorithm's code: its name in counter keys and in the Redis script's arguments (two letters). */
export function algorithmCode(algorithm: Algorithm): string {
  return ALGORITHM_FACTS[algorithm].code;
}

/** Algorithms whose state is one GCRA timestamp and whose capacity is `burst`. */
export function isBucket(algorithm: Algorithm): boolean {
  return ALGORITHM_FACTS[algorithm].bucket;
}

/** A resolved limit: what a counter enforces. Frozen at config load. */
export interface Limit {
  /** Admitted hits per window. */
  readonly requestsPerUnit: number;
  readonly unit: Unit;
  /** Window = unit x unitMultiplier (extension; 1 in the reference format). */
  readonly unitMultiplier: number;
  /** unit x unitMultiplier in milliseconds, precomputed. */
  readonly windowMs: number;
  readonly algorithm: Algorithm;
  /** token_bucket / leaky_bucket: capacity in hits (`burst`, default requestsPerUnit); requestsPerUnit elsewhere. */
  readonly burst: number;
  /** sliding_window: counters per window (`sub_windows`, default 1: the two-counter estimate); 1 elsewhere. */
  readonly subWindows: number;
  /** sliding_window: count the oldest sub-window in full until it has expired (`strict`); false elsewhere. */
  readonly strict: boolean;
  /**
   * `calendar: true` (fixed_window, unit_multiplier 1): the window is the calendar's unit containing
   * now (./calendar.ts) rather than an epoch-aligned windowMs; windowMs stays the unit's nominal length.
   */
  readonly calendar?: boolean;
  /** Optional rule name (`rate_limit.name`), reported in `current_limit.name` and used by `replaces`. */
  readonly name?: string;
  /** `unlimited: true`: always OK, never touches a store. */
  readonly unlimited: boolean;
  /**
   * `concurrency: N`: an in-flight limit, no window: at most N reservations held at once
   * (./reservations.ts). requestsPerUnit is N; the unit and window are placeholders never counted with.
   */
  readonly concurrency?: number;
  /** `lease: true`: decided in process against this replica's part of the limit, settled in the background (src/sharing/leases). */
  readonly lease?: boolean;
  /**
   * `scope: global`: one limit shared by every region (README, Regions), leased within the region
   * (`lease` is then true); absent: `regional`, counted in this region's store alone.
   */
  readonly scope?: LimitScope;
}

/** Where a limit is counted: in this region's store (`regional`, the default) or across every region (`global`). */
export type LimitScope = 'global' | 'regional';

/** A limit's scope, `regional` when it names none. */
export function limitScope(limit: Pick<Limit, 'scope'>): LimitScope {
  return limit.scope ?? 'regional';
}

/** A `scope: global` limit's window holds at least this many REGION_SYNC_INTERVALs (shorter ones are refused at load). */
export const GLOBAL_MIN_WINDOW_SYNCS = 10;

/** One key/value entry of a descriptor, in request order. */
export interface Entry {
  readonly key: string;
  readonly value: string;
}

/** A request-supplied limit override (`RateLimitDescriptor.limit`). */
export interface LimitOverride {
  readonly requestsPerUnit: number;
  readonly unit: Unit;
}

export interface Descriptor {
  readonly entries: readonly Entry[];
  readonly limit?: LimitOverride;
  /** Descriptor-level hits (`RateLimitDescriptor.hits_addend`); undefined when unset. 0 = check only. */
  readonly hitsAddend?: number;
}

/**
 * Caps on what one request may hold, so that no caller picks how much memory and work it costs
 * (every cache keyed by request values is bounded in bytes too, but a cap at the door is cheaper).
 * A request over one is malformed (InvalidRequestError, naming the cap and its setting).
 */
export interface RequestLimits {
  /** Descriptors per request. */
  readonly maxDescriptors: number;
  /** Entries per descriptor. */
  readonly maxEntries: number;
  /** UTF-8 bytes of one entry's key. */
  readonly maxKeyBytes: number;
  /** UTF-8 bytes of one entry's value. */
  readonly maxValueBytes: number;
}

/** The setting that raises each cap (named in the error a request over it gets). */
export const REQUEST_LIMIT_SETTINGS: Readonly<Record<keyof RequestLimits, string>> = Object.freeze({
  maxDescriptors: 'REQUEST_MAX_DESCRIPTORS',
  maxEntries: 'DESCRIPTOR_MAX_ENTRIES',
  maxKeyBytes: 'DESCRIPTOR_MAX_KEY_BYTES',
  maxValueBytes: 'DESCRIPTOR_MAX_VALUE_BYTES',
});

/**
 * Far above what any Envoy configuration sends (one descriptor per rate-limit action, a handful of
 * entries each, keys named in the proxy's config, values from one header or address), below what
 * would let one request cost much.
 */
export const DEFAULT_REQUEST_LIMITS: RequestLimits = Object.freeze({
  maxDescriptors: 4096,
  maxEntries: 64,
  maxKeyBytes: 1024,
  maxValueBytes: 16 * 1024,
});

/** A ShouldRateLimit request, already validated by the edge. */
export interface RateLimitRequest {
  readonly domain: string;
  readonly descriptors: readonly Descriptor[];
  /** Request-level hits; 0 means 1. */
  readonly hitsAddend: number;
}

export type Code = 'OK' | 'OVER_LIMIT';

export interface DescriptorStatus {
  readonly code: Code;
  /** Absent when no rule matched. */
  readonly currentLimit?: {
    readonly requestsPerUnit: number;
    readonly unit: Unit;
    readonly name?: string;
    /** unit x unit_multiplier in ms (not on the wire; used by the draft RateLimit-Policy `w`). Defaults to one unit. */
    readonly windowMs?: number;
  };
  readonly limitRemaining: number;
  /** Milliseconds; absent when no rule matched. */
  readonly durationUntilResetMs?: number;
}

/** A value of a google.protobuf.Struct, as plain data (what JSON can hold). */
export type StructValue = null | boolean | number | string | readonly StructValue[] | StructFields;

/** The fields of a google.protobuf.Struct, as plain data. */
export type StructFields = { readonly [key: string]: StructValue };

export interface RateLimitResponse {
  readonly overallCode: Code;
  readonly statuses: readonly DescriptorStatus[];
  /** Extra response headers (RateLimit-* when enabled). */
  readonly responseHeaders: readonly { readonly key: string; readonly value: string }[];
  /** `dynamic_metadata` (RESPONSE_DYNAMIC_METADATA); absent when not enabled. */
  readonly dynamicMetadata?: StructFields;
}

/** Time source; tests pin it. */
export interface Clock {
  nowMs(): number;
}

// The wall-clock time at which the monotonic clock reads 0, taken once.
const MONOTONIC_ORIGIN_MS = Date.now() - performance.now();

/**
 * Whole milliseconds since the epoch as the wall clock read them when the process started, advanced
 * by a monotonic clock since: a wall-clock step (NTP, an operator, a VM restored) neither starts
 * windows over nor stretches a wait. The in-process caches and the memory store keep time with it;
 * it drifts from the wall clock only as fast as the two clocks' rates differ.
 */
export const monotonicClock: Clock = { nowMs: () => Math.floor(MONOTONIC_ORIGIN_MS + performance.now()) };

/** Anything that answers ShouldRateLimit: the limiter, or a wrapper around it (metrics). What every edge needs. */
export interface RateLimitDecider {
  /** `onLocalDenial`: hears of a call answered wholly from remembered denials (RateLimiter.shouldRateLimit). */
  shouldRateLimit(request: RateLimitRequest, onLocalDenial?: LocalDenialListener): Promise<RateLimitResponse>;
}

/** Counts one matched, counted descriptor contributes to the per-rule metrics (reference counter names). */
export interface DescriptorOutcome {
  readonly domain: string;
  /** The rule's key path ("tenant_acme.path"), or the detailed one when the rule has `detailed_metric`. */
  readonly statKey: string;
  /** total_hits: the descriptor's hits (0 for a check-only descriptor). */
  readonly hits: number;
  /** over_limit: hits denied by the limit (all of them: a denied request admits none). Shadow rules included. */
  readonly overLimit: number;
  /** near_limit: admitted hits that pushed usage above nearLimitRatio x limit. */
  readonly nearLimit: number;
  /** within_limit: hits admitted. */
  readonly withinLimit: number;
  /** shadow_mode: hits a shadow-mode rule would have denied (answered OK instead). */
  readonly shadowMode: number;
  /** over_limit_with_local_cache: the part of overLimit answered by the local denial cache. */
  readonly overLimitWithLocalCache: number;
  /** The rule that decided it: one object per rule of a config (the live view groups by it). */
  readonly rule: OutcomeRule;
  /** Its counter's identity (./keys.ts): the descriptor as it was counted. */
  readonly key: string;
}

/** What an outcome tells of its rule (a MatchedRule is one). */
export interface OutcomeRule {
  /** The rule's key path as the metrics name it without detailed_metric ("tenant_acme.path"). */
  readonly statKey: string;
  readonly limit: Limit;
  readonly shadowMode: boolean;
  /** True for the rule a request's own `limit` override makes (named by the caller's keys, not by a config). */
  readonly override?: boolean;
  /** Set when a runtime override decided (src/limiter/overrides.ts): the config's rule it replaced, if that rule has a limit. */
  readonly overridden?: { readonly configRule: OutcomeRule | undefined };
}

/** Receives per-descriptor outcomes (metrics). Called synchronously on the hot path: keep it cheap. */
export interface LimiterObserver {
  /** Once per descriptor whose counter was consulted. */
  onDescriptor(outcome: DescriptorOutcome): void;
  /** Once per request that global shadow mode turned from OVER_LIMIT into OK. */
  onGlobalShadowMode?(domain: string): void;
  /** Once per request answered by a replay (./replay): a local denial answered without decoding or matching. */
  onReplay?(): void;
  /** Once per reserve, commit or release of a reservation (./reservations.ts), after its outcomes. */
  onReservation?(event: ReservationEvent): void;
}

/** What one reservation call did to its descriptor's book. */
export interface ReservationEvent {
  readonly domain: string;
  /** The rule whose descriptor's reservations they are (its statKey names it, never a request's values). */
  readonly rule: OutcomeRule;
  readonly kind: 'reserve' | 'commit' | 'release';
  /** The descriptor's entries, its reserve or commit entry left out: what names its book. */
  readonly entries: readonly Entry[];
  readonly outcome: HoldOutcome;
  /** Reservations the book holds after the call. */
  readonly held: number;
  /** Holds of the book the call found lapsed. */
  readonly lapsed: number;
}

/** Response headers from the statuses (RateLimit-*, see ./headers). */
export type ResponseHeadersBuilder = (statuses: readonly DescriptorStatus[]) => RateLimitResponse['responseHeaders'];

/**
 * A request the limiter answered wholly from remembered denials (Store.decideLocally): everything a
 * repeat of it needs to be answered again later without the limiter (./replay).
 */
export interface LocalDenial {
  /** The config it was matched under: the answer holds only while that config does. */
  readonly config: object;
  readonly domain: string;
  /** The answer given. */
  readonly response: RateLimitResponse;
  /** Per status: the local time (ms) until which its denial holds; NaN for a status that does not count down. */
  readonly deniedUntilMs: readonly number[];
  /** What was reported to the observer for it, in order. */
  readonly outcomes: readonly DescriptorOutcome[];
  /** Global shadow mode turned its OVER_LIMIT into OK (and reported that once). */
  readonly shadowed: boolean;
  /** How its response headers were built; undefined when it has none. */
  readonly headers: ResponseHeadersBuilder | undefined;
}

export type LocalDenialListener = (denial: LocalDenial) => void;
