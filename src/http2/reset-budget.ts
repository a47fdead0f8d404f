/**
 * How many stream resets and refusals one connection may cause: a token bucket of `burst` tokens
 * refilled at `perSecond`. Every stream that ends without a normal exchange costs the server a
 * header decode, a handler start and a frame or two for nothing; a peer that makes the server do
 * that faster than any real client would (rapid reset, CVE-2023-44487; streams refused by the
 * concurrency limit; header lists over the limit) exhausts it and loses its connection.
 * nghttp2 allows 1,000 and 33 per second; those are the defaults of the settings that size it.
 */
export class ResetBudget {
  private tokens: number;
  private lastMs: number;

  constructor(
    private readonly burst: number,
    private readonly perSecond: number,
    nowMs: number,
  ) {
    this.tokens = burst;
    this.lastMs = nowMs;
  }

  /** Spends `cost` tokens at `nowMs`; false once the budget is overdrawn (cut the connection). */
  spend(cost: number, nowMs: number): boolean {
    const elapsed = Math.max(0, nowMs - this.lastMs);
    this.lastMs = nowMs;
    this.tokens = Math.min(this.burst, this.tokens + (elapsed * this.perSecond) / 1000) - cost;
    return this.tokens >= 0;
  }
}
