import { detailedStatKey, keysStatKey, matchDescriptor, requestKeys } from './match';
import type { MatchedRule, RateLimitConfig, RuleLimit } from './rules';
import { InvalidRequestError, NotReadyError } from './errors';
import { plannedCounters, type CounterRequest, type HoldCall, type PlannedCounters } from './store';
import { counterKey, counterKeyPrefix } from './keys';
import type { CalendarWindow } from './calendar';
import { leaseMark } from './lease-mark';
import { commitCharge, holdTimeOf } from './reservations';
import { descriptorTail, overriddenRule, type ActiveOverride, type OverrideLookup } from './overrides';
import {
  DEFAULT_RESERVATION_KEYS,
  reservationEntryOf,
  validateDescriptor,
  validateRequest,
  type ReservationEntry,
  type ReservationKeys,
} from './request-validation';
import {
  DEFAULT_REQUEST_LIMITS,
  UNIT_MS,
  UNITS,
  type Algorithm,
  type Descriptor,
  type DescriptorStatus,
  type Limit,
  type RateLimitRequest,
  type RequestLimits,
  type Unit,
} from './types';

/**
 * Planning: a request validated and matched to its rules, the statuses that need no store, and the
 * counters the store must decide (./rate-limiter.ts decides them). Plans and per-descriptor memos are
 * kept for frozen requests and descriptors, so that a request seen again costs no validation,
 * matching or keying.
 */

/** Largest uint32: limit_remaining of an unlimited rule, as the reference server sends it. */
export const UNLIMITED_REMAINING = 4_294_967_295;

// As the reference server: a descriptor that matches no rule, or whose limit another matched rule of
// the request replaces, answers OK with no current_limit and limit_remaining 0; an `unlimited` rule
// answers OK with limit_remaining 4294967295, also without current_limit.
const NOT_LIMITED: DescriptorStatus = Object.freeze({ code: 'OK', limitRemaining: 0 });
const UNLIMITED: DescriptorStatus = Object.freeze({ code: 'OK', limitRemaining: UNLIMITED_REMAINING });
const NO_REPLACES: readonly string[] = Object.freeze([]);

declare const kept: unique symbol;

/**
 * A request the planner keeps a plan for: frozen (so it cannot change), and one object per distinct
 * request message (the codec's RequestCache, src/wire/rls-codec.ts, hands out such objects). Keys
 * the planner's plans; recognised by isKeptRequest.
 */
export type KeptRequest = RateLimitRequest & { readonly [kept]: 'request' };

/** A descriptor the planner keeps a memo for: frozen, one object per distinct descriptor (the codec's DescriptorCache). */
export type KeptDescriptor = Descriptor & { readonly [kept]: 'descriptor' };

function isKeptRequest(req: RateLimitRequest): req is KeptRequest {
  return Object.isFrozen(req);
}

function isKeptDescriptor(d: Descriptor): d is KeptDescriptor {
  return Object.isFrozen(d);
}

/** A request after matching: statuses so far, and the counters the store must decide. */
export interface Plan {
  /** The config it was matched under. */
  readonly config: RateLimitConfig;
  readonly domain: string;
  readonly descriptors: readonly Descriptor[];
  /** The request-level hits_addend as sent (0 when unset). */
  readonly hitsAddend: number;
  /** Filled by the decision: each plan handed out has its own (see decidable). */
  readonly statuses: DescriptorStatus[];
  readonly counted: readonly Counted[];
  /** `counted`'s counters in order, what a one-call request hands the store: PlannedCounters when the plan is kept. */
  readonly counters: readonly CounterRequest[] | PlannedCounters;
  /** Counted descriptors on shadow-mode or quota-mode rules ("soft": they never deny on their own). */
  readonly softCount: number;
  /** Per descriptor, whether it is in quota mode; undefined when none is (the overall code is then any status's). */
  readonly quotaAt: boolean[] | undefined;
  /**
   * Per descriptor, the position in `counted` of the limit its status is taken from (filled by the
   * decision); undefined when no descriptor has several limits (each status is then its one counter's).
   */
  readonly decidedBy: number[] | undefined;
  /** The reserve and commit descriptors (./reservations.ts), decided by Store.reservations; undefined when there is none. */
  readonly holds: readonly PlannedHold[] | undefined;
}

