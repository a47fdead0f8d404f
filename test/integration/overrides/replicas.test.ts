import { descriptor } from '../../helpers/grpc-client';
import { overridesClient, tokensFile, within } from '../../helpers/overrides';
import { startCluster, startRedis, type RedisClusterSetup, type RedisServer } from '../../helpers/redis';
import { startTestService, type TestService } from '../../helpers/service';

/**
 * Runtime overrides across replicas sharing Redis, on the real service: a change made on one
 * replica answered on the other within OVERRIDES_SYNC_INTERVAL (1 s by default), removals and
 * expiries likewise, a restarted replica deciding with them from its first answer, the caps held
 * against a hostile token holder flooding both replicas while a legitimate one's overrides and
 * answers stay exact, and the same on a Redis Cluster.
 */

const CONFIG = `
domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: client
    rate_limit: {unit: hour, requests_per_unit: 1000000}
`;
const LEGIT = 'legit-token-0123456789abcdef';
const HOSTILE = 'hostile-token-0123456789abcdef';
const key = (value: string) => ({ domain: 'edge', descriptor: [{ key: 'api_key', value }] });
const perMinute = (n: number) => ({ unit: 'minute', requests_per_unit: n });

/** The limit a replica decides `api_key=value` under, asked without counting a hit (hits_addend 0). */
async function limitOf(svc: TestService, value: string): Promise<number | undefined> {
  return (await svc.client.shouldRateLimit({ domain: 'edge', descriptors: [descriptor([['api_key', value]], { hitsAddend: { value: 0 } })] })).statuses[0]
    .currentLimit?.requestsPerUnit;
}

