import { joinCounts, mergeCounts, type EntryView } from './summary';
import { STEPS, type RuleView, type WindowView } from './top-sketch';

/**
 * Views of several processes merged into one, and the JSON that /top and /top/rules answer with.
 * A process's view is merged with the views its siblings and the other replicas published: counts
 * add up, each part's bound of what it did not keep adds to the counts and their errors, so every
 * count stays at or above the truth and at most its error (<= the count's total / TOP_ENTRIES)
 * above it (./summary.ts).
 */

/** What GET /top may be asked: a domain, the count to sort by, how many entries. */
export interface TopQuery {
  readonly domain?: string;
  readonly by: 'denied' | 'allowed' | 'near_limit';
  readonly limit: number;
}

export const DEFAULT_TOP_LIMIT = 20;
export const MAX_TOP_LIMIT = 1_000;
/** Characters of a descriptor value shown; longer ones end in '…'. */
export const DISPLAY_VALUE_CHARS = 64;

/** The query of a /top URL, or the message of why it is not one. */
export function parseTopQuery(query: URLSearchParams): TopQuery | string {
  const by = query.get('by') ?? 'denied';
  if (by !== 'denied' && by !== 'allowed' && by !== 'near_limit') return `by: expected denied, allowed or near_limit, got "${by}"`;
  const limitText = query.get('limit');
  const limit = limitText === null ? DEFAULT_TOP_LIMIT : Number(limitText);
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_TOP_LIMIT || !/^[0-9]+$/.test(limitText ?? '1')) {
    return `limit: expected an integer from 1 to ${MAX_TOP_LIMIT}, got "${limitText}"`;
  }
  const domain = query.get('domain') ?? undefined;
  return domain === undefined || domain === '' ? { by, limit } : { domain, by, limit };
}

/** Views of several processes as one: rules matched by domain and key path, steps by their absolute number. */
export function mergeViews(views: readonly WindowView[], keep: number): WindowView {
  if (views.length === 0) throw new RangeError('no view to merge');
  const first = views[0];
  if (views.length === 1) return first;
  const lastStep = Math.max(...views.map((v) => v.atMs / v.stepMs));
  const firstStep = lastStep - STEPS + 1;
  const byRule = new Map<string, RuleView[]>();
  for (const v of views) {
    for (const r of v.rules) {
      const name = `${r.domain}\u0000${r.rule}`;
      const list = byRule.get(name);
      if (list === undefined) byRule.set(name, [r]);
      else list.push(r);
    }
  }
  const rules: RuleView[] = [];
  for (const parts of byRule.values()) {
    const stepAllowed = new Array<number>(STEPS).fill(0);
    const stepDenied = new Array<number>(STEPS).fill(0);
    const stepNearLimit = new Array<number>(STEPS).fill(0);
    let allowed = 0;
    let denied = 0;
    let nearLimit = 0;
    for (const r of parts) {
      allowed += r.allowed;
      denied += r.denied;
      nearLimit += r.nearLimit;
      for (let j = 0; j < STEPS; j++) {
        const at = r.firstStep + j - firstStep;
        if (at < 0 || at >= STEPS) continue;
        stepAllowed[at] += r.stepAllowed[j];
        stepDenied[at] += r.stepDenied[j];
        stepNearLimit[at] += r.stepNearLimit[j];
      }
    }
    const { domain, rule, limit } = parts[0];
    const byDenied = mergeCounts(
      parts.map((r) => r.byDenied),
      keep,
    );
    const byAllowed = mergeCounts(
      parts.map((r) => r.byAllowed),
      keep,
    );
    rules.push({ domain, rule, limit, allowed, denied, nearLimit, firstStep, stepAllowed, stepDenied, stepNearLimit, byDenied, byAllowed });
  }
  const untracked = views.reduce((sum, v) => sum + v.untracked, 0);
  return { windowMs: first.windowMs, stepMs: first.stepMs, atMs: lastStep * first.stepMs, rules, untracked };
}

/** A descriptor as [key, value] pairs, read back from its id (a counter key: `domain|window|key=value|...`, escaped). */
export function descriptorOf(id: string): [string, string][] {
  // A bounded id ends in '{' and a hash: the cut entry shows what is left of it and the hash.
  const brace = id.indexOf('{');
  const kept = brace < 0 ? id : id.slice(0, brace);
  const parts = kept.split('|').slice(2);
  return parts.map((part, i) => {
    const eq = part.indexOf('=');
    const key = unescapeComponent(eq < 0 ? part : part.slice(0, eq));
    const value = eq < 0 ? '' : unescapeComponent(part.slice(eq + 1));
    if (brace >= 0 && i === parts.length - 1) return [key, `${value.slice(0, DISPLAY_VALUE_CHARS)}…#${id.slice(brace + 1)}`];
    return [key, displayText(value)];
  });
}

/** A caller's text as shown: at most DISPLAY_VALUE_CHARS characters, a longer one cut and ended with '…'. */
export function displayText(text: string): string {
  return text.length > DISPLAY_VALUE_CHARS ? `${text.slice(0, DISPLAY_VALUE_CHARS)}…` : text;
}

