import { detailedStatKey, keysStatKey, matchDescriptor, requestKeys } from './match';
import type { MatchedRule, RateLimitConfig, RuleLimit } from './rules';
import { InvalidRequestError, NotReadyError } from './errors';
import type { CounterDecision, CounterRequest, LocalAnswer, Store } from './store';
import { rateLimitHeaders, type HeaderValue, type ResponseHeaderOptions } from './headers';
import { counterKey, counterKeyPrefix } from './keys';
import type { CalendarWindow } from './calendar';
import {
  DEFAULT_REQUEST_LIMITS,
  REQUEST_LIMIT_SETTINGS,
  UNIT_MS,
  UNITS,
  type Algorithm,
  type Descriptor,
  type DescriptorOutcome,
  type DescriptorStatus,
  type Entry,
  type Limit,
  type LimiterObserver,
  type LocalDenial,
  type LocalDenialListener,
  type RateLimitRequest,
  type RateLimitResponse,
  type RequestLimits,
  type ResponseHeadersBuilder,
  type StructFields,
  type StructValue,
  type Unit,
} from './types';

/**
 * The ShouldRateLimit decision: validate, match each descriptor to a rule, ask the store about every
 * counted descriptor at once, and turn the store's verdicts into per-descriptor statuses.
 *
 * Behaviour follows the reference server (envoyproxy/ratelimit) wherever it defines one:
 * - a descriptor that matches no rule, or whose limit is replaced (`replaces`) by another matched
 *   rule of the same request, answers `{code: OK}` with no current_limit and limit_remaining 0;
 * - an `unlimited` rule answers OK with limit_remaining 4294967295, also without current_limit;
 * - a request-supplied `limit` override is used instead of matching, for domains that have a config
 *   (an unknown domain limits nothing, override or not), counted with the default algorithm, and
 *   reported in metrics under its keys alone (never one series per value: see keysStatKey);
 * - a rule in shadow mode is decided and counted but answers OK;
 * - a rule in quota mode (`quota_mode`, or every rule with QUOTA_MODE) over its limit answers
 *   OVER_LIMIT, but the overall code is OVER_LIMIT only when a rule not in quota mode is over, or
 *   every quota-mode descriptor of the request is (descriptors matching no rule count as quota-mode
 *   ones under QUOTA_MODE, unlimited ones never);
 * - global shadow mode keeps every descriptor's own code and makes only the overall code OK;
 * - an entry with an empty value is accepted (Envoy sends them; the reference server counts them).
 *
 * Beyond the reference, a rule may hold several limits (`rate_limits`): its descriptor becomes one
 * counter per limit, all in the same store call (so all-or-nothing covers them), sharing a tag (one
 * Redis Cluster slot). Its status is the deciding limit's: among the limits that deny, the one with
 * the longest wait; when all admit, the one with the fewest hits remaining. Each limit reports its
 * own outcome, under the rule's stat key and the limit's suffix. A limit whose name another matched
 * rule replaces is dropped from the list; a descriptor whose every limit is dropped is not limited.
 * A rule with `count_denied_requests` marks its counters to be charged even when the call is denied.
 *
 * All-or-nothing is the store's job (one decide() call), with one refinement: shadow-mode and
 * quota-mode rules ("soft" rules) never deny on their own, so their counters must not veto the
 * charging of the enforced ones. When a request has soft rules, the enforced counters are decided
 * first (one call); each soft counter is then decided on its own, charged only if the request was
 * admitted so far. Requests without soft rules, the common case, make exactly one call.
 *
 * The store is asked for a local answer first (Store.decideLocally: the denial cache, which answers
 * only calls whose every counter it remembers denied). A call it answers so is finished
 * synchronously, and the caller's listener gets the LocalDenial event: what the request's replay
 * (./replay) is built from.
 */

