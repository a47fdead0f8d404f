import { existsSync, readFileSync, writeFileSync } from 'node:fs';

/** Renders a Markdown table; numbers are already formatted by the caller. */
export function markdownTable(header: readonly string[], rows: readonly (readonly string[])[], align?: readonly ('l' | 'r')[]): string {
  const sep = header.map((_, i) => ((align?.[i] ?? 'l') === 'r' ? '---:' : '---'));
  const line = (cells: readonly string[]): string => `| ${cells.join(' | ')} |`;
  return [line(header), line(sep), ...rows.map(line)].join('\n');
}

/**
 * Replaces the text between `<!-- NAME:start -->` and `<!-- NAME:end -->` in a file.
 * Returns false (and leaves the file alone) when the file or either marker is missing,
 * so a generated table never lands anywhere a person did not reserve for it.
 */
export function replaceBetweenMarkers(file: string, name: string, content: string): boolean {
  if (!existsSync(file)) return false;
  const text = readFileSync(file, 'utf8');
  const start = `<!-- ${name}:start -->`;
  const end = `<!-- ${name}:end -->`;
  const a = text.indexOf(start);
  const b = text.indexOf(end);
  if (a < 0 || b < a) return false;
  const next = `${text.slice(0, a + start.length)}\n${content.trim()}\n${text.slice(b)}`;
  if (next !== text) writeFileSync(file, next);
  return true;
}

/** Formats a number with a fixed count of decimals, or "-" when it is not finite. */
export function fmt(n: number | undefined, decimals = 0): string {
  if (n === undefined || !Number.isFinite(n)) return '-';
  return n.toLocaleString('en-US', { minimumFractionDigits: decimals, maximumFractionDigits: decimals });
}
