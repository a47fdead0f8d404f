import type { CounterRequest } from '../../../../src/limiter/store';
import { counterProblem } from '../../../../src/store/redis/script';

const counter = (over: Partial<CounterRequest>): CounterRequest => ({
  key: 'edge|sw3600000|k=v',
  algorithm: 'sliding_window',
  windowMs: 3_600_000,
  limit: 0,
  hits: 1,
  burst: 0,
  subWindows: 1,
  ...over,
});

describe('the checks a counter passes before it joins a DECIDE batch', () => {
  it('accept a limit of 0 (requests_per_unit: 0 denies everything) on every algorithm', () => {
    for (const algorithm of ['sliding_window', 'fixed_window', 'sliding_log', 'token_bucket', 'leaky_bucket'] as const) {
      expect(counterProblem(counter({ algorithm }))).toBeUndefined();
    }
  });

  it('read a burst only for the buckets, where a positive limit needs a burst of at least 1', () => {
    expect(counterProblem(counter({ limit: 5, burst: 0 }))).toBeUndefined();
    expect(counterProblem(counter({ algorithm: 'token_bucket', limit: 5, burst: 0 }))).toBe('burst 0 is not an integer from 1 to 4294967295');
    expect(counterProblem(counter({ algorithm: 'leaky_bucket', limit: 5, burst: 5 }))).toBeUndefined();
  });
});
