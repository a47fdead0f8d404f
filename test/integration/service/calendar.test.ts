import { calendarPeriod } from '../../../src/limiter/calendar';
import { descriptor } from '../../helpers/grpc-client';
import { startRedis, type RedisServer } from '../../helpers/redis';
import { startTestService, type TestService } from '../../helpers/service';

/**
 * Calendar windows on the wire: the real service with CALENDAR_TIMEZONE=+05:30, on the memory store
 * and on a redis-server (whose TIME is this machine's clock). Each answer's duration_until_reset,
 * read as an instant, is the end of the local day, Monday-to-Monday week and month computed for
 * the time of the call, within the call's own duration.
 */

const RULES = `
domain: billing
descriptors:
  - key: day
    rate_limit: {unit: day, requests_per_unit: 2, calendar: true}
  - key: week
    rate_limit: {unit: week, requests_per_unit: 2, calendar: true}
  - key: month
    rate_limit: {unit: month, requests_per_unit: 2, calendar: true}
`;

const OFFSET_MS = 5.5 * 3_600_000;

const ms = (d: { seconds: number; nanos: number } | null): number => (d ? Number(d.seconds) * 1000 + Math.round(d.nanos / 1e6) : NaN);

describe.each(['memory', 'redis'])('calendar windows on the wire (%s store, CALENDAR_TIMEZONE=+05:30)', (backend) => {
  let redis: RedisServer | undefined;
  let svc: TestService;

  beforeAll(async () => {
    if (backend === 'redis') redis = await startRedis();
    const store: Record<string, string> = redis === undefined ? {} : { BACKEND_TYPE: 'redis', REDIS_URL: redis.url, STORE_TIMEOUT_MS: '1000' };
    svc = await startTestService({ config: { 'billing.yaml': RULES }, env: { ...store, CALENDAR_TIMEZONE: '+05:30' } });
  });

  afterAll(async () => {
    await svc?.stop();
    await redis?.stop();
  });

  it.each(['day', 'week', 'month'] as const)('admits 2 per calendar %s and tells the denied one to wait until its local end', async (unit) => {
    const value = `tenant-${Date.now()}`;
    const codes: string[] = [];
    for (let i = 0; i < 3; i++) {
      const before = Date.now();
      const res = await svc.client.shouldRateLimit({ domain: 'billing', descriptors: [descriptor([[unit, value]])] });
      const after = Date.now();
      const [s] = res.statuses;
      codes.push(res.overallCode);
      expect(s.currentLimit?.unit).toBe(unit.toUpperCase());
      // Rounded to whole ms on the wire; a call straddling the period's end is judged by the one it ended in.
      const resetAt = [before + ms(s.durationUntilReset), after + ms(s.durationUntilReset)];
      expect(resetAt[0]).toBeLessThanOrEqual(calendarPeriod(after, unit, OFFSET_MS).endMs + 1);
      expect(resetAt[1]).toBeGreaterThanOrEqual(calendarPeriod(before, unit, OFFSET_MS).endMs - 1);
    }
    expect(codes).toEqual(['OK', 'OK', 'OVER_LIMIT']);
  });
});
