import { buildConfig } from '../../../src/config/rule-tree';
import { parseConfigText } from '../../../src/config/rule-reader';
import { overrideLimitParser } from '../../../src/config/override-limit';
import { counterKey, counterKeyPrefix } from '../../../src/limiter/keys';
import { OverrideReader } from '../../../src/limiter/override-admin';
import { descriptorTail, overrideId, overrideJson, OverrideTable, type ActiveOverride, type OverrideRecord } from '../../../src/limiter/overrides';
import { RateLimiter } from '../../../src/limiter/rate-limiter';
import type { RateLimitConfig } from '../../../src/limiter/rules';
import type { Descriptor, DescriptorOutcome, Entry, RateLimitRequest, StructFields } from '../../../src/limiter/types';
import { MemoryStore } from '../../../src/store/memory-store';
import { FakeClock } from '../../helpers/fake-clock';
import { LIMITER_DEFAULTS } from '../../helpers/limiter-defaults';

/** Runtime overrides as the decision sees them: the table, and the planner's use of it (src/limiter/overrides.ts, plan.ts). */

const EDGE = `
domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: dry
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: tenant
    value: acme
    descriptors:
      - key: path
        rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: two
    rate_limits:
      - {name: per_minute, unit: minute, requests_per_unit: 10}
      - {name: per_hour, unit: hour, requests_per_unit: 100}
  - key: held
    rate_limit: {concurrency: 2}
`;

const START = 1_800_000_000_000; // a minute boundary
const reader = new OverrideReader(overrideLimitParser('sliding_window'));
const entries = (...pairs: [string, string][]): Entry[] => pairs.map(([key, value]) => ({ key, value }));
const d = (...pairs: [string, string][]): Descriptor => ({ entries: entries(...pairs) });
/** A request as the codec keeps it: frozen, its descriptors too. */
const kept = (...descriptors: Descriptor[]): RateLimitRequest => {
  for (const x of descriptors) Object.freeze(x);
  return Object.freeze({ domain: 'edge', descriptors: Object.freeze(descriptors), hitsAddend: 0 });
};

let version = 0;
/** An override as the store would hand it over (each one a new version). */
function override(descriptor: Entry[], rateLimit: StructFields, extra: Partial<OverrideRecord> = {}, domain = 'edge'): ActiveOverride {
  const record: OverrideRecord = { domain, descriptor, rateLimit, updatedAtMs: START, updatedBy: 'test', ...extra };
  return reader.read({ id: overrideId(domain, descriptor), version: ++version, json: overrideJson(record) });
}

