import { overrideLimitParser } from '../../../src/config/override-limit';
import { OverrideReader } from '../../../src/limiter/override-admin';
import { OverrideSync } from '../../../src/limiter/override-sync';
import { overrideId, overrideJson, OverrideTable, type OverrideRecord } from '../../../src/limiter/overrides';
import type { OverridesStore, StoredOverride } from '../../../src/limiter/overrides-store';
import type { Entry } from '../../../src/limiter/types';
import { MemoryOverrides } from '../../../src/store/memory-overrides';
import { FakeClock } from '../../helpers/fake-clock';

/** Following the store (src/limiter/override-sync.ts): deltas, full reads, expiry, unreadable records, one run at a time. */

const START = 1_800_000_000_000;
const reader = new OverrideReader(overrideLimitParser('sliding_window'));
const entries = (value: string): Entry[] => [{ key: 'k', value }];

function record(value: string, rpu: number, extra: Partial<OverrideRecord> = {}): { id: string; json: string; expiresAtMs: number | undefined } {
  const r: OverrideRecord = {
    domain: 'edge',
    descriptor: entries(value),
    rateLimit: { unit: 'minute', requests_per_unit: rpu },
    updatedAtMs: START,
    updatedBy: 't',
    ...extra,
  };
  return { id: overrideId('edge', r.descriptor), json: overrideJson(r), expiresAtMs: r.expiresAtMs };
}

const CAPS = { maxCount: 1_000, maxBytes: 1 << 20 };

describe('OverrideSync', () => {
  let clock: FakeClock;
  let store: MemoryOverrides;
  let table: OverrideTable;
  let applied: number;
  let sync: OverrideSync;
  const put = async (value: string, rpu: number, extra: Partial<OverrideRecord> = {}): Promise<void> => {
    const outcome = await store.put({ ...record(value, rpu, extra), nowMs: clock.nowMs(), ...CAPS });
    if (!outcome.ok) throw new Error('refused');
  };
  const limits = (): Record<string, number> => Object.fromEntries([...table.values()].map((o) => [o.entries[0].value, o.limit.requestsPerUnit]));

  beforeEach(async () => {
    clock = new FakeClock(START);
    store = await MemoryOverrides.open({ rememberedRemovals: 5 });
    table = new OverrideTable();
    applied = 0;
    sync = new OverrideSync({ store, table, read: (s) => reader.read(s), clock, pageSize: 3, onApplied: () => applied++ });
  });

  it('applies the changes since the last sync at once (one new generation), page by page', async () => {
    for (let i = 0; i < 7; i++) await put(`v${i}`, i);
    await sync.sync();
    expect(limits()).toEqual({ v0: 0, v1: 1, v2: 2, v3: 3, v4: 4, v5: 5, v6: 6 });
    expect(sync.version).toBe(7);
    expect(applied).toBe(1);
    await put('v1', 10);
    await store.remove(record('v2', 0).id, START);
    await sync.sync();
    expect(limits()).toEqual({ v0: 0, v1: 10, v3: 3, v4: 4, v5: 5, v6: 6 });
    expect(applied).toBe(2);
    // Nothing new: nothing applied.
    await sync.sync();
    expect(applied).toBe(2);
  });

  it('reads the store whole when it forgot removals this replica has not seen', async () => {
    for (let i = 0; i < 8; i++) await put(`v${i}`, 1);
    await sync.sync();
    // Eight removals: the store remembers five.
    for (let i = 0; i < 8; i++) await store.remove(record(`v${i}`, 1).id, START);
    await put('new', 2);
    await sync.sync();
    expect(limits()).toEqual({ new: 2 });
  });

  it('reads a store whose version went back (another one, or flushed) whole', async () => {
    for (let i = 0; i < 4; i++) await put(`v${i}`, 1);
    await sync.sync();
    const other = await MemoryOverrides.open();
    await other.put({ ...record('only', 9), nowMs: START, ...CAPS });
    const follower = new OverrideSync({ store: other, table, read: (s) => reader.read(s), clock });
    // Same table, store now at version 1 < 4.
    (follower as unknown as { applied: number }).applied = 4;
    await follower.sync();
    expect(limits()).toEqual({ only: 9 });
  });

  it('stops applying an override at its expiry, and removes it from the store once', async () => {
    const expired: string[] = [];
    sync = new OverrideSync({ store, table, read: (s) => reader.read(s), clock, onApplied: () => applied++, onExpired: (r) => expired.push(r.previous.id) });
    await put('short', 1, { expiresAtMs: START + 1_000 });
    await put('long', 1);
    await sync.tick();
    expect(Object.keys(limits()).sort()).toEqual(['long', 'short']);
    clock.advance(1_000);
    await sync.tick();
    expect(Object.keys(limits())).toEqual(['long']);
    expect(expired).toEqual([record('short', 1).id]);
    await sync.tick();
    expect(expired).toHaveLength(1);
  });

  it('leaves out an override read after its expiry, and has the store remove it', async () => {
    await put('stale', 1, { expiresAtMs: START + 500 });
    clock.advance(600);
    await sync.tick();
    expect(limits()).toEqual({});
    // The next tick removes it from the store (this table never held it).
    await sync.tick();
    expect((await store.changes(0, 10)).changed).toEqual([]);
  });

  it('leaves out an override it cannot read, said once, and the version of it it held', async () => {
    const unreadable: StoredOverride[] = [];
    sync = new OverrideSync({ store, table, read: (s) => reader.read(s), clock, onUnreadable: (s) => unreadable.push(s) });
    await put('ok', 1);
    await sync.sync();
    const bad = record('ok', 1);
    const rateLimit = JSON.parse(bad.json) as Record<string, unknown>;
    rateLimit.rate_limit = { unit: 'fortnight', requests_per_unit: 1 };
    await store.put({ id: bad.id, json: JSON.stringify(rateLimit), expiresAtMs: undefined, nowMs: START, ...CAPS });
    await sync.sync();
    await sync.sync();
    expect(limits()).toEqual({});
    expect(unreadable).toHaveLength(1);
    // A record under another descriptor's id is refused too.
    const misplaced = record('x', 1);
    await store.put({ id: record('y', 1).id, json: misplaced.json, expiresAtMs: undefined, nowMs: START, ...CAPS });
    await sync.sync();
    expect(unreadable).toHaveLength(2);
  });

  it('runs one sync at a time: a call during a run waits for a run that starts after it, shared with the calls meanwhile', async () => {
    let versions = 0;
    let release: (() => void) | undefined;
    const slow: OverridesStore = {
      ...store,
      put: (w) => store.put(w),
      remove: (id, now) => store.remove(id, now),
      purgeExpired: (now, max) => store.purgeExpired(now, max),
      close: () => store.close(),
      changes: (since, max) => store.changes(since, max),
      version: async () => {
        versions++;
        if (versions === 1) await new Promise<void>((r) => (release = r));
        return store.version();
      },
    };
    sync = new OverrideSync({ store: slow, table, read: (s) => reader.read(s), clock });
    const first = sync.sync();
    await put('late', 3);
    const second = sync.sync();
    const third = sync.sync();
    expect(second).toBe(third);
    release!();
    await first;
    await second;
    expect(versions).toBe(2);
    expect(limits()).toEqual({ late: 3 });
  });
});
