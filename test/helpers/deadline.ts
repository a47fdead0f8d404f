/**
 * Real-time cases whose expectation holds only before some instant (a call just before a window
 * ends must be denied): on a loaded machine a sleep or a call may end past that instant, where the
 * expectation says nothing. Such a step throws `Stretched` instead of asserting, and `untilUnstretched`
 * runs the case again (on fresh counters) a few times; every expectation of the attempt that
 * completes holds exactly, and a case stretched on every attempt fails naming the step.
 */

/** A step ended after the instant its expectation depends on. */
export class Stretched extends Error {}

/** Throws `Stretched` when `nowMs` is not before `deadlineMs`; `what` names the step. */
export function requireBefore(deadlineMs: number, nowMs: number, what: string): void {
  if (nowMs >= deadlineMs) throw new Stretched(`${what} ended ${nowMs - deadlineMs} ms after the instant its expectation needs`);
}

/** Runs `attempt` until one is not stretched; after `tries` stretched attempts, fails with the last one's reason. */
export async function untilUnstretched(attempt: () => Promise<void>, tries = 4): Promise<void> {
  for (let i = 1; ; i++) {
    try {
      return await attempt();
    } catch (err) {
      if (!(err instanceof Stretched) || i >= tries) throw err;
    }
  }
}
