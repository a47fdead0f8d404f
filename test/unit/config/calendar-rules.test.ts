import { describeConfig } from '../../../src/config/describe';
import { buildConfig } from '../../../src/config/rule-tree';
import { parseConfigText } from '../../../src/config/rule-reader';
import { calendarKeyPrefix, counterKeyPrefix } from '../../../src/limiter/keys';

const opts = { defaultAlgorithm: 'sliding_window' } as const;

function load(rateLimit: string) {
  return parseConfigText('billing.yaml', `domain: billing\ndescriptors:\n  - key: tenant\n    rate_limit: ${rateLimit}\n`, opts);
}

describe('calendar: true in a rate_limit', () => {
  it('makes a fixed window of one calendar unit, with a counter prefix of its own', () => {
    const domain = load('{unit: month, requests_per_unit: 5, calendar: true}');
    const rule = domain.rules.get('tenant')!.keyOnly!;
    expect(rule.limit).toMatchObject({ unit: 'month', algorithm: 'fixed_window', calendar: true, unitMultiplier: 1 });
    expect(rule.keyPrefix).toBe(calendarKeyPrefix('billing', 'month'));
    expect(rule.keyPrefix).toBe('billing|fc-month');
    expect(rule.keyPrefix).not.toBe(counterKeyPrefix('billing', 'fixed_window', rule.limit!.windowMs));
  });

  it('leaves a rule without it epoch-aligned, and calendar: false is the same', () => {
    const rule = load('{unit: day, requests_per_unit: 5, algorithm: fixed_window, calendar: false}').rules.get('tenant')!.keyOnly!;
    expect(rule.limit!.calendar).toBeUndefined();
    expect(rule.keyPrefix).toBe(counterKeyPrefix('billing', 'fixed_window', 86_400_000));
  });

  it.each([
    ['{unit: day, requests_per_unit: 5, calendar: true, algorithm: sliding_window}', 'only with algorithm fixed_window (this rule uses sliding_window)'],
    ['{unit: day, requests_per_unit: 5, calendar: true, algorithm: token_bucket}', 'only with algorithm fixed_window (this rule uses token_bucket)'],
    ['{unit: month, unit_multiplier: 3, requests_per_unit: 5, calendar: true}', 'only with unit_multiplier 1 (this rule has 3)'],
    ['{unlimited: true, calendar: true}', 'not allowed with unlimited: true'],
  ])('refuses %s naming the file and the path', (rateLimit, detail) => {
    expect(() => load(rateLimit)).toThrow(`billing.yaml: descriptors[0].rate_limit.calendar: ${detail}`);
  });

  it('refuses a calendar value that is not a boolean', () => {
    expect(() => load('{unit: day, requests_per_unit: 5, calendar: monthly}')).toThrow('billing.yaml: descriptors[0].rate_limit.calendar:');
  });

  it('shows calendar windows in /rlconfig and validate', () => {
    expect(describeConfig(buildConfig([load('{unit: week, requests_per_unit: 5, calendar: true}')]))).toEqual([
      'billing.tenant: unit=WEEK requests_per_unit=5 unit_multiplier=1 algorithm=fixed_window calendar=true, shadow_mode: false, quota_mode: false',
    ]);
  });
});
