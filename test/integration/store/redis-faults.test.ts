import type { RedisErrorKind, RedisStore } from '../../../src/store/redis/redis-store';
import { StoreUnavailableError, type CounterRequest } from '../../../src/limiter/store';
import { Stretched, untilUnstretched } from '../../helpers/deadline';
import { connectStore, rawCommand, sleep, startRedis, startSentinel, waitUntil, type RedisServer, type SentinelSetup } from '../../helpers/redis';

const DEADLINE = 25;
// Timers on a loaded 2-core machine fire late; the bound still proves "no hang". A call is also
// allowed the lateness of a timer of DEADLINE ms started beside it: a loaded machine fires the
// store's timer as late as that one.
const LATE = 60;

const c = (key: string, limit = 1_000): CounterRequest => ({ key, limit, windowMs: 60_000, algorithm: 'sliding_window', hits: 1 });

/** Calls decide and reports how long it took to settle and how, and the bound it had to settle within. */
async function timed(store: RedisStore, key: string): Promise<{ ms: number; ok: boolean; error?: unknown; boundMs: number }> {
  const start = performance.now();
  const beside = new Promise<number>((resolve) => setTimeout(() => resolve(performance.now() - start), DEADLINE));
  let settled: { ms: number; ok: boolean; error?: unknown };
  try {
    await store.decide([c(key)]);
    settled = { ms: performance.now() - start, ok: true };
  } catch (error) {
    settled = { ms: performance.now() - start, ok: false, error };
  }
  return { ...settled, boundMs: Math.max(DEADLINE, await beside) + LATE };
}

/** Waits until a call succeeds: the store's 25 ms deadline may pass on a loaded machine while Redis is well. */
const answering = (store: RedisStore, key: string): Promise<void> => waitUntil('a call to succeed', async () => (await timed(store, key)).ok, 5_000, 20);

describe('the redis store when redis fails', () => {
  let redis: RedisServer;
  let store: RedisStore;
  const errors: RedisErrorKind[] = [];

  beforeAll(async () => {
    redis = await startRedis();
    store = await connectStore({ type: 'single', url: redis.url, timeoutMs: DEADLINE, onError: (k) => errors.push(k) });
  });

  afterAll(async () => {
    await store?.close();
    await redis?.stop();
  });

  it('rejects with StoreUnavailableError within the deadline once redis is killed, and recovers after a restart', async () => {
    await answering(store, 'kill');
    await redis.server.kill();
    for (let i = 0; i < 20; i++) {
      const r = await timed(store, 'kill');
      expect(r.ok).toBe(false);
      expect(r.error).toBeInstanceOf(StoreUnavailableError);
      expect(r.ms).toBeLessThan(r.boundMs);
    }
    expect(store.isHealthy()).toBe(false);
    expect(errors.length).toBeGreaterThanOrEqual(20);
    expect(errors).toContain('disconnected');

    await redis.server.start();
    const restarted = Date.now();
    await waitUntil('the store to report healthy again', async () => store.isHealthy(), 5_000, 20);
    await answering(store, 'kill');
    expect(Date.now() - restarted).toBeLessThan(5_000);
  });

  it('settles every call within the deadline while redis is frozen, and recovers when it resumes', async () => {
    await answering(store, 'stop');
    redis.server.pause();
    try {
      const results = await Promise.all(Array.from({ length: 50 }, (_, i) => timed(store, `stop-${i % 5}`)));
      for (const r of results) {
        expect(r.ok).toBe(false);
        expect(r.error).toBeInstanceOf(StoreUnavailableError);
        expect(r.ms).toBeLessThan(r.boundMs);
      }
      for (let i = 0; i < 5; i++) {
        const r = await timed(store, 'stop');
        expect(r.ms).toBeLessThan(r.boundMs);
      }
      expect(errors).toContain('timeout');
      // Health follows the PING probe, which misses its own (longer) deadline a few times running first.
      await waitUntil('the probe to report redis unreachable', async () => !store.isHealthy(), 2_000, 10);
    } finally {
      redis.server.resume();
    }
    await waitUntil('the store to report healthy again', async () => store.isHealthy(), 5_000, 20);
    await answering(store, 'stop');
  });
});

/** Keeps the event loop busy for `ms` without yielding, as a saturated service would. */
function hogEventLoop(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // spin
  }
}

