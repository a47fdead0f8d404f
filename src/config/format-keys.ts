import { RULE_SETTINGS, type RuleSetting, type RuleSettings } from '../limiter/rules';
/** The keys of the config format at each level, and every key the reference format knows. */

/** The core's table of per-rule flags and numbers (RULE_SETTINGS), as [field, setting] pairs in table order. */
export const SETTINGS = Object.entries(RULE_SETTINGS) as [keyof RuleSettings, RuleSetting][];

export const ROOT_KEYS = ['domain', 'descriptors'] as const;
export const RULE_KEYS: readonly string[] = [
  'key',
  'value',
  'rate_limit',
  'rate_limits',
  'descriptors',
  ...SETTINGS.map(([, s]) => s.yaml),
  'value_to_metric',
  'share_threshold',
  'metadata',
];
export const LIMIT_KEYS = [
  'unit',
  'requests_per_unit',
  'unlimited',
  'name',
  'replaces',
  'unit_multiplier',
  'algorithm',
  'burst',
  'sub_windows',
  'strict',
  'calendar',
  'concurrency',
  'lease',
  'scope',
] as const;
export const REPLACES_KEYS = ['name'] as const;

/**
 * Every key the reference format knows. Its loader checks keys against this one set at every level,
 * so a known key in the wrong place (`shadow_mode` under `rate_limit`, say) loads there and does
 * nothing: here it loads too, with a warning naming it. Any other unknown key is an error in both.
 */
export const REFERENCE_KEYS: ReadonlySet<string> = new Set([
  'domain',
  'key',
  'value',
  'descriptors',
  'rate_limit',
  'unit',
  'requests_per_unit',
  'unlimited',
  'name',
  'replaces',
  'value_to_metric',
  'share_threshold',
  'metadata',
  ...SETTINGS.filter(([, s]) => s.reference === true).map(([, s]) => s.yaml),
]);