/**
 * A descriptor ending in `(reserve, ID)` or `(commit, ID)`: its store call (made once per kept
 * descriptor and hits), and per decision of the answer (its counters, then its in-flight limit)
 * what that limit reports, as a counted descriptor would.
 */
export interface PlannedHold {
  readonly index: number;
  readonly rule: MatchedRule;
  readonly soft: boolean;
  readonly call: HoldCall;
  /** In the order of the answer's decisions; each `counter` carries the hits its outcome reports. */
  readonly parts: readonly Counted[];
}

/** A kept plan: its counters are the same frozen array on every call. */
interface KeptPlan extends Plan {
  readonly counters: PlannedCounters;
}

/**
 * What a descriptor alone decides under one config and domain: its rule, and its counter for the
 * hits it was last counted with. Kept per KeptDescriptor: a descriptor seen again is neither
 * validated, nor matched, nor keyed again.
 */
interface DescriptorMemo {
  readonly domain: string;
  readonly rule: MatchedRule | undefined;
  counter: CounterRequest | undefined;
  /** A `rate_limits` rule's counters, one per limit (`counter` is then unused). */
  counters: readonly CounterRequest[] | undefined;
  statKey: string | undefined;
  /** Its reservation entry, when it is a reserve or commit descriptor. */
  readonly reservation: ReservationEntry | undefined;
  /** A reservation descriptor's plan, for the hits it was last planned with. */
  hold: PlannedHold | undefined;
  /** The runtime override found for it (undefined: none), and the overrides' generation it was last checked at. */
  readonly override: ActiveOverride | undefined;
  overrideGen: number;
  /** Its descriptorTail (without a reservation entry), once some override of its domain made it needed. */
  tail: string | undefined;
}

/** A counted descriptor: its rule, its position in the request and its store request. */
export interface Counted {
  readonly index: number;
  readonly rule: MatchedRule;
  readonly counter: CounterRequest;
  /** Shadow or quota mode: its counter does not veto the others (see RateLimiter.decideSplit). */
  readonly soft: boolean;
  /**
   * The stat key when it depends on the request (share_threshold, value_to_metric) or names one limit
   * of a `rate_limits` rule (its suffix included, joined once per plan); else undefined: the rule's.
   */
  readonly statKey: string | undefined;
  /** Which limit of a `rate_limits` rule the counter is; undefined for a rule with one limit. */
  readonly limit: RuleLimit | undefined;
  /** The status's current_limit when this counter decides it (its limit's). */
  readonly currentLimit: DescriptorStatus['currentLimit'];
}

/** A descriptor matched to a `rate_limits` rule, as RequestPlanner.planLimits counts it. */
interface LimitsPlan {
  readonly config: RateLimitConfig;
  readonly domain: string;
  readonly descriptor: Descriptor;
  readonly rule: MatchedRule;
  readonly limits: readonly RuleLimit[];
  /** Its position in the request. */
  readonly index: number;
  readonly hits: number;
  readonly soft: boolean;
  readonly memo: DescriptorMemo | undefined;
  /** Names replaced by the request's matched rules. */
  readonly replaced: ReadonlySet<string> | undefined;
}

export interface PlannerOptions {
  /** The current config; undefined until the first one loaded (requests then fail with NotReadyError). */
  readonly config: () => RateLimitConfig | undefined;
  /** Every rule in quota mode (QUOTA_MODE). */
  readonly quotaMode?: boolean;
  /** Algorithm of request-supplied limit overrides. */
  readonly defaultAlgorithm: Algorithm;
  /** Caps on what one request may hold; DEFAULT_REQUEST_LIMITS when omitted. */
  readonly requestLimits?: RequestLimits;
  /** The calendar of `calendar: true` limits: its offset from UTC, ms (CALENDAR_TIMEZONE); default 0. */
  readonly calendarOffsetMs?: number;
  /** The entry keys of reserve and commit descriptors (RESERVE_ENTRY_KEY, COMMIT_ENTRY_KEY); `reserve` and `commit` by default. */
  readonly reservationKeys?: ReservationKeys;
  /** The runtime overrides in force (./overrides.ts); none when absent. */
  readonly overrides?: OverrideLookup;
}

