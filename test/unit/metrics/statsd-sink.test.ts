import type { StatsdSink } from '../../../src/metrics/metrics';
import { SummingStatsdSink } from '../../../src/metrics/statsd-sink';

class Recording implements StatsdSink {
  readonly sent: [string, number][] = [];
  increment(stat: string, value: number): void {
    this.sent.push([stat, value]);
  }
  timing(): void {}
  close(callback?: (error?: Error) => void): void {
    callback?.();
  }
}

describe('SummingStatsdSink', () => {
  it('sums the names within its bounds until the flush, and sends increments of names beyond them as they come', () => {
    const client = new Recording();
    const sink = new SummingStatsdSink(client, '.__env=test', 60_000, { maxNames: 2, maxBytes: 1e6 });
    for (const name of ['a', 'b', 'a', 'c', 'c']) sink.increment(name, 1);
    expect(client.sent).toEqual([
      ['c.__env=test', 1],
      ['c.__env=test', 1],
    ]);
    sink.flush();
    expect(client.sent.slice(2)).toEqual([
      ['a.__env=test', 2],
      ['b.__env=test', 1],
    ]);
    sink.close();
  });

  it('bounds the names summed in bytes too', () => {
    const client = new Recording();
    const sink = new SummingStatsdSink(client, '', 60_000, { maxNames: 1_000, maxBytes: 200 });
    sink.increment('x'.repeat(100), 1);
    sink.increment('y'.repeat(100), 1);
    expect(client.sent).toEqual([['y'.repeat(100), 1]]);
    sink.close();
    expect(client.sent[1]).toEqual(['x'.repeat(100), 1]);
  });
});
