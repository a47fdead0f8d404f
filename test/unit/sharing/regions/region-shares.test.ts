import { LeasedStore } from '../../../../src/sharing/leases/leased-store';
import type { LeaseLimits } from '../../../../src/sharing/leases/lease';
import type { DemandExchange, ReplicaDemand, ReplicaExchange } from '../../../../src/limiter/replica-exchange';
import { StoreUnavailableError, type CounterRequest, type SettleAnswer, type SettleCall, type Settlements } from '../../../../src/limiter/store';
import { RegionShares, type RegionLimits } from '../../../../src/sharing/regions/region-shares';
import { RegionalStore } from '../../../../src/sharing/regions/regional-store';
import type { GlobalFallback } from '../../../../src/sharing/regions/region-division';
import { MemoryExchange } from '../../../../src/store/memory-exchange';
import { MemoryStore } from '../../../../src/store/memory-store';
import { FakeClock } from '../../../helpers/fake-clock';

/**
 * Regions on a fake clock: each region its own memory store (its Redis) and two replicas leasing
 * through it; one global memory store every region reaches through a link that can be cut.
 */

const LEASE_SYNC_MS = 250;
const REGION_SYNC_MS = 1_000;
const REGION_TTL_MS = 3_000;
const WINDOW_MS = 10_000;
const LIMIT = 1_000;
const LEASES: LeaseLimits = {
  syncIntervalMs: LEASE_SYNC_MS,
  ttlMs: 1_000,
  maxLeases: 100,
  maxBytes: 1 << 20,
  maxReplicas: 256,
  maxSyncBytesPerSecond: 1 << 30,
};
/** The README's bound with no delay to the global store: L x (1 + 2%) + L x (REGION_SYNC_INTERVAL + LEASE_SYNC_INTERVAL) / W. */
const BOUND = LIMIT * 1.02 + (LIMIT * (REGION_SYNC_MS + LEASE_SYNC_MS)) / WINDOW_MS;

const GLOBAL: CounterRequest = Object.freeze({
  key: 'd_tenant_t1',
  limit: LIMIT,
  windowMs: WINDOW_MS,
  algorithm: 'sliding_window',
  hits: 1,
  burst: LIMIT,
  subWindows: 10,
  lease: 'd\u0000tenant',
  global: true,
});

/** The link from one region to the global store: `down` fails every call on it. */
class Link implements Settlements, ReplicaExchange {
  down = false;
  constructor(
    private readonly settlements: Settlements,
    private readonly exchange: ReplicaExchange,
  ) {}
  settle(call: SettleCall): Promise<SettleAnswer> {
    return this.down ? Promise.reject(new StoreUnavailableError('cut')) : this.settlements.settle(call);
  }
  exchangeDemand(exchange: DemandExchange): Promise<ReplicaDemand[]> {
    return this.down ? Promise.reject(new StoreUnavailableError('cut')) : this.exchange.exchangeDemand(exchange);
  }
  put(kind: string, name: string, document: string, ttlMs: number): Promise<void> {
    return this.down ? Promise.reject(new StoreUnavailableError('cut')) : this.exchange.put(kind, name, document, ttlMs);
  }
  all(kind: string, max: number): Promise<string[]> {
    return this.down ? Promise.reject(new StoreUnavailableError('cut')) : this.exchange.all(kind, max);
  }
}

interface Replica {
  readonly region: string;
  readonly store: RegionalStore;
  readonly leases: LeasedStore;
  readonly shares: RegionShares;
}

function world(regions: readonly string[], fallback: GlobalFallback = 'split') {
  const clock = new FakeClock(1_000_000_000);
  const global = new MemoryStore({ clock, maxKeys: 10_000, sweepIntervalMs: 0 });
  const globalExchange = new MemoryExchange({ clock });
  const limits: RegionLimits = { syncIntervalMs: REGION_SYNC_MS, ttlMs: REGION_TTL_MS, fallback, maxParts: 100, maxBytes: 1 << 20 };
  const links = new Map<string, Link>();
  const replicas: Replica[] = [];
  const regional = new Map<string, MemoryStore>();
  for (const region of regions) {
    const store = new MemoryStore({ clock, maxKeys: 10_000, sweepIntervalMs: 0 });
    const exchange = new MemoryExchange({ clock });
    const link = new Link(global.settlements, globalExchange);
    links.set(region, link);
    regional.set(region, store);
    for (const id of ['r0', 'r1']) {
      const leases = new LeasedStore({ store, settlements: store.settlements, exchange, clock, replicaId: id, limits: LEASES });
      const shares = new RegionShares({ region, replicaId: id, settlements: link, exchange: link, regional: store, clock, limits });
      replicas.push({ region, leases, shares, store: new RegionalStore({ store: leases, shares }) });
    }
  }
  return { clock, global, links, replicas, regional };
}

