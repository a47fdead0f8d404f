import { StoreUnavailableError } from '../../../src/limiter/store';
import { loadSettings, SettingsError, type RegionSettings } from '../../../src/settings/settings';
import { createGlobalStore, GLOBAL_KEY_PREFIX, type GlobalStore } from '../../../src/store/create-global-store';
import { capturedLogger } from '../../helpers/captured-logger';
import { connectStore, freePort, startRedis, waitUntil, type RedisServer } from '../../helpers/redis';

/** The global store (regions) on a real redis-server: what it builds, where its keys go, and a global Redis that is not there. */

const DAY = 86_400_000;

function regionsOf(globalUrl: string, env: Record<string, string> = {}): RegionSettings {
  return loadSettings({ REDIS_URL: '127.0.0.1:1', REGION: 'eu', GLOBAL_REDIS_URL: globalUrl, ...env }).regions!;
}

describe('createGlobalStore', () => {
  let redis: RedisServer;
  const opened: GlobalStore[] = [];
  const open = (regions: RegionSettings, logger = capturedLogger().logger): GlobalStore => {
    const store = createGlobalStore({ regions, cacheKeyPrefix: 'app:', logger });
    opened.push(store);
    return store;
  };

  beforeAll(async () => {
    redis = await startRedis();
  });

  afterAll(async () => {
    await Promise.all(opened.map((s) => s.close()));
    await redis?.stop();
  });

  it('exchanges demand and settles on the global Redis, under CACHE_KEY_PREFIX and its own prefix', async () => {
    const log = capturedLogger();
    const global = open(regionsOf(redis.url), log.logger);
    await waitUntil('the global store to connect', async () => global.isHealthy(), 10_000, 20);
    expect(global.target).toBe(`redis single ${redis.url}`);
    const demand = { member: 'eu', demand: 40, admitted: 12, proxies: 2 };
    expect(await global.exchange.exchangeDemand({ key: 'g-demand', kind: 'lease', publish: demand, ttlMs: DAY })).toEqual([demand]);
    const counter = { key: 'g-counter', algorithm: 'sliding_window' as const, limit: 100, windowMs: DAY, hits: 30 };
    const settled = await global.settlements.settle({ key: 'g-counter', member: 'eu', seq: 1, counters: [counter], ttlMs: DAY });
    expect(settled).toMatchObject({ applied: true, full: false, heldSeq: 1, decisions: [{ allowed: true, remaining: 70 }] });
    // The same (member, seq) again is never charged twice.
    expect(await global.settlements.settle({ key: 'g-counter', member: 'eu', seq: 1, counters: [counter], ttlMs: DAY })).toMatchObject({ applied: false });
    expect((await global.store.decide([{ ...counter, hits: 0 }]))[0]).toMatchObject({ remaining: 70 });
    const keys = redis.server.cli('--scan').trim().split('\n').sort();
    expect(keys.length).toBeGreaterThan(0);
    expect(keys.every((k) => k.startsWith(`app:${GLOBAL_KEY_PREFIX}{`))).toBe(true);
    expect(keys).toContain(`app:${GLOBAL_KEY_PREFIX}{g-demand}|lease`);
    expect(log.lines().some((l) => l.msg === 'global redis connected')).toBe(true);
  });

  it('keeps a global counter apart from the regional counter of the same key on the same Redis', async () => {
    const global = open(regionsOf(redis.url));
    const regional = await connectStore({ type: 'single', url: redis.url, keyPrefix: 'app:' });
    try {
      await waitUntil('the global store to connect', async () => global.isHealthy(), 10_000, 20);
      const counter = { key: 'same-key', algorithm: 'fixed_window' as const, limit: 10, windowMs: DAY, hits: 4 };
      expect((await global.store.decide([counter]))[0].remaining).toBe(6);
      expect((await regional.decide([counter]))[0].remaining).toBe(6);
      expect((await global.store.decide([{ ...counter, hits: 0 }]))[0].remaining).toBe(6);
    } finally {
      await regional.close();
    }
  });

  it('starts without a global Redis, fails its calls within GLOBAL_STORE_TIMEOUT, says so once, and connects when one appears', async () => {
    const port = await freePort();
    const log = capturedLogger();
    const global = open(regionsOf(`127.0.0.1:${port}`, { GLOBAL_STORE_TIMEOUT: '200ms' }), log.logger);
    expect(global.isHealthy()).toBe(false);
    const started = Date.now();
    await expect(global.exchange.exchangeDemand({ key: 'k', kind: 'lease', withdraw: 'nobody', ttlMs: DAY })).rejects.toBeInstanceOf(StoreUnavailableError);
    await expect(
      global.settlements.settle({
        key: 'k',
        member: 'eu',
        seq: 1,
        counters: [{ key: 'k', algorithm: 'fixed_window', limit: 1, windowMs: DAY, hits: 1 }],
        ttlMs: DAY,
      }),
    ).rejects.toBeInstanceOf(StoreUnavailableError);
    expect(Date.now() - started).toBeLessThan(2_000);
    await waitUntil('the start-up warning', async () => log.lines().some((l) => l.msg.startsWith('global redis not reachable yet')), 6_000, 50);
    const server = await startRedis([], { port });
    try {
      await waitUntil('the global store to connect once its Redis is there', async () => global.isHealthy(), 10_000, 50);
      expect(await global.exchange.exchangeDemand({ key: 'k', kind: 'lease', withdraw: 'nobody', ttlMs: DAY })).toEqual([]);
      expect(log.lines().filter((l) => l.msg.startsWith('global redis not reachable yet'))).toHaveLength(1);
    } finally {
      await global.close();
      await server.stop();
    }
  });

  it('throws SettingsError naming the GLOBAL_REDIS_* variable of settings it cannot use, before connecting', () => {
    const error = (regions: RegionSettings): unknown => {
      try {
        open(regions);
      } catch (err) {
        return err;
      }
      return undefined;
    };
    const list = error(regionsOf('a:1,b:2'));
    expect(list).toBeInstanceOf(SettingsError);
    expect((list as SettingsError).variable).toBe('GLOBAL_REDIS_URL');
    const tls = error(regionsOf('h:1', { GLOBAL_REDIS_TLS: 'true', GLOBAL_REDIS_TLS_CACERT: '/nonexistent/ca.pem' }));
    expect((tls as SettingsError).variable).toBe('GLOBAL_REDIS_TLS_CACERT');
  });
});
