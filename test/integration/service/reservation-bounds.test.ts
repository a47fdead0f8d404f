import * as grpc from '@grpc/grpc-js';
import { descriptor, type RlsClient } from '../../helpers/grpc-client';
import { startRedis } from '../../helpers/redis';
import { startTestService, type TestService } from '../../helpers/service';

/**
 * The bounds of reservations against callers who pick their IDs, amounts and keys to hurt, on the
 * real service (two replicas on one Redis, or one with the memory store), each beside a legit caller
 * whose answers stay exact: an ID is held once and every commit is charged; a reserve or commit
 * entry is taken only on a rule that opts in, a commit charges at most the limit and a hold lasts
 * its rule's window; no caller's commits or holds fill a table another tenant's reserves need, and
 * a shared descriptor keeps taking reserve + commit pairs however many went before.
 */

const RULES = `
domain: bounds
descriptors:
  - key: tokens
    reservations: true
    rate_limit: {unit: hour, requests_per_unit: 1000, algorithm: fixed_window}
  - key: flight
    rate_limit: {concurrency: 2}
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 1000, algorithm: fixed_window}
  - key: bucket
    reservations: true
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket}
  - key: shared
    reservations: true
    rate_limit: {unit: hour, requests_per_unit: 1000000, algorithm: fixed_window}
`;

/** Per descriptor's book: small, so that 300 pairs would fill one that remembered its commits. */
const PER_KEY = 100;
/** The memory store's holds over every book: the cap the table-filling run was measured at. */
const MAX_ENTRIES = 2_000;

type Deployment = { url: string; stop(): Promise<void> };

interface Answer {
  readonly overall: string;
  readonly remaining: number;
  readonly resetMs: number;
}

