import { descriptor, grpc, grpcCode, type RlsClient, type RlsRequestInput } from '../../helpers/grpc-client';
import { startTestService, type TestService, type TestServiceOptions } from '../../helpers/service';

/**
 * ShouldRateLimit and health over a real grpc-js client connection to the real service (memory store),
 * once per gRPC transport (GRPC_TRANSPORT): both must behave identically.
 * Windows are minutes or hours, so no test depends on when it runs; every test uses its own values
 * so counters never leak between tests.
 */

const EDGE = `
domain: edge
descriptors:
  - key: hits
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: named
    rate_limit: {name: per_user, unit: hour, requests_per_unit: 3}
  - key: weekly
    rate_limit: {unit: week, requests_per_unit: 2}
  - key: tenant
    value: acme
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: base
    rate_limit: {name: base_limit, unit: minute, requests_per_unit: 1}
  - key: special
    rate_limit: {unit: minute, requests_per_unit: 100, replaces: [{name: base_limit}]}
  - key: burst
    rate_limit: {unit: hour, requests_per_unit: 50}
  - key: big
    rate_limit: {unit: hour, requests_per_unit: 1000000}
  - key: token
    rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 10}
  - key: strict
    rate_limit: {unit: hour, requests_per_unit: 3, sub_windows: 4, strict: true}
`;

const UINT32_MAX = 4294967295;