describe('runtime overrides on two replicas sharing one redis-server', () => {
  let redis: RedisServer;
  let tokens: ReturnType<typeof tokensFile>;
  const replicas: TestService[] = [];
  const start = async (env: Record<string, string> = {}): Promise<TestService> => {
    const svc = await startTestService({
      config: { 'edge.yaml': CONFIG },
      env: { BACKEND_TYPE: 'redis', REDIS_URL: redis.url, STORE_TIMEOUT_MS: '1000', ADMIN_TOKENS_FILE: tokens.path, ...env },
    });
    replicas.push(svc);
    return svc;
  };

  beforeAll(async () => {
    redis = await startRedis();
    tokens = tokensFile({ legit: LEGIT, hostile: HOSTILE });
  });
  afterEach(async () => {
    await Promise.all(replicas.splice(0).map((r) => r.stop()));
    redis.server.cli('FLUSHALL');
  });
  afterAll(async () => {
    await redis?.stop();
    tokens?.remove();
  });

  it('answers an override set on one replica on the other within 1 s, and its removal too', async () => {
    const [a, b] = [await start(), await start()];
    expect(await limitOf(b, 'alice')).toBe(10);
    const set = await overridesClient(a.service.httpPort, LEGIT).put({ ...key('alice'), rate_limit: perMinute(3) });
    expect(set.status).toBe(200);
    expect(await limitOf(a, 'alice')).toBe(3);
    const seen = await within('the override on the other replica', 3_000, async () => (await limitOf(b, 'alice')) === 3);
    expect(seen).toBeLessThan(1_000);
    // Read through the other replica's API: the same override.
    expect((await overridesClient(b.service.httpPort, LEGIT).get('domain=edge&descriptor=api_key=alice')).body).toEqual(set.body);

    expect((await overridesClient(b.service.httpPort, LEGIT).del(key('alice'))).status).toBe(200);
    const gone = await within('the removal on the first replica', 3_000, async () => (await limitOf(a, 'alice')) === 10);
    expect(gone).toBeLessThan(1_000);
  });

  it('answers a raised override at once where denials were remembered (the denial cache and the replays of repeated calls)', async () => {
    const a = await start();
    const api = overridesClient(a.service.httpPort, LEGIT);
    await api.put({ ...key('dot'), rate_limit: perMinute(1) });
    // The same call over and over: once denied, its repeats are answered from what was remembered.
    const call = (): Promise<string> =>
      a.client.shouldRateLimit({ domain: 'edge', descriptors: [descriptor([['api_key', 'dot']])] }).then((r) => r.overallCode);
    const codes: string[] = [];
    for (let i = 0; i < 6; i++) codes.push(await call());
    expect(codes).toEqual(['OK', 'OVER_LIMIT', 'OVER_LIMIT', 'OVER_LIMIT', 'OVER_LIMIT', 'OVER_LIMIT']);
    expect(await api.put({ ...key('dot'), rate_limit: perMinute(100) })).toMatchObject({ status: 200 });
    expect(await call()).toBe('OK');
  });

  it('stops applying an expired override on every replica within 1 s', async () => {
    const [a, b] = [await start(), await start()];
    const expiresAtMs = Date.now() + 1_500;
    await overridesClient(a.service.httpPort, LEGIT).put({ ...key('bo'), rate_limit: perMinute(2), expires_at: new Date(expiresAtMs).toISOString() });
    await within('the override on both', 1_000, async () => (await limitOf(a, 'bo')) === 2 && (await limitOf(b, 'bo')) === 2);
    await within('the expiry', 5_000, async () => Date.now() >= expiresAtMs);
    const [onA, onB] = await Promise.all([
      within('the expiry on the first replica', 2_000, async () => (await limitOf(a, 'bo')) === 10),
      within('the expiry on the second replica', 2_000, async () => (await limitOf(b, 'bo')) === 10),
    ]);
    expect(Math.max(onA, onB)).toBeLessThan(1_000);
    // Removed from the store once (by whichever replica saw it first).
    await within('the store purged', 2_000, async () => redis.server.cli('HLEN', '{slidegate-overrides}|data').trim() === '0');
  });

  it('keeps overrides through a restart of a replica: its first answer uses them', async () => {
    const a = await start();
    await overridesClient(a.service.httpPort, LEGIT).put({ ...key('cy'), rate_limit: perMinute(4) });
    await a.stop();
    replicas.splice(0);
    const again = await start();
    expect(await limitOf(again, 'cy')).toBe(4);
  });

  it('holds OVERRIDES_MAX and the request rate against a hostile token holder on both replicas; a legitimate override still applies exactly and none is lost', async () => {
    const env = { OVERRIDES_MAX: '40', OVERRIDES_MAX_REQUESTS_PER_SECOND: '20' };
    const [a, b] = [await start(env), await start(env)];
    const legit = overridesClient(a.service.httpPort, LEGIT);
    for (let i = 0; i < 10; i++) expect((await legit.put({ ...key(`tenant-${i}`), rate_limit: perMinute(5) })).status).toBe(200);
    await within('the legit overrides on both', 1_000, async () => (await limitOf(b, 'tenant-9')) === 5);

    // 600 writes of new descriptors at once, half on each replica, each replica's bucket 20 a second (so that some are refused for the rate however slowly a loaded machine sends them).
    const hostile = [overridesClient(a.service.httpPort, HOSTILE), overridesClient(b.service.httpPort, HOSTILE)];
    const flood = Array.from({ length: 600 }, (_, i) => hostile[i % 2].put({ ...key(`junk-${i}`), rate_limit: perMinute(1), note: 'x'.repeat(200) }));
    // Meanwhile: the legitimate holder updates its override and reads, and its descriptor is decided beside others, hundreds in flight.
    const legitDuring = [legit.put({ ...key('tenant-0'), rate_limit: perMinute(6) }), legit.get('domain=edge&descriptor=api_key=tenant-3')];
    const calls = Array.from({ length: 300 }, (_, i) =>
      (i % 2 === 0 ? a : b).client.shouldRateLimit({
        domain: 'edge',
        descriptors: [descriptor([['api_key', 'tenant-1']]), descriptor([['client', `c-${i}`]])],
      }),
    );
    const [answers, legitAnswers, decisions] = await Promise.all([Promise.all(flood), Promise.all(legitDuring), Promise.all(calls)]);

    const statuses = answers.map((x) => x.status);
    const accepted = statuses.filter((s) => s === 200).length;
    const full = answers.filter((x) => x.status === 507);
    const throttled = answers.filter((x) => x.status === 429);
    // 30 places were left: exactly 30 taken, every other write refused naming its cap.
    expect(accepted).toBe(30);
    expect(full.length + throttled.length).toBe(600 - 30);
    expect(full.length).toBeGreaterThan(0);
    expect(throttled.length).toBeGreaterThan(0);
    for (const x of full) expect(x.body).toMatchObject({ cap: 'OVERRIDES_MAX', error: expect.stringMatching(/^OVERRIDES_MAX: /) });
    for (const x of throttled) expect(x.body).toMatchObject({ cap: 'OVERRIDES_MAX_REQUESTS_PER_SECOND' });
    expect(legitAnswers.map((x) => x.status)).toEqual([200, 200]);
    // The legitimate override decided exactly: 5 of 300 calls allowed in the minute, whichever replica answered.
    expect(decisions.filter((d) => d.statuses[0].code === 'OK')).toHaveLength(5);
    expect(decisions.every((d) => d.statuses[1].code === 'OK')).toBe(true);

    // Nothing stored was lost: all ten legitimate overrides are there, on both replicas, and 40 in all.
    for (const svc of [a, b]) {
      const listed: unknown[] = [];
      let cursor: string | null = null;
      do {
        const page: { body: { overrides: unknown[]; next: string | null } } = await overridesClient(svc.service.httpPort, LEGIT).get(
          `domain=edge&limit=7${cursor === null ? '' : `&cursor=${cursor}`}`,
        );
        listed.push(...page.body.overrides);
        cursor = page.body.next;
      } while (cursor !== null);
      expect(listed).toHaveLength(40);
      await within('the legit overrides', 1_000, async () => (await limitOf(svc, 'tenant-0')) === 6 && (await limitOf(svc, 'tenant-9')) === 5);
    }
  });
});

