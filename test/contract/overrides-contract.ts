import { storedBytes, type OverridesStore, type OverrideWrite, type PutOutcome } from '../../src/limiter/overrides-store';

/**
 * The behaviour every adapter of the overrides port shares (src/limiter/overrides-store.ts), run
 * once per adapter: versions, changes since a version (paged), removals and what is forgotten of
 * them, the caps decided with the write (under hundreds of writes in flight from two replicas), and
 * expiry. Each case gets a store of its own (`fresh`), and a second replica on the same data.
 */

export interface OverridesHarness {
  readonly store: OverridesStore;
  /** Another replica on the same data (a second connection); the store itself for a store in one process. */
  readonly peer: OverridesStore;
}

export interface OverridesFixture {
  /** An empty store (removals remembered: `rememberedRemovals`), and its peer. */
  fresh(options: { rememberedRemovals: number }): Promise<OverridesHarness>;
  close(): Promise<void>;
}

const NOW = 1_800_000_000_000;
const BIG = { maxCount: 1_000_000, maxBytes: 1 << 30 };

let sequence = 0;
/** An id as overrideId makes them (43 characters), unique per call. */
function freshId(label: string): string {
  sequence += 1;
  return `${label}-${sequence}`.padEnd(43, '_').slice(0, 43);
}

function write(id: string, json: string, extra: Partial<OverrideWrite> = {}): OverrideWrite {
  return { id, json, expiresAtMs: undefined, nowMs: NOW, ...BIG, ...extra };
}

function ok(outcome: PutOutcome): { version: number; previous: string | undefined } {
  if (!outcome.ok) throw new Error(`refused by the ${outcome.cap} cap`);
  return { version: outcome.version, previous: outcome.previous?.json };
}

