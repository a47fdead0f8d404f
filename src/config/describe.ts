import { isBucket, type Limit } from '../limiter/types';
import { matchDescriptor } from '../limiter/match';
import type { RateLimitConfig, RuleLevel } from '../limiter/rules';
import type { Entry } from '../limiter/types';

/**
 * Human-readable dump of the loaded rules, for /rlconfig and the validate command. Each line keeps
 * the reference server's shape (`<domain>.<statKey>: unit=SECOND requests_per_unit=5, shadow_mode: false, quota_mode: false`)
 * so existing scripts still read it, with this server's window and algorithm (and its burst, sub-windows or
 * strictness) inserted before the comma.
 */

/** The algorithm's options, where they differ from plain: ` burst=N`, ` sub_windows=k`, ` strict=true`. */
function shapeOf(limit: Limit): string {
  if (isBucket(limit.algorithm)) return ` burst=${limit.burst}`;
  let out = limit.subWindows === 1 ? '' : ` sub_windows=${limit.subWindows}`;
  if (limit.strict) out += ' strict=true';
  return out;
}

function walk(domain: string, level: RuleLevel, out: string[]): void {
  for (const rules of level.values()) {
    const nodes = [...rules.exact.values(), ...rules.wildcards.map((w) => w.node)];
    if (rules.keyOnly !== undefined) nodes.push(rules.keyOnly);
    for (const node of nodes) {
      const limit = node.limit;
      if (limit !== undefined) {
        let line = `${domain}.${node.statKey}: `;
        line += limit.unlimited
          ? 'unlimited'
          : `unit=${limit.unit.toUpperCase()} requests_per_unit=${limit.requestsPerUnit} unit_multiplier=${limit.unitMultiplier} algorithm=${limit.algorithm}${shapeOf(limit)}`;
        if (limit.name !== undefined) line += ` name=${limit.name}`;
        if (node.replaces.length > 0) line += ` replaces=${node.replaces.join(',')}`;
        line += `, shadow_mode: ${node.shadowMode}, quota_mode: ${node.quotaMode}`;
        out.push(line);
      }
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

/** What /rlmatch answers (JSON). */
export interface RuleMatch {
  /** Domains of the config in force. */
  readonly domains: readonly string[];
  /** The matched rule, null when none matches (or the domain is not loaded). */
  readonly rule: {
    readonly requestsPerUnit: number;
    readonly unit: string;
    readonly unitMultiplier: number;
    readonly windowMs: number;
    readonly algorithm: string;
    readonly name: string | null;
    readonly unlimited: boolean;
    readonly shadowMode: boolean;
  } | null;
}

/** The debug port's /rlmatch answer: the rule `entries` match in `domain` under `config`. */
export function ruleMatch(config: RateLimitConfig | undefined, domain: string, entries: readonly Entry[]): RuleMatch {
  const domains = config === undefined ? [] : [...config.domains.keys()];
  const matched = config === undefined ? undefined : matchDescriptor(config, domain, entries);
  if (matched === undefined) return { domains, rule: null };
  const { limit } = matched;
  return {
    domains,
    rule: {
      requestsPerUnit: limit.requestsPerUnit,
      unit: limit.unit,
      unitMultiplier: limit.unitMultiplier,
      windowMs: limit.windowMs,
      algorithm: limit.algorithm,
      name: limit.name ?? null,
      unlimited: limit.unlimited,
      shadowMode: matched.shadowMode,
    },
  };
}
