import { CallBatcher, type CallBatch, type PendingCall } from '../../../../src/store/redis/batcher';
import { FakeTimers, settlePromises } from '../../../helpers/fake-timers';

interface Sent {
  readonly batch: CallBatch<string, string>;
  readonly calls: readonly PendingCall<string, string>[];
  readonly from: number;
  readonly to: number;
  readonly weight: number;
}

/** A batcher of string requests (weight: their length) whose sends are recorded, not answered. */
function setUp(options: { grouped?: boolean; maxCalls?: number; maxWeight?: number } = {}) {
  const timers = new FakeTimers();
  const sent: Sent[] = [];
  let expired = 0;
  const batcher = new CallBatcher<string, string>({
    timeoutMs: 10,
    maxCallsPerSend: options.maxCalls ?? 64,
    maxWeightPerSend: options.maxWeight ?? 256,
    weightOf: (request) => request.length,
    send: (batch, calls, from, to, weight) => sent.push({ batch, calls, from, to, weight }),
    grouped: options.grouped ?? false,
    timeoutError: () => new Error('timed out'),
    onExpired: () => expired++,
    timers,
  });
  const requestsOf = (s: Sent): string[] => s.calls.slice(s.from, s.to).map((c) => c.request);
  /** Answers every call of a send with its request upper-cased. */
  const answer = (s: Sent): void => {
    for (let i = s.from; i < s.to; i++) batcher.resolve(s.batch, s.calls[i], s.calls[i].request.toUpperCase());
  };
  return { timers, sent, batcher, requestsOf, answer, expired: () => expired };
}

/** Tracks a promise's outcome without awaiting it. */
function watch<T>(p: Promise<T>): { value?: T; error?: Error } {
  const state: { value?: T; error?: Error } = {};
  p.then(
    (v) => (state.value = v),
    (e: Error) => (state.error = e),
  );
  return state;
}

describe('CallBatcher', () => {
  it('sends a lone call at the end of its loop turn, never before', async () => {
    const { timers, sent, batcher, requestsOf, answer } = setUp();
    const a = watch(batcher.enqueue('a', 0));
    expect(sent).toHaveLength(0);
    timers.runImmediates();
    expect(sent.map(requestsOf)).toEqual([['a']]);
    answer(sent[0]);
    await settlePromises();
    expect(a.value).toBe('A');
  });

  it('sends the calls of one turn together, and those made while a batch is on the wire once it is answered', async () => {
    const { timers, sent, batcher, requestsOf, answer } = setUp();
    batcher.enqueue('a', 0);
    batcher.enqueue('b', 0);
    timers.runImmediates();
    expect(sent.map(requestsOf)).toEqual([['a', 'b']]);
    const c = watch(batcher.enqueue('c', 0));
    const d = watch(batcher.enqueue('d', 0));
    timers.runImmediates();
    // One batch on the wire at a time: c and d wait for it.
    expect(sent).toHaveLength(1);
    answer(sent[0]);
    expect(sent.map(requestsOf)).toEqual([
      ['a', 'b'],
      ['c', 'd'],
    ]);
    answer(sent[1]);
    await settlePromises();
    expect([c.value, d.value]).toEqual(['C', 'D']);
  });

  it('cuts a batch at maxCallsPerSend calls and maxWeightPerSend weight; a heavier call goes alone', () => {
    const { timers, sent, batcher, requestsOf } = setUp({ maxCalls: 3, maxWeight: 4 });
    for (const r of ['a', 'b', 'c', 'd', 'eee', 'ff', 'gggggg', 'h']) batcher.enqueue(r, 0);
    timers.runImmediates();
    expect(sent.map(requestsOf)).toEqual([['a', 'b', 'c'], ['d', 'eee'], ['ff'], ['gggggg'], ['h']]);
    expect(sent.map((s) => s.weight)).toEqual([3, 4, 2, 6, 1]);
  });

  it('never sends calls of different groups together when grouped', () => {
    const { timers, sent, batcher, requestsOf } = setUp({ grouped: true });
    batcher.enqueue('a', 7);
    batcher.enqueue('b', 9);
    batcher.enqueue('c', 7);
    timers.runImmediates();
    expect(sent.map(requestsOf)).toEqual([['a', 'c'], ['b']]);
  });

  it('fails unanswered calls timeoutMs after their batch is sent, one loop turn later, with the calls queued behind it', async () => {
    const { timers, sent, batcher, expired } = setUp();
    const a = watch(batcher.enqueue('a', 0));
    timers.advance(50); // waiting to be sent does not count
    timers.runImmediates();
    expect(sent).toHaveLength(1);
    const b = watch(batcher.enqueue('b', 0));
    timers.runImmediates();
    timers.advance(9);
    timers.runImmediates();
    await settlePromises();
    expect(a.error).toBeUndefined();
    timers.advance(1);
    await settlePromises();
    // The deadline has passed, but an answer read in this turn's poll would still count.
    expect(a.error).toBeUndefined();
    timers.runImmediates();
    await settlePromises();
    expect(a.error?.message).toBe('timed out');
    expect(b.error?.message).toBe('timed out');
    expect(expired()).toBe(2);
    // The next call goes out on its own.
    batcher.enqueue('c', 0);
    timers.runImmediates();
    expect(sent).toHaveLength(2);
  });

  it('ignores an answer that comes after the deadline, and cancels the deadline of an answered batch', async () => {
    const { timers, sent, batcher, answer, expired } = setUp();
    const a = watch(batcher.enqueue('a', 0));
    timers.runImmediates();
    timers.advance(10);
    timers.runImmediates();
    expect(sent[0].calls[0].settled).toBe(true);
    answer(sent[0]);
    await settlePromises();
    expect(a.value).toBeUndefined();
    expect(a.error?.message).toBe('timed out');

    const b = watch(batcher.enqueue('b', 0));
    timers.runImmediates();
    answer(sent[1]);
    expect(timers.pendingTimers).toBe(0);
    await settlePromises();
    expect(b.value).toBe('B');
    expect(expired()).toBe(1);
  });

  it('rejects the unsettled calls of a send, calling onEach before each, and sends what waited', async () => {
    const { timers, sent, batcher, requestsOf } = setUp({ maxCalls: 1 });
    const a = watch(batcher.enqueue('a', 0));
    const b = watch(batcher.enqueue('b', 0));
    timers.runImmediates();
    batcher.resolve(sent[0].batch, sent[0].calls[0], 'A');
    const c = watch(batcher.enqueue('c', 0));
    let counted = 0;
    const err = new Error('down');
    batcher.reject(sent[0].batch, sent[0].calls, 0, 2, err, () => counted++);
    await settlePromises();
    expect([a.value, b.error, counted]).toEqual(['A', err, 1]);
    expect(sent.map(requestsOf)).toEqual([['a'], ['b'], ['c']]);
    expect(c.error).toBeUndefined();
  });

  it('after close, rejects the calls not yet sent and still settles those on the wire', async () => {
    const { timers, sent, batcher, answer } = setUp();
    const a = watch(batcher.enqueue('a', 0));
    timers.runImmediates();
    const b = watch(batcher.enqueue('b', 0));
    const closed = new Error('closed');
    batcher.close(closed);
    answer(sent[0]);
    await settlePromises();
    expect([a.value, b.error]).toEqual(['A', closed]);
    expect(sent).toHaveLength(1);
  });
});
