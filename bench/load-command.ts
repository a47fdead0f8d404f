import type { LoadResult } from './load-result';

/** The value after `name` in argv, if any. */
export function arg(args: readonly string[], name: string): string | undefined {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
}

/** Ends a load-generator command: one JSON LoadResult on stdout and exit 0, or the error on stderr and exit 1. */
export function printLoadResult(result: Promise<LoadResult>): void {
  result.then(
    (r) => {
      process.stdout.write(JSON.stringify(r) + '\n');
      process.exit(0);
    },
    (e: unknown) => {
      process.stderr.write(`${e instanceof Error ? e.message : String(e)}\n`);
      process.exit(1);
    },
  );
}