/** Turns requests into plans, keeping them (and per-descriptor memos) for frozen requests until the config changes. */
export class RequestPlanner {
  private readonly config: () => RateLimitConfig | undefined;
  private readonly quotaMode: boolean;
  private readonly defaultAlgorithm: Algorithm;
  // Weak: a descriptor the codec no longer holds takes its memo with it. Replaced as a whole when
  // the config changes, so that no memo keeps an old config's rules alive.
  private memos = new WeakMap<KeptDescriptor, DescriptorMemo>();
  // Plans of kept requests, their statuses as before any decision: a repeated request is neither
  // validated nor matched again. Replaced with the memos.
  private plans = new WeakMap<KeptRequest, KeptPlan>();
  private memosConfig: RateLimitConfig | undefined;
  private readonly overrides: OverrideLookup | undefined;
  /** The overrides' generation the kept plans were made under: another one replaces them (memos are checked one by one). */
  private plansGeneration = 0;
  private readonly limits: RequestLimits;
  /** The CalendarWindow of each unit, made once: counters of calendar limits carry one. */
  private readonly calendars: Readonly<Record<Unit, CalendarWindow>>;
  private readonly reservationKeys: ReservationKeys;

  constructor(options: PlannerOptions) {
    this.reservationKeys = options.reservationKeys ?? DEFAULT_RESERVATION_KEYS;
    this.config = options.config;
    this.overrides = options.overrides;
    this.quotaMode = options.quotaMode === true;
    this.defaultAlgorithm = options.defaultAlgorithm;
    this.limits = options.requestLimits ?? DEFAULT_REQUEST_LIMITS;
    const offsetMs = options.calendarOffsetMs ?? 0;
    this.calendars = Object.freeze(Object.fromEntries(UNITS.map((unit) => [unit, Object.freeze({ unit, offsetMs })])) as Record<Unit, CalendarWindow>);
  }

  /**
   * The plan of `req`, from the plans kept when it is a KeptRequest; its statuses (and deciding
   * limits) are the caller's to fill. Throws InvalidRequestError for a malformed request, and
   * NotReadyError before the first config.
   */
  planOf(req: RateLimitRequest): Plan {
    if (!isKeptRequest(req)) return this.plan(req);
    const known = this.config() === this.memosConfig && (this.overrides?.generation ?? 0) === this.plansGeneration ? this.plans.get(req) : undefined;
    if (known !== undefined) return decidable(known);
    const plan = this.plan(req);
    const counters = plannedCounters(plan.counters);
    this.plans.set(req, { ...plan, counters, statuses: plan.statuses.slice(), decidedBy: plan.decidedBy?.slice() });
    return plan;
  }

