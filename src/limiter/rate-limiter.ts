import {
  isChargedAnyway,
  judgeCheck,
  type CounterDecision,
  type CounterRequest,
  type HoldAnswer,
  type LocalAnswer,
  type Reservations,
  type Store,
} from './store';
import { InvalidRequestError } from './errors';
import { rateLimitHeaders, type HeaderValue, type ResponseHeaderOptions } from './headers';
import { RequestPlanner, type Plan, type PlannedHold, type PlannerOptions } from './plan';
import { outcomeOf } from './outcome';
import { dynamicMetadataOf } from './response-metadata';
import type {
  DescriptorOutcome,
  DescriptorStatus,
  LimiterObserver,
  LocalDenial,
  LocalDenialListener,
  RateLimitRequest,
  RateLimitResponse,
  ResponseHeadersBuilder,
} from './types';

/**
 * The ShouldRateLimit decision: a request's plan (./plan.ts: validated, matched, its counters) is
 * decided by the store, every counted descriptor at once, and the store's verdicts become
 * per-descriptor statuses and the overall code. What each counted descriptor reports is
 * ./outcome.ts; the response's dynamic metadata ./response-metadata.ts.
 */

export interface RateLimiterOptions extends PlannerOptions {
  readonly store: Store;
  /** Global shadow mode (SHADOW_MODE): overall code always OK. */
  readonly shadowMode: boolean;
  /** Fill `dynamicMetadata` of every response (RESPONSE_DYNAMIC_METADATA). */
  readonly dynamicMetadata?: boolean;
  /** Charge denied requests too (COUNT_DENIED_REQUESTS). */
  readonly countDenied: boolean;
  /** NEAR_LIMIT_RATIO, 0..1. */
  readonly nearLimitRatio: number;
  readonly observer?: LimiterObserver;
  /** Builds response headers from the statuses: a function, or the header settings (see ./headers). */
  readonly responseHeaders?: ResponseHeadersBuilder | ResponseHeaderOptions;
}

const NO_HEADERS: readonly HeaderValue[] = Object.freeze([]);
/** deniedUntilMs of a store answer: nothing in it came from remembered denials. */
const NOT_LOCAL: readonly number[] = Object.freeze([]);

/**
 * Decides ShouldRateLimit requests against the current config and a Store. A planner itself (no
 * object between a call and its plan): planning is RequestPlanner's, deciding this class's.
 */
export class RateLimiter extends RequestPlanner {
  private readonly store: Store;
  private readonly shadowMode: boolean;
  private readonly dynamicMetadata: boolean;
  private readonly countDenied: boolean;
  private readonly nearLimitRatio: number;
  private readonly observer: LimiterObserver | undefined;
  private readonly headers: ResponseHeadersBuilder | undefined;
  private readonly decideOptions: { readonly countDenied: boolean };

  constructor(options: RateLimiterOptions) {
    if (!(options.nearLimitRatio >= 0 && options.nearLimitRatio <= 1)) {
      throw new RangeError(`nearLimitRatio must be within 0..1, got ${options.nearLimitRatio}`);
    }
    super(options);
    this.store = options.store;
    this.shadowMode = options.shadowMode;
    this.dynamicMetadata = options.dynamicMetadata === true;
    this.countDenied = options.countDenied;
    this.nearLimitRatio = options.nearLimitRatio;
    this.observer = options.observer;
    this.headers = headerBuilder(options.responseHeaders);
    this.decideOptions = Object.freeze({ countDenied: options.countDenied });
  }

