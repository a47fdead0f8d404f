import pino from 'pino';
import pretty from 'pino-pretty';
import type { LogLevel } from './settings/settings';

/**
 * The process logger. One line per event; the request path logs nothing at the default level.
 * `text` goes through pino-pretty on the main thread (a synchronous stream, so no worker thread
 * and no lost lines at exit); `json` is plain pino.
 */

export type Logger = pino.Logger;

export interface LoggerOptions {
  readonly level: LogLevel | 'silent';
  readonly format: 'text' | 'json';
  /** Where lines go; stdout when omitted. */
  readonly destination?: NodeJS.WritableStream;
}

/** Builds the process logger from LOG_LEVEL and LOG_FORMAT. */
export function createLogger(options: LoggerOptions): Logger {
  const base = { level: options.level, base: { service: 'slidegate' } };
  if (options.format === 'json') {
    return options.destination ? pino(base, options.destination) : pino(base);
  }
  const stream = pretty({
    sync: true,
    colorize: false,
    translateTime: 'SYS:standard',
    ignore: 'pid,hostname,service',
    singleLine: true,
    destination: options.destination ?? 1,
  });
  return pino(base, stream);
}

/** A logger that writes nothing (tests, library use). */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
