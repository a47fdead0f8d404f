import { buildConfig } from '../../src/config/rule-tree';
import { parseConfigText } from '../../src/config/rule-reader';
import { RateLimiter } from '../../src/limiter/rate-limiter';
import type { Store } from '../../src/limiter/store';
import { ALGORITHMS, type DescriptorStatus, type RateLimitRequest } from '../../src/limiter/types';
import { requireBefore, untilUnstretched } from '../helpers/deadline';
import { LIMITER_DEFAULTS } from '../helpers/limiter-defaults';
import type { TimeCase } from './time-cases';

/**
 * Budgets decided by the limiter on each store (part of the store contract, see ./store-contract.ts):
 * several limits on one rule (`rate_limits`) are decided and charged together, in one Redis Cluster
 * slot, and reported by the deciding limit; a rule with `count_denied_requests` records a post-paid
 * charge past its limit. Real time on Redis: the 2 s limit's case lines up with a window first and
 * waits two windows, on every algorithm at once.
 */

/** The harness of the suite, as this part uses it. */
interface BudgetHarness {
  readonly store: Store;
  advance(ms: number): Promise<void>;
  nowMs?(): number;
}

/** Resolves inside a window with `room` ms left, with the window's end (store clock). */
type LineUp = (algorithm: 'sliding_window' | 'fixed_window', windowMs: number, room: number) => Promise<number>;

let sequence = 0;
const run = `${process.pid}-${Date.now().toString(36)}`;

/** A domain no other case (or earlier run against the same Redis) uses. */
function freshDomain(label: string): string {
  sequence += 1;
  return `budget-${run}-${sequence}-${label}`;
}

function limiterFor(store: Store, domain: string, rules: string): RateLimiter {
  const config = buildConfig([parseConfigText('budgets.yaml', `domain: ${domain}\ndescriptors:\n${rules}`, { defaultAlgorithm: 'sliding_window' })]);
  return new RateLimiter({ store, config: () => config, ...LIMITER_DEFAULTS });
}

const ask = (domain: string, ...descriptors: [string, string, number?][]): RateLimitRequest => ({
  domain,
  hitsAddend: 0,
  descriptors: descriptors.map(([key, value, hitsAddend]) => ({ entries: [{ key, value }], ...(hitsAddend === undefined ? {} : { hitsAddend }) })),
});

/** Code, deciding limit's name, and for a denial whether its wait is the minute's (over one 2 s window). */
const verdict = (s: DescriptorStatus): [string, string | undefined] => [s.code, s.currentLimit?.name];

/** Registers the budget cases inside a store's contract suite (`overTime` registers a case that waits for real time). */
export function describeBudgetContract(harness: () => BudgetHarness, lineUp: LineUp, overTime: TimeCase): void {
  describe('budgets through the limiter', () => {
    overTime(
      'admits exactly 5 on 3 per 2 s and 5 per minute, every algorithm: the first denial names the 3, the last the 5, and a denial charges nothing',
      () =>
        untilUnstretched(async () => {
          const h = harness();
          const now = (): number => h.nowMs?.() ?? Date.now();
          const domain = freshDomain('several');
          const rules = ALGORITHMS.map(
            (algorithm) =>
              `  - key: user_${algorithm}\n    rate_limits:\n` +
              `      - {name: short, unit: second, unit_multiplier: 2, requests_per_unit: 3, algorithm: ${algorithm}}\n` +
              `      - {name: minute, unit: minute, requests_per_unit: 5, algorithm: sliding_log}\n`,
          ).join('');
          const limiter = limiterFor(h.store, domain, `${rules}  - key: other\n    rate_limit: {unit: day, requests_per_unit: 100}\n`);
          const call = (algorithm: string): Promise<DescriptorStatus> =>
            limiter.shouldRateLimit(ask(domain, [`user_${algorithm}`, 'u'], ['other', algorithm])).then((r) => r.statuses[0]);

          // Four requests inside one 2 s window (and within 600 ms: a bucket of 3 per 2 s gains one every
          // 667 ms), then three once two windows have passed.
          const end = await lineUp('fixed_window', 2_000, 1_200);
          const sent = now();
          const first = await Promise.all(ALGORITHMS.map(async (a) => [await call(a), await call(a), await call(a), await call(a)]));
          requireBefore(Math.min(end, sent + 600), now(), 'the first four calls of every algorithm');
          await h.advance(4_200);
          const second = await Promise.all(ALGORITHMS.map(async (a) => [await call(a), await call(a), await call(a)]));

          ALGORITHMS.forEach((algorithm, i) => {
            const statuses = [...first[i], ...second[i]];
            expect({ algorithm, verdicts: statuses.map(verdict) }).toEqual({
              algorithm,
              verdicts: [
                ['OK', 'short'],
                ['OK', 'short'],
                ['OK', 'short'],
                ['OVER_LIMIT', 'short'],
                ['OK', 'minute'],
                ['OK', 'minute'],
                ['OVER_LIMIT', 'minute'],
              ],
            });
            expect(statuses[3].durationUntilResetMs).toBeLessThanOrEqual(2_001);
            expect(statuses[6].durationUntilResetMs).toBeGreaterThan(50_000);
          });
          // The other descriptor was charged by the 5 admitted requests only.
          const others = await Promise.all(ALGORITHMS.map((a) => limiter.shouldRateLimit(ask(domain, ['other', a, 0]))));
          expect(others.map((r) => r.statuses[0].limitRemaining)).toEqual(ALGORITHMS.map(() => 95));
        }),
    );

    it('records a post-paid 1,000 per minute budget charged 700 then 500 at 1,200, and denies the next check', async () => {
      const h = harness();
      const domain = freshDomain('post-paid');
      const limiter = limiterFor(
        h.store,
        domain,
        '  - key: tokens\n    count_denied_requests: true\n    rate_limits:\n' +
          '      - {name: per_minute, unit: minute, requests_per_unit: 1000, algorithm: fixed_window}\n' +
          '      - {name: per_day, unit: day, requests_per_unit: 5000, algorithm: sliding_log}\n',
      );
      await lineUp('fixed_window', 60_000, 5_000);
      const tokens = (hits: number): Promise<DescriptorStatus> => limiter.shouldRateLimit(ask(domain, ['tokens', 'app', hits])).then((r) => r.statuses[0]);
      expect(verdict(await tokens(0))).toEqual(['OK', 'per_minute']);
      expect(await tokens(700)).toMatchObject({ code: 'OK', limitRemaining: 300 });
      expect(verdict(await tokens(500))).toEqual(['OVER_LIMIT', 'per_minute']);
      const check = await tokens(0);
      expect(verdict(check)).toEqual(['OVER_LIMIT', 'per_minute']);
      // Both limits hold 1,200: the minute until its window ends, the day's log until a day has passed.
      const limits = limiterFor(
        h.store,
        domain,
        '  - key: tokens\n    rate_limits:\n' +
          '      - {name: per_minute, unit: minute, requests_per_unit: 1200, algorithm: fixed_window}\n' +
          '      - {name: per_day, unit: day, requests_per_unit: 1200, algorithm: sliding_log}\n',
      );
      const held = await limits.shouldRateLimit(ask(domain, ['tokens', 'app', 0]));
      expect(held.statuses[0]).toMatchObject({ code: 'OK', limitRemaining: 0 });
      expect((await limits.shouldRateLimit(ask(domain, ['tokens', 'app', 1]))).statuses[0].code).toBe('OVER_LIMIT');
    });
  });
}
