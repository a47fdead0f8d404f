import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';

/** The repository root: the nearest ancestor holding package.json (works from bench/ and dist/bench/). */
export function repoRoot(from: string = __dirname): string {
  let dir = from;
  for (let i = 0; i < 10; i++) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    const up = dirname(dir);
    if (up === dir) break;
    dir = up;
  }
  return process.cwd();
}

/** Today's date as YYYY-MM-DD (UTC), used in result file names. */
export function isoDate(d: Date = new Date()): string {
  return d.toISOString().slice(0, 10);
}
