import type { CounterRequest } from '../../../src/limiter/store';
import Redis from 'ioredis';
import { MAX_BATCH_KEYS, type RedisStore } from '../../../src/store/redis/redis-store';
import { connectStore, sleep, startCluster, startRedis, waitUntil, type RedisClusterSetup, type RedisServer } from '../../helpers/redis';

/**
 * A call of thousands of counters costs Redis tens of milliseconds as one script, and the small
 * calls queued behind it would miss their deadline. The store decides it in parts instead: the
 * small calls made beside it are answered between its parts, and it stays all-or-nothing.
 */

const HOUR = 3_600_000;
const LARGE = 3_000;

const counter = (key: string, limit: number, hits = 1): CounterRequest => ({ key, limit, windowMs: HOUR, algorithm: 'fixed_window', hits });

describe.each([
  ['a single redis', 'single'],
  ['a 3-master cluster', 'cluster'],
] as const)('large calls on %s', (_label, type) => {
  let deployment: RedisServer | RedisClusterSetup;
  let store: RedisStore;
  let run = 0;

  beforeAll(async () => {
    deployment = type === 'single' ? await startRedis() : await startCluster({ masters: 3 });
    store = await connectStore({ type, url: deployment.url, keyPrefix: 'large:' });
  });

  afterAll(async () => {
    await store?.close();
    await deployment?.stop();
  });

  const ports = (): number[] => ('nodes' in deployment ? deployment.nodes.map((n) => n.port) : [deployment.port]);
  const fresh = (label: string): string => `${label}|${Date.now().toString(36)}|${++run}`;
  const remaining = async (keys: readonly string[], limit: number): Promise<number[]> =>
    (await store.decide(keys.map((k) => counter(k, limit, 0)))).map((d) => d.remaining);

  it('decides a call of 3,000 counters whole: every counter charged once when all allow', async () => {
    const label = fresh('whole');
    const keys = Array.from({ length: LARGE }, (_, j) => `${label}|${j}`);
    const decisions = await store.decide(keys.map((k) => counter(k, 10)));
    expect(decisions.every((d) => d.allowed && d.remaining === 9)).toBe(true);
    expect(new Set(await remaining(keys, 10))).toEqual(new Set([9]));
  });

  it('keeps a call of 3,000 counters all-or-nothing: one denying counter leaves the others uncharged', async () => {
    const label = fresh('denied');
    const keys = Array.from({ length: LARGE }, (_, j) => `${label}|${j}`);
    const counters = keys.map((k, j) => counter(k, j === LARGE - 1 ? 0 : 10));
    const decisions = await store.decide(counters);
    expect(decisions[LARGE - 1].allowed).toBe(false);
    // What each other counter would have had left, as an atomic store reports it.
    expect(decisions.slice(0, -1).every((d) => d.allowed && d.remaining === 9)).toBe(true);
    await waitUntil('every refund to land', async () => (await remaining(keys.slice(0, -1), 10)).every((r) => r === 10), 5_000, 50);
  });

  it('answers the small calls made beside a 3,000-counter call before it, and never sends Redis a script of more counters than a batch piece', async () => {
    const label = fresh('beside');
    const sizes: number[] = [];
    const monitors = await Promise.all(
      ports().map(async (port) => {
        const monitor = await new Redis({ host: '127.0.0.1', port }).monitor();
        monitor.on('monitor', (_time: string, args: string[]) => {
          if (/^evalsha$/i.test(args[0])) sizes.push(Number(args[2]));
        });
        return monitor;
      }),
    );
    try {
      const order: string[] = [];
      const large = store.decide(Array.from({ length: LARGE }, (_, j) => counter(`${label}|${j}`, 10))).then(() => order.push('large'));
      const small: Promise<unknown>[] = [];
      for (let i = 0; i < 5; i++) {
        await sleep(1);
        small.push(store.decide([counter(`${label}|small|${i}`, 10)]).then(() => order.push(`small ${i}`)));
      }
      await Promise.all([large, ...small]);
      // Each small call was answered while the large call was still in flight (on a cluster, the small
      // calls go to different nodes: their own order may vary).
      expect(order).toHaveLength(6);
      expect(order[5]).toBe('large');
      await waitUntil('the monitors to see every script', async () => sizes.reduce((a, b) => a + b, 0) >= LARGE, 2_000, 20);
      expect(Math.max(...sizes)).toBeLessThanOrEqual(MAX_BATCH_KEYS);
    } finally {
      for (const m of monitors) m.disconnect();
    }
  });
});