export interface RateLimiterOptions {
  readonly store: Store;
  /** The current config; undefined until the first one loaded (requests then fail with NotReadyError). */
  readonly config: () => RateLimitConfig | undefined;
  /** Global shadow mode (SHADOW_MODE): overall code always OK. */
  readonly shadowMode: boolean;
  /** Every rule in quota mode (QUOTA_MODE). */
  readonly quotaMode?: boolean;
  /** Fill `dynamicMetadata` of every response (RESPONSE_DYNAMIC_METADATA). */
  readonly dynamicMetadata?: boolean;
  /** Charge denied requests too (COUNT_DENIED_REQUESTS). */
  readonly countDenied: boolean;
  /** Algorithm of request-supplied limit overrides. */
  readonly defaultAlgorithm: Algorithm;
  /** NEAR_LIMIT_RATIO, 0..1. */
  readonly nearLimitRatio: number;
  readonly observer?: LimiterObserver;
  /** Builds response headers from the statuses: a function, or the header settings (see ./headers). */
  readonly responseHeaders?: ResponseHeadersBuilder | ResponseHeaderOptions;
  /** Caps on what one request may hold; DEFAULT_REQUEST_LIMITS when omitted. */
  readonly requestLimits?: RequestLimits;
  /** The calendar of `calendar: true` limits: its offset from UTC, ms (CALENDAR_TIMEZONE); default 0. */
  readonly calendarOffsetMs?: number;
}

/** Largest uint32: limit_remaining of an unlimited rule, as the reference server sends it. */
export const UNLIMITED_REMAINING = 4_294_967_295;

const NO_HEADERS: readonly HeaderValue[] = Object.freeze([]);
const NOT_LIMITED: DescriptorStatus = Object.freeze({ code: 'OK', limitRemaining: 0 });
const UNLIMITED: DescriptorStatus = Object.freeze({ code: 'OK', limitRemaining: UNLIMITED_REMAINING });
const NO_REPLACES: readonly string[] = Object.freeze([]);
/** deniedUntilMs of a store answer: nothing in it came from remembered denials. */
const NOT_LOCAL: readonly number[] = Object.freeze([]);

/** A request after matching: statuses so far, and the counters the store must decide. */
interface Plan {
  /** The config it was matched under. */
  readonly config: RateLimitConfig;
  readonly domain: string;
  readonly descriptors: readonly Descriptor[];
  /** The request-level hits_addend as sent (0 when unset). */
  readonly hitsAddend: number;
  readonly statuses: DescriptorStatus[];
  readonly counted: Counted[];
  /**
   * `counted`'s counters in order, what a one-call request hands the store. Frozen when the plan is
   * kept: a store may then key work per request on this array (the same object on every call).
   */
  readonly counters: readonly CounterRequest[];
  /** Counted descriptors on shadow-mode or quota-mode rules. */
  readonly softCount: number;
  /** Per descriptor, whether it is in quota mode; undefined when none is (the overall code is then any status's). */
  readonly quotaAt: boolean[] | undefined;
  /**
   * Per descriptor, the position in `counted` of the limit its status is taken from; undefined when
   * no descriptor has several limits (each status is then its one counter's).
   */
  readonly decidedBy: number[] | undefined;
}

/**
 * What a descriptor alone decides under one config and domain: its rule, and its counter for the
 * hits it was last counted with. Kept per frozen descriptor object (a frozen descriptor cannot
 * change, and the codec hands out one object per distinct descriptor, see src/wire/rls-codec.ts):
 * a descriptor seen again is neither validated, nor matched, nor keyed again.
 */
interface DescriptorMemo {
  readonly domain: string;
  readonly rule: MatchedRule | undefined;
  counter: CounterRequest | undefined;
  /** A `rate_limits` rule's counters, one per limit (`counter` is then unused). */
  counters: readonly CounterRequest[] | undefined;
  statKey: string | undefined;
}

/** A counted descriptor: its rule, its position in the request and its store request. */
interface Counted {
  readonly index: number;
  readonly rule: MatchedRule;
  readonly counter: CounterRequest;
  /** Shadow or quota mode: its counter does not veto the others (see decideSplit). */
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

/** A descriptor matched to a `rate_limits` rule, as RateLimiter.planLimits counts it. */
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

/** Decides ShouldRateLimit requests against the current config and a Store. */
export class RateLimiter {
  private readonly store: Store;
  private readonly config: () => RateLimitConfig | undefined;
  private readonly shadowMode: boolean;
  private readonly quotaMode: boolean;
  private readonly dynamicMetadata: boolean;
  private readonly countDenied: boolean;
  private readonly defaultAlgorithm: Algorithm;
  private readonly nearLimitRatio: number;
  private readonly observer: LimiterObserver | undefined;
  private readonly headers: ResponseHeadersBuilder | undefined;
  private readonly decideOptions: { readonly countDenied: boolean };
  // Weak: a descriptor the codec no longer holds takes its memo with it. Replaced as a whole when
  // the config changes, so that no memo keeps an old config's rules alive.
  private memos = new WeakMap<Descriptor, DescriptorMemo>();
  // Plans of frozen requests (the codec hands out one frozen object per distinct request message,
  // src/wire/rls-codec.ts RequestCache), their statuses as before any decision: a repeated request
  // is neither validated nor matched again. Replaced with the memos.
  private plans = new WeakMap<RateLimitRequest, Plan>();
  private memosConfig: RateLimitConfig | undefined;
  private readonly limits: RequestLimits;
  /** The CalendarWindow of each unit, made once: counters of calendar limits carry one. */
  private readonly calendars: Readonly<Record<Unit, CalendarWindow>>;