describe('runtime overrides in the decision', () => {
  let config: RateLimitConfig;
  let clock: FakeClock;
  let table: OverrideTable;
  let outcomes: DescriptorOutcome[];
  let limiter: RateLimiter;

  beforeEach(() => {
    config = buildConfig([parseConfigText('edge.yaml', EDGE, { defaultAlgorithm: 'sliding_window' })]);
    clock = new FakeClock(START);
    table = new OverrideTable();
    outcomes = [];
    limiter = new RateLimiter({
      ...LIMITER_DEFAULTS,
      store: new MemoryStore({ clock, maxKeys: 10_000, sweepIntervalMs: 0 }),
      config: () => config,
      overrides: table,
      observer: { onDescriptor: (o) => outcomes.push(o) },
    });
  });

  const remaining = async (request: RateLimitRequest): Promise<number[]> => (await limiter.shouldRateLimit(request)).statuses.map((s) => s.limitRemaining);
  const codes = async (request: RateLimitRequest): Promise<string[]> => (await limiter.shouldRateLimit(request)).statuses.map((s) => s.code);

  it('replaces the limit of exactly its descriptor, on the same counter: hits so far count against the new limit', async () => {
    const alice = kept(d(['api_key', 'alice']));
    const bob = kept(d(['api_key', 'bob']));
    for (let i = 0; i < 3; i++) await limiter.shouldRateLimit(alice);
    expect(await remaining(alice)).toEqual([6]);
    table.apply([override(entries(['api_key', 'alice']), { unit: 'minute', requests_per_unit: 5 })], []);
    // 4 counted so far: one more, then denied.
    expect(await remaining(alice)).toEqual([0]);
    expect(await codes(alice)).toEqual(['OVER_LIMIT']);
    expect((await limiter.shouldRateLimit(alice)).statuses[0].currentLimit).toMatchObject({ requestsPerUnit: 5, unit: 'minute' });
    // Another value of the same rule keeps the config's limit.
    expect(await remaining(bob)).toEqual([9]);
    const key = counterKey(counterKeyPrefix('edge', 'sliding_window', 60_000), entries(['api_key', 'alice']));
    expect(outcomes.filter((o) => o.key === key).length).toBeGreaterThan(4);
    expect(outcomes.at(-2)!.rule.overridden?.configRule?.limit.requestsPerUnit).toBe(10);
  });

  it('counts a limit of another shape on a counter of its own', async () => {
    const carol = kept(d(['api_key', 'carol']));
    for (let i = 0; i < 5; i++) await limiter.shouldRateLimit(carol);
    table.apply([override(entries(['api_key', 'carol']), { unit: 'hour', requests_per_unit: 2 })], []);
    expect(await remaining(carol)).toEqual([1]);
    expect(outcomes.at(-1)!.key).toBe(counterKey(counterKeyPrefix('edge', 'sliding_window', 3_600_000), entries(['api_key', 'carol'])));
  });

  it('stops applying as soon as it is removed or replaced, for a request planned before (the kept plan is checked again)', async () => {
    const dave = kept(d(['api_key', 'dave']));
    await limiter.shouldRateLimit(dave);
    const first = override(entries(['api_key', 'dave']), { unlimited: true });
    table.apply([first], []);
    expect(await remaining(dave)).toEqual([4_294_967_295]);
    const second = override(entries(['api_key', 'dave']), { unit: 'minute', requests_per_unit: 3 });
    table.apply([second], []);
    expect(await remaining(dave)).toEqual([1]);
    table.apply([], [{ id: second.id, version: second.version + 1 }]);
    expect(await remaining(dave)).toEqual([7]);
  });

  it('keeps the memo of a descriptor whose override did not change when another one did', async () => {
    const erin = kept(d(['api_key', 'erin']));
    await limiter.shouldRateLimit(erin);
    const counterBefore = limiter.planOf(erin).counters[0];
    table.apply([override(entries(['api_key', 'frank']), { unit: 'minute', requests_per_unit: 1 })], []);
    expect(limiter.planOf(erin).counters[0]).toBe(counterBefore);
  });

  it("keeps the rule's other settings (shadow mode) and its metrics series", async () => {
    table.apply([override(entries(['dry', 'x']), { unit: 'minute', requests_per_unit: 1 })], []);
    const dry = kept(d(['dry', 'x']));
    expect(await codes(dry)).toEqual(['OK']);
    expect(await codes(dry)).toEqual(['OK']);
    expect(outcomes.at(-1)).toMatchObject({ statKey: 'dry', shadowMode: 1, overLimit: 1 });
  });

  it('applies on a node with no limit of its own, and replaces every limit of a rate_limits rule', async () => {
    table.apply(
      [
        override(entries(['tenant', 'acme']), { unit: 'minute', requests_per_unit: 1 }),
        override(entries(['two', 'x']), { unit: 'minute', requests_per_unit: 2 }),
      ],
      [],
    );
    expect(await codes(kept(d(['tenant', 'acme'])))).toEqual(['OK']);
    expect(await codes(kept(d(['tenant', 'acme'])))).toEqual(['OVER_LIMIT']);
    const two = kept(d(['two', 'x']));
    expect(await remaining(two)).toEqual([1]);
    expect(outcomes.at(-1)!.statKey).toBe('two');
  });

  it('leaves a descriptor with its own request limit to that limit, and an in-flight override off a rule without reservations', async () => {
    table.apply(
      [override(entries(['api_key', 'gina']), { unit: 'minute', requests_per_unit: 1 }), override(entries(['api_key', 'hal']), { concurrency: 1 })],
      [],
    );
    const own = kept({ entries: entries(['api_key', 'gina']), limit: { requestsPerUnit: 50, unit: 'minute' } });
    expect(await remaining(own)).toEqual([49]);
    expect(await remaining(kept(d(['api_key', 'hal'])))).toEqual([9]);
  });

  it('outlives a config reload, taking the new rule settings of its path', async () => {
    table.apply([override(entries(['api_key', 'ivy']), { unit: 'minute', requests_per_unit: 2 })], []);
    const ivy = kept(d(['api_key', 'ivy']));
    expect(await remaining(ivy)).toEqual([1]);
    config = buildConfig([
      parseConfigText('edge.yaml', EDGE.replace('  - key: api_key\n', '  - key: api_key\n    shadow_mode: true\n'), { defaultAlgorithm: 'sliding_window' }),
    ]);
    expect(await remaining(ivy)).toEqual([0]);
    // Over the override's 2, answered OK: the new config put the rule in shadow mode.
    expect(await codes(ivy)).toEqual(['OK']);
    expect(outcomes.at(-1)!.overLimit).toBe(1);
  });

  it('applies to a descriptor the codec does not keep too (matched on every call)', async () => {
    table.apply([override(entries(['api_key', 'jo']), { unit: 'minute', requests_per_unit: 1 })], []);
    const fresh = (): RateLimitRequest => ({ domain: 'edge', descriptors: [d(['api_key', 'jo'])], hitsAddend: 0 });
    expect((await limiter.shouldRateLimit(fresh())).statuses[0].code).toBe('OK');
    expect((await limiter.shouldRateLimit(fresh())).statuses[0].code).toBe('OVER_LIMIT');
  });
});

