import { PartGate, type GatedCall } from '../../../../src/store/redis/part-gate';
import { FakeTimers, settlePromises } from '../../../helpers/fake-timers';

/** A gate of capacity 10 whose parts' sends are held open until answered by hand. */
function setUp(options: { capacity?: number; maxWaiting?: number } = {}) {
  const timers = new FakeTimers();
  const gate = new PartGate({
    capacity: options.capacity ?? 10,
    maxWaiting: options.maxWaiting ?? 100,
    maxWaitMs: 50,
    busyError: (why) => new Error(`busy: ${why}`),
    timers,
  });
  const sent: { label: string; answer: (ok: boolean) => void }[] = [];
  const outcomes = new Map<string, string>();
  /** Passes a part of `weight` for `call`; its send is recorded, and answered later with answer(). */
  const pass = (label: string, weight: number, call: GatedCall): void => {
    gate
      .pass(
        weight,
        call,
        () => new Promise<string>((resolve, reject) => sent.push({ label, answer: (ok) => (ok ? resolve(label) : reject(new Error('failed'))) })),
      )
      .then(
        () => outcomes.set(label, 'ok'),
        (err: Error) => outcomes.set(label, err.message),
      );
  };
  const answer = async (label: string, ok = true): Promise<void> => {
    sent.find((s) => s.label === label)!.answer(ok);
    await settlePromises();
  };
  return { timers, gate, sent, outcomes, pass, answer, labels: () => sent.map((s) => s.label) };
}

describe('the part gate', () => {
  it('lets parts on the wire up to its capacity, then one by one as others answer, in arrival order', async () => {
    const t = setUp();
    const a: GatedCall = { failed: false };
    const b: GatedCall = { failed: false };
    t.pass('a1', 6, a);
    t.pass('a2', 6, a);
    t.pass('b1', 3, b);
    t.pass('a3', 1, a);
    await settlePromises();
    // b1 would fit beside a1, but a2 came first: no overtaking.
    expect(t.labels()).toEqual(['a1']);
    expect([t.gate.inFlight, t.gate.waiting]).toEqual([6, 10]);
    await t.answer('a1');
    expect(t.labels()).toEqual(['a1', 'a2', 'b1', 'a3']);
    expect([t.gate.inFlight, t.gate.waiting]).toEqual([10, 0]);
    for (const l of ['a2', 'b1', 'a3']) await t.answer(l);
    expect(t.gate.inFlight).toBe(0);
    expect([...t.outcomes.values()]).toEqual(['ok', 'ok', 'ok', 'ok']);
  });

  it('lets a part heavier than its capacity pass alone', async () => {
    const t = setUp();
    t.pass('big', 25, { failed: false });
    t.pass('small', 1, { failed: false });
    await settlePromises();
    expect(t.labels()).toEqual(['big']);
    await t.answer('big');
    expect(t.labels()).toEqual(['big', 'small']);
  });

  it('fails a part that waited too long, and turns away the other waiting parts of its call', async () => {
    const t = setUp();
    const a: GatedCall = { failed: false };
    const b: GatedCall = { failed: false };
    t.pass('b1', 10, b);
    t.pass('a1', 5, a);
    t.pass('a2', 5, a);
    await settlePromises();
    t.timers.advance(50);
    await settlePromises();
    expect(t.outcomes.get('a1')).toBe('busy: a part waited 50 ms for its turn');
    expect(t.outcomes.get('a2')).toBe('busy: another part of this call failed');
    expect(a.failed).toBe(true);
    expect(t.gate.waiting).toBe(0);
    await t.answer('b1');
    expect(t.labels()).toEqual(['b1']);
    expect(t.timers.pendingTimers).toBe(0);
  });

  it('turns away the waiting parts of a call whose part on the wire failed, and lets the next call on', async () => {
    const t = setUp();
    const a: GatedCall = { failed: false };
    const b: GatedCall = { failed: false };
    t.pass('a1', 10, a);
    t.pass('a2', 10, a);
    t.pass('b1', 10, b);
    await settlePromises();
    await t.answer('a1', false);
    expect(t.outcomes.get('a1')).toBe('failed');
    expect(t.outcomes.get('a2')).toBe('busy: another part of this call failed');
    expect(t.labels()).toEqual(['a1', 'b1']);
    // A part of a failed call arriving later is turned away at once.
    t.pass('a3', 1, a);
    await settlePromises();
    expect(t.outcomes.get('a3')).toBe('busy: another part of this call failed');
  });

  it('admits a call only while its counters fit in the waiting room', async () => {
    const t = setUp({ maxWaiting: 20 });
    const a: GatedCall = { failed: false };
    t.pass('a1', 10, a);
    t.pass('a2', 10, a);
    t.pass('a3', 10, a);
    await settlePromises();
    expect(t.gate.waiting).toBe(20);
    expect(t.gate.admits(1)).toBe(false);
    await t.answer('a1');
    expect(t.gate.admits(10)).toBe(true);
  });
});
