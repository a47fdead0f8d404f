import { HealthProbe } from '../../../../src/store/redis/health-probe';
import { FakeTimers, settlePromises } from '../../../helpers/fake-timers';

/** A probe whose PINGs wait in `pings` until the test answers them. */
function setUp() {
  const timers = new FakeTimers();
  const pings: { resolve: () => void; reject: (e: Error) => void }[] = [];
  let connected = true;
  const probe = new HealthProbe({
    ping: () => new Promise<void>((resolve, reject) => pings.push({ resolve, reject })),
    connected: () => connected,
    failureThreshold: 3,
    timeoutMs: 250,
    intervalMs: 200,
    timers,
  });
  return { timers, pings, probe, disconnect: () => (connected = false) };
}

describe('HealthProbe', () => {
  it('stays healthy and idle until a call fails, then probes once and stops after a success', async () => {
    const { timers, pings, probe } = setUp();
    timers.advance(10_000);
    expect(pings).toHaveLength(0);
    probe.callFailed();
    probe.callFailed(); // one probe at a time
    timers.advance(0);
    expect(pings).toHaveLength(1);
    pings[0].resolve();
    await settlePromises();
    timers.advance(10_000);
    expect(pings).toHaveLength(1);
    expect(probe.healthy()).toBe(true);
  });

  it('probes again after intervalMs when a call failed while a probe was out', async () => {
    const { timers, pings, probe } = setUp();
    probe.callFailed();
    timers.advance(0);
    probe.callFailed();
    pings[0].resolve();
    await settlePromises();
    timers.advance(199);
    expect(pings).toHaveLength(1);
    timers.advance(1);
    expect(pings).toHaveLength(2);
  });

  it('turns unhealthy after failureThreshold probes miss their deadline running, and healthy on the next answer', async () => {
    const { timers, pings, probe } = setUp();
    probe.callFailed();
    timers.advance(0);
    for (let i = 1; i <= 3; i++) {
      expect(probe.healthy()).toBe(true);
      timers.advance(250);
      // The deadline has passed; the miss counts only after the loop turn that could read the answer.
      expect(probe.consecutiveFailures).toBe(i - 1);
      timers.runImmediates();
      expect(probe.consecutiveFailures).toBe(i);
      // Below the threshold, confirm at once.
      if (i < 3) timers.advance(0);
      expect(pings).toHaveLength(i < 3 ? i + 1 : 3);
    }
    expect(probe.healthy()).toBe(false);
    // Past it, poll every intervalMs.
    timers.advance(199);
    expect(pings).toHaveLength(3);
    timers.advance(1);
    expect(pings).toHaveLength(4);
    pings[3].resolve();
    await settlePromises();
    expect(probe.healthy()).toBe(true);
    expect(probe.consecutiveFailures).toBe(0);
    // An answer after its deadline changes nothing.
    pings[0].resolve();
    await settlePromises();
    timers.advance(10_000);
    expect(pings).toHaveLength(4);
  });

  it('counts a failed PING as a failed probe', async () => {
    const { timers, pings, probe } = setUp();
    probe.callFailed();
    timers.advance(0);
    pings[0].reject(new Error('LOADING'));
    await settlePromises();
    expect(probe.consecutiveFailures).toBe(1);
    timers.advance(0);
    expect(pings).toHaveLength(2);
  });

  it('stops probing while disconnected, and forgets failures on reset', async () => {
    const { timers, pings, probe, disconnect } = setUp();
    probe.callFailed();
    timers.advance(0);
    pings[0].reject(new Error('down'));
    await settlePromises();
    disconnect();
    timers.advance(10_000);
    expect(pings).toHaveLength(1);
    expect(probe.consecutiveFailures).toBe(1);
    probe.reset();
    expect(probe.consecutiveFailures).toBe(0);
  });

  it('sends nothing once stopped', () => {
    const { timers, pings, probe } = setUp();
    probe.callFailed();
    probe.stop();
    probe.callFailed();
    timers.advance(10_000);
    expect(pings).toHaveLength(0);
  });
});
