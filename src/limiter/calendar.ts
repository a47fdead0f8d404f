import { UNIT_MS, type Unit } from './types';

/**
 * Calendar windows (`calendar: true`): a window is the civil second, minute, hour, day, week (Monday
 * 00:00 to Monday 00:00), month or year containing an instant, on a clock `offsetMs` ahead of UTC
 * (CALENDAR_TIMEZONE). Months and years have their real lengths, leap years included (proleptic
 * Gregorian calendar). Integer arithmetic only, on day numbers: the Redis script computes the same
 * periods with the same steps in Lua (src/store/redis/script.ts), so both stores cut time alike.
 */

/** What makes a counter a calendar window: its unit and the calendar's offset from UTC. */
export interface CalendarWindow {
  readonly unit: Unit;
  /** Local time minus UTC, ms (+05:30 is 19,800,000); whole minutes within a day either way. */
  readonly offsetMs: number;
}

/** The calendar period containing an instant: [startMs, endMs), epoch ms. */
export interface CalendarPeriod {
  readonly startMs: number;
  readonly endMs: number;
}

/** The largest offset a calendar may have from UTC (real zones stay within -12:00..+14:00). */
export const MAX_CALENDAR_OFFSET_MS = 86_400_000 - 60_000;

const DAY_MS = UNIT_MS.day;
// 1970-01-01 was a Thursday: the first Monday 00:00 after the epoch is day 4.
const MONDAY_MS = 4 * DAY_MS;
// Days from 0000-03-01 to 1970-01-01 in the proleptic Gregorian calendar.
const EPOCH_SHIFT_DAYS = 719_468;
const DAYS_PER_ERA = 146_097; // 400 years

/**
 * Day number (days since 1970-01-01) of the first day of month `month` (1-12) of `year`. Years are
 * counted from March, so that February, with its leap day, ends each one.
 */
export function daysFromCivil(year: number, month: number): number {
  const y = month <= 2 ? year - 1 : year;
  const era = Math.floor(y / 400);
  const yearOfEra = y - era * 400;
  const monthFromMarch = (month + 9) % 12;
  const dayOfYear = Math.floor((153 * monthFromMarch + 2) / 5);
  const dayOfEra = yearOfEra * 365 + Math.floor(yearOfEra / 4) - Math.floor(yearOfEra / 100) + dayOfYear;
  return era * DAYS_PER_ERA + dayOfEra - EPOCH_SHIFT_DAYS;
}

/** The year and month (1-12) of a day number: the inverse of daysFromCivil on first days of months. */
export function civilFromDays(days: number): { readonly year: number; readonly month: number } {
  const z = days + EPOCH_SHIFT_DAYS;
  const era = Math.floor(z / DAYS_PER_ERA);
  const dayOfEra = z - era * DAYS_PER_ERA;
  const yearOfEra = Math.floor((dayOfEra - Math.floor(dayOfEra / 1460) + Math.floor(dayOfEra / 36_524) - Math.floor(dayOfEra / 146_096)) / 365);
  const dayOfYear = dayOfEra - (365 * yearOfEra + Math.floor(yearOfEra / 4) - Math.floor(yearOfEra / 100));
  const monthFromMarch = Math.floor((5 * dayOfYear + 2) / 153);
  const month = monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9;
  const year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0);
  return { year, month };
}

/** The calendar period of `unit` containing `nowMs`, on a clock `offsetMs` ahead of UTC. */
export function calendarPeriod(nowMs: number, unit: Unit, offsetMs: number): CalendarPeriod {
  const local = nowMs + offsetMs;
  let start: number;
  let end: number;
  if (unit === 'month' || unit === 'year') {
    const { year, month } = civilFromDays(Math.floor(local / DAY_MS));
    if (unit === 'year') {
      start = daysFromCivil(year, 1) * DAY_MS;
      end = daysFromCivil(year + 1, 1) * DAY_MS;
    } else {
      start = daysFromCivil(year, month) * DAY_MS;
      end = month === 12 ? daysFromCivil(year + 1, 1) * DAY_MS : daysFromCivil(year, month + 1) * DAY_MS;
    }
  } else {
    // Units of one length: the local epoch (a Monday for weeks) is on a boundary.
    const w = UNIT_MS[unit];
    const anchor = unit === 'week' ? MONDAY_MS : 0;
    start = local - floorMod(local - anchor, w);
    end = start + w;
  }
  return { startMs: start - offsetMs, endMs: end - offsetMs };
}

function floorMod(a: number, n: number): number {
  const r = a % n;
  return r < 0 ? r + n : r;
}

/** `+05:30` for 19,800,000 ms; `UTC` for 0. */
export function formatOffset(offsetMs: number): string {
  if (offsetMs === 0) return 'UTC';
  const minutes = Math.abs(offsetMs) / 60_000;
  const hh = String(Math.floor(minutes / 60)).padStart(2, '0');
  const mm = String(minutes % 60).padStart(2, '0');
  return `${offsetMs < 0 ? '-' : '+'}${hh}:${mm}`;
}
