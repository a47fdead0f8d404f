import { decideAcrossSlots, mergePartAnswers, refundArgs, splitBySlot, type SlotPart, type PartAnswer } from '../../../../src/store/redis/cluster-slots';
import { keySlot } from '../../../../src/store/redis/key-slot';
import { algorithmCode } from '../../../../src/limiter/types';
import type { CounterDecision, CounterRequest } from '../../../../src/limiter/store';

const counter = (key: string, hits = 1): CounterRequest => ({ key, limit: 10, windowMs: 1000, algorithm: 'sliding_window', hits });
const keyOf = (c: CounterRequest): string => `p{${c.key}}`;
const allowed = (remaining: number): CounterDecision => ({ allowed: true, remaining, resetMs: 1000 });
const denied: CounterDecision = { allowed: false, remaining: 0, resetMs: 1000 };
const fulfilled = (decisions: CounterDecision[], tokens: string[]): PromiseSettledResult<PartAnswer> => ({ status: 'fulfilled', value: { decisions, tokens } });

describe('splitBySlot', () => {
  it('groups counters by the slot of their hash tag, in order of first appearance', () => {
    const counters = [counter('a'), counter('b'), counter('a'), counter('c')];
    expect(new Set([keySlot('a'), keySlot('b'), keySlot('c')]).size).toBe(3);
    expect(splitBySlot(counters, keyOf)).toEqual([
      [keySlot('a'), [0, 2]],
      [keySlot('b'), [1]],
      [keySlot('c'), [3]],
    ]);
  });
});

describe('mergePartAnswers', () => {
  const parts: SlotPart[] = [
    [1, [0, 2]],
    [2, [1]],
  ];

  it('keeps every charge when every slot allows, decisions in the call order', () => {
    const merged = mergePartAnswers(3, parts, [fulfilled([allowed(5), allowed(7)], ['t0', 't2']), fulfilled([allowed(6)], ['t1'])], false);
    expect(merged).toEqual({ decisions: [allowed(5), allowed(6), allowed(7)], failure: undefined, refund: [] });
  });

  it('refunds every slot when one denies, unless denied calls count', () => {
    const settled = [fulfilled([allowed(5), allowed(7)], ['t0', 't2']), fulfilled([denied], [''])];
    expect(mergePartAnswers(3, parts, settled, false).refund).toEqual([0, 1]);
    expect(mergePartAnswers(3, parts, settled, false).decisions).toEqual([allowed(5), denied, allowed(7)]);
    expect(mergePartAnswers(3, parts, settled, true).refund).toEqual([]);
  });

  it('fails with the first failure and refunds the slots that answered', () => {
    const down = new Error('down');
    const merged = mergePartAnswers(3, parts, [{ status: 'rejected', reason: down }, fulfilled([allowed(6)], ['t1'])], true);
    expect(merged.failure).toBe(down);
    expect(merged.refund).toEqual([1]);
  });
});

describe('refundArgs', () => {
  it('takes back only the charged counters: key count, keys, then algorithm, hits and token per key', () => {
    const counters = [counter('a', 2), counter('b'), counter('c', 3)];
    expect(refundArgs(counters, ['ta', '', 'tc'], keyOf)).toEqual([
      2,
      'p{a}',
      'p{c}',
      algorithmCode('sliding_window'),
      2,
      'ta',
      algorithmCode('sliding_window'),
      3,
      'tc',
    ]);
    expect(refundArgs(counters, ['', '', ''], keyOf)).toBeUndefined();
  });
});

describe('decideAcrossSlots', () => {
  function fakeSlots(answer: (counters: readonly CounterRequest[]) => CounterDecision[] | Error) {
    const calls: string[] = [];
    const refunds: [string[], readonly string[]][] = [];
    const decide = (counters: readonly CounterRequest[]): Promise<CounterDecision[]> => {
      const r = answer(counters);
      return r instanceof Error ? Promise.reject(r) : Promise.resolve(r);
    };
    return {
      calls,
      refunds,
      options: {
        keyOf,
        decideInSlot: (counters: readonly CounterRequest[], slot: number) => {
          calls.push(`atomic ${slot} ${counters.map((c) => c.key).join(',')}`);
          return decide(counters);
        },
        decidePart: async (counters: readonly CounterRequest[], slot: number) => {
          calls.push(`part ${slot} ${counters.map((c) => c.key).join(',')}`);
          return { decisions: await decide(counters), tokens: counters.map((c) => `tok-${c.key}`) };
        },
        refund: (counters: readonly CounterRequest[], tokens: readonly string[]) => refunds.push([counters.map((c) => c.key), tokens]),
      },
    };
  }

  it('decides counters of one slot in one atomic call', async () => {
    const f = fakeSlots((cs) => cs.map(() => allowed(1)));
    const slot = keySlot('x');
    await expect(decideAcrossSlots({ counters: [counter('x'), counter('x')], countDenied: false, ...f.options })).resolves.toEqual([allowed(1), allowed(1)]);
    expect(f.calls).toEqual([`atomic ${slot} x,x`]);
  });

  it('decides one part per slot and refunds them all when one slot denies', async () => {
    const f = fakeSlots((cs) => cs.map((c) => (c.key === 'b' ? denied : allowed(1))));
    const decisions = await decideAcrossSlots({ counters: [counter('a'), counter('b')], countDenied: false, ...f.options });
    expect(decisions).toEqual([allowed(1), denied]);
    expect(f.calls).toEqual([`part ${keySlot('a')} a`, `part ${keySlot('b')} b`]);
    expect(f.refunds).toEqual([
      [['a'], ['tok-a']],
      [['b'], ['tok-b']],
    ]);
  });

  it('keeps the charges when every slot allows', async () => {
    const f = fakeSlots((cs) => cs.map(() => allowed(1)));
    await decideAcrossSlots({ counters: [counter('a'), counter('b')], countDenied: false, ...f.options });
    expect(f.refunds).toEqual([]);
  });

  it('keeps, when a slot denies, the charges of counters charged whatever the outcome', async () => {
    const f = fakeSlots((cs) => cs.map((c) => (c.key === 'b' ? denied : allowed(1))));
    const post = { ...counter('a'), countDenied: true };
    await decideAcrossSlots({ counters: [post, counter('c'), counter('b')], countDenied: false, ...f.options });
    const refunded = new Map(f.refunds.flatMap(([keys, tokens]) => keys.map((k, i) => [k, tokens[i]] as const)));
    expect(refunded).toEqual(
      new Map([
        ['a', ''],
        ['b', 'tok-b'],
        ['c', 'tok-c'],
      ]),
    );
  });

  it('fails when a slot fails, refunding the slots that charged', async () => {
    const down = new Error('down');
    const f = fakeSlots((cs) => (cs[0].key === 'b' ? down : cs.map(() => allowed(1))));
    await expect(decideAcrossSlots({ counters: [counter('a'), counter('b')], countDenied: true, ...f.options })).rejects.toBe(down);
    expect(f.refunds).toEqual([[['a'], ['tok-a']]]);
  });
});