describe('the redis store on a busy event loop with a healthy redis', () => {
  const deadline = 10;
  let redis: RedisServer;
  let store: RedisStore;
  const errors: RedisErrorKind[] = [];

  beforeAll(async () => {
    redis = await startRedis(['--enable-debug-command', 'yes']);
    store = await connectStore({ type: 'single', url: redis.url, timeoutMs: deadline, onError: (k) => errors.push(k) });
  });

  afterAll(async () => {
    await store?.close();
    await redis?.stop();
  });

  it('takes answers that wait unread in the socket when the deadline timer fires first', async () => {
    const calls = Array.from({ length: 20 }, (_, i) => store.decide([c(`unread-${i}`)]));
    // Let the commands go out, then keep the loop from reading the answers until the deadline is long past.
    await new Promise((resolve) => setImmediate(resolve));
    hogEventLoop(5 * deadline);
    const settled = await Promise.allSettled(calls);
    expect(settled.map((r) => r.status)).toEqual(settled.map(() => 'fulfilled'));
  });

  it('starts the deadline when the command is sent, not while the loop is still busy before sending it', async () => {
    const calls = Array.from({ length: 20 }, (_, i) => store.decide([c(`unsent-${i}`)]));
    hogEventLoop(5 * deadline);
    const settled = await Promise.allSettled(calls);
    expect(settled.map((r) => r.status)).toEqual(settled.map(() => 'fulfilled'));
  });

  it('stays healthy through bursts of deadline misses while redis still answers its probe', async () => {
    errors.length = 0;
    const health: boolean[] = [];
    const sampler = setInterval(() => health.push(store.isHealthy()), 5);
    try {
      for (let burst = 0; burst < 5; burst++) {
        await untilUnstretched(async () => {
          // Redis holds every client for 150 ms, from its answer to the pause on: every call in the
          // burst misses its 10 ms deadline, PING (250 ms) is only late. (A stall sent on its own
          // socket 15 ms before the calls could reach Redis after them on a loaded machine.)
          expect(await rawCommand(redis.port, 'CLIENT PAUSE 150 ALL', 2_000)).toMatch(/^\+OK/);
          const results = await Promise.all(Array.from({ length: 20 }, (_, i) => timed(store, `burst-${i}`)));
          // Every call answered within its deadline: a loaded machine sent them after the pause.
          if (results.every((r) => r.ok && r.ms < deadline)) throw new Stretched('the burst went after the pause had ended');
          expect(results.filter((r) => !r.ok).length).toBeGreaterThan(0);
          await sleep(150);
        });
      }
    } finally {
      clearInterval(sampler);
    }
    expect(errors.filter((k) => k === 'timeout').length).toBeGreaterThanOrEqual(20);
    expect(health.length).toBeGreaterThan(20);
    expect(health.every(Boolean)).toBe(true);
    expect(store.isHealthy()).toBe(true);
    await answering(store, 'after-bursts');
  });
});

describe('the redis store behind sentinel', () => {
  let setup: SentinelSetup;
  let store: RedisStore;

  beforeAll(async () => {
    setup = await startSentinel({ sentinels: 1, downAfterMs: 300 });
    store = await connectStore({ type: 'sentinel', url: setup.url, timeoutMs: 200 });
  });

  afterAll(async () => {
    await store?.close();
    await setup?.stop();
    // Left running: the 2 s timer ioredis starts at the failover to destroy a sentinel socket that
    // had already closed. It holds a run without --forceExit (make test passes it) up to 2 s longer.
  });

  it('follows the new master after the master is killed', async () => {
    expect((await store.decide([c('failover', 5)]))[0].allowed).toBe(true);
    expect(setup.currentMaster()).toBe(setup.master.address);
    await setup.master.kill();
    const killed = Date.now();
    await waitUntil('sentinel to promote the replica', async () => setup.currentMaster() === setup.replica.address, 15_000, 100);
    await waitUntil(
      'the store to answer from the new master',
      async () => {
        try {
          await store.decide([c('after-failover', 5)]);
          return true;
        } catch {
          return false;
        }
      },
      // Sentinel's promotion and the client's reconnection both slow down on a loaded machine (three
      // test files at once on two cores): seconds on a quiet one, past 10 s seen under load.
      25_000,
      50,
    );
    expect(Date.now() - killed).toBeLessThan(35_000);
    expect(store.isHealthy()).toBe(true);
    // Writes land on the promoted replica.
    expect(setup.replica.cli('ROLE').split('\n')[0]).toBe('master');
    expect(Number(setup.replica.cli('DBSIZE').trim())).toBeGreaterThan(0);
  }, 60_000);
});