  /** Validation, matching, and the statuses that need no store; throws on a bad request or before the first config. */
  private plan(req: RateLimitRequest): Plan {
    const limits = this.limits;
    validateRequest(req, limits);
    const { domain, descriptors } = req;
    const n = descriptors.length;
    const config = this.config();
    // An unknown domain limits nothing, limit override or not.
    const domainKnown = config !== undefined && config.domains.has(domain);
    const requestHits = req.hitsAddend > 0 ? req.hitsAddend : 1;
    if (config !== this.memosConfig) {
      this.memos = new WeakMap();
      this.plans = new WeakMap();
      this.memosConfig = config;
    }
    const overrides = this.overrides;
    const generation = overrides === undefined ? 0 : overrides.generation;
    if (generation !== this.plansGeneration) {
      this.plans = new WeakMap();
      this.plansGeneration = generation;
    }

    // Pass 1: validate and match every descriptor, collecting the names replaced by any match.
    const rules: (MatchedRule | undefined)[] = new Array<MatchedRule | undefined>(n);
    const memos: (DescriptorMemo | undefined)[] = new Array<DescriptorMemo | undefined>(n);
    // Per descriptor its reservation entry; undefined while the request has none (the kind is told once per kept descriptor).
    let reservations: (ReservationEntry | undefined)[] | undefined;
    let replaced: Set<string> | undefined;
    for (let i = 0; i < n; i++) {
      const d = descriptors[i];
      let rule: MatchedRule | undefined;
      // Only kept descriptors have memos: another one simply finds none (no isFrozen per lookup).
      const memo = config === undefined ? undefined : this.memos.get(d as KeptDescriptor);
      if (memo !== undefined && memo.domain === domain && (memo.overrideGen === generation || this.sameOverride(memo, d, domain, generation))) {
        rule = memo.rule;
        memos[i] = memo;
        if (memo.reservation !== undefined) (reservations ??= new Array<ReservationEntry | undefined>(n))[i] = memo.reservation;
      } else {
        validateDescriptor(d, i, limits);
        let reservation = reservationEntryOf(d, i, this.reservationKeys);
        if (!domainKnown) continue;
        // A runtime override of exactly the entries a rule is matched by replaces its limit; a request's own `limit` wins over both.
        const inDomain = d.limit === undefined ? overrides?.inDomain(domain) : undefined;
        let override: ActiveOverride | undefined;
        let tail: string | undefined;
        if (d.limit !== undefined) rule = this.overrideRule(domain, d);
        else if (reservation === undefined && inDomain === undefined) rule = matchDescriptor(config!, domain, d.entries);
        else {
          let resolved = resolveRule(config!, domain, reservation === undefined ? d.entries : d.entries.slice(0, -1), inDomain);
          // A reservation's rule is the one its other entries match, and it must take reservations.
          if (reservation !== undefined && (resolved.rule === undefined || !resolved.rule.reservations)) {
            // Read as any descriptor, as the reference reads it: a rule keyed like the entry matches it.
            const plain = resolveRule(config!, domain, d.entries, inDomain);
            if (plain.rule === undefined && resolved.rule !== undefined) throw this.noReservations(i, resolved.rule);
            resolved = plain;
            reservation = undefined;
          }
          ({ rule, override, tail } = resolved);
        }
        if (reservation !== undefined) (reservations ??= new Array<ReservationEntry | undefined>(n))[i] = reservation;
        if (isKeptDescriptor(d)) {
          this.memos.set(
            d,
            (memos[i] = {
              domain,
              rule,
              counter: undefined,
              counters: undefined,
              statKey: undefined,
              reservation,
              hold: undefined,
              override,
              overrideGen: generation,
              tail,
            }),
          );
        }
      }
      rules[i] = rule;
      if (rule !== undefined && rule.replaces.length > 0) {
        replaced ??= new Set<string>();
        for (const name of rule.replaces) replaced.add(name);
      }
    }

    // Checked after validation, so that a malformed request is reported as such in every state.
    if (config === undefined) throw new NotReadyError('no rate limit configuration loaded');

    // Pass 2: statuses that need no store, and the counters that do. Under QUOTA_MODE a descriptor
    // matching no rule counts as a quota-mode one (an unlimited one never does).
    const statuses: DescriptorStatus[] = new Array<DescriptorStatus>(n);
    const counted: Counted[] = [];
    let softCount = 0;
    let quotaAt: boolean[] | undefined;
    let decidedBy: number[] | undefined;
    let holds: PlannedHold[] | undefined;
    for (let i = 0; i < n; i++) {
      const rule = rules[i];
      if (rule === undefined) {
        statuses[i] = NOT_LIMITED;
        if (this.quotaMode) (quotaAt ??= new Array<boolean>(n).fill(false))[i] = true;
        continue;
      }
      const limit = rule.limit;
      if (limit.unlimited) {
        statuses[i] = UNLIMITED;
        continue;
      }
      if (replaced !== undefined && (rule.limits === undefined ? limit.name !== undefined && replaced.has(limit.name) : everyReplaced(rule.limits, replaced))) {
        statuses[i] = NOT_LIMITED;
        if (this.quotaMode) (quotaAt ??= new Array<boolean>(n).fill(false))[i] = true;
        continue;
      }
      const quota = this.quotaMode || rule.quotaMode;
      if (quota) (quotaAt ??= new Array<boolean>(n).fill(false))[i] = true;
      const d = descriptors[i];
      const hits = d.hitsAddend ?? requestHits;
      const soft = rule.shadowMode || quota;
      if (soft) softCount++;
      const memo = memos[i];
      const reservation = reservations?.[i];
      if (reservation !== undefined) {
        (holds ??= []).push(this.planHold({ config, domain, descriptor: d, rule, limits: rule.limits, index: i, hits, soft, memo, replaced }, reservation));
        continue;
      }
      if (rule.limits !== undefined) {
        decidedBy ??= new Array<number>(n).fill(-1);
        this.planLimits({ config, domain, descriptor: d, rule, limits: rule.limits, index: i, hits, soft, memo, replaced }, counted);
        continue;
      }
      let counter = memo?.counter;
      let statKey = memo?.statKey;
      if (counter === undefined) {
        // Checked where the counter is made: once per kept descriptor (a descriptor refused here never gets one).
        if (limit.concurrency !== undefined) throw this.inFlightOnly(i, rule);
        const keys = rule.requestKeyed ? requestKeys(config, domain, d.entries, rule) : undefined;
        counter = this.counterOf(counterKey(rule.keyPrefix, keys === undefined ? d.entries : keys.entries), limit, hits, rule, undefined, domain);
        statKey = keys?.statKey;
        if (memo !== undefined) {
          memo.counter = counter;
          memo.statKey = statKey;
        }
      } else if (counter.hits !== hits) {
        counter = { ...counter, hits };
        memo!.counter = counter;
      }
      counted.push({ index: i, rule, counter, soft, statKey, limit: undefined, currentLimit: currentLimitOf(limit) });
    }

    const counters = new Array<CounterRequest>(counted.length);
    for (let k = 0; k < counted.length; k++) counters[k] = counted[k].counter;
    return { config, domain, descriptors, hitsAddend: req.hitsAddend, statuses, counted, counters, softCount, quotaAt, decidedBy, holds };
  }

