import { isBucket, type Limit } from '../limiter/types';
import { matchDescriptor } from '../limiter/match';
import { overriddenRule, type ActiveOverride } from '../limiter/overrides';
import type { RateLimitConfig, RuleLevel, RuleNode } from '../limiter/rules';
import type { Entry } from '../limiter/types';

/**
 * Human-readable dump of the loaded rules, for /rlconfig and the validate command. Each line keeps
 * the reference server's shape (`<domain>.<statKey>: unit=SECOND requests_per_unit=5, shadow_mode: false, quota_mode: false`)
 * so existing scripts still read it, with this server's window and algorithm (and its burst, sub-windows or
 * strictness) inserted before the comma. A rule with several limits (`rate_limits`) has one line per
 * limit, named as its metrics are (`<statKey>.<name>`, or `.<position>` unnamed).
 */

/** The algorithm's options, where they differ from plain: ` burst=N`, ` sub_windows=k`, ` strict=true`, ` calendar=true`. */
function shapeOf(limit: Limit): string {
  if (isBucket(limit.algorithm)) return ` burst=${limit.burst}`;
  if (limit.calendar === true) return ' calendar=true';
  let out = limit.subWindows === 1 ? '' : ` sub_windows=${limit.subWindows}`;
  if (limit.strict) out += ' strict=true';
  return out;
}

/** One line of the dump: one limit of `node`, named `name`. */
function limitLine(name: string, limit: Limit, replaces: readonly string[], node: RuleNode): string {
  let line = `${name}: `;
  line += limit.unlimited
    ? 'unlimited'
    : limit.concurrency !== undefined
      ? `concurrency=${limit.concurrency}`
      : `unit=${limit.unit.toUpperCase()} requests_per_unit=${limit.requestsPerUnit} unit_multiplier=${limit.unitMultiplier} algorithm=${limit.algorithm}${shapeOf(limit)}`;
  if (limit.lease === true) line += ' lease=true';
  if (limit.scope === 'global') line += ' scope=global';
  if (limit.name !== undefined) line += ` name=${limit.name}`;
  if (replaces.length > 0) line += ` replaces=${replaces.join(',')}`;
  if (node.countDeniedRequests) line += ' count_denied_requests=true';
  if (node.reservations) line += ' reservations=true';
  if (node.reservationHoldSeconds > 0) line += ` reservation_hold_seconds=${node.reservationHoldSeconds}`;
  return `${line}, shadow_mode: ${node.shadowMode}, quota_mode: ${node.quotaMode}`;
}

function walk(domain: string, level: RuleLevel, out: string[]): void {
  for (const rules of level.values()) {
    const nodes = [...rules.exact.values(), ...rules.wildcards.map((w) => w.node)];
    if (rules.keyOnly !== undefined) nodes.push(rules.keyOnly);
    for (const node of nodes) {
      if (node.limits !== undefined) {
        for (const l of node.limits) out.push(limitLine(`${domain}.${l.statKey}`, l.limit, l.replaces, node));
      } else if (node.limit !== undefined) out.push(limitLine(`${domain}.${node.statKey}`, node.limit, node.replaces, node));
      walk(domain, node.children, out);
    }
  }
}

/** One line per rule that has a limit, domains in name order, parents before their children. */
export function describeConfig(config: RateLimitConfig): string[] {
  const out: string[] = [];
  for (const name of [...config.domains.keys()].sort()) walk(name, config.domains.get(name)!.rules, out);
  return out;
}

/** One limit as /rlmatch shows it. */
export interface LimitMatch {
  readonly requestsPerUnit: number;
  readonly unit: string;
  readonly unitMultiplier: number;
  readonly windowMs: number;
  readonly algorithm: string;
  /** Windows follow the calendar (`calendar: true`); windowMs is then the unit's nominal length. */
  readonly calendar: boolean;
  readonly name: string | null;
  readonly unlimited: boolean;
  /** An in-flight limit (`concurrency`): reservations held at once; absent for a window limit (unit and window are then placeholders). */
  readonly concurrency?: number;
  /** Leased (`lease: true`): decided in process against this replica's part on a shared store; absent otherwise. */
  readonly lease?: boolean;
  /** `scope: global`: shared by every region (leased within this one); absent for a regional limit. */
  readonly scope?: 'global';
}