  /**
   * Answers one request. Rejects with InvalidRequestError for a malformed request, NotReadyError
   * before the first config, and whatever the store rejects with (StoreUnavailableError) when it
   * cannot answer. Not an async function: a call answered without waiting (no counter, or the
   * denial cache) costs one promise, not an async frame and its awaits.
   *
   * The store is asked for a local answer first (Store.decideLocally: the denial cache, which
   * answers only calls whose every counter it remembers denied). A call it answers so is finished
   * synchronously, and `onLocalDenial` hears of it before the answer is returned: the LocalDenial
   * event, what the request's replay (./replay) is built from.
   */
  shouldRateLimit(req: RateLimitRequest, onLocalDenial?: LocalDenialListener): Promise<RateLimitResponse> {
    try {
      const plan = this.planOf(req);
      if (plan.holds !== undefined) return this.decideWithHolds(plan);
      const counted = plan.counted;
      const m = counted.length;
      if (m === 0) return Promise.resolve(this.answer(plan));
      if (!this.oneCall(m, plan.softCount)) return this.decideSplit(plan);
      const counters = plan.counters;
      const store = this.store;
      const local = store.decideLocally?.(counters);
      if (local !== undefined) return Promise.resolve(this.answerLocally(plan, local, onLocalDenial));
      // A store deciding in this process: the call's one promise is its answer's.
      const decided = store.decideNow?.(counters, this.decideOptions);
      if (decided !== undefined) {
        this.applyDecisions(plan, decided, undefined, undefined);
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

  /**
   * The store's verdicts, in `plan.counted` order, turned into statuses and reported; `deniedUntilMs`
   * (same order) marks the verdicts a local answer gave (finite: a remembered denial), and
   * `outcomes` collects what was reported. A rule in shadow mode is decided and counted but answers
   * OK. A descriptor of several limits takes the status of its deciding limit (see decidesOver).
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
      const outcome = outcomeOf(domain, descriptors[index].entries, c, decision, cached, this.nearLimitRatio);
      observer?.onDescriptor(outcome);
      outcomes?.push(outcome);
    }
  }

  /** The response of a decided plan. Global shadow mode keeps every descriptor's own code and makes only the overall code OK. */
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

  /**
   * A request with soft rules. All-or-nothing is the store's job (one decide() call), with one
   * refinement: shadow-mode and quota-mode rules ("soft" rules) never deny on their own, so their
   * counters must not veto the charging of the enforced ones. The enforced counters are decided
   * first (one call); each soft descriptor's counters are then decided on their own, charged only if
   * the request was admitted so far. Requests without soft rules, the common case, make exactly one
   * call (see oneCall).
   */
  private async decideSplit(plan: Plan): Promise<RateLimitResponse> {
    await this.decideSplitStatuses(plan);
    return this.answer(plan);
  }

  /** decideSplit's decisions, into the plan's statuses. */
  private async decideSplitStatuses(plan: Plan): Promise<void> {
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
  }

  /**
   * A request with reserve or commit descriptors (./reservations.ts), each one call of
   * Store.reservations. Commits (charged whatever the outcome) go at once. Reserves go first of the
   * rest: when one is denied (on an enforced rule), the request's other counters are only checked
   * and the reserves that held are released; when all hold, the counters are decided as usual, and
   * if that denies the request, the holds are released again: a denied request holds nothing.
   */
  private async decideWithHolds(plan: Plan): Promise<RateLimitResponse> {
    const holds = plan.holds!;
    const reservations = this.store.reservations;
    if (reservations === undefined) {
      throw new InvalidRequestError(`descriptors[${holds[0].index}]: the ${this.store.name} store holds no reservations`);
    }
    const others = Promise.all(holds.map((h) => (h.call.kind === 'reserve' ? undefined : reservations.hold(h.call))));
    // Keep the commits' fate attached: a rejection is seen below, never unhandled.
    others.catch(() => {});
    const reserves = holds.filter((h) => h.call.kind === 'reserve');
    const reserved = await Promise.all(reserves.map((h) => reservations.hold(h.call)));
    let admitted = true;
    for (let j = 0; j < reserves.length; j++) if (!reserves[j].soft && !allAllowed(reserved[j])) admitted = false;
    if (plan.counted.length > 0) {
      if (admitted) {
        if (this.oneCall(plan.counted.length, plan.softCount))
          this.applyDecisions(plan, await this.store.decide(plan.counters, this.decideOptions), undefined, undefined);
        else await this.decideSplitStatuses(plan);
        for (const c of plan.counted) if (!c.soft && plan.statuses[c.index].code === 'OVER_LIMIT') admitted = false;
      } else {
        // Checked only: a denied request charges nothing (but what is charged whatever the outcome).
        const counters = plan.counted.map((c) => (isChargedAnyway(c.counter) ? c.counter : { ...c.counter, hits: 0 }));
        const checks = await this.store.decide(counters, this.decideOptions);
        const decisions = checks.map((d, k) => (isChargedAnyway(counters[k]) ? d : judgeCheck(d, plan.counted[k].counter)));
        this.applyDecisions(plan, decisions, undefined, undefined);
      }
    }
    if (!admitted) await releaseHeld(reservations, reserves, reserved);
    for (let j = 0; j < reserves.length; j++) this.applyHold(plan, reserves[j], reserved[j]);
    const answers = await others;
    for (let j = 0; j < holds.length; j++) if (answers[j] !== undefined) this.applyHold(plan, holds[j], answers[j]!);
    return this.answer(plan);
  }

  /** A reservation's answer as its descriptor's status (its deciding limit's, as for several limits), and its outcomes reported. */
  private applyHold(plan: Plan, hold: PlannedHold, answer: HoldAnswer): void {
    const { decisions } = answer;
    let best = 0;
    for (let k = 1; k < decisions.length; k++) if (decidesOver(decisions[k], decisions[best])) best = k;
    const decision = decisions[best];
    plan.statuses[hold.index] = {
      code: decision.allowed || hold.rule.shadowMode ? 'OK' : 'OVER_LIMIT',
      currentLimit: hold.parts[best].currentLimit,
      limitRemaining: decision.remaining,
      durationUntilResetMs: decision.resetMs,
    };
    const observer = this.observer;
    if (observer === undefined) return;
    const entries = plan.descriptors[hold.index].entries;
    for (let k = 0; k < decisions.length; k++) observer.onDescriptor(outcomeOf(plan.domain, entries, hold.parts[k], decisions[k], false, this.nearLimitRatio));
    observer.onReservation?.({
      domain: plan.domain,
      rule: hold.parts[0].limit ?? hold.rule,
      kind: hold.call.kind,
      entries: entries.slice(0, -1),
      outcome: answer.outcome,
      held: answer.held,
      lapsed: answer.lapsed,
    });
  }
}

function allAllowed(answer: HoldAnswer): boolean {
  for (const d of answer.decisions) if (!d.allowed) return false;
  return true;
}

/** Frees what the reserves of a denied request held (best effort: a hold not freed lapses after the TTL). */
async function releaseHeld(reservations: Reservations, reserves: readonly PlannedHold[], answers: readonly HoldAnswer[]): Promise<void> {
  const releases: Promise<unknown>[] = [];
  for (let j = 0; j < reserves.length; j++) {
    if (answers[j].outcome === 'held') releases.push(reservations.hold({ ...reserves[j].call, kind: 'release' }).catch(() => undefined));
  }
  await Promise.all(releases);
}

/**
 * The overall verdict before global shadow mode. A rule in quota mode (`quota_mode`, or every rule
 * with QUOTA_MODE) over its limit answers OVER_LIMIT, but the overall code is OVER_LIMIT only when a
 * rule not in quota mode is over, or every quota-mode descriptor of the request is.
 */
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

/** Whether a rule with several limits takes its status from `next` rather than `current`: a denial over an admission, the longer wait between denials, the fewer remaining between admissions; ties keep the earlier limit. */
function decidesOver(next: CounterDecision, current: CounterDecision): boolean {
  if (next.allowed !== current.allowed) return !next.allowed;
  return next.allowed ? next.remaining < current.remaining : next.resetMs > current.resetMs;
}

function headerBuilder(option: RateLimiterOptions['responseHeaders']): ResponseHeadersBuilder | undefined {
  if (option === undefined) return undefined;
  if (typeof option === 'function') return option;
  if (!option.enabled && !option.draftEnabled) return undefined;
  return (statuses) => rateLimitHeaders(statuses, option);
}
