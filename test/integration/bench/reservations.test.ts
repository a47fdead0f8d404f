import { requireRedisBinaries } from '../../helpers/redis';
import { reservationTables, runReservationBench } from '../../../bench/reservations';

// bench/reservations.ts in a short run against its own redis-server: the harness, not the speed.
// The overspend of each mode is exact whatever the machine's load.
describe('the reservation benchmark, briefly', () => {
  it('measures checks and reserve + commit pairs, what each mode lets 100 concurrent streams spend, and pairs on one shared descriptor', async () => {
    requireRedisBinaries();
    const o = { seconds: 0.4, concurrency: 8, streams: 100, cost: 100, budget: 1000, sharedSeconds: 1, sharedRate: 200 };
    const b = await runReservationBench(o);
    expect(b.rate.map((r) => r.mode)).toEqual(['check', 'reserve+commit']);
    for (const r of b.rate) expect(r.perSecond).toBeGreaterThan(0);
    expect(b.overspend).toEqual([
      { mode: 'check only', admitted: 100, spent: 10_000, recorded: 1_000, ofBudget: 10 },
      { mode: 'post-paid', admitted: 100, spent: 10_000, recorded: 10_000, ofBudget: 10 },
      { mode: 'reserve/commit', admitted: 10, spent: 1_000, recorded: 1_000, ofBudget: 1 },
    ]);
    expect(reservationTables(b, o)).toContain('| reserve/commit | 10 | 1000 | 1.0 | 1000 |');
    // One shared descriptor: every pair started is answered OK (none refused, none failed).
    expect(b.shared).toMatchObject({ target: 200, refused: 0, failed: 0 });
    expect(b.shared.completed + b.shared.late).toBeGreaterThanOrEqual(190);
    expect(reservationTables(b, o)).toContain('| one shared descriptor, 200 pairs a second asked for 1 s, default settings |');
  });
});
