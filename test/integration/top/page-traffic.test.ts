import { writeFileSync } from 'node:fs';
import { EnvoyQuotaClient } from '../../helpers/envoy-quota-client';
import { descriptor } from '../../helpers/grpc-client';
import { openPage } from '../../helpers/headless-browser';
import { startTestService } from '../../helpers/service';

/**
 * The live page in a real headless browser (Debian's chromium) under traffic that outgrows the
 * summaries: a scan of one-shot API keys, far more per slice than TOP_ENTRIES, beside three keys
 * being denied, and two proxies dividing a quota. Counts that may be over show the range their true
 * value lies in; denials stay exact. With SCREENSHOT=path the test writes what the browser shows
 * near the end of the traffic (docs/top-page.png is made so).
 */

const EDGE = `
domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 5}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 300}
`;

const QUOTA = `
domain: quota
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 100}
`;

const TICK_MS = 100;
/** One-shot keys per tick: 80/s, about 480 per 6 s slice against 64 entries. */
const SCANS_PER_TICK = 8;
/**
 * 60 ticks: 6 s and more of traffic, so at least one slice takes in hundreds of one-shot keys. The
 * screenshot shows 15 s of it (the chart's 60 steps of 1 s fill better).
 */
const TICKS = process.env.SCREENSHOT === undefined ? 60 : 150;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** The rows of one rule's table, as text cells. */
const rowsOf = (rule: string) =>
  `[...document.querySelectorAll('.rule[data-rule="${rule}"] tbody tr')].map((tr) => [...tr.children].map((td) => td.textContent))`;

it('shows exact denials, ranges for the counts a scan made inexact, and the proxies sharing a quota', async () => {
  const svc = await startTestService({ config: { 'edge.yaml': EDGE, 'quota.yaml': QUOTA } });
  const proxies = ['edge-7f3a.eu-west-1', 'edge-19c2.eu-west-1'].map(
    (name) => new EnvoyQuotaClient({ targets: [svc.addr], domain: 'quota', reportIntervalMs: 1_000, initialMetadata: { 'node-id': name } }),
  );
  const page = await openPage(`http://127.0.0.1:${svc.service.debugPort}/`, { width: 1200, height: 1000 });
  const call = (pairs: [string, string][]) => svc.client.shouldRateLimit({ domain: 'edge', descriptors: [descriptor(pairs)] });
  const denied = new Map<string, number>();
  try {
    for (let tick = 0; tick < TICKS; tick++) {
      const calls: Promise<void>[] = [];
      const key = (value: string) =>
        calls.push(
          call([['api_key', value]]).then((r) => {
            if (r.overallCode === 'OVER_LIMIT') denied.set(value, (denied.get(value) ?? 0) + 1);
          }),
        );
      for (let i = 0; i < 4; i++) key('mallory-7f3a');
      if (tick % 2 === 0) key('alice-19c2');
      if (tick % 5 === 0) key('bob-44e0');
      for (let i = 0; i < SCANS_PER_TICK; i++) key(`scan-${(tick * SCANS_PER_TICK + i).toString(36)}`);
      calls.push(call([['remote_address', `10.0.${1 + (tick % 3)}.${3 + (tick % 3) * 7}`]]).then(() => undefined));
      await Promise.all(calls);
      for (let i = 0; i < 8; i++) proxies[0].request({ tenant: 'acme' });
      for (let i = 0; i < 3; i++) proxies[1].request({ tenant: 'acme' });
      await sleep(TICK_MS);
      // While the proxies still report demand (docs/top-page.png).
      if (tick === TICKS - 10 && process.env.SCREENSHOT !== undefined) writeFileSync(process.env.SCREENSHOT, await page.screenshot());
    }
    const expected = JSON.stringify(['mallory-7f3a', 'alice-19c2', 'bob-44e0'].map((v) => String(denied.get(v))));
    await page.waitFor(`JSON.stringify(${rowsOf('api_key')}.slice(0, 3).map((r) => r[1])) === ${JSON.stringify(expected)}`, 'the denials of the last tick');
    const rows = await page.evaluate<string[][]>(rowsOf('api_key'));
    expect(rows.slice(0, 3).map((r) => r[0])).toEqual(['api_key=mallory-7f3a', 'api_key=alice-19c2', 'api_key=bob-44e0']);
    // The scan outgrew the allowed summaries: a count that may be over shows the range of its true
    // value, "low–high", and the last column its width.
    for (const r of rows) {
      const range = /^([0-9]+)–([0-9]+)$/.exec(r[2]);
      expect(r[4]).toBe(range === null ? 'exact' : `${Number(range[2]) - Number(range[1])} allowed`);
    }
    expect(rows.slice(3).every((r) => r[0].startsWith('api_key=scan-') && r[1] === '0' && r[2].includes('–'))).toBe(true);
    const quota = await page.evaluate<string[][]>(
      `[...document.querySelectorAll('.rlqs-budget tbody tr')].map((tr) => [...tr.children].map((td) => td.textContent))`,
    );
    expect(quota.map((r) => [r[0], r[1]]).sort()).toEqual([
      ['edge-19c2.eu-west-1', 'tenant=acme'],
      ['edge-7f3a.eu-west-1', 'tenant=acme'],
    ]);
  } finally {
    for (const p of proxies) p.close();
    await page.close();
    await svc.stop();
  }
}, 90_000);
