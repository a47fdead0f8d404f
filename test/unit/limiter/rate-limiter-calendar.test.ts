import { buildConfig } from '../../../src/config/rule-tree';
import { parseConfigText } from '../../../src/config/rule-reader';
import { RateLimiter } from '../../../src/limiter/rate-limiter';
import type { DescriptorStatus } from '../../../src/limiter/types';
import { MemoryStore } from '../../../src/store/memory-store';
import { FakeClock } from '../../helpers/fake-clock';
import { LIMITER_DEFAULTS } from '../../helpers/limiter-defaults';

const CALENDAR = `
domain: billing
descriptors:
  - key: month
    rate_limit: {unit: month, requests_per_unit: 3, calendar: true}
  - key: epoch_month
    rate_limit: {unit: month, requests_per_unit: 3, algorithm: fixed_window}
  - key: week
    rate_limit: {unit: week, requests_per_unit: 2, calendar: true, algorithm: fixed_window}
  - key: year
    rate_limit: {unit: year, requests_per_unit: 1, calendar: true}
  - key: dry_month
    shadow_mode: true
    rate_limit: {unit: month, requests_per_unit: 1, calendar: true}
  - key: both
    rate_limits:
      - {name: per_minute, unit: minute, requests_per_unit: 2, algorithm: fixed_window}
      - {name: per_month, unit: month, requests_per_unit: 3, calendar: true}
`;

const at = (iso: string): number => Date.parse(iso);
const HOUR = 3_600_000;

interface Calendar {
  readonly clock: FakeClock;
  ask(key: string): Promise<DescriptorStatus>;
  askBoth(...keys: string[]): Promise<readonly DescriptorStatus[]>;
}

function setUp(startIso: string, calendarOffsetMs = 0): Calendar {
  const clock = new FakeClock(at(startIso));
  const store = new MemoryStore({ clock, maxKeys: 1_000, sweepIntervalMs: 0 });
  const config = buildConfig([parseConfigText('billing.yaml', CALENDAR, { defaultAlgorithm: 'sliding_window' })]);
  const limiter = new RateLimiter({ ...LIMITER_DEFAULTS, store, config: () => config, calendarOffsetMs });
  const askBoth = async (...keys: string[]): Promise<readonly DescriptorStatus[]> =>
    (await limiter.shouldRateLimit({ domain: 'billing', descriptors: keys.map((key) => ({ entries: [{ key, value: 'acme' }] })), hitsAddend: 1 })).statuses;
  const ask = async (key: string): Promise<DescriptorStatus> => (await askBoth(key))[0];
  return { clock, ask, askBoth };
}

/** Admits `limit` requests, then checks that the next one is denied until exactly `endIso`. */
async function spend(ask: (key: string) => Promise<DescriptorStatus>, key: string, limit: number, nowMs: number, endIso: string): Promise<void> {
  for (let i = 0; i < limit; i++) {
    const ok = await ask(key);
    expect([ok.code, ok.limitRemaining, ok.durationUntilResetMs]).toEqual(['OK', limit - 1 - i, at(endIso) - nowMs]);
  }
  const denied = await ask(key);
  expect([denied.code, denied.durationUntilResetMs]).toEqual(['OVER_LIMIT', at(endIso) - nowMs]);
}

describe('calendar windows in the limiter (memory store, fake clock)', () => {
  it('resets a calendar month at the end of a leap February, on its last millisecond', async () => {
    const { clock, ask } = setUp('2028-02-10T12:00:00Z');
    await spend(ask, 'month', 3, clock.nowMs(), '2028-03-01T00:00:00Z');
    clock.set(at('2028-02-29T23:59:59.999Z'));
    expect((await ask('month')).code).toBe('OVER_LIMIT');
    clock.advance(1);
    await spend(ask, 'month', 3, clock.nowMs(), '2028-04-01T00:00:00Z');
  });

  it('resets a calendar month at the end of a 28-day February, where a 30-day window would run on', async () => {
    const { clock, ask } = setUp('2027-02-01T00:00:00Z');
    await spend(ask, 'month', 3, clock.nowMs(), '2027-03-01T00:00:00Z');
    // The epoch-aligned 30-day window that holds February 1 runs to March 3.
    await spend(ask, 'epoch_month', 3, clock.nowMs(), '2027-03-03T00:00:00Z');
    clock.set(at('2027-03-01T00:00:00Z'));
    expect((await ask('month')).code).toBe('OK');
    expect((await ask('epoch_month')).code).toBe('OVER_LIMIT');
  });

  it('resets a calendar week on Monday 00:00 and a calendar year on January 1', async () => {
    const { clock, ask } = setUp('2026-12-31T22:00:00Z');
    // 2026-12-31 is a Thursday: its week ends on Monday 2027-01-04.
    await spend(ask, 'week', 2, clock.nowMs(), '2027-01-04T00:00:00Z');
    await spend(ask, 'year', 1, clock.nowMs(), '2027-01-01T00:00:00Z');
    clock.set(at('2027-01-01T00:00:00Z'));
    expect((await ask('year')).code).toBe('OK');
    expect((await ask('week')).code).toBe('OVER_LIMIT');
    clock.set(at('2027-01-04T00:00:00Z'));
    expect((await ask('week')).code).toBe('OK');
  });

  it('follows the calendar of CALENDAR_TIMEZONE: at -08:00 a month turns at 08:00 UTC', async () => {
    const { clock, ask } = setUp('2026-11-30T12:00:00Z', -8 * HOUR);
    await spend(ask, 'month', 3, clock.nowMs(), '2026-12-01T08:00:00Z');
    clock.set(at('2026-12-01T07:59:59.999Z'));
    expect((await ask('month')).code).toBe('OVER_LIMIT');
    clock.advance(1);
    expect((await ask('month')).code).toBe('OK');
  });

  it('counts a calendar month among several limits of one rule, and names it when it denies', async () => {
    const { clock, ask } = setUp('2028-02-29T23:58:00Z');
    expect((await ask('both')).code).toBe('OK');
    expect((await ask('both')).code).toBe('OK');
    clock.advance(60_000);
    const third = await ask('both');
    expect([third.code, third.currentLimit?.name, third.limitRemaining]).toEqual(['OK', 'per_month', 0]);
    const denied = await ask('both');
    expect([denied.code, denied.currentLimit?.name, denied.durationUntilResetMs]).toEqual(['OVER_LIMIT', 'per_month', 60_000]);
    clock.advance(60_000);
    expect((await ask('both')).code).toBe('OK');
  });

  it('reports a shadow calendar month it would deny, in a request another rule denies, as waiting until the month ends', async () => {
    const { clock, ask, askBoth } = setUp('2026-01-10T00:00:00Z');
    expect((await ask('dry_month')).code).toBe('OK');
    expect((await ask('year')).code).toBe('OK');
    // The year denies the request; the shadow month, checked without charging, would deny too.
    const [year, month] = await askBoth('year', 'dry_month');
    expect(year.code).toBe('OVER_LIMIT');
    expect([month.code, month.durationUntilResetMs]).toEqual(['OK', at('2026-02-01T00:00:00Z') - clock.nowMs()]);
  });
});