describe.each(['http2', 'grpc-js'])('over the %s transport', (transport) => {
  const start = (options: TestServiceOptions = {}): Promise<TestService> =>
    startTestService({ ...options, env: { GRPC_TRANSPORT: transport, ...options.env } });

  let svc: TestService;
  let client: RlsClient;
  let unique = 0;
  /** A value no other test uses, so each test starts from empty counters. */
  const fresh = (label: string): string => `${label}-${++unique}-${Date.now()}`;
  const req = (descriptors: RlsRequestInput['descriptors'], extra: Partial<RlsRequestInput> = {}): RlsRequestInput => ({
    domain: 'edge',
    descriptors,
    ...extra,
  });
  const ms = (d: { seconds: number; nanos: number } | null): number => (d ? Number(d.seconds) * 1000 + d.nanos / 1e6 : NaN);

  beforeAll(async () => {
    svc = await start({ config: { 'edge.yaml': EDGE } });
    client = svc.client;
  });

  afterAll(async () => {
    await svc?.stop();
  });

  describe('ShouldRateLimit', () => {
    it('counts the request hits_addend, treating 0 as 1', async () => {
      const d = descriptor([['hits', fresh('a')]]);
      const first = await client.shouldRateLimit(req([d], { hitsAddend: 3 }));
      expect(first.overallCode).toBe('OK');
      expect(first.statuses[0].limitRemaining).toBe(2);
      const second = await client.shouldRateLimit(req([d], { hitsAddend: 0 }));
      expect(second.statuses[0].limitRemaining).toBe(1);
    });

    it("lets a descriptor's own hits_addend win, with 0 meaning check without counting", async () => {
      const v = fresh('b');
      await client.shouldRateLimit(req([descriptor([['hits', v]])], { hitsAddend: 4 }));
      const check = await client.shouldRateLimit(req([descriptor([['hits', v]], { hitsAddend: { value: 0 } })], { hitsAddend: 3 }));
      expect(check.statuses[0]).toMatchObject({ code: 'OK', limitRemaining: 1 });
      const tooMany = await client.shouldRateLimit(req([descriptor([['hits', v]], { hitsAddend: { value: 2 } })], { hitsAddend: 1 }));
      expect(tooMany.overallCode).toBe('OVER_LIMIT');
      expect(tooMany.statuses[0]).toMatchObject({ code: 'OVER_LIMIT', limitRemaining: 0 });
      const one = await client.shouldRateLimit(req([descriptor([['hits', v]], { hitsAddend: { value: 1 } })], { hitsAddend: 9 }));
      expect(one.statuses[0]).toMatchObject({ code: 'OK', limitRemaining: 0 });
    });

    it("admits a token bucket's burst at once, then answers a denial with the wait for the next token", async () => {
      const d = descriptor([['token', fresh('t')]]);
      const burst = await client.shouldRateLimit(req([d], { hitsAddend: 10 }));
      expect(burst.statuses[0]).toMatchObject({ code: 'OK', limitRemaining: 0, currentLimit: { requestsPerUnit: 5, unit: 'SECOND' } });
      // Full again two seconds after the burst: 10 tokens at 5 per second.
      expect(ms(burst.statuses[0].durationUntilReset)).toBe(2_000);
      const denied = await client.shouldRateLimit(req([d]));
      expect(denied.statuses[0].code).toBe('OVER_LIMIT');
      // One token every 200 ms: the wait is what is left of the first one.
      expect(ms(denied.statuses[0].durationUntilReset)).toBeGreaterThan(0);
      expect(ms(denied.statuses[0].durationUntilReset)).toBeLessThanOrEqual(200);
    });

    it('denies on a strict sliding window until the hits have left the window entirely', async () => {
      const d = descriptor([['strict', fresh('s')]]);
      expect((await client.shouldRateLimit(req([d], { hitsAddend: 3 }))).overallCode).toBe('OK');
      const denied = await client.shouldRateLimit(req([d]));
      expect(denied.statuses[0].code).toBe('OVER_LIMIT');
      // The 3 hits count in full until their quarter-hour sub-window has left the hour: more than an hour away.
      expect(ms(denied.statuses[0].durationUntilReset)).toBeGreaterThan(3_600_000);
      expect(ms(denied.statuses[0].durationUntilReset)).toBeLessThanOrEqual(3_600_000 + 900_000);
    });

    it('caps a huge uint64 descriptor hits_addend and denies it', async () => {
      const r = await client.shouldRateLimit(req([descriptor([['hits', fresh('huge')]], { hitsAddend: { value: '18446744073709551615' } })]));
      expect(r.overallCode).toBe('OVER_LIMIT');
    });

    it('answers one status per descriptor, in request order', async () => {
      const r = await client.shouldRateLimit(
        req([
          descriptor([['nothing', 'matches']]),
          descriptor([['named', fresh('c')]]),
          descriptor([
            ['tenant', 'acme'],
            ['path', fresh('/p')],
          ]),
          descriptor([
            ['tenant', 'other'],
            ['path', '/p'],
          ]),
        ]),
      );
      expect(r.statuses).toHaveLength(4);
      expect(r.statuses[0]).toMatchObject({ code: 'OK', currentLimit: null, durationUntilReset: null });
      expect(r.statuses[1].currentLimit).toEqual({ requestsPerUnit: 3, unit: 'HOUR', name: 'per_user' });
      expect(r.statuses[2].currentLimit).toEqual({ requestsPerUnit: 2, unit: 'MINUTE', name: '' });
      expect(r.statuses[3]).toMatchObject({ code: 'OK', currentLimit: null });
    });

    it('reports limit_remaining and duration_until_reset as the window fills', async () => {
      const d = descriptor([['named', fresh('d')]]);
      const remaining: number[] = [];
      for (let i = 0; i < 3; i++) {
        const r = await client.shouldRateLimit(req([d]));
        expect(r.statuses[0].code).toBe('OK');
        remaining.push(r.statuses[0].limitRemaining);
        const reset = ms(r.statuses[0].durationUntilReset);
        expect(reset).toBeGreaterThan(0);
        expect(reset).toBeLessThanOrEqual(2 * 3_600_000);
      }
      expect(remaining).toEqual([2, 1, 0]);
      const denied = await client.shouldRateLimit(req([d]));
      expect(denied.overallCode).toBe('OVER_LIMIT');
      expect(denied.statuses[0]).toMatchObject({ code: 'OVER_LIMIT', limitRemaining: 0 });
      const wait = ms(denied.statuses[0].durationUntilReset);
      expect(wait).toBeGreaterThan(0);
      expect(wait).toBeLessThanOrEqual(2 * 3_600_000);
    });

    it('speaks the WEEK unit', async () => {
      const r = await client.shouldRateLimit(req([descriptor([['weekly', fresh('w')]])]));
      expect(r.statuses[0].currentLimit).toMatchObject({ requestsPerUnit: 2, unit: 'WEEK' });
    });

    it('is OVER_LIMIT overall when any one descriptor is, and charges none of them', async () => {
      const free = descriptor([['hits', fresh('e')]]);
      const full = descriptor([['base', fresh('f')]]);
      await client.shouldRateLimit(req([full]));
      const r = await client.shouldRateLimit(req([free, full]));
      expect(r.overallCode).toBe('OVER_LIMIT');
      expect(r.statuses.map((s) => s.code)).toEqual(['OK', 'OVER_LIMIT']);
      const after = await client.shouldRateLimit(req([free]));
      expect(after.statuses[0].limitRemaining).toBe(4);
    });

    it('never denies through a shadow-mode rule', async () => {
      const d = descriptor([['shadow', fresh('s')]]);
      for (let i = 0; i < 3; i++) {
        const r = await client.shouldRateLimit(req([d]));
        expect(r.overallCode).toBe('OK');
        expect(r.statuses[0].code).toBe('OK');
      }
    });

    it('answers unlimited rules OK with the largest remaining count', async () => {
      for (let i = 0; i < 3; i++) {
        const r = await client.shouldRateLimit(req([descriptor([['free', 'x']])]));
        expect(r.statuses[0]).toMatchObject({ code: 'OK', limitRemaining: UINT32_MAX });
      }
    });

    it('drops a limit replaced by another rule matched in the same request', async () => {
      const user = fresh('g');
      for (let i = 0; i < 3; i++) {
        const r = await client.shouldRateLimit(req([descriptor([['base', user]]), descriptor([['special', user]])]));
        expect(r.overallCode).toBe('OK');
        expect(r.statuses[0]).toMatchObject({ code: 'OK', currentLimit: null });
        expect(r.statuses[1].currentLimit).toMatchObject({ requestsPerUnit: 100 });
      }
    });

    it('applies a request-supplied limit override without matching', async () => {
      const d = descriptor([['not_configured', fresh('o')]], { limit: { requestsPerUnit: 2, unit: 'HOUR' } });
      const codes: string[] = [];
      for (let i = 0; i < 3; i++) {
        const r = await client.shouldRateLimit(req([d]));
        codes.push(r.overallCode);
        expect(r.statuses[0].currentLimit).toMatchObject({ requestsPerUnit: 2, unit: 'HOUR' });
      }
      expect(codes).toEqual(['OK', 'OK', 'OVER_LIMIT']);
    });

    it('answers OK for an unknown domain or a descriptor that matches nothing', async () => {
      const unknown = await client.shouldRateLimit({ domain: 'nope', descriptors: [descriptor([['hits', 'x']])] });
      expect(unknown.overallCode).toBe('OK');
      expect(unknown.statuses).toEqual([expect.objectContaining({ code: 'OK', currentLimit: null })]);
      const noMatch = await client.shouldRateLimit(req([descriptor([['unknown_key', 'x']])]));
      expect(noMatch.overallCode).toBe('OK');
    });

    it('admits exactly the limit out of 200 concurrent calls', async () => {
      const d = descriptor([['burst', fresh('c')]]);
      const results = await Promise.all(Array.from({ length: 200 }, () => client.shouldRateLimit(req([d]))));
      expect(results.filter((r) => r.overallCode === 'OK')).toHaveLength(50);
      expect(results.filter((r) => r.overallCode === 'OVER_LIMIT')).toHaveLength(150);
    });
  });

  describe('malformed requests', () => {
    it.each([
      ['an empty domain', { domain: '', descriptors: [descriptor([['hits', 'x']])] }],
      ['no descriptors', { domain: 'edge', descriptors: [] }],
      ['an empty key', { domain: 'edge', descriptors: [descriptor([['', 'x']])] }],
      ['a descriptor without entries', { domain: 'edge', descriptors: [{ entries: [] }] }],
      ['an override with an undefined unit', { domain: 'edge', descriptors: [descriptor([['hits', 'x']], { limit: { requestsPerUnit: 1, unit: 99 } })] }],
    ])('are INVALID_ARGUMENT: %s', async (_what, request) => {
      expect(await grpcCode(client.shouldRateLimit(request as RlsRequestInput))).toBe(grpc.status.INVALID_ARGUMENT);
    });

    it('a 2000-descriptor request is answered without stalling other calls', async () => {
      const many = Array.from({ length: 2000 }, (_, i) => descriptor([['big', `many-${i}-${Date.now()}`]]));
      const bigCall = client.shouldRateLimit(req(many)).then(
        (r) => ({ ok: true as const, r }),
        (err: grpc.ServiceError) => ({ ok: false as const, code: err.code }),
      );
      const started = Date.now();
      const small = await client.shouldRateLimit(req([descriptor([['hits', fresh('side')]])]));
      expect(small.overallCode).toBe('OK');
      const outcome = await bigCall;
      if (outcome.ok) {
        expect(outcome.r.statuses).toHaveLength(2000);
        expect(outcome.r.overallCode).toBe('OK');
      } else {
        expect([grpc.status.INVALID_ARGUMENT, grpc.status.RESOURCE_EXHAUSTED]).toContain(outcome.code);
      }
      expect(Date.now() - started).toBeLessThan(5_000);
      const t0 = Date.now();
      await client.shouldRateLimit(req([descriptor([['hits', fresh('after')]])]));
      expect(Date.now() - t0).toBeLessThan(250);
    });

    it('a 100 KB value is answered or rejected, and the next call still answers fast', async () => {
      const value = 'v'.repeat(100 * 1024);
      const code = await grpcCode(client.shouldRateLimit(req([descriptor([['hits', value]])])));
      expect([undefined, grpc.status.INVALID_ARGUMENT, grpc.status.RESOURCE_EXHAUSTED]).toContain(code);
      const t0 = Date.now();
      const r = await client.shouldRateLimit(req([descriptor([['hits', fresh('next')]])]));
      expect(r.overallCode).toBe('OK');
      expect(Date.now() - t0).toBeLessThan(250);
    });
  });

  describe('global SHADOW_MODE', () => {
    let shadow: TestService;
    beforeAll(async () => {
      shadow = await start({ config: { 'edge.yaml': EDGE }, env: { SHADOW_MODE: 'true' } });
    });
    afterAll(async () => {
      await shadow?.stop();
    });

    it('answers OK overall even when a descriptor is over its limit', async () => {
      const d = descriptor([['base', fresh('gs')]]);
      await shadow.client.shouldRateLimit(req([d]));
      const r = await shadow.client.shouldRateLimit(req([d]));
      expect(r.overallCode).toBe('OK');
      expect(r.statuses[0].code).toBe('OVER_LIMIT');
    });
  });

  describe('response headers', () => {
    let withHeaders: TestService;
    beforeAll(async () => {
      withHeaders = await start({ config: { 'edge.yaml': EDGE }, env: { LIMIT_RESPONSE_HEADERS_ENABLED: 'true' } });
    });
    afterAll(async () => {
      await withHeaders?.stop();
    });

    it('carries RateLimit-* headers in response_headers_to_add', async () => {
      const r = await withHeaders.client.shouldRateLimit(req([descriptor([['hits', fresh('h')]])]));
      expect(r.responseHeadersToAdd).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ key: 'RateLimit-Limit', value: '5' }),
          expect.objectContaining({ key: 'RateLimit-Remaining', value: '4' }),
        ]),
      );
    });
  });

  describe('gRPC health', () => {
    it.each(['', 'ratelimit'])('reports SERVING for %j once the config has loaded', async (service) => {
      expect(await client.healthCheck(service)).toBe('SERVING');
      const watch = client.healthWatch(service);
      expect(await watch.next()).toBe('SERVING');
      watch.cancel();
    });

    it('answers NOT_FOUND to Check and SERVICE_UNKNOWN to Watch for other services', async () => {
      expect(await grpcCode(client.healthCheck('other'))).toBe(grpc.status.NOT_FOUND);
      const watch = client.healthWatch('other');
      expect(await watch.next()).toBe('SERVICE_UNKNOWN');
      watch.cancel();
    });

    it('is NOT_SERVING before the first config, then SERVING once a valid one appears', async () => {
      const pending = await start({ config: { 'edge.yaml': 'domain: edge\ndescriptors: [{key: a, rate_limit: {unit: fortnight, requests_per_unit: 1}}]\n' } });
      try {
        expect(await pending.client.healthCheck('')).toBe('NOT_SERVING');
        expect(await pending.client.healthCheck('ratelimit')).toBe('NOT_SERVING');
        expect(await grpcCode(pending.client.shouldRateLimit(req([descriptor([['a', 'b']])])))).toBe(grpc.status.UNAVAILABLE);
        const watches = ['', 'ratelimit'].map((s) => pending.client.healthWatch(s));
        for (const w of watches) expect(await w.next()).toBe('NOT_SERVING');
        pending.writeConfig('edge.yaml', EDGE);
        for (const w of watches) expect(await w.next(10_000)).toBe('SERVING');
        for (const w of watches) w.cancel();
        expect(await pending.client.healthCheck('ratelimit')).toBe('SERVING');
      } finally {
        await pending.stop();
      }
    });

    it('turns NOT_SERVING for watchers when shutdown begins, then closes their streams', async () => {
      const closing = await start({ config: { 'edge.yaml': EDGE } });
      const watch = closing.client.healthWatch('ratelimit');
      expect(await watch.next()).toBe('SERVING');
      const t0 = Date.now();
      const stopped = closing.service.close();
      expect(await watch.next()).toBe('NOT_SERVING');
      await stopped;
      expect(Date.now() - t0).toBeLessThan(1_500);
      await expect(watch.next(1_000)).rejects.toThrow();
      await closing.stop();
    });
  });
});