  /** A reserve or commit descriptor on a rule that does not take reservations (`reservations: true`). */
  private noReservations(index: number, rule: MatchedRule): InvalidRequestError {
    const { reserve, commit } = this.reservationKeys;
    return new InvalidRequestError(
      `descriptors[${index}]: its rule (${rule.statKey}) takes no reservations: a "${reserve}" or "${commit}" entry needs \`reservations: true\` on the rule`,
    );
  }

  /**
   * Whether the runtime override of a memo's descriptor is the one it was planned with, now that the
   * overrides' generation moved (one lookup, its tail made at most once per memo); then the memo
   * holds at `generation` too. A descriptor with a request `limit` is never overridden.
   */
  private sameOverride(memo: DescriptorMemo, d: Descriptor, domain: string, generation: number): boolean {
    if (d.limit === undefined) {
      const inDomain = this.overrides!.inDomain(domain);
      let now: ActiveOverride | undefined;
      if (inDomain !== undefined) {
        memo.tail ??= descriptorTail(memo.reservation === undefined ? d.entries : d.entries.slice(0, -1));
        now = inDomain.get(memo.tail);
      }
      if (now !== memo.override) return false;
    }
    memo.overrideGen = generation;
    return true;
  }

  /** An ordinary descriptor on a rule that limits reservations in flight (`concurrency`): it holds nothing to count. */
  private inFlightOnly(index: number, rule: MatchedRule): InvalidRequestError {
    const { reserve, commit } = this.reservationKeys;
    return new InvalidRequestError(
      `descriptors[${index}]: its rule (${rule.statKey}) limits reservations in flight: its descriptors end in a "${reserve}" or "${commit}" entry`,
    );
  }