describe('the override table', () => {
  it('keeps the newest version of each override, and removes one only over an older version', () => {
    const table = new OverrideTable();
    const a1 = override(entries(['k', 'a']), { unit: 'minute', requests_per_unit: 1 });
    const a2 = override(entries(['k', 'a']), { unit: 'minute', requests_per_unit: 2 });
    expect(table.apply([a2], [])).toBe(true);
    expect(table.apply([a1], [])).toBe(false);
    expect(table.find('edge', entries(['k', 'a']))).toBe(a2);
    expect(table.apply([], [{ id: a2.id, version: a1.version }])).toBe(false);
    const generation = table.generation;
    expect(table.apply([], [{ id: a2.id, version: a2.version + 1 }])).toBe(true);
    expect(table.generation).toBe(generation + 1);
    expect(table.size).toBe(0);
  });

  it('sweeps what expired, once its time has come', () => {
    const table = new OverrideTable();
    const soon = override(entries(['k', 's']), { unit: 'minute', requests_per_unit: 1 }, { expiresAtMs: START + 1_000 });
    const later = override(entries(['k', 'l']), { unit: 'minute', requests_per_unit: 1 }, { expiresAtMs: START + 5_000 });
    const never = override(entries(['k', 'n']), { unit: 'minute', requests_per_unit: 1 });
    table.apply([soon, later, never], []);
    expect(table.sweep(START + 999)).toEqual([]);
    expect(table.sweep(START + 1_000)).toEqual([soon]);
    expect(table.sweep(START + 4_999)).toEqual([]);
    expect(table.sweep(START + 5_000)).toEqual([later]);
    expect([...table.values()]).toEqual([never]);
  });

  it('replaces its whole content by a full read, moving the generation only when something differs', () => {
    const table = new OverrideTable();
    const a = override(entries(['k', 'a']), { unit: 'minute', requests_per_unit: 1 });
    const b = override(entries(['k', 'b']), { unit: 'minute', requests_per_unit: 1 });
    table.apply([a, b], []);
    const generation = table.generation;
    expect(table.replaceAll([a, b])).toBe(false);
    expect(table.generation).toBe(generation);
    const c = override(entries(['k', 'c']), { unit: 'minute', requests_per_unit: 1 });
    expect(table.replaceAll([b, c])).toBe(true);
    expect([...table.values()].map((o) => o.id).sort()).toEqual([b.id, c.id].sort());
    expect(table.countsByDomain()).toEqual(new Map([['edge', 2]]));
  });

  it('pages a domain in the order its overrides were last written, one written again moving to the end', () => {
    const table = new OverrideTable();
    const all = Array.from({ length: 25 }, (_, i) => override(entries(['k', `v${String(i).padStart(2, '0')}`]), { unit: 'minute', requests_per_unit: 1 }));
    table.apply(all, []);
    table.apply([override(entries(['k', 'x']), { unit: 'minute', requests_per_unit: 1 }, {}, 'other')], []);
    const listing = (): string[] => {
      const seen: string[] = [];
      let after = 0;
      for (;;) {
        const page = table.page('edge', after, 10);
        seen.push(...page.overrides.map((o) => o.entries[0].value));
        if (page.next === undefined) break;
        after = page.next;
      }
      return seen;
    };
    expect(listing()).toEqual(all.map((o) => o.entries[0].value));
    // v03 written again, v05 removed: v03 now comes last, v05 not at all.
    const v03 = override(entries(['k', 'v03']), { unit: 'hour', requests_per_unit: 1 });
    table.apply([v03], [{ id: all[5].id, version: v03.version + 1 }]);
    expect(listing()).toEqual([...all.map((o) => o.entries[0].value).filter((v) => v !== 'v03' && v !== 'v05'), 'v03']);
    // A full read in another order pages the same.
    const fresh = new OverrideTable();
    fresh.replaceAll([...table.values()].reverse());
    expect(fresh.page('edge', 0, 100).overrides.map((o) => o.entries[0].value)).toEqual(listing());
    expect(table.page('nowhere', 0, 10)).toEqual({ overrides: [], next: undefined });
  });

  it('keeps paging in bounds through many removals (holes compacted)', () => {
    const table = new OverrideTable();
    const all = Array.from({ length: 3_000 }, (_, i) => override(entries(['k', `h${i}`]), { unit: 'minute', requests_per_unit: 1 }));
    table.apply(all, []);
    table.apply(
      [],
      all.slice(0, 2_990).map((o) => ({ id: o.id, version: o.version + 10_000 })),
    );
    expect(table.page('edge', 0, 100).overrides.map((o) => o.entries[0].value)).toEqual(all.slice(2_990).map((o) => o.entries[0].value));
    expect((table as unknown as { ordered: Map<string, { list: unknown[] }> }).ordered.get('edge')!.list.length).toBeLessThan(2 * 1_024 + 20);
  });

  it('tells the override of a counter key, and only for the counter of its own limit', () => {
    const table = new OverrideTable();
    const o = override(entries(['k', 'a|b']), { unit: 'minute', requests_per_unit: 1 }, {}, 'do|main');
    table.apply([o], []);
    expect(table.byCounterKey(counterKey(counterKeyPrefix('do|main', 'sliding_window', 60_000), o.entries))).toBe(o);
    expect(table.byCounterKey(counterKey(counterKeyPrefix('do|main', 'fixed_window', 60_000), o.entries))).toBeUndefined();
    expect(table.byCounterKey('no separators')).toBeUndefined();
    expect(descriptorTail(o.entries)).toBe('|k=a%7Cb');
  });
});
