import * as grpc from '@grpc/grpc-js';
import { descriptor, grpcCode, type RlsClient } from '../../helpers/grpc-client';
import { startCluster, startRedis } from '../../helpers/redis';
import { request } from '../../helpers/http-request';
import { RESERVATION_RULES } from '../../helpers/reservation-rules';
import { startTestService, type TestService } from '../../helpers/service';

/**
 * Reservations on the wire, as envoy-llm.yaml drives them: before a request a descriptor ending in
 * (reserve, <ID>) with the estimate as its hits_addend, when its stream is done one ending in
 * (commit, <ID>) with the real cost (the ID a UUID Envoy generates per request). Two replicas of the service share one Redis (single,
 * or a 3-master Cluster), so a commit reaches another replica than its reserve; with the memory store
 * there is one replica. Bad input is INVALID_ARGUMENT naming it; a hostile peer reserving fresh IDs
 * without ever committing fills its own book to its bound and no more, beside a legit one.
 */

const RULES = RESERVATION_RULES;

const PER_KEY = 100;

type Deployment = { url: string; stop(): Promise<void> };
const deployments: Record<string, (() => Promise<Deployment>) | undefined> = {
  memory: undefined,
  redis: () => startRedis(),
  cluster: () => startCluster(),
};

describe.each(['memory', 'redis', 'cluster'])('reservations on the wire (%s)', (backend) => {
  let deployment: Deployment | undefined;
  const replicas: TestService[] = [];
  let a: RlsClient;
  let b: RlsClient;

  beforeAll(async () => {
    deployment = await deployments[backend]?.();
    const env: Record<string, string> = { RESERVATIONS_MAX_PER_KEY: String(PER_KEY), RESERVATION_TTL: '30s' };
    if (deployment !== undefined) {
      Object.assign(env, {
        BACKEND_TYPE: 'redis',
        REDIS_TYPE: backend === 'cluster' ? 'cluster' : 'single',
        REDIS_URL: deployment.url,
        STORE_TIMEOUT_MS: '1000',
      });
    }
    for (let i = 0; i < (deployment === undefined ? 1 : 2); i++) replicas.push(await startTestService({ config: { 'llm.yaml': RULES }, env }));
    a = replicas[0].client;
    b = replicas[replicas.length - 1].client;
  });

  afterAll(async () => {
    await Promise.all(replicas.map((r) => r.stop()));
    await deployment?.stop();
  });

  const call = async (client: RlsClient, key: string, value: string, kind: string, id: string, hits: number) => {
    const res = await client.shouldRateLimit({
      domain: 'llm',
      descriptors: [
        descriptor(
          [
            [key, value],
            [kind, id],
          ],
          { hitsAddend: { value: hits } },
        ),
      ],
    });
    const [s] = res.statuses;
    return { overall: res.overallCode, name: s.currentLimit?.name, remaining: s.limitRemaining };
  };

  it('admits 10 of 50 concurrent reserves of 100 against 1,000 per minute, and commits of 30 on the other replica free the rest', async () => {
    // Inside one minute (a commit must not see the window slide).
    const left = 60_000 - (Date.now() % 60_000);
    if (left < 10_000) await new Promise((r) => setTimeout(r, left + 50));
    const key = `team-${Date.now()}`;
    const reserves = await Promise.all(Array.from({ length: 50 }, (_, i) => call(i % 2 ? a : b, 'api_key', key, 'reserve', `req-${i}`, 100)));
    const admitted = reserves.flatMap((r, i) => (r.overall === 'OK' ? [i] : []));
    expect(admitted).toHaveLength(10);
    expect(reserves.find((r) => r.overall === 'OVER_LIMIT')).toMatchObject({ name: 'tokens_per_minute', remaining: 0 });
    const commits = await Promise.all(admitted.map((i) => call(i % 2 ? b : a, 'api_key', key, 'commit', `req-${i}`, 30)));
    expect(commits.every((c) => c.overall === 'OK')).toBe(true);
    expect(Math.min(...commits.map((c) => c.remaining))).toBe(700);
    // A second commit of an ID is charged again.
    expect(await call(a, 'api_key', key, 'commit', `req-${admitted[0]}`, 30)).toMatchObject({ overall: 'OK', remaining: 670 });
    const again = await Promise.all(Array.from({ length: 10 }, (_, i) => call(i % 2 ? a : b, 'api_key', key, 'reserve', `more-${i}`, 100)));
    expect(again.filter((r) => r.overall === 'OK')).toHaveLength(6);
  });

  it('shows what a descriptor holds on /rlmatch and per rule on /top/rules', async () => {
    const tenant = `shown-${Date.now()}`;
    for (let i = 0; i < 3; i++) expect((await call(a, 'tenant', tenant, 'reserve', `s${i}`, 1)).overall).toBe('OK');
    await call(a, 'tenant', tenant, 'commit', 's0', 1);
    const debugPort = replicas[0].service.debugPort;
    const match = JSON.parse((await request(debugPort, 'GET', `/rlmatch?domain=llm&entry=tenant=${tenant}`)).text);
    expect(match.rule).toMatchObject({ concurrency: 5, reservationsHeld: 2 });
    const top = JSON.parse((await request(debugPort, 'GET', '/top/rules')).text);
    expect(top.reservations).toContainEqual({ domain: 'llm', rule: 'tenant', held: expect.any(Number), descriptors: expect.any(Number) });
    expect(top.reservations.find((r: { rule: string }) => r.rule === 'tenant').held).toBeGreaterThanOrEqual(2);
  });

  it('holds at most 5 in flight across the replicas, a commit freeing one', async () => {
    const tenant = `acme-${Date.now()}`;
    const reserves = await Promise.all(Array.from({ length: 8 }, (_, i) => call(i % 2 ? a : b, 'tenant', tenant, 'reserve', `f${i}`, 1)));
    const admitted = reserves.flatMap((r, i) => (r.overall === 'OK' ? [i] : []));
    expect(admitted).toHaveLength(5);
    expect(await call(b, 'tenant', tenant, 'commit', `f${admitted[0]}`, 1)).toMatchObject({ overall: 'OK', remaining: 1 });
    expect(await call(a, 'tenant', tenant, 'reserve', 'late', 1)).toMatchObject({ overall: 'OK', remaining: 0 });
    expect((await call(b, 'tenant', tenant, 'reserve', 'later', 1)).overall).toBe('OVER_LIMIT');
  });

  it('answers bad input INVALID_ARGUMENT, naming it', async () => {
    const ask = (entries: [string, string][], hits = 1) =>
      a.shouldRateLimit({ domain: 'llm', descriptors: [descriptor(entries, { hitsAddend: { value: hits } })] });
    const detail = async (entries: [string, string][]): Promise<string> => {
      try {
        await ask(entries);
      } catch (err) {
        expect((err as grpc.ServiceError).code).toBe(grpc.status.INVALID_ARGUMENT);
        return (err as grpc.ServiceError).details;
      }
      throw new Error('expected INVALID_ARGUMENT');
    };
    expect(
      await detail([
        ['reserve', 'x'],
        ['api_key', 'k'],
      ]),
    ).toMatch(/descriptors\[0\]\.entries\[0\]: a "reserve" entry must be the descriptor's last/);
    expect(
      await detail([
        ['api_key', 'k'],
        ['commit', 'x'.repeat(257)],
      ]),
    ).toMatch(/descriptors\[0\]\.entries\[1\]\.value: a reservation ID of 257 bytes, over the cap of 256/);
    expect(await detail([['tenant', 'acme']])).toMatch(/descriptors\[0\]: its rule \(tenant\) limits reservations in flight/);
    expect(
      await grpcCode(
        ask([
          ['api_key', 'k'],
          ['reserve', 'fine'],
        ]),
      ),
    ).toBeUndefined();
  });

  it('keeps a hostile peer reserving fresh IDs and never committing to its own book, bounded, while a legit peer gets exact answers', async () => {
    const hostile = `mallory-${Date.now()}`;
    const legit = `alice-${Date.now()}`;
    const left = 60_000 - (Date.now() % 60_000);
    if (left < 10_000) await new Promise((r) => setTimeout(r, left + 50));
    const codes = new Map<string, number>();
    const legitRemaining: number[] = [];
    for (let round = 0; round < 15; round++) {
      // Estimates of 0 hold no tokens: only the book's bound stops them.
      const burst = await Promise.all(
        Array.from({ length: 10 }, (_, i) => call(i % 2 ? a : b, 'api_key', hostile, 'reserve', `${round}-${i}-${'x'.repeat(240)}`, 0)),
      );
      for (const r of burst) codes.set(r.overall, (codes.get(r.overall) ?? 0) + 1);
      const reserved = await call(b, 'api_key', legit, 'reserve', `legit-${round}`, 100);
      const committed = await call(a, 'api_key', legit, 'commit', `legit-${round}`, 10);
      legitRemaining.push(reserved.remaining, committed.remaining);
    }
    // The legit key: 100 held then 10 charged each round, answered exactly.
    expect(legitRemaining).toEqual(Array.from({ length: 15 }, (_, r) => [1000 - 10 * r - 100, 1000 - 10 * (r + 1)]).flat());
    // The hostile key's book stops at RESERVATIONS_MAX_PER_KEY entries; every reserve past it is denied and holds nothing.
    expect(codes.get('OK')).toBe(PER_KEY);
    expect(codes.get('OVER_LIMIT')).toBe(150 - PER_KEY);
  });
});