  constructor(options: RateLimiterOptions) {
    if (!(options.nearLimitRatio >= 0 && options.nearLimitRatio <= 1)) {
      throw new RangeError(`nearLimitRatio must be within 0..1, got ${options.nearLimitRatio}`);
    }
    this.store = options.store;
    this.config = options.config;
    this.shadowMode = options.shadowMode;
    this.quotaMode = options.quotaMode === true;
    this.dynamicMetadata = options.dynamicMetadata === true;
    this.countDenied = options.countDenied;
    this.defaultAlgorithm = options.defaultAlgorithm;
    this.nearLimitRatio = options.nearLimitRatio;
    this.observer = options.observer;
    this.headers = headerBuilder(options.responseHeaders);
    this.decideOptions = Object.freeze({ countDenied: options.countDenied });
    this.limits = options.requestLimits ?? DEFAULT_REQUEST_LIMITS;
    const offsetMs = options.calendarOffsetMs ?? 0;
    this.calendars = Object.freeze(Object.fromEntries(UNITS.map((unit) => [unit, Object.freeze({ unit, offsetMs })])) as Record<Unit, CalendarWindow>);
  }

  /**
   * Answers one request. Rejects with InvalidRequestError for a malformed request, NotReadyError
   * before the first config, and whatever the store rejects with (StoreUnavailableError) when it
   * cannot answer. Not an async function: a call answered without waiting (no counter, or the
   * denial cache) costs one promise, not an async frame and its awaits.
   *
   * `onLocalDenial` hears of a call the store answered wholly from remembered denials (see the
   * class comment), synchronously, before the answer is returned.
   */
  shouldRateLimit(req: RateLimitRequest, onLocalDenial?: LocalDenialListener): Promise<RateLimitResponse> {
    try {
      const plan = this.planOf(req);
      const counted = plan.counted;
      const m = counted.length;
      if (m === 0) return Promise.resolve(this.answer(plan));
      if (!this.oneCall(m, plan.softCount)) return this.decideSplit(plan);
      const counters = plan.counters;
      const store = this.store;
      const local = store.decideLocally?.(counters);
      if (local !== undefined) return Promise.resolve(this.answerLocally(plan, local, onLocalDenial));
      // A store deciding in this process: the call's one promise is its answer's.
      if (store.decideNow !== undefined) {
        this.applyDecisions(plan, store.decideNow(counters, this.decideOptions), undefined, undefined);
        return Promise.resolve(this.answer(plan));
      }
      // The store's own promise and one then: no async frame on the hot path.
      return store.decide(counters, this.decideOptions).then((decisions) => {
        this.applyDecisions(plan, decisions, undefined, undefined);
        return this.answer(plan);
      });
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /** The answer to a one-call request the store answered locally; the LocalDenial event when it denied every counter. */
  private answerLocally(plan: Plan, local: LocalAnswer, onLocalDenial: LocalDenialListener | undefined): RateLimitResponse {
    const { decisions, deniedUntilMs } = local;
    if (onLocalDenial === undefined) {
      this.applyDecisions(plan, decisions, deniedUntilMs, undefined);
      return this.answer(plan);
    }
    const outcomes: DescriptorOutcome[] = [];
    this.applyDecisions(plan, decisions, deniedUntilMs, outcomes);
    const response = this.answer(plan);
    const untilAt = new Array<number>(plan.statuses.length).fill(NaN);
    // A status of several limits counts down as the limit it names (the longest wait: every limit denied).
    const decidedBy = plan.decidedBy;
    for (let k = 0; k < plan.counted.length; k++) {
      const { index, limit } = plan.counted[k];
      if (limit === undefined || decidedBy![index] === k) untilAt[index] = deniedUntilMs[k];
    }
    const denial: LocalDenial = {
      config: plan.config,
      domain: plan.domain,
      response,
      deniedUntilMs: untilAt,
      outcomes,
      shadowed: this.shadowMode && overLimitOf(plan),
      headers: this.headers,
    };
    onLocalDenial(denial);
    return response;
  }

  /** plan(req), from the plans kept when the request is frozen (see `plans`); its statuses are the caller's to fill. */
  private planOf(req: RateLimitRequest): Plan {
    if (!Object.isFrozen(req)) return this.plan(req);
    const kept = this.config() === this.memosConfig ? this.plans.get(req) : undefined;
    if (kept !== undefined) return decidable(kept);
    const plan = this.plan(req);
    Object.freeze(plan.counters);
    this.plans.set(req, decidable(plan));
    return plan;
  }

  /** Validation, matching, and the statuses that need no store; throws on a bad request or before the first config. */
  private plan(req: RateLimitRequest): Plan {
    const { domain, descriptors } = req;
    if (domain === '') throw new InvalidRequestError('domain must not be empty');
    const n = descriptors.length;
    if (n === 0) throw new InvalidRequestError('descriptors must not be empty');
    const limits = this.limits;
    if (n > limits.maxDescriptors) throw overCap('descriptors', `${n} descriptors`, limits, 'maxDescriptors');
    const config = this.config();
    const domainKnown = config !== undefined && config.domains.has(domain);
    const requestHits = req.hitsAddend > 0 ? req.hitsAddend : 1;
    if (config !== this.memosConfig) {
      this.memos = new WeakMap();
      this.plans = new WeakMap();
      this.memosConfig = config;
    }

    // Pass 1: validate and match every descriptor, collecting the names replaced by any match.
    const rules: (MatchedRule | undefined)[] = new Array<MatchedRule | undefined>(n);
    const memos: (DescriptorMemo | undefined)[] = new Array<DescriptorMemo | undefined>(n);
    let replaced: Set<string> | undefined;
    for (let i = 0; i < n; i++) {
      const d = descriptors[i];
      let rule: MatchedRule | undefined;
      const memo = config === undefined ? undefined : this.memos.get(d);
      if (memo !== undefined && memo.domain === domain) {
        rule = memo.rule;
        memos[i] = memo;
      } else {
        validateDescriptor(d, i, limits);
        if (!domainKnown) continue;
        rule = d.limit !== undefined ? this.overrideRule(domain, d) : matchDescriptor(config!, domain, d.entries);
        if (Object.isFrozen(d)) this.memos.set(d, (memos[i] = { domain, rule, counter: undefined, counters: undefined, statKey: undefined }));
      }
      rules[i] = rule;
      if (rule !== undefined && rule.replaces.length > 0) {
        replaced ??= new Set<string>();
        for (const name of rule.replaces) replaced.add(name);
      }
    }

    // Checked after validation, so that a malformed request is reported as such in every state.
    if (config === undefined) throw new NotReadyError('no rate limit configuration loaded');

    // Pass 2: statuses that need no store, and the counters that do.
    const statuses: DescriptorStatus[] = new Array<DescriptorStatus>(n);
    const counted: Counted[] = [];
    let softCount = 0;
    let quotaAt: boolean[] | undefined;
    let decidedBy: number[] | undefined;
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
      if (rule.limits !== undefined) {
        decidedBy ??= new Array<number>(n).fill(-1);
        this.planLimits({ config, domain, descriptor: d, rule, limits: rule.limits, index: i, hits, soft, memo, replaced }, counted);
        continue;
      }
      let counter = memo?.counter;
      let statKey = memo?.statKey;
      if (counter === undefined) {
        const keys = rule.requestKeyed ? requestKeys(config, domain, d.entries, rule) : undefined;
        counter = this.counterOf(counterKey(rule.keyPrefix, keys === undefined ? d.entries : keys.entries), limit, hits, rule, undefined);
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
    return { config, domain, descriptors, hitsAddend: req.hitsAddend, statuses, counted, counters, softCount, quotaAt, decidedBy };
  }

  /**
   * The counters of a descriptor matched to a `rate_limits` rule, one per limit not replaced, into
   * `counted`. They share a tag (the first limit's counter key), so that a Redis Cluster keeps them
   * in one slot; made once per memoized descriptor, as a single counter is.
   */
  private planLimits(p: LimitsPlan, counted: Counted[]): void {
    const { descriptor: d, rule, limits, hits, memo } = p;
    let counters = memo?.counters;
    let statKey = memo?.statKey;
    if (counters === undefined) {
      const keys = rule.requestKeyed ? requestKeys(p.config, p.domain, d.entries, rule) : undefined;
      const entries = keys === undefined ? d.entries : keys.entries;
      const tag = counterKey(limits[0].keyPrefix, entries);
      counters = limits.map(({ limit, keyPrefix }, j) => this.counterOf(j === 0 ? tag : counterKey(keyPrefix, entries), limit, hits, rule, tag));
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
   * The store's verdicts, in `plan.counted` order, turned into statuses and reported; `deniedUntilMs`
   * (same order) marks the verdicts a local answer gave (finite: a remembered denial), and
   * `outcomes` collects what was reported.
   */
  private applyDecisions(
    plan: Plan,
    decisions: readonly CounterDecision[],
    deniedUntilMs: readonly number[] | undefined,
    outcomes: DescriptorOutcome[] | undefined,
  ): void {
    const { domain, descriptors, statuses, counted, decidedBy } = plan;
    const observer = this.observer;
    for (let k = 0; k < counted.length; k++) {
      const c = counted[k];
      const { index, rule, limit } = c;
      const decision = decisions[k];
      // A limit of a `rate_limits` rule speaks for its descriptor only if it decides over the ones before it.
      const speaks = limit === undefined || decidedBy![index] < 0 || decidesOver(decision, decisions[decidedBy![index]]);
      if (speaks) {
        if (limit !== undefined) decidedBy![index] = k;
        statuses[index] = {
          code: decision.allowed || rule.shadowMode ? 'OK' : 'OVER_LIMIT',
          currentLimit: c.currentLimit,
          limitRemaining: decision.remaining,
          durationUntilResetMs: decision.resetMs,
        };
      }
      if (observer === undefined && outcomes === undefined) continue;
      const cached = deniedUntilMs !== undefined && Number.isFinite(deniedUntilMs[k]);
      const outcome = this.outcome(domain, descriptors[index].entries, c, decision, cached);
      observer?.onDescriptor(outcome);
      outcomes?.push(outcome);
    }
  }

  private answer(plan: Plan): RateLimitResponse {
    const { domain, statuses } = plan;
    let overLimit = overLimitOf(plan);
    if (overLimit && this.shadowMode) {
      overLimit = false;
      this.observer?.onGlobalShadowMode?.(domain);
    }
    const response: RateLimitResponse = {
      overallCode: overLimit ? 'OVER_LIMIT' : 'OK',
      statuses,
      responseHeaders: this.headers === undefined ? NO_HEADERS : this.headers(statuses),
    };
    return this.dynamicMetadata ? { ...response, dynamicMetadata: dynamicMetadataOf(plan) } : response;
  }

  /** Nothing to split: no soft rule, only one counter, or every counter is charged anyway. */
  private oneCall(counted: number, softCount: number): boolean {
    return softCount === 0 || counted === 1 || this.countDenied;
  }

  /** One store call of the split path: its local answer when it has one, else its decision. */
  private call(counters: CounterRequest[]): Promise<LocalAnswer> | LocalAnswer {
    const local = this.store.decideLocally?.(counters);
    if (local !== undefined) return local;
    return this.store.decide(counters, this.decideOptions).then((decisions) => ({ decisions, deniedUntilMs: NOT_LOCAL }));
  }

  /** A request with soft rules, decided as the class comment says: the enforced counters first, then each soft one. */
  private async decideSplit(plan: Plan): Promise<RateLimitResponse> {
    const counted = plan.counted;
    const m = counted.length;
    const decisions: CounterDecision[] = new Array<CounterDecision>(m);
    const deniedUntilMs: number[] = new Array<number>(m).fill(NaN);
    const enforced: CounterRequest[] = [];
    const enforcedAt: number[] = [];
    for (let k = 0; k < m; k++) {
      if (!counted[k].soft) {
        enforced.push(counted[k].counter);
        enforcedAt.push(k);
      }
    }
    let admitted = true;
    if (enforced.length > 0) {
      const verdicts = await this.call(enforced);
      for (let j = 0; j < enforcedAt.length; j++) {
        const k = enforcedAt[j];
        decisions[k] = verdicts.decisions[j];
        deniedUntilMs[k] = verdicts.deniedUntilMs[j] ?? NaN;
        if (!decisions[k].allowed) admitted = false;
      }
    }
    // A denied request is counted nowhere (but on counters charged whatever the outcome): soft
    // counters are then only checked (hits 0) for their status. The limits of one descriptor are
    // decided together, all-or-nothing among themselves.
    const shadowCalls: (Promise<LocalAnswer> | LocalAnswer)[] = [];
    const shadowAt: number[] = [];
    for (let k = 0; k < m;) {
      let end = k + 1;
      while (end < m && counted[end].index === counted[k].index) end++;
      if (counted[k].soft) {
        const group: CounterRequest[] = [];
        for (let g = k; g < end; g++) group.push(admitted || isChargedAnyway(counted[g].counter) ? counted[g].counter : { ...counted[g].counter, hits: 0 });
        shadowAt.push(k);
        shadowCalls.push(this.call(group));
      }
      k = end;
    }
    const shadowVerdicts = await Promise.all(shadowCalls);
    for (let j = 0; j < shadowAt.length; j++) {
      const first = shadowAt[j];
      const verdict = shadowVerdicts[j];
      for (let g = 0; g < verdict.decisions.length; g++) {
        const k = first + g;
        const counter = counted[k].counter;
        const charged = admitted || isChargedAnyway(counter);
        // Checked with hits 0, a soft counter would always look allowed: re-judge it with its own hits.
        decisions[k] = charged ? verdict.decisions[g] : judgeCheck(verdict.decisions[g], counter);
        if (charged) deniedUntilMs[k] = verdict.deniedUntilMs[g] ?? NaN;
      }
    }
    this.applyDecisions(plan, decisions, deniedUntilMs, undefined);
    return this.answer(plan);
  }

  /**
   * The store request of one limit of `rule`, counted under `key` (and `tag`, for the limits of a
   * `rate_limits` rule). Every counter has the same fields, unset ones undefined: the stores read
   * them on every call, and one object shape keeps those reads fast.
   */
  private counterOf(key: string, limit: Limit, hits: number, rule: MatchedRule, tag: string | undefined): CounterRequest {
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
    };
  }

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
      requestKeyed: false,
      replaces: NO_REPLACES,
      statKey: keysStatKey(d.entries),
      keyPrefix: counterKeyPrefix(domain, this.defaultAlgorithm, windowMs),
      override: true,
    };
  }

  /** What one counted descriptor (one limit of it) reports: `cached` when its denial was a remembered one. */
  private outcome(domain: string, entries: readonly Entry[], counted: Counted, decision: CounterDecision, cached: boolean): DescriptorOutcome {
    const { rule, counter } = counted;
    const hits = counter.hits;
    const statKey = counted.statKey ?? (rule.detailedMetric ? detailedStatKey(rule, entries) : rule.statKey);
    // requests_per_unit, or a bucket's burst: what `remaining` counts down from.
    const limit = (counted.limit ?? rule).limit.burst;
    let overLimit = 0;
    let nearLimit = 0;
    let withinLimit = 0;
    let shadowMode = 0;
    let overLimitWithLocalCache = 0;
    if (decision.allowed) {
      withinLimit = hits;
      // As the reference server: usage after this request above floor(L x ratio) makes the hits
      // beyond that threshold (all of them if usage was already above it) near-limit hits.
      const threshold = Math.floor(limit * this.nearLimitRatio);
      const after = limit - decision.remaining;
      if (after > threshold) {
        const before = after - hits;
        nearLimit = before >= threshold ? hits : after - threshold;
      }
    } else {
      overLimit = hits;
      if (rule.shadowMode) shadowMode = hits;
      if (cached) overLimitWithLocalCache = hits;
    }
    return { domain, statKey, hits, overLimit, nearLimit, withinLimit, shadowMode, overLimitWithLocalCache, rule: counted.limit ?? rule, key: counter.key };
  }
}

/** The overall verdict before global shadow mode. */
function overLimitOf(plan: Plan): boolean {
  return plan.quotaAt === undefined ? anyOverLimit(plan.statuses) : overallOverLimit(plan.statuses, plan.quotaAt);
}

function anyOverLimit(statuses: readonly DescriptorStatus[]): boolean {
  for (let i = 0; i < statuses.length; i++) if (statuses[i].code === 'OVER_LIMIT') return true;
  return false;
}

/** The overall verdict when some descriptors are in quota mode: any other one over, or every quota-mode one over. */
function overallOverLimit(statuses: readonly DescriptorStatus[], quotaAt: readonly boolean[]): boolean {
  let quotaTotal = 0;
  let quotaOver = 0;
  for (let i = 0; i < statuses.length; i++) {
    const over = statuses[i].code === 'OVER_LIMIT';
    if (quotaAt[i]) {
      quotaTotal++;
      if (over) quotaOver++;
    } else if (over) return true;
  }
  return quotaTotal > 0 && quotaOver === quotaTotal;
}

/**
 * The response's dynamic metadata, in the reference's shape: the domain; per descriptor its entries
 * as `key=value`, its limit override in protobuf text form and its hits_addend when set; the
 * request's hits_addend when not 0; and `metadata`, the rules' metadata merged over the descriptors
 * not over their limit (first one wins for a key, mappings merged key by key). One key of its own:
 * `limitedBy`, the key path of the first rule over its limit, absent when none is.
 */
function dynamicMetadataOf(plan: Plan): StructFields {
  const descriptors: StructFields[] = plan.descriptors.map((d) => {
    const out: Record<string, StructValue> = { entries: d.entries.map((e) => `${e.key}=${e.value}`) };
    if (d.limit !== undefined) {
      const parts: string[] = [];
      if (d.limit.requestsPerUnit !== 0) parts.push(`requests_per_unit:${d.limit.requestsPerUnit}`);
      parts.push(`unit:${d.limit.unit.toUpperCase()}`); // the wire enum's name
      out.limit = parts.join(' ');
    }
    if (d.hitsAddend !== undefined) out.hitsAddend = d.hitsAddend;
    return out;
  });
  const fields: Record<string, StructValue> = { domain: plan.domain, descriptors };
  if (plan.hitsAddend !== 0) fields.hitsAddend = plan.hitsAddend;
  // Beyond the reference: which rule denied the request (the first over its limit, by its key path as
  // the metrics name it), for access logs (%DYNAMIC_METADATA(envoy.filters.http.ratelimit:limitedBy)%).
  const first = plan.counted.find(({ index }) => plan.statuses[index].code === 'OVER_LIMIT');
  // Of a rule with several limits, the one its status names.
  const limiting = first === undefined || plan.decidedBy === undefined || first.limit === undefined ? first : plan.counted[plan.decidedBy[first.index]];
  if (limiting !== undefined) fields.limitedBy = (limiting.limit ?? limiting.rule).statKey;
  let merged: Record<string, StructValue> | undefined;
  for (const { index, rule } of plan.counted) {
    if (rule.metadata === undefined || plan.statuses[index].code === 'OVER_LIMIT') continue;
    merged = mergeStruct(merged ?? {}, rule.metadata);
  }
  if (merged !== undefined) fields.metadata = merged;
  return fields;
}

function isStruct(v: StructValue | undefined): v is StructFields {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** `into` with the keys of `from` it lacks; where both hold a mapping, merged the same way. Never writes `from`. */
function mergeStruct(into: Record<string, StructValue>, from: StructFields): Record<string, StructValue> {
  for (const key of Object.keys(from)) {
    const mine = Object.prototype.hasOwnProperty.call(into, key) ? into[key] : undefined;
    const theirs = from[key];
    // defineProperty: a metadata key may be "__proto__", which plain assignment would not store.
    if (mine === undefined) Object.defineProperty(into, key, { value: theirs, enumerable: true, writable: true, configurable: true });
    else if (isStruct(mine) && isStruct(theirs)) into[key] = mergeStruct({ ...mine }, theirs);
  }
  return into;
}

/** A copy of `plan` whose decision-time fields (statuses, deciding limits) are its own to fill. */
function decidable(plan: Plan): Plan {
  return { ...plan, statuses: plan.statuses.slice(), decidedBy: plan.decidedBy?.slice() };
}

/** Whether a rule with several limits takes its status from `next` rather than `current`: a denial over an admission, the longer wait between denials, the fewer remaining between admissions; ties keep the earlier limit. */
function decidesOver(next: CounterDecision, current: CounterDecision): boolean {
  if (next.allowed !== current.allowed) return !next.allowed;
  return next.allowed ? next.remaining < current.remaining : next.resetMs > current.resetMs;
}

/** Every limit of a `rate_limits` rule is named and replaced by another matched rule. */
function everyReplaced(limits: readonly RuleLimit[], replaced: ReadonlySet<string>): boolean {
  for (const { limit } of limits) if (limit.name === undefined || !replaced.has(limit.name)) return false;
  return true;
}

/** A counter charged even when its call is denied (a `count_denied_requests` rule's, with hits). */
function isChargedAnyway(counter: CounterRequest): boolean {
  return counter.countDenied === true && counter.hits > 0;
}

/**
 * A shadow counter checked with hits 0 after the enforced ones denied the request. Whether its
 * own hits would have fitted is `remaining >= hits` (remaining = L - used); when they would not, the
 * wait is unknown without another call, so one window is reported (an upper bound). A calendar
 * period may be longer than its unit's nominal window (a 31-day month), but it is a fixed window:
 * hits that fit in a fresh one wait exactly until its end, which the check reported.
 */
function judgeCheck(check: CounterDecision, counter: CounterRequest): CounterDecision {
  const hits = counter.hits;
  if (check.remaining >= hits) return { allowed: true, remaining: check.remaining - hits, resetMs: check.resetMs };
  const toEnd = counter.calendar !== undefined && hits <= counter.limit;
  return { allowed: false, remaining: 0, resetMs: toEnd ? check.resetMs : counter.windowMs };
}

function validateDescriptor(d: Descriptor, i: number, limits: RequestLimits): void {
  const entries = d.entries;
  if (entries.length === 0) throw new InvalidRequestError(`descriptors[${i}]: entries must not be empty`);
  if (entries.length > limits.maxEntries) throw overCap(`descriptors[${i}].entries`, `${entries.length} entries`, limits, 'maxEntries');
  for (let j = 0; j < entries.length; j++) {
    const { key, value } = entries[j];
    if (key === '') throw new InvalidRequestError(`descriptors[${i}].entries[${j}]: key must not be empty`);
    if (isOver(key, limits.maxKeyBytes)) throw overCap(`descriptors[${i}].entries[${j}].key`, `${utf8Bytes(key)} bytes`, limits, 'maxKeyBytes');
    if (isOver(value, limits.maxValueBytes)) throw overCap(`descriptors[${i}].entries[${j}].value`, `${utf8Bytes(value)} bytes`, limits, 'maxValueBytes');
  }
  const limit = d.limit;
  if (limit !== undefined) {
    if (!Number.isSafeInteger(limit.requestsPerUnit) || limit.requestsPerUnit < 0) {
      throw new InvalidRequestError(`descriptors[${i}].limit.requests_per_unit: expected a non-negative integer, got ${limit.requestsPerUnit}`);
    }
    if (UNIT_MS[limit.unit] === undefined) throw new InvalidRequestError(`descriptors[${i}].limit.unit: unknown unit "${limit.unit}"`);
  }
  const hits = d.hitsAddend;
  if (hits !== undefined && (!Number.isSafeInteger(hits) || hits < 0)) {
    throw new InvalidRequestError(`descriptors[${i}].hits_addend: expected a non-negative integer, got ${hits}`);
  }
}

/** A request over one of its caps: where, how much, and the cap with the setting that raises it (never the value itself). */
function overCap(path: string, amount: string, limits: RequestLimits, cap: keyof RequestLimits): InvalidRequestError {
  return new InvalidRequestError(`${path}: ${amount}, over the cap of ${limits[cap]} (${REQUEST_LIMIT_SETTINGS[cap]})`);
}

/** Whether `s` takes more than `max` bytes in UTF-8; counts them only for strings long enough to. */
function isOver(s: string, max: number): boolean {
  // A UTF-16 unit takes 1 to 3 bytes.
  if (s.length * 3 <= max) return false;
  if (s.length > max) return true;
  return utf8Bytes(s) > max;
}

/** Bytes of `s` in UTF-8 (a lone surrogate counts as the 3-byte replacement character). */
function utf8Bytes(s: string): number {
  let bytes = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) bytes += 1;
    else if (c < 0x800) bytes += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      bytes += 4;
      i++;
    } else bytes += 3;
  }
  return bytes;
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

function headerBuilder(option: RateLimiterOptions['responseHeaders']): ResponseHeadersBuilder | undefined {
  if (option === undefined) return undefined;
  if (typeof option === 'function') return option;
  if (!option.enabled && !option.draftEnabled) return undefined;
  return (statuses) => rateLimitHeaders(statuses, option);
}