export function describeOverridesContract(name: string, fixture: () => Promise<OverridesFixture>): void {
  describe(`overrides store contract: ${name}`, () => {
    let fx: OverridesFixture;
    beforeAll(async () => {
      fx = await fixture();
    });
    afterAll(async () => {
      await fx?.close();
    });
    const fresh = (rememberedRemovals = 100_000): Promise<OverridesHarness> => fx.fresh({ rememberedRemovals });

    it('starts at version 0 with nothing to read', async () => {
      const { store, peer } = await fresh();
      expect(await store.version()).toBe(0);
      expect(await peer.changes(0, 10)).toEqual({ version: 0, changed: [], removed: [], upTo: 0, floor: 0 });
    });

    it('numbers every write and removal, and answers a replaced or removed override as it was', async () => {
      const { store, peer } = await fresh();
      const [a, b] = [freshId('a'), freshId('b')];
      expect(ok(await store.put(write(a, '{"n":1}')))).toEqual({ version: 1, previous: undefined });
      expect(ok(await peer.put(write(b, '{"n":2}')))).toEqual({ version: 2, previous: undefined });
      expect(ok(await store.put(write(a, '{"n":3}')))).toEqual({ version: 3, previous: '{"n":1}' });
      expect(await peer.remove(b, NOW)).toEqual({ version: 4, previous: { id: b, version: 2, json: '{"n":2}' } });
      expect(await store.remove(b, NOW)).toBeUndefined();
      expect(await peer.version()).toBe(4);
    });

    it('gives the writes and removals after a version, each override as it is now, in version order', async () => {
      const { store, peer } = await fresh();
      const [a, b, c] = [freshId('a'), freshId('b'), freshId('c')];
      await store.put(write(a, '"a1"'));
      await store.put(write(b, '"b1"'));
      await store.put(write(c, '"c1"'));
      await store.put(write(a, '"a2"'));
      await store.remove(b, NOW);
      expect(await peer.changes(0, 10)).toEqual({
        version: 5,
        changed: [
          { id: c, version: 3, json: '"c1"' },
          { id: a, version: 4, json: '"a2"' },
        ],
        removed: [{ id: b, version: 5 }],
        upTo: 5,
        floor: 0,
      });
      expect(await peer.changes(3, 10)).toEqual({
        version: 5,
        changed: [{ id: a, version: 4, json: '"a2"' }],
        removed: [{ id: b, version: 5 }],
        upTo: 5,
        floor: 0,
      });
      expect(await peer.changes(5, 10)).toEqual({ version: 5, changed: [], removed: [], upTo: 5, floor: 0 });
      // A removed id written again is live again, and no longer a removal.
      await store.put(write(b, '"b2"'));
      expect(await peer.changes(4, 10)).toEqual({ version: 6, changed: [{ id: b, version: 6, json: '"b2"' }], removed: [], upTo: 6, floor: 0 });
    });

    it('pages the changes: each answer complete up to its upTo, and read from it the rest follows', async () => {
      const { store, peer } = await fresh();
      const ids = Array.from({ length: 30 }, (_, i) => freshId(`p${i}`));
      for (const id of ids) await store.put(write(id, `"${id}"`));
      for (let i = 0; i < ids.length; i += 3) await store.remove(ids[i], NOW);
      const live = new Map<string, number>();
      const gone = new Map<string, number>();
      let since = 0;
      let pages = 0;
      for (;;) {
        const page = await peer.changes(since, 4);
        pages++;
        expect(page.changed.length).toBeLessThanOrEqual(4);
        expect(page.removed.length).toBeLessThanOrEqual(4);
        for (const c of page.changed) {
          expect(c.version).toBeGreaterThan(since);
          expect(c.version).toBeLessThanOrEqual(page.upTo);
          live.set(c.id, c.version);
        }
        for (const r of page.removed) {
          expect(r.version).toBeLessThanOrEqual(page.upTo);
          gone.set(r.id, r.version);
        }
        since = page.upTo;
        if (since >= page.version) break;
      }
      expect(pages).toBeGreaterThan(2);
      expect([...live.keys()].sort()).toEqual(ids.filter((_, i) => i % 3 !== 0).sort());
      expect([...gone.keys()].sort()).toEqual(ids.filter((_, i) => i % 3 === 0).sort());
    });

    it('forgets removals past the ones it remembers, and says from when (floor)', async () => {
      const { store, peer } = await fresh(3);
      const ids = Array.from({ length: 5 }, (_, i) => freshId(`f${i}`));
      for (const id of ids) await store.put(write(id, '1'));
      for (const id of ids) await store.remove(id, NOW);
      // Versions 6..10 removed them; the first two removals (6, 7) are forgotten.
      const all = await peer.changes(0, 10);
      expect(all.floor).toBe(7);
      expect(all.removed.map((r) => r.version)).toEqual([8, 9, 10]);
    });

    it('refuses a new override past OVERRIDES_MAX and changes nothing, but replaces one already there', async () => {
      const { store, peer } = await fresh();
      const caps = { maxCount: 2, maxBytes: 1 << 20 };
      const [a, b, c] = [freshId('a'), freshId('b'), freshId('c')];
      await store.put(write(a, '"a"', caps));
      await store.put(write(b, '"b"', caps));
      const before = await peer.changes(0, 10);
      const refused = await peer.put(write(c, '"c"', caps));
      expect(refused).toEqual({ ok: false, cap: 'count', count: 2, bytes: storedBytes(a, '"a"') + storedBytes(b, '"b"'), purged: [] });
      expect(await store.changes(0, 10)).toEqual(before);
      expect(ok(await peer.put(write(a, '"a2"', caps))).version).toBe(3);
      // A removal makes room.
      await store.remove(b, NOW);
      expect(ok(await peer.put(write(c, '"c"', caps))).version).toBe(5);
    });

    it('refuses what would take the bytes past OVERRIDES_MAX_BYTES, counting a replaced override once', async () => {
      const { store, peer } = await fresh();
      const [a, b] = [freshId('a'), freshId('b')];
      const body = 'x'.repeat(57); // 43 + 57 = 100 bytes each
      const caps = { maxCount: 100, maxBytes: 250 };
      await store.put(write(a, body, caps));
      await store.put(write(b, body, caps));
      // 200 held: a third of 100 would make 300.
      const refused = await peer.put(write(freshId('c'), body, caps));
      expect(refused).toMatchObject({ ok: false, cap: 'bytes', bytes: 200 });
      // Replacing `a` by 150 bytes makes 250: the cap itself is allowed.
      expect(ok(await peer.put(write(a, 'y'.repeat(107), caps))).version).toBe(3);
      expect(await peer.put(write(b, 'y'.repeat(58), caps))).toMatchObject({ ok: false, cap: 'bytes', bytes: 250 });
      // Removing gives the bytes back.
      await store.remove(a, NOW);
      expect(ok(await peer.put(write(b, 'y'.repeat(150), caps))).version).toBe(5);
    });

    it('holds OVERRIDES_MAX with hundreds of writes in flight from two replicas, new ids and replacements mixed', async () => {
      const { store, peer } = await fresh();
      const caps = { maxCount: 50, maxBytes: 1 << 20 };
      // 20 overrides already there, replaced over and over while 400 new ids race for the 30 places left.
      const kept = Array.from({ length: 20 }, (_, i) => freshId(`k${i}`));
      for (const id of kept) ok(await store.put(write(id, '"kept"', caps)));
      const newIds = Array.from({ length: 400 }, (_, i) => freshId(`n${i}`));
      const calls: Promise<PutOutcome>[] = [];
      for (let i = 0; i < newIds.length; i++) {
        const via = i % 2 === 0 ? store : peer;
        calls.push(via.put(write(newIds[i], '"new"', caps)));
        if (i % 4 === 0) calls.push(via.put(write(kept[i % kept.length], `"kept ${i}"`, caps)));
      }
      const outcomes = await Promise.all(calls);
      const accepted = outcomes.filter((o) => o.ok).length;
      // Every replacement (100) and exactly 30 new ones.
      expect(accepted).toBe(100 + 30);
      expect(outcomes.filter((o) => !o.ok).every((o) => !o.ok && o.cap === 'count')).toBe(true);
      const all = await peer.changes(0, 1_000);
      expect(all.changed).toHaveLength(50);
      expect(all.version).toBe(20 + accepted);
      for (const id of kept) expect(all.changed.some((c) => c.id === id)).toBe(true);
      // Versions are unique: no two writes took the same number.
      const versions = outcomes.flatMap((o) => (o.ok ? [o.version] : []));
      expect(new Set(versions).size).toBe(versions.length);
    });

    it('purges expired overrides, as removals, and before a write counts its caps', async () => {
      const { store, peer } = await fresh();
      const [a, b, c] = [freshId('a'), freshId('b'), freshId('c')];
      await store.put(write(a, '"a"', { expiresAtMs: NOW + 1_000 }));
      await store.put(write(b, '"b"', { expiresAtMs: NOW + 5_000 }));
      await store.put(write(c, '"c"'));
      expect(await peer.purgeExpired(NOW + 999, 10)).toEqual([]);
      expect(await peer.purgeExpired(NOW + 1_000, 10)).toEqual([{ version: 4, previous: { id: a, version: 1, json: '"a"' } }]);
      // Full (2 of 2): the write purges `b`, expired by its time, and takes its place.
      const caps = { maxCount: 2, maxBytes: 1 << 20, nowMs: NOW + 6_000 };
      const outcome = await store.put(write(freshId('d'), '"d"', caps));
      expect(outcome).toMatchObject({ ok: true, version: 6, purged: [{ version: 5, previous: { id: b, version: 2 } }] });
      const all = await peer.changes(0, 10);
      expect(all.removed.map((r) => r.id)).toEqual([a, b]);
      expect(all.changed.map((x) => x.id)).toContain(c);
      // An override written again without an expiry no longer expires.
      await store.put(write(c, '"c2"', { expiresAtMs: NOW + 1 }));
      await store.put(write(c, '"c3"'));
      expect(await peer.purgeExpired(NOW + 10_000, 10)).toEqual([]);
    });
  });
}
