import { startWorld, worstSpan, type World } from '../../helpers/regions';
import type { Replica } from '../../helpers/lease-replicas';
import { request } from '../../helpers/http-request';

/**
 * Regions on the real service: three regions of two replicas each, every region its own
 * redis-server, the global redis-server reached through a proxy adding 100 ms each way. One global
 * limit of 200 per 10 s; calls at steady rates per region, phase after phase: uneven demand, a shift
 * from one region to another, a region cut off for 30 s and healed, the global store frozen for
 * 30 s, a replica killed, a region's Redis killed. The bound is checked over every span of one
 * window of the whole run; at the end, what the replicas settled to the global counter is exactly
 * what they admitted.
 */

const LIMIT = 200;
const WINDOW_MS = 10_000;
const REGION_SYNC_MS = 500;
const LEASE_SYNC_MS = 100;
const DELAY_MS = 100;
/** README: L x (1 + 2%) + L x (REGION_SYNC_INTERVAL + one-way delay + LEASE_SYNC_INTERVAL) / W. */
const BOUND = LIMIT * 1.02 + (LIMIT * (REGION_SYNC_MS + DELAY_MS + LEASE_SYNC_MS)) / WINDOW_MS;

const CONFIG = `domain: regions
descriptors:
  - key: tenant
    rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: ${LIMIT}, sub_windows: 10, scope: global}
`;

const REGIONS = ['eu', 'us', 'ap'] as const;
type Region = (typeof REGIONS)[number];

interface Admitted {
  readonly atMs: number;
  readonly region: Region;
  readonly replica: number;
}

/** Calls `[tenant=t1]` at each region's rate (split between its live replicas), recording every OK answer. */
class Traffic {
  readonly admitted: Admitted[] = [];
  readonly answered = new Map<Region, number>();
  rates: Record<Region, number> = { eu: 0, us: 0, ap: 0 };
  /** Replicas not called (killed). */
  readonly down = new Set<string>();
  private timer: NodeJS.Timeout | undefined;
  private readonly inFlight = new Set<Promise<void>>();

  constructor(private readonly world: World) {}

  start(): void {
    const due = new Map<string, number>();
    const stepMs = 50;
    this.timer = setInterval(() => {
      for (const region of REGIONS) {
        const live = [0, 1].filter((i) => !this.down.has(`${region}-${i}`));
        for (const i of live) {
          const key = `${region}-${i}`;
          let d = (due.get(key) ?? 0) + (this.rates[region] * stepMs) / 1000 / live.length;
          while (d >= 1) {
            d -= 1;
            this.call(region, i);
          }
          due.set(key, d);
        }
      }
    }, stepMs);
  }

  private call(region: Region, replica: number): void {
    const p = this.world
      .client(region, replica)
      .shouldRateLimit({ domain: 'regions', descriptors: [{ entries: [{ key: 'tenant', value: 't1' }] }] }, { deadlineMs: 2_000 })
      .then(
        (reply) => {
          this.answered.set(region, (this.answered.get(region) ?? 0) + 1);
          if (reply.overallCode === 'OK') this.admitted.push({ atMs: Date.now(), region, replica });
        },
        () => undefined,
      )
      .finally(() => this.inFlight.delete(p));
    this.inFlight.add(p);
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await Promise.all([...this.inFlight]);
  }

