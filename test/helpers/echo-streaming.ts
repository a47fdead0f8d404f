import type { StreamingCall, StreamingCloseReason, StreamingMethod } from '../../src/service/streaming';

/**
 * A test-only bidirectional streaming method, `/slidegate.test.Echo/Bidi`: each request message is
 * sent back as it is, except commands (UTF-8 text):
 *   `hold`            the handler keeps this message (its promise stays pending) until release()
 *   `flood N SIZE`    N messages of SIZE bytes, each its index in its first 4 bytes, written while
 *                     write() says so, the rest after each onWritable
 *   `end CODE`        ends the call with that status
 *   `throw`           the handler throws
 * The client's half-close ends the call with OK. What happened to every call is recorded.
 */

export const ECHO_PATH = '/slidegate.test.Echo/Bidi';

export interface EchoCall {
  readonly call: StreamingCall;
  readonly received: string[];
  closed: StreamingCloseReason | undefined;
  /** Messages written, times write() returned false, and times onWritable came. */
  written: number;
  refusals: number;
  writables: number;
}

export class EchoMethod implements StreamingMethod {
  readonly path = ECHO_PATH;
  readonly calls: EchoCall[] = [];
  private releases: Array<() => void> = [];

  constructor(readonly maxMessageBytes?: number) {}

  /** Lets every held message go. */
  release(): void {
    const releases = this.releases;
    this.releases = [];
    for (const release of releases) release();
  }

  get held(): number {
    return this.releases.length;
  }

  open(call: StreamingCall) {
    const record: EchoCall = { call, received: [], closed: undefined, written: 0, refusals: 0, writables: 0 };
    this.calls.push(record);
    let flood: (() => void) | undefined;
    return {
      onMessage: (message: Buffer): void | Promise<void> => {
        const text = message.toString();
        record.received.push(text.length > 64 ? `${text.length} bytes` : text);
        const [command, a, b] = text.split(' ');
        if (command === 'hold') return new Promise<void>((resolve) => this.releases.push(resolve));
        if (command === 'end') return call.end(Number(a), 'ended on request');
        if (command === 'throw') throw new Error('handler failed on purpose');
        if (command === 'flood') {
          let next = 0;
          const total = Number(a);
          const size = Number(b);
          flood = () => {
            while (next < total) {
              const m = Buffer.alloc(size, 0x61);
              m.writeUInt32BE(next++, 0);
              record.written++;
              if (!call.write(m)) {
                record.refusals++;
                return;
              }
            }
          };
          flood();
          return;
        }
        call.write(message);
      },
      onWritable: () => {
        record.writables++;
        flood?.();
      },
      onHalfClose: () => call.end(0),
      onClose: (reason: StreamingCloseReason) => {
        record.closed = reason;
      },
    };
  }
}