const flush = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/**
 * Drives every replica at its region's rate (calls per second, split between its two replicas) in
 * 10 ms steps for `ms`; leases tick every LEASE_SYNC_MS, regions every REGION_SYNC_MS. Returns the
 * admitted count per step, every region together, and per region.
 */
async function drive(w: ReturnType<typeof world>, rate: (region: string, atMs: number) => number, ms: number, at?: (t: number) => void) {
  const due = new Map<Replica, number>();
  const steps: number[] = [];
  const byRegion = new Map<string, number[]>();
  const start = w.clock.nowMs();
  // As the service does at start: the regions are read before the first call.
  for (const r of w.replicas) void r.shares.tick();
  await flush();
  for (let t = 0; t < ms; t += 10) {
    at?.(t);
    let admitted = 0;
    for (const r of w.replicas) {
      let d = (due.get(r) ?? 0) + rate(r.region, t) / 2 / 100;
      let own = 0;
      while (d >= 1) {
        d -= 1;
        let decision: { readonly allowed: boolean };
        try {
          decision = (r.store.decideNow([GLOBAL]) ?? (await r.store.decide([GLOBAL])))[0];
        } catch {
          // The region's store is down: an error answer, nothing admitted.
          decision = { allowed: false };
        }
        if (decision.allowed) own++;
      }
      due.set(r, d);
      admitted += own;
      const list = byRegion.get(r.region) ?? [];
      if (list.length <= t / 10) list.push(0);
      list[list.length - 1] += own;
      byRegion.set(r.region, list);
    }
    steps.push(admitted);
    w.clock.advance(10);
    const elapsed = w.clock.nowMs() - start;
    if (elapsed % LEASE_SYNC_MS === 0) for (const r of w.replicas) void r.leases.tick();
    if (elapsed % REGION_SYNC_MS === 0) for (const r of w.replicas) void r.shares.tick();
    await flush();
  }
  return { steps, byRegion };
}

/** The most admitted in any span of one window starting at or after `fromMs`. */
function worstSpan(steps: readonly number[], fromMs = 0, spanMs = WINDOW_MS): number {
  const w = spanMs / 10;
  let worst = 0;
  let sum = 0;
  for (let i = Math.floor(fromMs / 10); i < steps.length; i++) {
    sum += steps[i];
    if (i - w >= Math.floor(fromMs / 10)) sum -= steps[i - w];
    worst = Math.max(worst, sum);
  }
  return worst;
}

const sum = (xs: readonly number[], from = 0, to = xs.length): number => xs.slice(from, to).reduce((a, b) => a + b, 0);