  admittedIn(region: Region, fromMs: number, toMs: number): number {
    return this.admitted.filter((a) => a.region === region && a.atMs >= fromMs && a.atMs < toMs).length;
  }
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

interface RegionsView {
  readonly region: string;
  readonly parts: readonly { readonly counter: string; readonly settled: number; readonly pending: number; readonly cutOff: boolean; readonly part: number }[];
}

async function regionsOf(replica: Replica): Promise<RegionsView> {
  const res = await request(replica.run.debugPort, 'GET', '/regions');
  expect(res.status).toBe(200);
  return JSON.parse(res.text) as RegionsView;
}

jest.setTimeout(300_000);

describe('regions on the real service', () => {
  let world: World;
  let traffic: Traffic;

  beforeAll(async () => {
    world = await startWorld({
      regions: REGIONS,
      replicasPerRegion: 2,
      delayMs: DELAY_MS,
      config: CONFIG,
      env: {
        REGION_SYNC_INTERVAL: `${REGION_SYNC_MS}ms`,
        REGION_TTL: '2s',
        LEASE_SYNC_INTERVAL: `${LEASE_SYNC_MS}ms`,
      },
    });
    traffic = new Traffic(world);
  });

  afterAll(async () => {
    await traffic?.stop();
    await world?.stop();
  });

  test('uneven demand, a shift, a region cut off, the global store frozen, a replica and a Redis killed: within the bound in every span of one window, each hit settled once', async () => {
    const phases: { readonly name: string; readonly atMs: number }[] = [];
    const phase = (name: string): { readonly name: string; readonly atMs: number } => {
      const p = { name, atMs: Date.now() };
      phases.push(p);
      return p;
    };
    // Replicas started before the last one read the regions' names again at their next sync.
    await sleep(2 * REGION_SYNC_MS);
    traffic.start();
    // Uneven: eu asks 1.5x the limit's rate, us half, ap a tenth.
    traffic.rates = { eu: 30, us: 10, ap: 2 };
    const uneven = phase('uneven');
    await sleep(20_000);
    // Divided by demand (max-min fair, 25% headroom), not evenly: ap gets its 2.5/s, us and eu share the other 17.5/s, 87 a
    // window each (an even third would be 66); ap most of its 20 (a replica's one call a second measures unevenly).
    expect(traffic.admittedIn('us', uneven.atMs + 10_000, uneven.atMs + 20_000)).toBeGreaterThanOrEqual(78);
    expect(traffic.admittedIn('ap', uneven.atMs + 10_000, uneven.atMs + 20_000)).toBeGreaterThanOrEqual(14);
    // Shift: eu goes quiet, ap gets busy.
    traffic.rates = { eu: 2, us: 0, ap: 30 };
    const shift = phase('shift');
    await sleep(20_000);
    // eu's and us's hits leave the global counter as its window slides on, and ap takes what they free: over the second
    // window after the shift it admits most of the rest of the limit (20/s less eu's 2.5/s with headroom, 175 a window).
    expect(traffic.admittedIn('ap', shift.atMs + 10_000, shift.atMs + 20_000)).toBeGreaterThanOrEqual(110);

    // ap cut off from the global store for 30 s, everyone busy.
    traffic.rates = { eu: 15, us: 15, ap: 15 };
    world.partition('ap');
    const cut = phase('partition');
    await sleep(30_000);
    const apView = await regionsOf(world.replica('ap', 0));
    expect(apView.parts.find((p) => p.counter.includes('tenant'))?.cutOff).toBe(true);
    // Cut off, ap runs on its split: a third of the limit a window (the others kept room for it).
    const apCut = traffic.admittedIn('ap', cut.atMs + 15_000, cut.atMs + 25_000);
    expect(apCut).toBeGreaterThanOrEqual(LIMIT / 3 - 15);
    expect(apCut).toBeLessThanOrEqual(LIMIT / 3 + 15);
    world.heal('ap');
    await sleep(5_000);

    // The global store frozen for 30 s: every region on its split.
    world.pauseGlobal();
    const frozen = phase('global frozen');
    await sleep(30_000);
    world.resumeGlobal();
    for (const region of REGIONS) {
      const n = traffic.admittedIn(region, frozen.atMs + 15_000, frozen.atMs + 25_000);
      expect(n).toBeLessThanOrEqual(LIMIT / 3 + 15);
    }
    await sleep(5_000);

    // A replica killed: its region goes on with the other.
    traffic.down.add('eu-1');
    await world.killReplica('eu', 1);
    const killed = phase('replica killed');
    await sleep(10_000);
    expect(traffic.admittedIn('eu', killed.atMs + 5_000, killed.atMs + 10_000)).toBeGreaterThan(0);

    // us's Redis killed for 10 s, then back empty.
    phase('us redis killed');
    await world.killRegionRedis('us');
    await sleep(10_000);
    await world.restartRegionRedis('us');
    phase('us redis back');
    await sleep(10_000);
    await traffic.stop();

    const worst = worstSpan(
      traffic.admitted.map((a) => a.atMs),
      WINDOW_MS,
    );
    if (worst > BOUND) {
      // Where: the span's start against the phases, and each region's share of it.
      const times = traffic.admitted.map((a) => a.atMs).sort((a, b) => a - b);
      let j = 0;
      let at = 0;
      for (let i = 0; i < times.length; i++) {
        while (times[i] - times[j] >= WINDOW_MS) j++;
        if (i - j + 1 === worst) at = times[j];
      }
      const inSpan = (r: Region): number => traffic.admittedIn(r, at, at + WINDOW_MS);
      const t0 = phases[0].atMs;
      console.log({
        worst,
        startS: (at - t0) / 1000,
        phases: phases.map((p) => `${p.name}@${(p.atMs - t0) / 1000}`),
        eu: inSpan('eu'),
        us: inSpan('us'),
        ap: inSpan('ap'),
      });
    }
    expect(worst).toBeLessThanOrEqual(BOUND);

    // Every replica still running settles what it admitted, once: wait for the last syncs, then compare what each says it
    // settled to the global counter over the run (the metric counts across a part dropped while unused and opened again).
    await sleep(3 * REGION_SYNC_MS + 2 * DELAY_MS);
    for (const region of REGIONS) {
      for (const i of [0, 1]) {
        if (traffic.down.has(`${region}-${i}`)) continue;
        const replica = world.replica(region, i);
        const part = (await regionsOf(replica)).parts.find((p) => p.counter.includes('tenant'));
        const settled = await replica.metric('ratelimit_service_region_settled_hits_total', { domain: 'regions', descriptor: 'tenant', region });
        const admitted = traffic.admitted.filter((a) => a.region === region && a.replica === i).length;
        expect({ who: `${region}-${i}`, settled, pending: part?.pending ?? 0 }).toEqual({ who: `${region}-${i}`, settled: admitted, pending: 0 });
      }
    }
  });
});