describe('runtime overrides on two replicas sharing a Redis Cluster', () => {
  let cluster: RedisClusterSetup;
  let tokens: ReturnType<typeof tokensFile>;
  const replicas: TestService[] = [];

  beforeAll(async () => {
    cluster = await startCluster({ masters: 3 });
    tokens = tokensFile({ legit: LEGIT });
  });
  afterAll(async () => {
    await Promise.all(replicas.splice(0).map((r) => r.stop()));
    await cluster?.stop();
    tokens?.remove();
  });

  it('answers an override set on one replica on the other within 1 s, and its removal', async () => {
    for (let i = 0; i < 2; i++) {
      replicas.push(
        await startTestService({
          config: { 'edge.yaml': CONFIG },
          env: { BACKEND_TYPE: 'redis', REDIS_TYPE: 'cluster', REDIS_URL: cluster.url, STORE_TIMEOUT_MS: '1000', ADMIN_TOKENS_FILE: tokens.path },
        }),
      );
    }
    const [a, b] = replicas;
    expect((await overridesClient(a.service.httpPort, LEGIT).put({ ...key('dee'), rate_limit: perMinute(2) })).status).toBe(200);
    expect(await within('the override on the other replica', 3_000, async () => (await limitOf(b, 'dee')) === 2)).toBeLessThan(1_000);
    // Counted on one counter across both replicas (its keys in one slot): 2 allowed in all.
    const codes = [];
    for (const svc of [a, b, a, b])
      codes.push((await svc.client.shouldRateLimit({ domain: 'edge', descriptors: [descriptor([['api_key', 'dee']])] })).overallCode);
    expect(codes).toEqual(['OK', 'OK', 'OVER_LIMIT', 'OVER_LIMIT']);
    expect((await overridesClient(b.service.httpPort, LEGIT).del(key('dee'))).status).toBe(200);
    expect(await within('the removal on the first replica', 3_000, async () => (await limitOf(a, 'dee')) === 10)).toBeLessThan(1_000);
  });
});
