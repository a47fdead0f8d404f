import { Writable } from 'node:stream';
import { createLogger } from '../../src/log';

/** A JSON logger at info whose lines the test reads. */
export function capturedLogger(): { logger: ReturnType<typeof createLogger>; lines: () => { level: number; msg: string }[]; text: () => string } {
  let text = '';
  const destination = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      text += chunk.toString();
      callback();
    },
  });
  const logger = createLogger({ level: 'info', format: 'json', destination });
  return {
    logger,
    text: () => text,
    lines: () =>
      text
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => JSON.parse(l) as { level: number; msg: string }),
  };
}
