import type { Descriptor } from '../../../src/limiter/types';
import { startTestService, type TestService } from '../../helpers/service';

/**
 * One request naming the same descriptor many times (the cap raised to let it in), decided by the
 * running service's limiter and memory store: the store finds a call's repeated counters through a
 * map, so the call costs time in proportion to its descriptors, not to their square. Measured
 * against a call of a tenth of them on the same service, so that the load of the machine cancels out.
 */

const CONFIG = `domain: edge
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1000000}
`;

const N = 20_000;

let svc: TestService;

beforeAll(async () => {
  svc = await startTestService({ config: { 'edge.yaml': CONFIG }, env: { REQUEST_MAX_DESCRIPTORS: String(N) } });
});
afterAll(() => svc.stop());

/** Milliseconds of one call naming `value` n times, and its statuses' remaining hits. */
async function timed(value: string, n: number): Promise<{ ms: number; remaining: number[] }> {
  const descriptors: Descriptor[] = Array.from({ length: n }, () => ({ entries: [{ key: 'k', value }] }));
  const started = performance.now();
  const res = await svc.service.limiter.shouldRateLimit({ domain: 'edge', descriptors, hitsAddend: 0 });
  return { ms: performance.now() - started, remaining: res.statuses.map((s) => s.limitRemaining) };
}

it(`answers a call naming one counter ${N} times in about ten times the time of one naming it ${N / 10} times`, async () => {
  // Once to compile the paths.
  await timed('warm', 1_000);
  const small = await timed('small', N / 10);
  const large = await timed('large', N);
  // 1,000,000 per minute: each naming sees the hits of those before it.
  expect(large.remaining[0]).toBe(1_000_000 - 1);
  expect(large.remaining[N - 1]).toBe(1_000_000 - N);
  // Ten times the descriptors: ten times the work with a map (3 to 6 times here, the small call
  // paying more of the fixed costs), a hundred times comparing every pair (35 here, for the same reason).
  expect(large.ms).toBeLessThan(20 * small.ms);
});
