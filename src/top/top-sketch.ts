import type { DescriptorOutcome, Limit } from '../limiter/types';
import { SpaceSaving } from './space-saving';
import { mergeCounts, type CountEntry, type CountSummary } from './summary';

/**
 * The heavy hitters of every rule over a sliding recent window (TOP_WINDOW), fed by the limiter's
 * outcomes. The window is cut into SLICES slices, each with two Space-Saving summaries per rule
 * (./space-saving.ts), one of denied hits and one of allowed hits: a flood of allowed one-shot
 * values never pushes a denied descriptor out, and each count has its own bound (./summary.ts).
 * It is also cut into STEPS steps of exact totals per rule (the page's chart). The view covers the
 * current slice and the SLICES - 1 before it, so a hit stays in view between (SLICES - 1) / SLICES
 * of the window and the whole window after it was counted.
 *
 * Bounded: at most `maxRules` rules (hits of further ones are only counted as untracked; a rule
 * silent for a whole window leaves its place; every request's own `limit` override counts under the
 * one rule OVERRIDE_RULE, since callers name those; names cut to RULE_NAME_MAX_CHARS), each
 * 2 x SLICES x `entries` entries, and every id at most ID_MAX_CHARS characters (longer counter keys are
 * cut and hashed, see boundedId). Recording reads no clock: advance(), on a timer, moves the window.
 */

export const SLICES = 10;
export const STEPS = 60;
const STEPS_PER_SLICE = STEPS / SLICES;

/** Longest id kept; longer counter keys keep their first ID_KEPT_CHARS characters and a hash of the whole. */
export const ID_MAX_CHARS = 200;
/** Characters of a rule's name kept (a config's key paths can be long). */
export const RULE_NAME_MAX_CHARS = 200;
/** The one rule every request `limit` override is counted under (their names are the callers' keys). */
export const OVERRIDE_RULE = '(request limit overrides)';
const ID_KEPT_CHARS = 180;

export interface TopSketchOptions {
  /** The window in ms (TOP_WINDOW). */
  readonly windowMs: number;
  /** Entries per rule and slice (TOP_ENTRIES): the summaries' capacity k. */
  readonly entries: number;
  /** Rules tracked at most (TOP_RULES). */
  readonly maxRules: number;
  /** The time the sketch starts at (ms). */
  readonly nowMs: number;
}

/** What a rule's view says of its limit (the config's, as the metrics name the rule). */
export interface LimitView {
  readonly requestsPerUnit: number;
  readonly unit: string;
  readonly unitMultiplier: number;
  readonly windowMs: number;
  readonly algorithm: string;
  readonly name?: string;
  readonly shadowMode: boolean;
}

/** One rule over the window: its limit, exact totals, the totals per step, and its heaviest descriptors. */
export interface RuleView {
  readonly domain: string;
  /** The rule's key path, as the metrics name it ("tenant_acme.path"). */
  readonly rule: string;
  readonly limit: LimitView;
  readonly allowed: number;
  readonly denied: number;
  readonly nearLimit: number;
  /** Absolute number (time / stepMs) of the first of the STEPS steps below. */
  readonly firstStep: number;
  readonly stepAllowed: readonly number[];
  readonly stepDenied: readonly number[];
  readonly stepNearLimit: readonly number[];
  /** The descriptors with the most denied hits, and with the most allowed hits (near-limit ones carried along). */
  readonly byDenied: CountSummary;
  readonly byAllowed: CountSummary;
}

/** The two summaries of one slice of a rule. */
interface Slice {
  readonly denied: SpaceSaving;
  readonly allowed: SpaceSaving;
  /** The absolute slice number it holds, -1 before the first. */
  at: number;
}

/** Every rule over the window, as one process (or a merge of several) sees it. */
export interface WindowView {
  readonly windowMs: number;
  readonly stepMs: number;
  /** The time it was taken (ms). */
  readonly atMs: number;
  readonly rules: readonly RuleView[];
  /** Hits of rules beyond maxRules, not tracked. */
  readonly untracked: number;
}

