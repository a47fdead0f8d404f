/**
 * Receive window shared by every connection of a server. A connection's receive window is what its
 * client may send before the server has read it: request bytes the process may have to hold. The
 * protocol grants each connection 65,535 bytes that cannot be taken back; everything a connection
 * opens beyond that (up to its own limit) is borrowed from this budget and given back when the
 * connection closes, so the bytes all connections together may have buffered stay within
 * `connections x 65,535 + limit` however many connections there are.
 */
export class WindowBudget {
  private lent = 0;

  constructor(readonly limitBytes: number) {}

  /** Bytes lent now, to all connections together. */
  get lentBytes(): number {
    return this.lent;
  }

  /** Lends up to `wanted` bytes; returns what was lent (0 when the budget is spent). */
  borrow(wanted: number): number {
    const granted = Math.max(0, Math.min(wanted, this.limitBytes - this.lent));
    this.lent += granted;
    return granted;
  }

  /** Gives back bytes lent before. */
  giveBack(bytes: number): void {
    this.lent -= bytes;
  }
}