// The inverse of the counter key's escaping (%XX); a cut escape at the end of a bounded id stays as is.
function unescapeComponent(s: string): string {
  return s.indexOf('%') < 0 ? s : s.replace(/%([0-9A-F]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)));
}

/** What /top says of a descriptor a runtime override decided (src/limiter/overrides.ts): the override's limit and version. */
export interface TopOverride {
  readonly requests_per_unit: number;
  readonly unit: string;
  readonly unit_multiplier: number;
  readonly algorithm: string;
  readonly unlimited: boolean;
  readonly version: number;
}

/** The override of a counter key (an entry's id), if one decides it; what marks a row of /top and of the page. */
export type OverrideMarks = (id: string) => TopOverride | undefined;

const NO_MARKS: OverrideMarks = () => undefined;

/** One row of /top. */
export interface TopEntry {
  readonly domain: string;
  readonly rule: string;
  readonly descriptor: [string, string][];
  readonly allowed: number;
  readonly denied: number;
  readonly near_limit: number;
  /** How much each count may be above the true one (0: exact): denied, and allowed (near_limit's too, near-limit hits being allowed hits). */
  readonly error: { readonly allowed: number; readonly denied: number };
  /** Present when a runtime override decides this descriptor: its limit. */
  readonly override?: TopOverride;
}

/** GET /top: the heaviest descriptors of every rule (of one domain), sorted by `by`, then denied, then allowed. */
export function topReport(
  view: WindowView,
  replicas: number,
  query: TopQuery,
  marks: OverrideMarks = NO_MARKS,
): { window_s: number; replicas: number; entries: TopEntry[] } {
  const entries: TopEntry[] = [];
  for (const r of view.rules) {
    if (query.domain !== undefined && r.domain !== query.domain) continue;
    for (const e of joinCounts(r.byDenied, r.byAllowed)) entries.push(topEntry(r, e, marks));
  }
  const key = query.by;
  entries.sort((a, b) => b[key] - a[key] || b.denied - a.denied || b.allowed - a.allowed);
  if (entries.length > query.limit) entries.length = query.limit;
  return { window_s: view.windowMs / 1000, replicas, entries };
}

function topEntry(r: RuleView, e: EntryView, marks: OverrideMarks): TopEntry {
  const override = marks(e.id);
  return {
    domain: r.domain,
    rule: r.rule,
    descriptor: descriptorOf(e.id),
    allowed: e.allowed,
    denied: e.denied,
    near_limit: e.nearLimit,
    error: { allowed: e.errorAllowed, denied: e.errorDenied },
    ...(override === undefined ? {} : { override }),
  };
}

/** Bytes of the rules of one /top/rules answer at most: the rules with the most denials first, the others counted in `more_rules`. */
export const RULES_REPORT_MAX_BYTES = 512 * 1024;

/** GET /top/rules: every rule with its limit, totals, steps and heaviest descriptors (the page's data), within RULES_REPORT_MAX_BYTES. */
export function rulesReport(view: WindowView, replicas: number, extra: Record<string, unknown> = {}, marks: OverrideMarks = NO_MARKS): Record<string, unknown> {
  const heaviest = [...view.rules].sort((a, b) => b.denied - a.denied || b.allowed - a.allowed);
  const kept: { readonly rule: RuleView; readonly report: object }[] = [];
  let bytes = 0;
  for (const r of heaviest) {
    const report = ruleReport(r, view.stepMs, marks);
    bytes += JSON.stringify(report).length;
    if (bytes > RULES_REPORT_MAX_BYTES) break;
    kept.push({ rule: r, report });
  }
  const rules = kept
    .sort(({ rule: a }, { rule: b }) => (a.domain < b.domain ? -1 : a.domain > b.domain ? 1 : b.denied - a.denied || b.allowed - a.allowed))
    .map((k) => k.report);
  return {
    window_s: view.windowMs / 1000,
    replicas,
    at_ms: view.atMs,
    untracked: view.untracked,
    rules,
    more_rules: view.rules.length - rules.length,
    ...extra,
  };
}

function ruleReport(r: RuleView, stepMs: number, marks: OverrideMarks): object {
  return {
    domain: r.domain,
    rule: r.rule,
    limit: {
      requests_per_unit: r.limit.requestsPerUnit,
      unit: r.limit.unit,
      unit_multiplier: r.limit.unitMultiplier,
      window_s: r.limit.windowMs / 1000,
      algorithm: r.limit.algorithm,
      name: r.limit.name ?? null,
      shadow_mode: r.limit.shadowMode,
    },
    allowed: r.allowed,
    denied: r.denied,
    near_limit: r.nearLimit,
    steps: { step_s: stepMs / 1000, allowed: r.stepAllowed, denied: r.stepDenied, near_limit: r.stepNearLimit },
    entries: joinCounts(r.byDenied, r.byAllowed).map((e) => {
      const { domain: _d, rule: _r, ...rest } = topEntry(r, e, marks);
      return rest;
    }),
  };
}
