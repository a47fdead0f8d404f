import { buildConfig } from '../../../src/config/rule-tree';
import { parseConfigText } from '../../../src/config/rule-reader';
import { overrideLimitParser } from '../../../src/config/override-limit';
import { InvalidRequestError, NotReadyError } from '../../../src/limiter/errors';
import { OverrideAdmin, OverrideCapError, OverrideReader, type OverrideChange } from '../../../src/limiter/override-admin';
import { OverrideSync } from '../../../src/limiter/override-sync';
import { OverrideTable } from '../../../src/limiter/overrides';
import type { RateLimitConfig } from '../../../src/limiter/rules';
import { DEFAULT_REQUEST_LIMITS } from '../../../src/limiter/types';
import { MemoryOverrides } from '../../../src/store/memory-overrides';
import { FakeClock } from '../../helpers/fake-clock';

/** The override API's operations (src/limiter/override-admin.ts): what a body must be, the caps, the change events. */

const EDGE = `
domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: tenant
    value: acme
    descriptors:
      - key: path
        rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: held
    rate_limit: {concurrency: 2}
`;
const START = 1_800_000_000_000;

/** A value nested `levels` deep ([[[...]]]). */
function deep(levels: number): unknown {
  let v: unknown = 1;
  for (let i = 0; i < levels; i++) v = [v];
  return v;
}

