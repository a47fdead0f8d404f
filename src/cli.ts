#!/usr/bin/env node
import { runClient } from './cli/client';
import { processIo, type CliIo } from './cli/io';
import { runValidate } from './cli/validate';
import { main } from './main';

/**
 * The `slidegate` command: `serve` (the default, same as node dist/src/main.js), `validate PATH`,
 * and `client` (one ShouldRateLimit call). Exit codes are each subcommand's.
 */

const USAGE = [
  'usage: slidegate <command> [options]',
  '  serve                          run the service (settings from the environment)',
  '  validate PATH                  check a config file or directory and describe it',
  '  client --domain D --descriptor k=v[,k=v] [--descriptor ...] [--hits N] [--addr host:port]',
  '                                 send one ShouldRateLimit call; exit 0 OK, 2 OVER_LIMIT, 1 error',
].join('\n');

/** Runs a subcommand; resolves to its exit code, or undefined for `serve` (which runs until a signal). */
export async function runCli(argv: readonly string[], io: CliIo = processIo): Promise<number | undefined> {
  const [command, ...rest] = argv;
  switch (command) {
    case 'validate':
      return runValidate(rest, io);
    case 'client':
      return runClient(rest, io);
    case undefined:
    case 'serve':
      await main();
      return undefined;
    case 'help':
    case '--help':
    case '-h':
      io.out(USAGE);
      return 0;
    default:
      io.err(`unknown command "${command}"\n${USAGE}`);
      return 1;
  }
}

if (require.main === module) {
  // A reader that stops early (`slidegate client ... | head -1`) is not an error of ours.
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EPIPE') throw err;
  });
  runCli(process.argv.slice(2)).then(
    (code) => {
      if (code !== undefined) process.exitCode = code;
    },
    (err: unknown) => {
      process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
      process.exitCode = 1;
    },
  );
}
