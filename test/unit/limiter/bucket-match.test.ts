import { configFromTexts } from '../../../src/config/files';
import { matchBucket } from '../../../src/limiter/bucket-match';
import { counterKey } from '../../../src/limiter/keys';
import { matchDescriptor } from '../../../src/limiter/match';

const CONFIG = configFromTexts(
  [
    {
      file: 'quota.yaml',
      text: `domain: quota
descriptors:
  - key: tenant
    value: acme
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 60}
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: region
    descriptors:
      - key: tenant
        value: acme
        rate_limit: {unit: hour, requests_per_unit: 7}
  - key: ip
    value: "10.*"
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 3}
`,
    },
  ],
  { defaultAlgorithm: 'sliding_window' },
);

const pairs = (o: Record<string, string>) => Object.entries(o).map(([key, value]) => ({ key, value }));

describe('a bucket id matched as a descriptor', () => {
  test('its pairs are put in the order the rule tree needs, on the counter RLS uses for that descriptor', () => {
    const m = matchBucket(CONFIG, 'quota', pairs({ path: '/a', tenant: 'acme' }))!;
    expect(m.entries).toEqual(pairs({ tenant: 'acme', path: '/a' }));
    const rls = matchDescriptor(CONFIG, 'quota', m.entries)!;
    expect(m.rule).toBe(rls);
    expect(m.counters[0]).toMatchObject({ key: counterKey(rls.keyPrefix, m.entries), limit: 60, windowMs: 60_000, hits: 0 });
    expect(m.statKey).toBe('tenant_acme.path');
  });

  test('a single pair matches its rule; the first complete order wins when the tree allows several', () => {
    expect(matchBucket(CONFIG, 'quota', pairs({ tenant: 'zed' }))!.counters[0].limit).toBe(5);
    const m = matchBucket(CONFIG, 'quota', pairs({ tenant: 'acme', region: 'eu' }))!;
    expect(m.entries).toEqual(pairs({ region: 'eu', tenant: 'acme' }));
    expect(m.counters[0].limit).toBe(7);
  });

  test('share_threshold buckets share the counter of their pattern', () => {
    const a = matchBucket(CONFIG, 'quota', pairs({ ip: '10.0.0.1' }))!;
    const b = matchBucket(CONFIG, 'quota', pairs({ ip: '10.9.9.9' }))!;
    expect(a.counters[0].key).toBe(b.counters[0].key);
  });

  test('no rule for every pair, a node without a limit, or an unknown domain: no match', () => {
    expect(matchBucket(CONFIG, 'quota', pairs({ tenant: 'acme' }))).toBeUndefined();
    expect(matchBucket(CONFIG, 'quota', pairs({ tenant: 'zed', extra: 'x' }))).toBeUndefined();
    expect(matchBucket(CONFIG, 'elsewhere', pairs({ tenant: 'zed' }))).toBeUndefined();
    expect(matchBucket(CONFIG, 'quota', [])).toBeUndefined();
  });
});