/** The parts of the sketch a rule's outcomes need. */
interface RuleWindow {
  readonly domain: string;
  readonly rule: string;
  limit: LimitView;
  readonly slices: Slice[];
  /** The current slice. */
  current: Slice;
  /** allowed, denied, nearLimit per step, at 3 x (step % STEPS). */
  readonly steps: Float64Array;
  readonly stepAt: Float64Array;
  /** The step of its last outcome: a rule silent for a whole window is dropped (its slot freed). */
  lastStep: number;
  dropped: boolean;
}

/** Heavy hitters per rule over a sliding window; see the file comment. */
export class TopSketch {
  readonly windowMs: number;
  readonly stepMs: number;
  private readonly capacity: number;
  private readonly maxRules: number;
  private readonly byRule = new WeakMap<object, RuleWindow>();
  private readonly byName = new Map<string, RuleWindow>();
  private step: number;
  private stepIndex: number;
  private untracked = 0;

  constructor(options: TopSketchOptions) {
    if (!(options.windowMs >= STEPS)) throw new RangeError(`windowMs must be at least ${STEPS}, got ${options.windowMs}`);
    this.windowMs = options.windowMs;
    this.stepMs = options.windowMs / STEPS;
    this.capacity = options.entries;
    this.maxRules = options.maxRules;
    this.step = Math.floor(options.nowMs / this.stepMs);
    this.stepIndex = 3 * (this.step % STEPS);
  }

  /** Counts one outcome of the limiter: the hot path, a lookup and a few additions. */
  record(o: DescriptorOutcome): void {
    if (o.withinLimit + o.overLimit === 0) return;
    let w = this.byRule.get(o.rule);
    if (w === undefined || w.dropped) w = this.windowOf(o);
    if (w === undefined) {
      this.untracked += o.withinLimit + o.overLimit;
      return;
    }
    const id = boundedId(o.key);
    if (o.overLimit > 0) w.current.denied.add(id, o.overLimit, 0);
    if (o.withinLimit > 0) w.current.allowed.add(id, o.withinLimit, o.nearLimit);
    w.lastStep = this.step;
    const steps = w.steps;
    const i = this.stepIndex;
    steps[i] += o.withinLimit;
    steps[i + 1] += o.overLimit;
    steps[i + 2] += o.nearLimit;
  }

  /** Moves the window to `nowMs`: slices and steps that left it are emptied. Call at least once per step. */
  advance(nowMs: number): void {
    const step = Math.floor(nowMs / this.stepMs);
    if (step <= this.step) return;
    this.step = step;
    this.stepIndex = 3 * (step % STEPS);
    for (const [name, w] of this.byName) {
      if (step - w.lastStep >= STEPS) {
        w.dropped = true;
        this.byName.delete(name);
      } else this.moveTo(w, step);
    }
  }

  /** The window as of the last advance(): per rule its totals, steps and its heaviest descriptors, `keep` of each count (at least the capacity: the bounds need it). */
  view(keep: number = this.capacity): WindowView {
    const kept = Math.max(keep, this.capacity);
    const rules: RuleView[] = [];
    const first = this.step - STEPS + 1;
    const firstSlice = Math.floor(this.step / STEPS_PER_SLICE) - SLICES + 1;
    for (const w of this.byName.values()) {
      const slices = w.slices.filter((s) => s.at >= firstSlice);
      const stepAllowed: number[] = new Array<number>(STEPS).fill(0);
      const stepDenied: number[] = new Array<number>(STEPS).fill(0);
      const stepNearLimit: number[] = new Array<number>(STEPS).fill(0);
      let allowed = 0;
      let denied = 0;
      let nearLimit = 0;
      for (let j = 0; j < STEPS; j++) {
        const at = first + j;
        const i = 3 * (at % STEPS);
        if (w.stepAt[at % STEPS] !== at) continue;
        stepAllowed[j] = w.steps[i];
        stepDenied[j] = w.steps[i + 1];
        stepNearLimit[j] = w.steps[i + 2];
      }
      for (const s of slices) {
        allowed += s.allowed.total;
        denied += s.denied.total;
        nearLimit += s.allowed.nearTotal;
      }
      if (allowed + denied === 0) continue;
      rules.push({
        domain: w.domain,
        rule: w.rule,
        limit: w.limit,
        allowed,
        denied,
        nearLimit,
        firstStep: first,
        stepAllowed,
        stepDenied,
        stepNearLimit,
        byDenied: mergeCounts(
          slices.map((s) => summaryOf(s.denied)),
          kept,
        ),
        byAllowed: mergeCounts(
          slices.map((s) => summaryOf(s.allowed)),
          kept,
        ),
      });
    }
    return { windowMs: this.windowMs, stepMs: this.stepMs, atMs: this.step * this.stepMs, rules, untracked: this.untracked };
  }

