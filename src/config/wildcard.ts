/**
 * Wildcard values: '*' stands for any run of characters, possibly empty; every other character is
 * literal. Patterns are compiled once at config load into a plain string test: no regular
 * expression, so a hostile value cannot trigger backtracking, and the common shapes (`foo*`, `*bar`,
 * `*`) cost one startsWith/endsWith.
 */

/** True when a rule value is a pattern rather than an exact value. */
export function isWildcard(value: string): boolean {
  return value.includes('*');
}

/** Compiles a pattern into a matcher of whole values. */
export function compileWildcard(pattern: string): (value: string) => boolean {
  // Runs of '*' mean the same as one; collapsing them keeps the literal parts non-empty below.
  const parts = pattern.split(/\*+/);
  if (parts.length === 1) return (value) => value === pattern;
  const head = parts[0];
  const tail = parts[parts.length - 1];
  const middle = parts.slice(1, -1);
  const fixed = head.length + tail.length;

  if (middle.length === 0) {
    if (head === '' && tail === '') return () => true;
    if (tail === '') return (value) => value.startsWith(head);
    if (head === '') return (value) => value.endsWith(tail);
    return (value) => value.length >= fixed && value.startsWith(head) && value.endsWith(tail);
  }

  return (value) => {
    if (value.length < fixed || !value.startsWith(head) || !value.endsWith(tail)) return false;
    // Leftmost placement of each middle part is optimal for '*'-only patterns, so one forward
    // scan decides: O(value length x pattern length) at worst, no backtracking.
    const end = value.length - tail.length;
    let at = head.length;
    for (const part of middle) {
      const found = value.indexOf(part, at);
      if (found < 0 || found + part.length > end) return false;
      at = found + part.length;
    }
    return true;
  };
}
