import { readFileSync } from 'node:fs';
import type { LoadResult } from './load-result';

/** The value after `name` in argv, if any. */
export function arg(args: readonly string[], name: string): string | undefined {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
}

/** What both node generators read from their command line: the frames file and the run's shape. */
export interface CommonLoadArgs {
  /** The file named by `fileFlag`: concatenated gRPC frames. */
  readonly data: Buffer;
  readonly connections: number;
  readonly durationS: number;
  /** Calls/s over all connections; undefined: as fast as it goes. */
  readonly rps?: number;
}

/** Parses `fileFlag FILE [--connections K] [--duration S] [--rps R]`; throws `usage` when FILE is missing. */
export function commonLoadArgs(args: readonly string[], fileFlag: string, defaultConnections: number, usage: string): CommonLoadArgs {
  const file = arg(args, fileFlag);
  if (!file) throw new Error(usage);
  const rps = arg(args, '--rps');
  return {
    data: readFileSync(file),
    connections: Number(arg(args, '--connections') ?? defaultConnections),
    durationS: Number(arg(args, '--duration') ?? 5),
    rps: rps === undefined ? undefined : Number(rps),
  };
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
