import type { Clock } from '../../src/limiter/types';

/** A Clock that only moves when told to: unit tests pin time and assert exact keys and resets. */
export class FakeClock implements Clock {
  constructor(private now = 0) {}

  /** The pinned time, ms. */
  nowMs(): number {
    return this.now;
  }

  /** Moves time forward by `ms` (never backward). */
  advance(ms: number): void {
    if (ms < 0) throw new RangeError('a FakeClock never goes back');
    this.now += ms;
  }

  /** Pins time at `ms`. */
  set(ms: number): void {
    this.now = ms;
  }
}
