import { algorithmCode, type Algorithm, type Entry, type Limit, type Unit } from './types';

/**
 * Counter identities. The encoding is injective: every component is escaped so that the
 * separators ('|', '=') never occur inside one, hence distinct (domain, entries, window, algorithm)
 * tuples can never share a counter — `(a_b, c)` and `(a, b_c)` stay apart, as do values holding
 * ':', '_', '{', '}', '|' or any other character. The result never contains '{' or '}', so the
 * Redis store can wrap it in a hash tag that keeps both windows of a descriptor in one slot.
 */

// '%' is the escape character itself; '|' and '=' separate; braces are reserved for hash tags;
// control characters are escaped to keep keys printable in redis-cli.
// eslint-disable-next-line no-control-regex -- control characters are exactly what must be escaped
const SPECIAL = /[%|={}\u0000-\u001f\u007f]/g;
// eslint-disable-next-line no-control-regex -- as above
const HAS_SPECIAL = /[%|={}\u0000-\u001f\u007f]/;

function escapeChar(c: string): string {
  return '%' + c.charCodeAt(0).toString(16).padStart(2, '0').toUpperCase();
}

/** Escapes one key component; identity for the common case of plain text. */
export function escapeComponent(s: string): string {
  return HAS_SPECIAL.test(s) ? s.replace(SPECIAL, escapeChar) : s;
}

/**
 * The prefix shared by all counters of one (domain, algorithm, window, sub-windows): computed once
 * per rule at config load, so a request only appends its entries. Sub-windows other than 1 change
 * the layout of the state (`/k` after the window); the limit, burst and strictness only change how
 * the same state is read, so they are not part of it.
 */
export function counterKeyPrefix(domain: string, algorithm: Algorithm, windowMs: number, subWindows = 1): string {
  const layout = subWindows === 1 ? '' : `/${subWindows}`;
  return `${escapeComponent(domain)}|${algorithmCode(algorithm)}${windowMs}${layout}`;
}

/**
 * The prefix of a rule's calendar-window counters (`calendar: true`). Its tag `fc-<unit>` is told
 * apart from every counterKeyPrefix tag (letters then digits); the period itself is the store's
 * to add (a Redis key names its period's start), so one prefix serves every period.
 */
export function calendarKeyPrefix(domain: string, unit: Unit): string {
  return `${escapeComponent(domain)}|fc-${unit}`;
}

/**
 * The prefix of a rule's in-flight limit (`concurrency`): it has no counter, only the reservations
 * of each descriptor. Its tag `cc` is told apart from every counterKeyPrefix and calendar tag.
 */
export function concurrencyKeyPrefix(domain: string): string {
  return `${escapeComponent(domain)}|cc`;
}

/**
 * The prefix of a limit's counters in `domain`: its in-flight book, its calendar windows, or its
 * (algorithm, window, sub-windows). A config's rule and a runtime override of it (./overrides.ts)
 * of the same shape get the same prefix, hence the same counter.
 */
export function limitKeyPrefix(domain: string, limit: Limit): string {
  if (limit.concurrency !== undefined) return concurrencyKeyPrefix(domain);
  if (limit.calendar === true) return calendarKeyPrefix(domain, limit.unit);
  return counterKeyPrefix(domain, limit.algorithm, limit.windowMs, limit.subWindows);
}

/** Full counter identity: prefix + each entry as `|key=value`. */
export function counterKey(prefix: string, entries: readonly Entry[]): string {
  let key = prefix;
  for (const e of entries) key += `|${escapeComponent(e.key)}=${escapeComponent(e.value)}`;
  return key;
}
