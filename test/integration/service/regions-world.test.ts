import { descriptor, grpc, grpcCode, type RlsRequestInput } from '../../helpers/grpc-client';
import { pollUntil } from '../../helpers/lease-replicas';
import { rawCommand } from '../../helpers/redis';
import { startWorld, type World } from '../../helpers/regions';

/**
 * The region harness itself (test/helpers/regions.ts), on a regional config: every replica of
 * every region answers, each region counts on its own Redis, and the handles do what they say
 * (a proxy cut off and healed, the global Redis frozen and thawed, a replica and a region's Redis
 * killed and started again).
 */

const LIMIT = 3;
const CONFIG = `domain: world
descriptors:
  - key: user
    rate_limit: {unit: hour, algorithm: fixed_window, requests_per_unit: ${LIMIT}}
`;

const ask = (user: string): RlsRequestInput => ({ domain: 'world', descriptors: [descriptor([['user', user]])] });

let world: World;

beforeAll(async () => {
  world = await startWorld({ regions: ['eu', 'us', 'ap'], replicasPerRegion: 2, delayMs: 100, config: CONFIG });
}, 120_000);

afterAll(async () => {
  await world?.stop();
});

describe('a world of three regions of two replicas', () => {
  it('starts every replica on its region, each SERVING and answering', async () => {
    expect(world.regions).toEqual(['eu', 'us', 'ap']);
    expect(world.replicas()).toHaveLength(6);
    expect(world.replicas('us').map((r) => r.name)).toEqual(['us-0', 'us-1']);
    for (const region of world.regions) {
      for (const i of [0, 1]) {
        const reply = await world.client(region, i).shouldRateLimit(ask(`hello-${region}-${i}`));
        expect({ region, i, code: reply.overallCode }).toEqual({ region, i, code: 'OK' });
      }
    }
    // Distinct Redis and proxies per region, the proxies in front of the global Redis.
    const ports = world.regions.map((r) => world.regionRedis(r).port);
    expect(new Set([...ports, world.global.port]).size).toBe(4);
    expect(new Set(world.regions.map((r) => world.proxy(r).port)).size).toBe(3);
  });

  it('counts a regional limit on the region’s own Redis: shared by its replicas, apart from the other regions', async () => {
    const codes = async (region: string, i: number, n: number): Promise<string[]> => {
      const out: string[] = [];
      for (let k = 0; k < n; k++) out.push((await world.client(region, i).shouldRateLimit(ask('shared'))).overallCode);
      return out;
    };
    expect([...(await codes('eu', 0, 2)), ...(await codes('eu', 1, 2))]).toEqual(['OK', 'OK', 'OK', 'OVER_LIMIT']);
    expect(await codes('us', 1, LIMIT + 1)).toEqual(['OK', 'OK', 'OK', 'OVER_LIMIT']);
    expect(await codes('ap', 0, 1)).toEqual(['OK']);
    expect(world.regionRedis('eu').server.cli('--scan').split('\n').filter(Boolean).length).toBeGreaterThan(0);
  });

  it('reaches the global Redis through each region’s proxy, a round trip of two delays; cuts a region off and heals it', async () => {
    const ping = async (region: string, timeoutMs = 2_000): Promise<number> => {
      const sent = performance.now();
      expect(await rawCommand(world.proxy(region).port, 'PING', timeoutMs)).toBe('+PONG\r\n');
      return performance.now() - sent;
    };
    expect(await ping('eu')).toBeGreaterThanOrEqual(2 * 100 - 5);
    world.partition('eu');
    expect(world.proxy('eu').partitioned).toBe(true);
    await expect(rawCommand(world.proxy('eu').port, 'PING', 600)).rejects.toThrow('no reply');
    expect(await ping('us')).toBeGreaterThanOrEqual(2 * 100 - 5);
    world.heal('eu');
    expect(world.proxy('eu').partitioned).toBe(false);
    expect(await ping('eu')).toBeGreaterThanOrEqual(2 * 100 - 5);
  });

  it('freezes the global Redis and thaws it', async () => {
    world.pauseGlobal();
    try {
      await expect(rawCommand(world.global.port, 'PING', 500)).rejects.toThrow('no reply');
    } finally {
      world.resumeGlobal();
    }
    expect(await rawCommand(world.global.port, 'PING', 2_000)).toBe('+PONG\r\n');
  });

  it("kills a replica and starts it again under its REPLICA_ID; the region's other replica answers meanwhile", async () => {
    const before = world.replica('ap', 1);
    await world.killReplica('ap', 1);
    expect(before.run.child.signalCode).toBe('SIGKILL');
    expect(await grpcCode(before.client.shouldRateLimit(ask('during'), { deadlineMs: 1_000 }))).toBe(grpc.status.UNAVAILABLE);
    expect((await world.client('ap', 0).shouldRateLimit(ask('during'))).overallCode).toBe('OK');
    const after = await world.restartReplica('ap', 1);
    expect(after).not.toBe(before);
    expect(world.replica('ap', 1)).toBe(after);
    expect((await world.client('ap', 1).shouldRateLimit(ask('after'))).overallCode).toBe('OK');
  });

  it("kills a region's Redis and starts it again, empty, on the same port", async () => {
    const port = world.regionRedis('us').port;
    await world.killRegionRedis('us');
    expect(await grpcCode(world.client('us', 0).shouldRateLimit(ask('down'), { deadlineMs: 2_000 }))).toBe(grpc.status.UNAVAILABLE);
    expect((await world.client('eu', 0).shouldRateLimit(ask('down'))).overallCode).toBe('OK');
    await world.restartRegionRedis('us');
    expect(world.regionRedis('us').port).toBe(port);
    expect(world.regionRedis('us').server.cli('DBSIZE').trim()).toBe('0');
    const code = await pollUntil(
      () =>
        world
          .client('us', 0)
          .shouldRateLimit(ask('back'), { deadlineMs: 1_000 })
          .then(
            (r) => r.overallCode,
            () => 'failed',
          ),
      (c) => c === 'OK',
      10_000,
      100,
    );
    expect(code).toBe('OK');
    // Empty: the limit used up before the kill starts again (on the replica that never denied it: us-1 remembers its denial).
    expect((await world.client('us', 0).shouldRateLimit(ask('shared'))).overallCode).toBe('OK');
  });
});