/** What /rlmatch answers (JSON). */
export interface RuleMatch {
  /** Domains of the config in force. */
  readonly domains: readonly string[];
  /**
   * The matched rule, null when none matches (or the domain is not loaded): its (first) limit, and
   * for a rule with several limits (`rate_limits`) every one of them in `limits`, each with its stat key.
   */
  readonly rule:
    | (LimitMatch & {
        readonly shadowMode: boolean;
        readonly countDeniedRequests: boolean;
        readonly limits?: readonly (LimitMatch & { readonly statKey: string })[];
        /** The rule takes reservations (`reservations: true`, or a `concurrency` limit); absent when it does not. */
        readonly reservations?: true;
        /** Its `reservation_hold_seconds`; absent when unset. */
        readonly reservationHoldSeconds?: number;
        /** Reservations the descriptor's book held at its last reserve, commit or release on this process (absent when none). */
        readonly reservationsHeld?: number;
        /**
         * Present when a runtime override of exactly this descriptor decides (the limit above is then
         * the override's): its version, author, times and note, and the config's own limit it replaces.
         */
        readonly override?: {
          readonly version: number;
          readonly updatedBy: string;
          readonly updatedAt: string;
          readonly expiresAt: string | null;
          readonly note: string | null;
          readonly configLimit: LimitMatch | null;
        };
      })
    | null;
}

function limitMatch(limit: Limit): LimitMatch {
  const { requestsPerUnit, unit, unitMultiplier, windowMs, algorithm, unlimited } = limit;
  const match: LimitMatch = {
    requestsPerUnit,
    unit,
    unitMultiplier,
    windowMs,
    algorithm,
    calendar: limit.calendar === true,
    name: limit.name ?? null,
    unlimited,
  };
  if (limit.concurrency !== undefined) return { ...match, concurrency: limit.concurrency };
  if (limit.lease !== true) return match;
  return limit.scope === 'global' ? { ...match, lease: true, scope: 'global' } : { ...match, lease: true };
}

/**
 * The debug port's /rlmatch answer: the rule that decides `entries` in `domain` under `config` (the
 * runtime override of exactly these entries, `override`, when there is one and it applies), with the
 * reservations its book held at its last reservation call here (`held`, shown when above 0).
 */
export function ruleMatch(config: RateLimitConfig | undefined, domain: string, entries: readonly Entry[], held = 0, override?: ActiveOverride): RuleMatch {
  const domains = config === undefined ? [] : [...config.domains.keys()];
  const matched =
    config === undefined ? undefined : override === undefined ? matchDescriptor(config, domain, entries) : overriddenRule(config, domain, entries, override);
  if (matched === undefined) return { domains, rule: null };
  const origin = matched.overridden;
  const record = origin === undefined ? undefined : override!.record();
  const rule = {
    ...limitMatch(matched.limit),
    shadowMode: matched.shadowMode,
    countDeniedRequests: matched.countDeniedRequests,
    ...(matched.reservations ? { reservations: true as const } : {}),
    ...(matched.reservationHoldSeconds > 0 ? { reservationHoldSeconds: matched.reservationHoldSeconds } : {}),
    ...(held > 0 ? { reservationsHeld: held } : {}),
    ...(origin === undefined || record === undefined
      ? {}
      : {
          override: {
            version: origin.version,
            updatedBy: record.updatedBy,
            updatedAt: new Date(record.updatedAtMs).toISOString(),
            expiresAt: record.expiresAtMs === undefined ? null : new Date(record.expiresAtMs).toISOString(),
            note: record.note ?? null,
            configLimit: origin.configRule === undefined ? null : limitMatch(origin.configRule.limit),
          },
        }),
  };
  if (matched.limits === undefined) return { domains, rule };
  return { domains, rule: { ...rule, limits: matched.limits.map((l) => ({ ...limitMatch(l.limit), statKey: `${domain}.${l.statKey}` })) } };
}
