import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';

/** `make help` (the default goal) lists every target of the Makefile, each with a description. */

const ROOT = path.resolve(__dirname, '..', '..');

/** Rule names of the Makefile: `name:` at a line's start, variable assignments (`:=`) and file targets left out. */
function targets(): string[] {
  const text = fs.readFileSync(path.join(ROOT, 'Makefile'), 'utf8');
  return [...text.matchAll(/^([a-z][a-z-]*):(?!=)/gm)].map((m) => m[1]);
}

test('make help lists every target, with a description', () => {
  const help = execFileSync('make', ['-s', '--no-print-directory', 'help'], { cwd: ROOT, encoding: 'utf8' });
  const listed = [...help.matchAll(/^  make (\S+) +(\S.*)$/gm)].map((m) => m[1]);
  expect(targets().length).toBeGreaterThan(10);
  expect(listed.sort()).toEqual(targets().sort());
});

test('every target is declared .PHONY (none names a file)', () => {
  const text = fs.readFileSync(path.join(ROOT, 'Makefile'), 'utf8');
  const phony = /^\.PHONY:(.*)$/m.exec(text)![1].trim().split(/\s+/);
  expect(phony.sort()).toEqual(targets().sort());
});

test('plain `make` prints the help', () => {
  const plain = execFileSync('make', ['-s', '--no-print-directory'], { cwd: ROOT, encoding: 'utf8' });
  expect(plain).toContain('make test');
});
