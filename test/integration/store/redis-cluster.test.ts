import { keySlot } from '../../../src/store/redis/key-slot';
import type { RedisStore } from '../../../src/store/redis/redis-store';
import type { CounterRequest } from '../../../src/limiter/store';
import { connectStore, startCluster, waitUntil, type RedisClusterSetup } from '../../helpers/redis';

const PREFIX = 'rl:';

describe('the redis store on a cluster', () => {
  let cluster: RedisClusterSetup;
  let store: RedisStore;

  beforeAll(async () => {
    cluster = await startCluster({ masters: 3 });
    store = await connectStore({ type: 'cluster', url: cluster.url, keyPrefix: PREFIX });
  });

  afterAll(async () => {
    await store?.close();
    await cluster?.stop();
  });

  /** Two counter keys whose Redis keys hash to different slots served by different masters. */
  function keysInDifferentSlots(label: string): [string, string] {
    const a = `${label}|a`;
    for (let i = 0; ; i++) {
      const b = `${label}|b${i}`;
      if (Math.floor(keySlot(`${PREFIX}{${a}}`) / 5462) !== Math.floor(keySlot(`${PREFIX}{${b}}`) / 5462)) return [a, b];
    }
  }

  it('computes the same hash slots as redis, hash tags and UTF-8 included', () => {
    const node = cluster.nodes[0];
    for (const key of ['plain', 'rl:{edge|sw1000|k=v}:1234', '{}x', 'a{}{b}', 'x{y', 'ü{ñ}z', 'rl:{a}{b}:1', '{{a}}']) {
      expect({ key, slot: keySlot(key) }).toEqual({ key, slot: Number(node.cli('CLUSTER', 'KEYSLOT', key).trim()) });
    }
  });

  it('keeps both windows of a sliding window counter in one slot', async () => {
    await store.decide([{ key: 'one-slot', limit: 5, windowMs: 1_000, algorithm: 'sliding_window', hits: 1 }]);
    const slot = keySlot(`${PREFIX}{one-slot}:1`);
    expect(keySlot(`${PREFIX}{one-slot}:2`)).toBe(slot);
    const owner = cluster.nodes.find((n) => n.cli('CLUSTER', 'COUNTKEYSINSLOT', String(slot)).trim() !== '0');
    expect(owner).toBeDefined();
  });

  /** Script calls (DECIDE and REFUND) every node has run. */
  const scriptCalls = (): number =>
    cluster.nodes.reduce(
      (sum, n) => sum + [...n.cli('INFO', 'commandstats').matchAll(/cmdstat_eval(?:sha)?:calls=(\d+)/g)].reduce((x, m) => x + Number(m[1]), 0),
      0,
    );

  it('keeps counters sharing a tag (the limits of one descriptor) in the tag slot: one atomic call, nothing to refund', async () => {
    const [a, b] = keysInDifferentSlots('tagged');
    const counters = (hits: number): CounterRequest[] => [
      { key: a, limit: 1, windowMs: 60_000, algorithm: 'fixed_window', hits, tag: a },
      { key: b, limit: 10, windowMs: 60_000, algorithm: 'sliding_log', hits, tag: a },
    ];
    // Loads the script on every node's connection first.
    await Promise.all([a, b].map((key) => store.decide([{ key, limit: 1, windowMs: 60_000, algorithm: 'fixed_window', hits: 0 }])));
    const before = scriptCalls();
    expect(await store.decide(counters(1))).toMatchObject([{ allowed: true }, { allowed: true, remaining: 9 }]);
    expect(await store.decide(counters(1))).toMatchObject([{ allowed: false }, { allowed: true, remaining: 8 }]);
    expect(await store.decide(counters(0))).toMatchObject([
      { allowed: true, remaining: 0 },
      { allowed: true, remaining: 9 },
    ]);
    // Untagged, each call would have been two parts and the denied one two refunds.
    expect(scriptCalls() - before).toBe(3);
    const slot = String(keySlot(`${PREFIX}{${a}}`));
    const inSlot = cluster.nodes.flatMap((node) => node.cli('CLUSTER', 'GETKEYSINSLOT', slot, '100').trim().split('\n'));
    expect(inSlot).toEqual(expect.arrayContaining([`${PREFIX}{${a}}${b}`, expect.stringMatching(/^rl:\{tagged\|a\}:\d+$/)]));
  });

  it('coalesces concurrent calls into one script call per hash slot, each call still exact', async () => {
    const [a, b] = keysInDifferentSlots('coalesce');
    // Loads the script on every node's connection first.
    await Promise.all([a, b].map((key) => store.decide([{ key, limit: 100, windowMs: 60_000, algorithm: 'fixed_window', hits: 0 }])));
    const before = scriptCalls();
    const decisions = await Promise.all(
      Array.from({ length: 40 }, (_, i) => store.decide([{ key: i % 2 === 0 ? a : b, limit: 10, windowMs: 60_000, algorithm: 'sliding_window', hits: 1 }])),
    );
    expect(decisions.filter((d, i) => i % 2 === 0 && d[0].allowed)).toHaveLength(10);
    expect(decisions.filter((d, i) => i % 2 === 1 && d[0].allowed)).toHaveLength(10);
    expect(scriptCalls() - before).toBe(2);
  });

  it('stays all-or-nothing across slots: a denial in one slot refunds the charges in the others', async () => {
    const [a, b] = keysInDifferentSlots('refund');
    const call = (): Promise<unknown[]> =>
      store.decide([
        { key: a, limit: 1, windowMs: 60_000, algorithm: 'fixed_window', hits: 1 },
        { key: b, limit: 10, windowMs: 60_000, algorithm: 'sliding_window', hits: 2 },
      ]);
    expect(await call()).toMatchObject([{ allowed: true }, { allowed: true, remaining: 8 }]);
    expect(await call()).toMatchObject([{ allowed: false }, { allowed: true, remaining: 6 }]);
    const check: CounterRequest = { key: b, limit: 10, windowMs: 60_000, algorithm: 'sliding_window', hits: 0 };
    await waitUntil('the refund to land', async () => (await store.decide([check]))[0].remaining === 8, 2_000, 10);
  });

  it('refunds every algorithm exactly', async () => {
    const [gate, other] = keysInDifferentSlots('algos');
    const [, other2] = keysInDifferentSlots('algos2');
    const counters = (hits: number): CounterRequest[] => [
      { key: gate, limit: 0, windowMs: 60_000, algorithm: 'fixed_window', hits: 1 },
      { key: other, limit: 10, windowMs: 60_000, algorithm: 'sliding_log', hits },
      { key: other2, limit: 10, windowMs: 60_000, algorithm: 'fixed_window', hits },
    ];
    for (let i = 0; i < 3; i++) expect((await store.decide(counters(3)))[0].allowed).toBe(false);
    const remaining = async (): Promise<number[]> => (await store.decide(counters(0).slice(1))).map((d) => d.remaining);
    await waitUntil('every refund to land', async () => (await remaining()).every((r) => r === 10), 2_000, 10);
  });

  it('answers many concurrent multi-slot calls with exactly the limit admitted', async () => {
    const [a, b] = keysInDifferentSlots('race');
    const decisions = await Promise.all(
      Array.from({ length: 120 }, () =>
        store.decide([
          { key: a, limit: 30, windowMs: 60_000, algorithm: 'sliding_window', hits: 1 },
          { key: b, limit: 1_000, windowMs: 60_000, algorithm: 'sliding_window', hits: 1 },
        ]),
      ),
    );
    const admitted = decisions.filter((d) => d.every((x) => x.allowed)).length;
    expect(admitted).toBe(30);
    const check: CounterRequest = { key: b, limit: 1_000, windowMs: 60_000, algorithm: 'sliding_window', hits: 0 };
    // Only the admitted calls' hits stay on b once every refund has landed.
    await waitUntil('the refunds to land', async () => (await store.decide([check]))[0].remaining === 1_000 - 30, 3_000, 20);
  });
});