  /**
   * A reserve or commit descriptor: its book (the tag its rule's counters share, or its one
   * counter's key), its counters as checks (hits 0), its in-flight limit, and what each limit reports.
   * A limit another matched rule replaces is left out, as for a counted descriptor.
   */
  private planHold(p: Omit<LimitsPlan, 'limits'> & { readonly limits: readonly RuleLimit[] | undefined }, entry: ReservationEntry): PlannedHold {
    const { descriptor: d, rule, hits, memo } = p;
    const known = memo?.hold;
    if (known !== undefined && known.call.hits === hits && p.replaced === undefined) return known;
    const entries = d.entries.slice(0, -1);
    const keys = rule.requestKeyed ? requestKeys(p.config, p.domain, entries, rule) : undefined;
    const keyed = keys === undefined ? entries : keys.entries;
    const ruleStatKey = keys?.statKey ?? (rule.detailedMetric ? detailedStatKey(rule, entries) : rule.statKey);
    const list = p.limits;
    const book = counterKey(list === undefined ? rule.keyPrefix : list[0].keyPrefix, keyed);
    const counters: CounterRequest[] = [];
    const parts: Counted[] = [];
    let inFlight: Counted | undefined;
    let maxHeld: number | undefined;
    const windows: number[] = [];
    const each = list ?? [undefined];
    for (let j = 0; j < each.length; j++) {
      const ruleLimit = each[j];
      const limit = ruleLimit?.limit ?? rule.limit;
      if (ruleLimit !== undefined && p.replaced !== undefined && limit.name !== undefined && p.replaced.has(limit.name)) continue;
      const statKey = ruleLimit === undefined ? ruleStatKey : ruleStatKey + ruleLimit.statSuffix;
      if (limit.concurrency !== undefined) {
        maxHeld = limit.concurrency;
        // What the outcome counts: one place in flight (none for a commit, which frees one).
        const counter = this.counterOf(book, limit, entry.kind === 'reserve' ? 1 : 0, rule, undefined);
        inFlight = { index: p.index, rule, counter, soft: p.soft, statKey, limit: ruleLimit, currentLimit: undefined };
        continue;
      }
      const key = list === undefined || j === 0 ? book : counterKey(ruleLimit!.keyPrefix, keyed);
      const check = this.counterOf(key, limit, 0, rule, list === undefined ? undefined : book);
      counters.push(check);
      windows.push(limit.windowMs);
      // What the outcome counts: the estimate, or what the commit charges (commitCharge: at most the limit).
      const counted = entry.kind === 'commit' ? commitCharge(check, hits) : hits;
      parts.push({ index: p.index, rule, counter: { ...check, hits: counted }, soft: p.soft, statKey, limit: ruleLimit, currentLimit: currentLimitOf(limit) });
    }
    if (inFlight !== undefined) parts.push(inFlight);
    const holdMs = holdTimeOf(windows, rule.reservationHoldSeconds);
    const call: HoldCall = Object.freeze({ kind: entry.kind, key: book, id: entry.id, hits, counters: Object.freeze(counters), maxHeld, holdMs });
    const hold: PlannedHold = Object.freeze({ index: p.index, rule, soft: p.soft, call, parts: Object.freeze(parts) });
    // Kept for the next request with these hits, unless another rule of this one replaced some of its limits.
    if (memo !== undefined && p.replaced === undefined) memo.hold = hold;
    return hold;
  }

  /**
   * The counters of a descriptor matched to a `rate_limits` rule (beyond the reference: a rule with
   * several limits), one per limit that no other matched rule replaces, into `counted`; a descriptor
   * whose every limit is replaced is not limited (see plan). They are decided in one store call, so
   * that all-or-nothing covers them, and share a tag (the first limit's counter key), so that a
   * Redis Cluster keeps them in one slot; made once per memoized descriptor, as a single counter is.
   */
  private planLimits(p: LimitsPlan, counted: Counted[]): void {
    const { descriptor: d, rule, limits, hits, memo } = p;
    let counters = memo?.counters;
    let statKey = memo?.statKey;
    if (counters === undefined) {
      if (limits.some((l) => l.limit.concurrency !== undefined)) throw this.inFlightOnly(p.index, rule);
      const keys = rule.requestKeyed ? requestKeys(p.config, p.domain, d.entries, rule) : undefined;
      const entries = keys === undefined ? d.entries : keys.entries;
      const tag = counterKey(limits[0].keyPrefix, entries);
      counters = limits.map(({ limit, keyPrefix }, j) => this.counterOf(j === 0 ? tag : counterKey(keyPrefix, entries), limit, hits, rule, tag, p.domain));
      statKey = keys?.statKey;
      if (memo !== undefined) {
        memo.counters = counters;
        memo.statKey = statKey;
      }
    } else if (counters[0].hits !== hits) {
      counters = counters.map((c) => ({ ...c, hits }));
      memo!.counters = counters;
    }
    const ruleStatKey = statKey ?? (rule.detailedMetric ? detailedStatKey(rule, d.entries) : rule.statKey);
    for (let j = 0; j < limits.length; j++) {
      const name = limits[j].limit.name;
      if (p.replaced !== undefined && name !== undefined && p.replaced.has(name)) continue;
      const limit = limits[j];
      counted.push({
        index: p.index,
        rule,
        counter: counters[j],
        soft: p.soft,
        statKey: ruleStatKey + limit.statSuffix,
        limit,
        currentLimit: currentLimitOf(limit.limit),
      });
    }
  }