describe.each(['memory', 'redis'])('reservation bounds on the wire (%s)', (backend) => {
  let deployment: Deployment | undefined;
  const replicas: TestService[] = [];
  let a: RlsClient;
  let b: RlsClient;
  const run = Date.now().toString(36);

  beforeAll(async () => {
    if (backend === 'redis') deployment = await startRedis();
    const env: Record<string, string> = { RESERVATIONS_MAX_PER_KEY: String(PER_KEY), RESERVATION_TTL: '30s', RESERVATIONS_MAX_ENTRIES: String(MAX_ENTRIES) };
    if (deployment !== undefined) Object.assign(env, { BACKEND_TYPE: 'redis', REDIS_TYPE: 'single', REDIS_URL: deployment.url, STORE_TIMEOUT_MS: '2000' });
    for (let i = 0; i < (deployment === undefined ? 1 : 2); i++) replicas.push(await startTestService({ config: { 'bounds.yaml': RULES }, env }));
    a = replicas[0].client;
    b = replicas[replicas.length - 1].client;
    // Fixed windows of an hour: every case ends well inside one.
    const left = 3_600_000 - (Date.now() % 3_600_000);
    if (left < 60_000) await new Promise((r) => setTimeout(r, left + 100));
  }, 120_000);

  afterAll(async () => {
    await Promise.all(replicas.map((r) => r.stop()));
    await deployment?.stop();
  });

  const call = async (client: RlsClient, key: string, value: string, kind: string, id: string, hits: number): Promise<Answer> => {
    const res = await client.shouldRateLimit({
      domain: 'bounds',
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
    const reset = s.durationUntilReset;
    return { overall: res.overallCode, remaining: s.limitRemaining, resetMs: reset === null ? 0 : reset.seconds * 1000 + Math.round(reset.nanos / 1e6) };
  };
  const codes = (answers: readonly Answer[]): Record<string, number> => {
    const out: Record<string, number> = {};
    for (const x of answers) out[x.overall] = (out[x.overall] ?? 0) + 1;
    return out;
  };

  it('holds one ID once: 200 concurrent reserves of it across replicas pass concurrency 2 once, beside 100 legit reserves answered exactly', async () => {
    const flight = `acme-${run}`;
    const legit = `alice-${run}`;
    const answers = await Promise.all([
      ...Array.from({ length: 200 }, (_, i) => call(i % 2 ? a : b, 'flight', flight, 'reserve', 'same', 1)),
      ...Array.from({ length: 100 }, (_, i) => call(i % 2 ? b : a, 'tokens', legit, 'reserve', `legit-${i}`, 10)),
    ]);
    expect(codes(answers.slice(0, 200))).toEqual({ OK: 1, OVER_LIMIT: 199 });
    expect(
      answers
        .slice(200)
        .map((x) => x.remaining)
        .sort((x, y) => x - y),
    ).toEqual(Array.from({ length: 100 }, (_, i) => 10 * i));
    // The one hold counts once: a second ID fits the two in flight, a third does not.
    expect(await call(a, 'flight', flight, 'reserve', 'second', 1)).toMatchObject({ overall: 'OK', remaining: 0 });
    expect((await call(b, 'flight', flight, 'reserve', 'third', 1)).overall).toBe('OVER_LIMIT');
  });

  it('charges every commit: 21 reserve + commit pairs of 100 on one ID spend the 1,000 once, and a commit of 0 frees no later one', async () => {
    const bob = `bob-${run}`;
    const carol = `carol-${run}`;
    const legit = `dave-${run}`;
    const pairs: string[] = [];
    const legitRemaining: number[] = [];
    for (let i = 0; i < 21; i++) {
      const reserved = await call(i % 2 ? a : b, 'tokens', bob, 'reserve', 'one', 100);
      pairs.push(reserved.overall);
      if (reserved.overall === 'OK') await call(i % 2 ? b : a, 'tokens', bob, 'commit', 'one', 100);
      // Beside it, a legit key: 100 held, 40 charged, a fresh ID each time.
      if (i < 10) {
        legitRemaining.push((await call(a, 'tokens', legit, 'reserve', `d${i}`, 100)).remaining);
        legitRemaining.push((await call(b, 'tokens', legit, 'commit', `d${i}`, 40)).remaining);
      }
    }
    expect(pairs).toEqual([...Array<string>(10).fill('OK'), ...Array<string>(11).fill('OVER_LIMIT')]);
    expect(legitRemaining).toEqual(Array.from({ length: 10 }, (_, i) => [900 - 40 * i, 960 - 40 * i]).flat());
    // A commit of 0 first, then one of 500: the 500 are charged.
    expect(await call(a, 'tokens', carol, 'reserve', 'x', 500)).toMatchObject({ overall: 'OK', remaining: 500 });
    expect(await call(b, 'tokens', carol, 'commit', 'x', 0)).toMatchObject({ overall: 'OK', remaining: 1_000 });
    expect(await call(a, 'tokens', carol, 'commit', 'x', 500)).toMatchObject({ overall: 'OK', remaining: 500 });
    expect((await call(b, 'tokens', carol, 'reserve', 'y', 501)).overall).toBe('OVER_LIMIT');
  });

  it('takes reserve and commit entries only on a rule that opts in: elsewhere INVALID_ARGUMENT naming the descriptor, nothing charged', async () => {
    const refused = a.shouldRateLimit({
      domain: 'bounds',
      descriptors: [
        descriptor([['tokens', `erin-${run}`]]),
        descriptor(
          [
            ['plain', `x-${run}`],
            ['commit', 'id'],
          ],
          { hitsAddend: { value: 1_000_000 } },
        ),
      ],
    });
    await expect(refused).rejects.toMatchObject({
      code: grpc.status.INVALID_ARGUMENT,
      details: expect.stringMatching(/^descriptors\[1\]: its rule \(plain\) takes no reservations/),
    });
    expect(await call(b, 'tokens', `erin-${run}`, 'reserve', 'e', 1)).toMatchObject({ overall: 'OK', remaining: 999 });
  });

  it('charges a commit at most the limit: one of 2^32-1 on a bucket of 10 a second locks it for a second, beside a legit key', async () => {
    const locked = `locked-${run}`;
    const legit = `legit-${run}`;
    expect(await call(a, 'bucket', locked, 'commit', 'huge', 4_294_967_295)).toMatchObject({ overall: 'OK', remaining: 0 });
    const lockedNow = await call(b, 'bucket', locked, 'reserve', 'r', 1);
    expect(lockedNow.overall).toBe('OVER_LIMIT');
    expect(lockedNow.resetMs).toBeLessThanOrEqual(1_000);
    expect(await call(a, 'bucket', legit, 'reserve', 'l', 5)).toMatchObject({ overall: 'OK', remaining: 5 });
    expect(await call(b, 'bucket', legit, 'commit', 'l', 5)).toMatchObject({ overall: 'OK', remaining: 5 });
    await new Promise((r) => setTimeout(r, 1_100));
    expect(await call(b, 'bucket', locked, 'reserve', 'r', 10)).toMatchObject({ overall: 'OK', remaining: 0 });
  });

  it("holds no longer than its rule's window: a hold of a whole 10-a-second bucket lapses after a second, not RESERVATION_TTL", async () => {
    const held = `held-${run}`;
    const legit = `steady-${run}`;
    expect(await call(b, 'bucket', held, 'reserve', 'all', 10)).toMatchObject({ overall: 'OK', remaining: 0 });
    expect((await call(a, 'bucket', held, 'reserve', 'r', 1)).overall).toBe('OVER_LIMIT');
    expect(await call(a, 'bucket', legit, 'reserve', 'l', 4)).toMatchObject({ overall: 'OK', remaining: 6 });
    await new Promise((r) => setTimeout(r, 1_100));
    expect(await call(a, 'bucket', held, 'reserve', 'r', 10)).toMatchObject({ overall: 'OK', remaining: 0 });
    // The legit hold lapsed too (never committed): its key is whole again.
    expect(await call(b, 'bucket', legit, 'reserve', 'm', 10)).toMatchObject({ overall: 'OK', remaining: 0 });
  });

  it('keeps taking reserve + commit pairs on a shared descriptor: 300 pairs, 50 at a time, against books of 100', async () => {
    const shared = `shared-${run}`;
    const results: Answer[] = [];
    for (let round = 0; round < 6; round++) {
      results.push(
        ...(await Promise.all(
          Array.from({ length: 50 }, async (_, i) => {
            const id = `p-${round}-${i}`;
            const reserved = await call(i % 2 ? a : b, 'shared', shared, 'reserve', id, 3);
            if (reserved.overall === 'OK') await call(i % 2 ? b : a, 'shared', shared, 'commit', id, 2);
            return reserved;
          }),
        )),
      );
    }
    expect(codes(results)).toEqual({ OK: 300 });
    expect(await call(a, 'shared', shared, 'reserve', 'last', 0)).toMatchObject({ overall: 'OK', remaining: 1_000_000 - 600 });
  });

  it('lets no caller fill a table another tenant needs: 2,200 commits of 0 and 2,200 holds on fresh keys, 200 in flight, a legit caller beside them exact', async () => {
    const mallory = `mallory-${run}`;
    const legit = `frank-${run}`;
    const legitAnswers: number[] = [];
    let pairs = 0;
    // Each batch of 200 hostile calls beside one legit reserve + commit of 10.
    const flood = async (make: (i: number) => Promise<Answer>): Promise<Answer[]> => {
      const out: Answer[] = [];
      for (let start = 0; start < 2_200; start += 200) {
        const id = `f${pairs++}`;
        const [batch, pair] = await Promise.all([
          Promise.all(Array.from({ length: 200 }, (_, j) => make(start + j))),
          (async () => [await call(a, 'tokens', legit, 'reserve', id, 10), await call(b, 'tokens', legit, 'commit', id, 10)])(),
        ]);
        out.push(...batch);
        legitAnswers.push(...pair.map((x) => (x.overall === 'OK' ? x.remaining : -1)));
      }
      return out;
    };
    // Commits of 0 with fresh IDs on fresh descriptors: charged (nothing), remembered nowhere.
    expect(codes(await flood((i) => call(i % 2 ? a : b, 'tokens', `${mallory}-c${i}`, 'commit', `c-${i}`, 0)))).toEqual({ OK: 2_200 });
    // Holds of 0 on fresh descriptors: more than the memory store keeps over every book.
    expect(codes(await flood((i) => call(i % 2 ? a : b, 'tokens', `${mallory}-h${i}`, 'reserve', 'h', 0)))).toEqual({ OK: 2_200 });
    // The legit key, 10 held then charged in each of the 22 batches: exact throughout.
    expect(legitAnswers).toEqual(Array.from({ length: 22 }, (_, j) => [990 - 10 * j, 990 - 10 * j]).flat());
    expect(await call(a, 'tokens', legit, 'reserve', 'after', 100)).toMatchObject({ overall: 'OK', remaining: 1_000 - 220 - 100 });
  });
});