describe('RegionShares', () => {
  test('three regions asking past the limit admit within the bound in every span of one window', async () => {
    const w = world(['eu', 'us', 'ap']);
    const { steps } = await drive(w, () => 300, 40_000);
    const worst = worstSpan(steps);
    expect(worst).toBeLessThanOrEqual(BOUND);
    // And near the limit once the parts are divided: the regions together use it.
    expect(sum(steps, 2_000, 3_000)).toBeGreaterThanOrEqual(LIMIT * 0.9);
  });

  test('uneven demand: a quiet region gets what it asks, the busy ones share the rest', async () => {
    const w = world(['eu', 'us', 'ap']);
    const { steps, byRegion } = await drive(w, (region) => (region === 'ap' ? 10 : 400), 40_000);
    expect(worstSpan(steps)).toBeLessThanOrEqual(BOUND);
    // ap asks 100 a window, and gets them all in the last window.
    expect(sum(byRegion.get('ap')!, 3_000, 4_000)).toBeGreaterThanOrEqual(95);
    expect(sum(byRegion.get('eu')!, 3_000, 4_000)).toBeGreaterThan(350);
    expect(sum(byRegion.get('us')!, 3_000, 4_000)).toBeGreaterThan(350);
  });

  test('a shift of demand: the region that becomes busy reaches 95% of what it asks within three region syncs of the others slowing down', async () => {
    const w = world(['eu', 'us']);
    // eu busy, us quiet for 30 s; then the other way round.
    const rate = (region: string, t: number): number => ((region === 'eu') === t < 30_000 ? 200 : 2);
    const { steps, byRegion } = await drive(w, rate, 70_000);
    expect(worstSpan(steps)).toBeLessThanOrEqual(BOUND);
    // Past one window after the shift (eu's hits slid out), us admits at 95% of what it asks (100/s of 200/s... capped by the limit: 100/s).
    const us = byRegion.get('us')!;
    const perSecond = (from: number): number => sum(us, from / 10, from / 10 + 100);
    let reachedAt: number | undefined;
    for (let t = 30_000; t < 70_000; t += 1_000) {
      if (perSecond(t) >= 0.95 * (LIMIT / (WINDOW_MS / 1000))) {
        reachedAt = t;
        break;
      }
    }
    expect(reachedAt).toBeDefined();
    // eu's hits of the last window hold the counter until they slide out (10 s), then three syncs at most.
    expect(reachedAt!).toBeLessThanOrEqual(30_000 + WINDOW_MS + 3 * REGION_SYNC_MS);
  });

  test('a region cut off from the global store keeps its part, then splits; the others keep room for it; its hits are settled once when it heals', async () => {
    const w = world(['eu', 'us', 'ap']);
    const cut = w.links.get('ap')!;
    const { steps, byRegion } = await drive(
      w,
      () => 300,
      60_000,
      (t) => {
        if (t === 15_000) cut.down = true;
        if (t === 45_000) cut.down = false;
      },
    );
    expect(worstSpan(steps)).toBeLessThanOrEqual(BOUND);
    // Cut off, ap admits about its even part (L/3 a window) and not nothing.
    const ap = sum(byRegion.get('ap')!, 3_000, 4_000);
    expect(ap).toBeGreaterThanOrEqual(LIMIT / 3 - 40);
    expect(ap).toBeLessThanOrEqual(LIMIT / 3 + 40);
    // After the heal every hit ap admitted reached the global store: settled counts all it admitted.
    await drive(w, () => 0, 5_000);
    const apSettled = w.replicas.filter((r) => r.region === 'ap').reduce((s, r) => s + r.shares.view(10).parts[0].settled, 0);
    expect(apSettled).toBe(sum(byRegion.get('ap')!));
  });

  test('the global store down for every region: each splits the limit, never more than the limit together', async () => {
    const w = world(['eu', 'us', 'ap']);
    const { steps } = await drive(
      w,
      (region) => (region === 'eu' ? 600 : 100),
      60_000,
      (t) => {
        for (const link of w.links.values()) link.down = t >= 20_000 && t < 50_000;
      },
    );
    expect(worstSpan(steps)).toBeLessThanOrEqual(BOUND);
  });

  test('deny: a cut-off region admits nothing once REGION_TTL has passed', async () => {
    const w = world(['eu', 'us'], 'deny');
    const { byRegion } = await drive(
      w,
      () => 200,
      40_000,
      (t) => {
        if (t === 15_000) w.links.get('us')!.down = true;
      },
    );
    // From REGION_TTL after the cut (plus a sync), us admits nothing.
    expect(sum(byRegion.get('us')!, (15_000 + REGION_TTL_MS + REGION_SYNC_MS) / 10, 4_000)).toBe(0);
  });

  test('the global counter holds what the replicas settled, each settlement once', async () => {
    const w = world(['eu']);
    await drive(w, () => 50, 5_000);
    const [d] = await w.global.decide([{ ...GLOBAL, hits: 0, lease: undefined, global: undefined }]);
    const settled = w.replicas.reduce((s, r) => s + r.shares.view(10).parts[0].settled, 0);
    expect(LIMIT - d.remaining).toBe(settled);
  });
});

describe('RegionShares with a region store that fails', () => {
  test('every hit a replica admitted is settled to the global counter, once, through the region store going down and back', async () => {
    const w = world(['eu', 'us']);
    const down = { on: false };
    for (const r of w.replicas.filter((x) => x.region === 'us')) {
      const store = w.regional.get('us')!;
      const orig = store.decide.bind(store);
      store.decide = (...args) => (down.on ? Promise.reject(new StoreUnavailableError('down')) : orig(...args));
      const settle = store.settlements.settle.bind(store.settlements);
      (store.settlements as { settle: Settlements['settle'] }).settle = (call) => (down.on ? Promise.reject(new StoreUnavailableError('down')) : settle(call));
      void r;
      break;
    }
    const { byRegion } = await drive(
      w,
      () => 150,
      40_000,
      (t) => {
        down.on = t >= 15_000 && t < 25_000;
      },
    );
    await drive(w, () => 0, 5_000);
    for (const region of ['eu', 'us']) {
      const settled = w.replicas.filter((r) => r.region === region).reduce((s, r) => s + r.shares.view(10).parts[0].settled, 0);
      expect({ region, settled }).toEqual({ region, settled: sum(byRegion.get(region)!) });
    }
  });
});
