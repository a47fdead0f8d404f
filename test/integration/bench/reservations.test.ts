import { requireRedisBinaries } from '../../helpers/redis';
import { reservationTables, runReservationBench } from '../../../bench/reservations';

// bench/reservations.ts in a short run against its own redis-server: the harness, not the speed.
// The overspend of each mode is exact whatever the machine's load.
describe('the reservation benchmark, briefly', () => {
  it('measures checks and reserve + commit pairs, and what each mode lets 100 concurrent streams spend', async () => {
    requireRedisBinaries();
    const o = { seconds: 0.4, concurrency: 8, streams: 100, cost: 100, budget: 1000 };
    const b = await runReservationBench(o);
    expect(b.rate.map((r) => r.mode)).toEqual(['check', 'reserve+commit']);
    for (const r of b.rate) expect(r.perSecond).toBeGreaterThan(0);
    expect(b.overspend).toEqual([
      { mode: 'check only', admitted: 100, spent: 10_000, recorded: 1_000, ofBudget: 10 },
      { mode: 'post-paid', admitted: 100, spent: 10_000, recorded: 10_000, ofBudget: 10 },
      { mode: 'reserve/commit', admitted: 10, spent: 1_000, recorded: 1_000, ofBudget: 1 },
    ]);
    expect(reservationTables(b, o)).toContain('| reserve/commit | 10 | 1000 | 1.0 | 1000 |');
  });
});
