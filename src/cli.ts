#!/usr/bin/env node
import * as fs from 'node:fs';
import * as path from 'node:path';
import { CLIENT_HELP, runClient } from './cli/client';
import { processIo, type CliIo } from './cli/io';
import { OVERRIDES_HELP, runOverrides } from './cli/overrides';
import { runValidate, VALIDATE_HELP } from './cli/validate';
import { main } from './main';

/**
 * The `slidegate` command: `serve` (the same as node dist/src/main.js), `validate PATH`, `client`
 * (one ShouldRateLimit call), and `overrides` (the runtime override API). Without a command it
 * prints the help and exits 1: starting a server that listens on every interface is never a
 * default. Exit codes are each subcommand's.
 */

const SERVE_HELP = [
  'usage: slidegate serve',
  "  Runs the service. Every setting comes from the environment (see the README's settings table); by default",
  '  gRPC (ShouldRateLimit, grpc.health.v1) on 0.0.0.0:8081 (GRPC_HOST, GRPC_PORT), HTTP (/healthcheck, /livez,',
  '  /readyz, /json, /metrics) on 0.0.0.0:8080 (HOST, PORT), debug (/rlconfig, /rlmatch) on 0.0.0.0:6070',
  '  (DEBUG_HOST, DEBUG_PORT), config from RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config or CONFIG_PATH.',
].join('\n');

export const USAGE = [
  'usage: slidegate <command> [options]',
  '',
  'commands:',
  '  serve                  run the service; settings from the environment, gRPC on 0.0.0.0:8081 by default',
  '  validate PATH          check a config file or directory and describe its rules; exit 0 valid, 1 not',
  '    --default-algorithm NAME   algorithm of rules that name none (default: DEFAULT_ALGORITHM or sliding_window)',
  '    --ignore-dot-files         skip files and directories whose name starts with a dot',
  '  client                 send one ShouldRateLimit call and print the answer; exit 0 OK, 2 OVER_LIMIT, 1 error',
  '    --domain D                 the rate-limit domain (required)',
  '    --descriptor k=v[,k=v]     one descriptor, entries in order (required; repeat for several)',
  '    --hits N                   hits of every descriptor; 0 checks without counting (default: 1)',
  '    --addr HOST:PORT           the gRPC address (default: 127.0.0.1:8081)',
  "    --debug-addr HOST:PORT     the debug port, asked for each rule's window (default: the --addr host, port 6070)",
  '    --timeout-ms MS            deadline of the call (default: 2000)',
  '  overrides set|get|list|delete|import   runtime overrides through the API on the HTTP port (token: SLIDEGATE_ADMIN_TOKEN);',
  '                         exit 0 done, 3 no such override, 1 error',
  '',
  '  slidegate <command> --help   help of one command',
  '  slidegate --version          the version',
].join('\n');

/** The package's version, from the package.json above this file (src/ when run by ts-node or jest, dist/src/ when built). */
export function packageVersion(): string {
  for (let dir = __dirname; ; dir = path.dirname(dir)) {
    const file = path.join(dir, 'package.json');
    if (fs.existsSync(file)) {
      const pkg = JSON.parse(fs.readFileSync(file, 'utf8')) as { name?: string; version?: string };
      if (pkg.name === 'slidegate' && pkg.version) return pkg.version;
    }
    if (path.dirname(dir) === dir) return 'unknown';
  }
}

const wantsHelp = (args: readonly string[]): boolean => args.includes('--help') || args.includes('-h');

/** Runs a subcommand; resolves to its exit code, or undefined for `serve` (which runs until a signal). */
export async function runCli(argv: readonly string[], io: CliIo = processIo): Promise<number | undefined> {
  const [command, ...rest] = argv;
  switch (command) {
    case 'validate':
      if (wantsHelp(rest)) return help(io, VALIDATE_HELP);
      return runValidate(rest, io);
    case 'client':
      if (wantsHelp(rest)) return help(io, CLIENT_HELP);
      return runClient(rest, io);
    case 'overrides':
      if (wantsHelp(rest)) return help(io, OVERRIDES_HELP);
      return runOverrides(rest, io);
    case 'serve':
      if (wantsHelp(rest)) return help(io, SERVE_HELP);
      if (rest.length > 0) {
        io.err(`serve takes no arguments (settings come from the environment), got: ${rest.join(' ')}\n${SERVE_HELP}`);
        return 1;
      }
      await main();
      return undefined;
    case 'help':
    case '--help':
    case '-h':
      return help(io, USAGE);
    case '--version':
    case '-v':
    case 'version':
      io.out(`slidegate ${packageVersion()}`);
      return 0;
    case undefined:
      io.err(USAGE);
      return 1;
    default:
      io.err(`unknown command "${command}"\n${USAGE}`);
      return 1;
  }
}

function help(io: CliIo, text: string): number {
  io.out(text);
  return 0;
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