describe('OverrideAdmin', () => {
  let config: RateLimitConfig | undefined;
  let clock: FakeClock;
  let table: OverrideTable;
  let changes: OverrideChange[];
  let admin: OverrideAdmin;

  const make = async (caps: { maxCount?: number; maxBytes?: number } = {}): Promise<OverrideAdmin> => {
    const store = await MemoryOverrides.open();
    const parseLimit = overrideLimitParser('sliding_window');
    const reader = new OverrideReader(parseLimit);
    let made: OverrideAdmin | undefined;
    const sync = new OverrideSync({ store, table, read: (s) => reader.read(s), clock, onExpired: (r) => made!.expired(r) });
    made = new OverrideAdmin({
      store,
      table,
      sync,
      config: () => config,
      parseLimit,
      clock,
      maxCount: caps.maxCount ?? 100,
      maxBytes: caps.maxBytes ?? 1 << 20,
      requestLimits: { ...DEFAULT_REQUEST_LIMITS, maxEntries: 3, maxValueBytes: 32 },
      observer: { onChange: (c) => changes.push(c) },
    });
    return made;
  };

  beforeEach(async () => {
    config = buildConfig([parseConfigText('edge.yaml', EDGE, { defaultAlgorithm: 'sliding_window' })]);
    clock = new FakeClock(START);
    table = new OverrideTable();
    changes = [];
    admin = await make();
  });

  const alice = { domain: 'edge', descriptor: [{ key: 'api_key', value: 'alice' }] };

  it('stores an override, answers it with its version and author, and holds it in the table before answering', async () => {
    const answer = await admin.put(
      { ...alice, rate_limit: { unit: 'minute', requests_per_unit: 5 }, note: 'trial', expires_at: '2027-01-15T10:00:00Z' },
      'ops',
    );
    expect(answer).toEqual({
      domain: 'edge',
      descriptor: [{ key: 'api_key', value: 'alice' }],
      rate_limit: { unit: 'minute', requests_per_unit: 5 },
      expires_at: '2027-01-15T10:00:00.000Z',
      note: 'trial',
      updated_at: new Date(START).toISOString(),
      updated_by: 'ops',
      version: 1,
    });
    expect(table.find('edge', alice.descriptor)?.limit.requestsPerUnit).toBe(5);
    expect(await admin.get('edge', alice.descriptor)).toEqual(answer);
    await admin.put({ ...alice, rate_limit: { unit: 'hour', requests_per_unit: 50 } }, 'lead');
    expect(await admin.remove(alice, 'ops')).toMatchObject({ rate_limit: { unit: 'hour', requests_per_unit: 50 }, version: 2 });
    expect(await admin.remove(alice, 'ops')).toBeUndefined();
    expect(await admin.get('edge', alice.descriptor)).toBeUndefined();
    expect(changes.map((c) => [c.action, c.actor, c.version, c.before, c.after])).toEqual([
      ['create', 'ops', 1, undefined, { unit: 'minute', requests_per_unit: 5 }],
      ['update', 'lead', 2, { unit: 'minute', requests_per_unit: 5 }, { unit: 'hour', requests_per_unit: 50 }],
      ['delete', 'ops', 3, { unit: 'hour', requests_per_unit: 50 }, undefined],
    ]);
  });

  it.each([
    [[], 'body: expected a JSON object'],
    [{ ...alice, rate_limit: { unit: 'minute' }, extra: 1 }, 'extra: unknown field (expected one of: domain, descriptor, rate_limit, expires_at, note)'],
    [{ descriptor: alice.descriptor, rate_limit: {} }, 'domain: required'],
    [{ domain: 7, descriptor: alice.descriptor, rate_limit: {} }, 'domain: expected a non-empty string'],
    [{ domain: 'edge', rate_limit: {} }, 'descriptor: required'],
    [{ domain: 'edge', descriptor: [], rate_limit: {} }, 'descriptor: expected a non-empty list'],
    [{ domain: 'edge', descriptor: [{ key: '', value: 'x' }], rate_limit: {} }, 'descriptor[0].key: expected a non-empty string'],
    [{ domain: 'edge', descriptor: [{ key: 'a', value: 1 }], rate_limit: {} }, 'descriptor[0].value: expected a string'],
    [{ domain: 'edge', descriptor: [{ key: 'a', value: 'b', x: 1 }], rate_limit: {} }, 'descriptor[0].x: unknown field'],
    [
      { domain: 'edge', descriptor: [{ key: 'a', value: 'x'.repeat(33) }], rate_limit: {} },
      'descriptor[0].value: over the cap of 32 bytes (DESCRIPTOR_MAX_VALUE_BYTES)',
    ],
    [
      { domain: 'edge', descriptor: Array(4).fill({ key: 'a', value: 'b' }), rate_limit: {} },
      'descriptor: 4 entries, over the cap of 3 (DESCRIPTOR_MAX_ENTRIES)',
    ],
    [alice, 'rate_limit: required'],
    [{ ...alice, rate_limit: { unit: 'sec', requests_per_unit: 1 } }, 'rate_limit.unit: unknown unit "sec"'],
    [{ ...alice, rate_limit: { unit: 'minute', requests_per_unit: -1 } }, 'rate_limit.requests_per_unit: expected an integer'],
    [{ ...alice, rate_limit: { unit: 'minute', requests_per_unit: 1 }, expires_at: 'tomorrow' }, 'expires_at: expected an RFC 3339 time'],
    [{ ...alice, rate_limit: { unit: 'minute', requests_per_unit: 1 }, expires_at: '2020-01-01T00:00:00Z' }, 'expires_at: already past'],
    [{ ...alice, rate_limit: { unit: 'minute', requests_per_unit: 1 }, note: 5 }, 'note: expected a string'],
    [{ ...alice, rate_limit: { unit: 'minute', requests_per_unit: 1 }, note: 'n'.repeat(1_025) }, 'note: over 1024 bytes'],
    [
      { domain: 'other', descriptor: alice.descriptor, rate_limit: { unit: 'minute', requests_per_unit: 1 } },
      'domain: "other" is not a domain of the loaded config',
    ],
    [
      { domain: 'edge', descriptor: [{ key: 'nope', value: 'x' }], rate_limit: { unit: 'minute', requests_per_unit: 1 } },
      'descriptor[0].key: no rule for key "nope"',
    ],
    [
      { domain: 'edge', descriptor: [{ key: 'tenant', value: 'other' }], rate_limit: { unit: 'minute', requests_per_unit: 1 } },
      'descriptor[0].value: no rule for "tenant" = "other"',
    ],
    [
      {
        domain: 'edge',
        descriptor: [
          { key: 'tenant', value: 'acme' },
          { key: 'route', value: '/' },
        ],
        rate_limit: { unit: 'minute', requests_per_unit: 1 },
      },
      'descriptor[1].key: no rule for key "route" under the rule of descriptor[0]',
    ],
    [{ ...alice, rate_limit: { concurrency: 3 } }, 'rate_limit.concurrency: only on a descriptor whose rule limits reservations in flight'],
  ])('refuses %j with 400 naming the field: %s', async (body, message) => {
    const put = admin.put(body, 'ops');
    await expect(put).rejects.toThrow(InvalidRequestError);
    await expect(put).rejects.toThrow(message);
    expect(changes).toEqual([]);
    expect(table.size).toBe(0);
  });

  it('refuses a body nested deeper than the API needs before reading it (the config reader recurses)', async () => {
    const put = admin.put({ ...alice, rate_limit: { unit: 'minute', requests_per_unit: 1, replaces: deep(30_000) } }, 'ops');
    await expect(put).rejects.toThrow(InvalidRequestError);
    await expect(put).rejects.toThrow('body: nested deeper than 32 levels');
    await expect(admin.remove({ ...alice, descriptor: deep(40) }, 'ops')).rejects.toThrow('body: nested deeper than 32 levels');
  });

  it('takes an in-flight limit where the rule holds reservations, and refuses every override before the first config', async () => {
    await admin.put({ domain: 'edge', descriptor: [{ key: 'held', value: 'x' }], rate_limit: { concurrency: 5 } }, 'ops');
    config = undefined;
    await expect(admin.put({ ...alice, rate_limit: { unit: 'minute', requests_per_unit: 1 } }, 'ops')).rejects.toThrow(NotReadyError);
  });

  it('refuses past OVERRIDES_MAX and OVERRIDES_MAX_BYTES with 507 naming the cap, nothing stored changing', async () => {
    admin = await make({ maxCount: 2, maxBytes: 600 });
    const put = (value: string, note?: string): Promise<unknown> =>
      admin.put(
        { domain: 'edge', descriptor: [{ key: 'api_key', value }], rate_limit: { unit: 'minute', requests_per_unit: 1 }, ...(note ? { note } : {}) },
        'ops',
      );
    await put('a');
    await put('b');
    const full = put('c');
    await expect(full).rejects.toThrow(OverrideCapError);
    await expect(full).rejects.toMatchObject({ cap: 'OVERRIDES_MAX' });
    const large = put('a', 'n'.repeat(400));
    await expect(large).rejects.toMatchObject({ cap: 'OVERRIDES_MAX_BYTES' });
    await expect(large).rejects.toThrow(/^OVERRIDES_MAX_BYTES: /);
    expect([...table.values()].map((o) => o.entries[0].value).sort()).toEqual(['a', 'b']);
    expect(changes.map((c) => c.action)).toEqual(['create', 'create']);
  });

  it('lists a domain a page at a time, with a cursor it gave, and refuses a bad page', async () => {
    for (const v of ['d', 'a', 'c', 'b', 'e'])
      await admin.put({ domain: 'edge', descriptor: [{ key: 'api_key', value: v }], rate_limit: { unlimited: true } }, 'ops');
    const first = await admin.list('edge', undefined, 2);
    expect(first.overrides.map((o) => (o.descriptor as { value: string }[])[0].value)).toEqual(['d', 'a']);
    const second = await admin.list('edge', first.next!, 2);
    const third = await admin.list('edge', second.next!, 2);
    expect(second.overrides.map((o) => (o.descriptor as { value: string }[])[0].value)).toEqual(['c', 'b']);
    expect(third).toMatchObject({ next: null });
    expect(third.overrides).toHaveLength(1);
    await expect(admin.list('edge', undefined, 0)).rejects.toThrow('limit: expected an integer from 1 to 1000');
    await expect(admin.list('edge', '!!', 10)).rejects.toThrow('cursor: not one this API gave');
    expect(await admin.list('other', undefined, 10)).toEqual({ overrides: [], next: null });
  });

  it('tells each expiry it removed from the store as a change by `expiry`', async () => {
    await admin.put({ ...alice, rate_limit: { unit: 'minute', requests_per_unit: 5 }, expires_at: new Date(START + 1_000).toISOString() }, 'ops');
    clock.advance(1_000);
    await (admin as unknown as { options: { sync: OverrideSync } }).options.sync.tick();
    expect(changes.at(-1)).toMatchObject({ action: 'expire', actor: 'expiry', before: { unit: 'minute', requests_per_unit: 5 }, after: undefined });
    expect(table.size).toBe(0);
  });
});