  /** The window of the rule of `o`, made on its first outcome; undefined past maxRules. */
  private windowOf(o: DescriptorOutcome): RuleWindow | undefined {
    const rule = o.rule.override === true ? OVERRIDE_RULE : o.rule.statKey.slice(0, RULE_NAME_MAX_CHARS);
    const name = `${o.domain}\u0000${rule}`;
    let w = this.byName.get(name);
    if (w === undefined) {
      if (this.byName.size >= this.maxRules) return undefined;
      const slices: Slice[] = [];
      for (let s = 0; s < SLICES; s++) slices.push({ denied: new SpaceSaving(this.capacity), allowed: new SpaceSaving(this.capacity), at: -1 });
      // A rule's view shows the config's limit; the descriptors a runtime override decides are marked one by one (/top).
      const shown = o.rule.overridden?.configRule ?? o.rule;
      w = {
        domain: o.domain,
        rule,
        limit: limitView(shown.limit, shown.shadowMode),
        slices,
        current: slices[0],
        steps: new Float64Array(3 * STEPS),
        stepAt: new Float64Array(STEPS).fill(-1),
        lastStep: this.step,
        dropped: false,
      };
      this.moveTo(w, this.step);
      this.byName.set(name, w);
    } else if (o.rule.overridden === undefined) {
      // A new config made a new rule object for it: its limit may have changed.
      w.limit = limitView(o.rule.limit, o.rule.shadowMode);
    }
    this.byRule.set(o.rule, w);
    return w;
  }

  private moveTo(w: RuleWindow, step: number): void {
    const at = step % STEPS;
    if (w.stepAt[at] !== step) {
      w.stepAt[at] = step;
      w.steps.fill(0, 3 * at, 3 * at + 3);
    }
    const slice = Math.floor(step / STEPS_PER_SLICE);
    const s = w.slices[slice % SLICES];
    if (s.at !== slice) {
      s.at = slice;
      s.denied.clear();
      s.allowed.clear();
    }
    w.current = s;
  }
}

function summaryOf(s: SpaceSaving): CountSummary {
  const entries: CountEntry[] = [];
  for (let slot = 0; slot < s.size; slot++) entries.push({ id: s.idAt(slot), count: s.countAt(slot), error: s.error[slot], near: s.near[slot] });
  return { entries, floor: s.floor() };
}

function limitView(limit: Limit, shadowMode: boolean): LimitView {
  return {
    requestsPerUnit: limit.requestsPerUnit,
    unit: limit.unit,
    unitMultiplier: limit.unitMultiplier,
    windowMs: limit.windowMs,
    algorithm: limit.algorithm,
    ...(limit.name === undefined ? {} : { name: limit.name }),
    shadowMode,
  };
}

/**
 * A counter key as an id of at most ID_MAX_CHARS characters: itself when short enough, else its
 * first ID_KEPT_CHARS characters, '{' (never part of a counter key) and a 52-bit hash of the whole,
 * the same in every process, so that long values stay apart and merge across replicas.
 */
export function boundedId(key: string): string {
  if (key.length <= ID_MAX_CHARS) return key;
  return `${key.slice(0, ID_KEPT_CHARS)}{${hash52(key).toString(36)}`;
}

/**
 * Two 32-bit FNV-1a lanes (different offsets, the second with an extra shift) over the UTF-16 code
 * units, folded into 52 bits: enough that two long keys of one rule practically never meet.
 */
function hash52(s: string): number {
  let a = 0x811c9dc5;
  let b = 0x2b2f5a8d;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x01000193) ^ (b >>> 13);
  }
  return (a >>> 0) * 0x100000 + (b >>> 12);
}