  /**
   * The store request of one limit of `rule`, counted under `key` (and `tag`, for the limits of a
   * `rate_limits` rule). A rule with `count_denied_requests` marks its counters to be charged even
   * when the call is denied. Every counter has the same fields, unset ones undefined: the stores
   * read them on every call, and one object shape keeps those reads fast. A `lease: true` limit's
   * counter carries its rule (leaseMark), and a `scope: global` one's is marked `global`;
   * reservations (no `domain` here) are never leased, so never global either.
   */
  private counterOf(key: string, limit: Limit, hits: number, rule: MatchedRule, tag: string | undefined, domain?: string): CounterRequest {
    return {
      key,
      limit: limit.requestsPerUnit,
      windowMs: limit.windowMs,
      algorithm: limit.algorithm,
      hits,
      burst: limit.burst,
      subWindows: limit.subWindows,
      strict: limit.strict,
      calendar: limit.calendar === true ? this.calendars[limit.unit] : undefined,
      countDenied: rule.countDeniedRequests ? true : undefined,
      tag,
      lease: limit.lease === true && domain !== undefined ? leaseMark(domain, rule.statKey) : undefined,
      global: limit.scope === 'global' && domain !== undefined ? true : undefined,
    };
  }

  /**
   * The rule of a request-supplied `limit` override, used instead of matching (for domains that
   * have a config): counted with the default algorithm, and reported in metrics under its keys
   * alone (never one series per value: see keysStatKey).
   */
  private overrideRule(domain: string, d: Descriptor): MatchedRule {
    const override = d.limit!;
    const windowMs = UNIT_MS[override.unit];
    const limit: Limit = {
      requestsPerUnit: override.requestsPerUnit,
      unit: override.unit,
      unitMultiplier: 1,
      windowMs,
      algorithm: this.defaultAlgorithm,
      burst: override.requestsPerUnit,
      subWindows: 1,
      strict: false,
      unlimited: false,
    };
    return {
      limit,
      shadowMode: false,
      detailedMetric: false,
      quotaMode: false,
      countDeniedRequests: false,
      reservations: false,
      reservationHoldSeconds: 0,
      requestKeyed: false,
      replaces: NO_REPLACES,
      statKey: keysStatKey(d.entries),
      keyPrefix: counterKeyPrefix(domain, this.defaultAlgorithm, windowMs),
      override: true,
    };
  }
}

/** The rule that decides some entries, and the runtime override found for them (with the tail it was found by). */
interface ResolvedRule {
  readonly rule: MatchedRule | undefined;
  readonly override: ActiveOverride | undefined;
  readonly tail: string | undefined;
}

/**
 * The rule of `entries` in `domain`: a runtime override's (`inDomain`: the domain's overrides, when
 * it has any) where there is one for exactly these entries and it applies, else the config's.
 */
function resolveRule(
  config: RateLimitConfig,
  domain: string,
  entries: Descriptor['entries'],
  inDomain: ReadonlyMap<string, ActiveOverride> | undefined,
): ResolvedRule {
  if (inDomain === undefined) return { rule: matchDescriptor(config, domain, entries), override: undefined, tail: undefined };
  const tail = descriptorTail(entries);
  const override = inDomain.get(tail);
  return { rule: override === undefined ? matchDescriptor(config, domain, entries) : overriddenRule(config, domain, entries, override), override, tail };
}

/** A copy of `plan` whose decision-time fields (statuses, deciding limits) are its own to fill. */
function decidable(plan: Plan): Plan {
  return { ...plan, statuses: plan.statuses.slice(), decidedBy: plan.decidedBy?.slice() };
}

/** Every limit of a `rate_limits` rule is named and replaced by another matched rule. */
function everyReplaced(limits: readonly RuleLimit[], replaced: ReadonlySet<string>): boolean {
  for (const { limit } of limits) if (limit.name === undefined || !replaced.has(limit.name)) return false;
  return true;
}

// One frozen current_limit per limit, made once rather than per call (configured limits live as
// long as their config). Nothing relies on the identity: it only saves the allocation.
const CURRENT_LIMITS = new WeakMap<Limit, NonNullable<DescriptorStatus['currentLimit']>>();

function currentLimitOf(limit: Limit): DescriptorStatus['currentLimit'] {
  let current = CURRENT_LIMITS.get(limit);
  if (current === undefined) {
    current = Object.freeze(
      limit.name === undefined
        ? { requestsPerUnit: limit.requestsPerUnit, unit: limit.unit, windowMs: limit.windowMs }
        : { requestsPerUnit: limit.requestsPerUnit, unit: limit.unit, name: limit.name, windowMs: limit.windowMs },
    );
    CURRENT_LIMITS.set(limit, current);
  }
  return current;
}
