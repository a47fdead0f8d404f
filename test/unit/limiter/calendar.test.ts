import fc from 'fast-check';
import { calendarPeriod, civilFromDays, daysFromCivil, formatOffset } from '../../../src/limiter/calendar';
import { UNIT_MS, type Unit } from '../../../src/limiter/types';

const at = (iso: string): number => Date.parse(iso);
const HOUR = 3_600_000;
const DAY = UNIT_MS.day;

/** The period as ISO strings, to read failures at a glance. */
function period(iso: string, unit: Unit, offsetMs = 0): [string, string] {
  const p = calendarPeriod(at(iso), unit, offsetMs);
  return [new Date(p.startMs).toISOString(), new Date(p.endMs).toISOString()];
}

describe('calendar periods', () => {
  it('numbers days from 1970-01-01 and back, across centuries and leap days', () => {
    expect(daysFromCivil(1970, 1)).toBe(0);
    expect(daysFromCivil(2000, 3)).toBe(at('2000-03-01T00:00:00Z') / DAY);
    expect(daysFromCivil(1900, 3)).toBe(at('1900-03-01T00:00:00Z') / DAY);
    expect(daysFromCivil(1969, 12)).toBe(-31);
    expect(civilFromDays(at('2028-02-29T00:00:00Z') / DAY)).toEqual({ year: 2028, month: 2 });
    expect(civilFromDays(at('2100-03-01T00:00:00Z') / DAY)).toEqual({ year: 2100, month: 3 });
    expect(civilFromDays(-1)).toEqual({ year: 1969, month: 12 });
  });

  it('agrees with the JavaScript calendar on every first of a month from 1600 to 2600', () => {
    // Every month is checked; the disagreements are gathered into one expectation (36,000 of them
    // took 5 s), which names each month that disagrees.
    const disagreements: string[] = [];
    const same = (a: { year: number; month: number }, b: { year: number; month: number }): boolean => a.year === b.year && a.month === b.month;
    for (let year = 1600; year <= 2600; year++) {
      for (let month = 1; month <= 12; month++) {
        const days = Date.UTC(year, month - 1, 1) / DAY;
        const before = month === 1 ? { year: year - 1, month: 12 } : { year, month: month - 1 };
        if (daysFromCivil(year, month) !== days) disagreements.push(`daysFromCivil(${year}, ${month}) = ${daysFromCivil(year, month)}, not ${days}`);
        if (!same(civilFromDays(days), { year, month })) disagreements.push(`civilFromDays(${days}) = ${JSON.stringify(civilFromDays(days))}`);
        if (!same(civilFromDays(days - 1), before)) disagreements.push(`civilFromDays(${days - 1}) = ${JSON.stringify(civilFromDays(days - 1))}`);
      }
    }
    expect(disagreements).toEqual([]);
  });

  it('gives February 29 days in a leap year and 28 otherwise', () => {
    expect(period('2028-02-29T23:59:59.999Z', 'month')).toEqual(['2028-02-01T00:00:00.000Z', '2028-03-01T00:00:00.000Z']);
    expect(period('2028-02-01T00:00:00.000Z', 'month')).toEqual(['2028-02-01T00:00:00.000Z', '2028-03-01T00:00:00.000Z']);
    expect(period('2027-02-28T12:00:00Z', 'month')).toEqual(['2027-02-01T00:00:00.000Z', '2027-03-01T00:00:00.000Z']);
    expect(period('2100-02-15T00:00:00Z', 'month')).toEqual(['2100-02-01T00:00:00.000Z', '2100-03-01T00:00:00.000Z']);
    expect(period('2000-02-29T00:00:00Z', 'month')).toEqual(['2000-02-01T00:00:00.000Z', '2000-03-01T00:00:00.000Z']);
  });

  it('ends months of 30 and 31 days on their last millisecond', () => {
    expect(period('2026-04-30T23:59:59.999Z', 'month')).toEqual(['2026-04-01T00:00:00.000Z', '2026-05-01T00:00:00.000Z']);
    expect(period('2026-05-01T00:00:00.000Z', 'month')).toEqual(['2026-05-01T00:00:00.000Z', '2026-06-01T00:00:00.000Z']);
    expect(period('2026-08-31T23:59:59.999Z', 'month')).toEqual(['2026-08-01T00:00:00.000Z', '2026-09-01T00:00:00.000Z']);
    expect(period('2026-12-31T23:59:59.999Z', 'month')).toEqual(['2026-12-01T00:00:00.000Z', '2027-01-01T00:00:00.000Z']);
  });

  it('gives a leap year 366 days and turns at midnight of January 1', () => {
    const leap = calendarPeriod(at('2028-07-01T00:00:00Z'), 'year', 0);
    expect(leap.endMs - leap.startMs).toBe(366 * DAY);
    const plain = calendarPeriod(at('2027-07-01T00:00:00Z'), 'year', 0);
    expect(plain.endMs - plain.startMs).toBe(365 * DAY);
    expect(period('2026-12-31T23:59:59.999Z', 'year')).toEqual(['2026-01-01T00:00:00.000Z', '2027-01-01T00:00:00.000Z']);
    expect(period('2027-01-01T00:00:00.000Z', 'year')).toEqual(['2027-01-01T00:00:00.000Z', '2028-01-01T00:00:00.000Z']);
  });

  it('runs weeks from Monday 00:00 to the next Monday', () => {
    // 2026-11-23 is a Monday.
    expect(period('2026-11-25T10:00:00Z', 'week')).toEqual(['2026-11-23T00:00:00.000Z', '2026-11-30T00:00:00.000Z']);
    expect(period('2026-11-29T23:59:59.999Z', 'week')).toEqual(['2026-11-23T00:00:00.000Z', '2026-11-30T00:00:00.000Z']);
    expect(period('2026-11-30T00:00:00.000Z', 'week')).toEqual(['2026-11-30T00:00:00.000Z', '2026-12-07T00:00:00.000Z']);
    // The epoch was a Thursday: its week began on Monday 1969-12-29.
    expect(period('1970-01-01T00:00:00Z', 'week')).toEqual(['1969-12-29T00:00:00.000Z', '1970-01-05T00:00:00.000Z']);
  });

  it('starts days, weeks, months and years at local midnight on a clock ahead of or behind UTC', () => {
    const plus0530 = 5.5 * HOUR;
    // 2026-02-28T20:00Z is already March 1, 01:30 at +05:30.
    expect(period('2026-02-28T20:00:00Z', 'month', plus0530)).toEqual(['2026-02-28T18:30:00.000Z', '2026-03-31T18:30:00.000Z']);
    expect(period('2026-02-28T18:29:59.999Z', 'month', plus0530)).toEqual(['2026-01-31T18:30:00.000Z', '2026-02-28T18:30:00.000Z']);
    expect(period('2026-11-25T20:00:00Z', 'day', plus0530)).toEqual(['2026-11-25T18:30:00.000Z', '2026-11-26T18:30:00.000Z']);
    // At -08:00, Monday 2026-11-30 00:00 is 08:00Z; Sunday evening there is already Monday in UTC.
    expect(period('2026-11-30T07:59:59.999Z', 'week', -8 * HOUR)).toEqual(['2026-11-23T08:00:00.000Z', '2026-11-30T08:00:00.000Z']);
    expect(period('2027-01-01T03:00:00Z', 'year', -8 * HOUR)).toEqual(['2026-01-01T08:00:00.000Z', '2027-01-01T08:00:00.000Z']);
    // Hours follow the clock's half hour at +05:30; seconds and minutes are UTC's.
    expect(period('2026-11-25T10:10:00Z', 'hour', plus0530)).toEqual(['2026-11-25T09:30:00.000Z', '2026-11-25T10:30:00.000Z']);
    expect(period('2026-11-25T10:10:30.250Z', 'minute', plus0530)).toEqual(['2026-11-25T10:10:00.000Z', '2026-11-25T10:11:00.000Z']);
  });

  it('contains the instant, in a period of its unit, on local boundaries, for any instant and offset', () => {
    const units: Unit[] = ['second', 'minute', 'hour', 'day', 'week', 'month', 'year'];
    fc.assert(
      fc.property(
        fc.integer({ min: -1_000_000_000_000, max: 20_000_000_000_000 }),
        fc.constantFrom(...units),
        fc.integer({ min: -1439, max: 1439 }),
        (now, unit, minutes) => {
          const offset = minutes * 60_000;
          const { startMs, endMs } = calendarPeriod(now, unit, offset);
          expect(startMs).toBeLessThanOrEqual(now);
          expect(endMs).toBeGreaterThan(now);
          const start = new Date(startMs + offset);
          const end = new Date(endMs + offset);
          if (unit === 'month' || unit === 'year') {
            expect([start.getUTCDate(), end.getUTCDate(), start.getUTCHours(), end.getUTCHours()]).toEqual([1, 1, 0, 0]);
            const months = (end.getUTCFullYear() - start.getUTCFullYear()) * 12 + end.getUTCMonth() - start.getUTCMonth();
            expect(months).toBe(unit === 'month' ? 1 : 12);
            if (unit === 'year') expect(start.getUTCMonth()).toBe(0);
          } else {
            expect(endMs - startMs).toBe(UNIT_MS[unit]);
            const boundary = UNIT_MS[unit === 'week' ? 'day' : unit];
            expect(Math.abs((startMs + offset) % boundary)).toBe(0);
            if (unit === 'week') expect(start.getUTCDay()).toBe(1);
          }
          // The next period starts where this one ends.
          expect(calendarPeriod(endMs, unit, offset).startMs).toBe(endMs);
        },
      ),
      { numRuns: 2_000 },
    );
  });

  it('names offsets as the setting writes them', () => {
    expect(formatOffset(0)).toBe('UTC');
    expect(formatOffset(5.5 * HOUR)).toBe('+05:30');
    expect(formatOffset(-8 * HOUR)).toBe('-08:00');
  });
});
