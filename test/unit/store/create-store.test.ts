import { Writable } from 'node:stream';
import { createLogger } from '../../../src/log';
import { warnIfTimeoutBelowRoundTrip } from '../../../src/store/create-store';

function capture(): { lines: string[]; logger: ReturnType<typeof createLogger> } {
  const lines: string[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(
        ...chunk
          .toString()
          .split('\n')
          .filter((l) => l !== ''),
      );
      done();
    },
  });
  return { lines, logger: createLogger({ level: 'warn', format: 'json', destination }) };
}

describe('STORE_TIMEOUT_MS against the measured Redis round trip', () => {
  it('warns, naming STORE_TIMEOUT_MS and the round trip, when the deadline is under twice the round trip', () => {
    const { lines, logger } = capture();
    warnIfTimeoutBelowRoundTrip(8, 10, logger);
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0]).msg).toMatch(/^STORE_TIMEOUT_MS=10 is below twice the measured Redis round trip \(8\.0 ms/);
  });

  it('says nothing when the deadline leaves room, or when nothing was measured', () => {
    const { lines, logger } = capture();
    warnIfTimeoutBelowRoundTrip(5, 10, logger);
    warnIfTimeoutBelowRoundTrip(0.2, 10, logger);
    warnIfTimeoutBelowRoundTrip(undefined, 1, logger);
    expect(lines).toEqual([]);
  });
});
