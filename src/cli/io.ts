/** Where a subcommand writes; tests capture it, the binary uses the process streams. */
export interface CliIo {
  out(line: string): void;
  err(line: string): void;
}

/** The process's stdout and stderr, one line per call. */
export const processIo: CliIo = {
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
};
