import { EnvoyQuotaClient } from '../../helpers/envoy-quota-client';
import { openPage, type BrowserPage } from '../../helpers/headless-browser';
import { startTestService, type TestService } from '../../helpers/service';

/**
 * The quota streams (RLQS) in the live view of the real service: /top/rules carries every budget
 * with each proxy's demand, share, assignment and last report, and the page in a real headless
 * browser (Debian's chromium) renders one table per budget. The proxy's name and the bucket are
 * the caller's bytes: they come back cut and are shown as text, never as markup.
 */

const QUOTA = `
domain: quota
descriptors:
  - key: tenant
    rate_limit: {unit: second, requests_per_unit: 100}
`;

interface BudgetJson {
  domain: string;
  rule: string;
  descriptor: [string, string][];
  limit: number;
  window_s: number;
  shadow_mode: boolean;
  used: number;
  overshoot: number;
  more_proxies: number;
  proxies: {
    proxy: string;
    stream: string | null;
    bucket: [string, string][] | null;
    demand: number | null;
    share: number;
    assignment: { kind: string; max_tokens?: number; tokens_per_fill?: number; fill_interval_s?: number } | null;
    report_age_s: number | null;
    local: boolean;
  }[];
}

const PROXY_NAME = '<b id="owned">edge-7</b>';
const LONG_TENANT = 'a'.repeat(100);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

let svc: TestService;
let proxy: EnvoyQuotaClient | undefined;
let page: BrowserPage | undefined;

async function budgets(): Promise<BudgetJson[]> {
  const res = await fetch(`http://127.0.0.1:${svc.service.debugPort}/top/rules`);
  expect(res.status).toBe(200);
  return ((await res.json()) as { rlqs: BudgetJson[] }).rlqs;
}

/** Requests through the proxy for `ms`, one every 10 ms, so that its reports carry a demand. */
async function traffic(ms: number): Promise<void> {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    proxy!.request({ tenant: 'acme' });
    proxy!.request({ tenant: LONG_TENANT });
    await sleep(10);
  }
}

beforeAll(async () => {
  svc = await startTestService({ config: { 'quota.yaml': QUOTA } });
  page = await openPage(`http://127.0.0.1:${svc.service.debugPort}/`);
}, 60_000);

afterAll(async () => {
  proxy?.close();
  await page?.close();
  await svc?.stop();
});

it('carries no budget and hides the section while no stream reports', async () => {
  expect(await budgets()).toEqual([]);
  // The document may still be loading (no body yet) when the browser hands the page over.
  await page!.waitFor(`document.body?.dataset.updated !== undefined`, 'the first refresh');
  expect(await page!.evaluate(`document.getElementById('rlqs').hidden && document.querySelectorAll('.rlqs-budget').length === 0`)).toBe(true);
}, 30_000);

it('lists each proxy of a budget in /top/rules with its bucket, demand, share, assignment and last report', async () => {
  proxy = new EnvoyQuotaClient({ targets: [svc.addr], domain: 'quota', reportIntervalMs: 200, initialMetadata: { 'node-id': PROXY_NAME } });
  await traffic(1_000);
  // Two buckets of one stream: one budget each (tenant=acme and the long tenant are two counters).
  const all = await budgets();
  expect(all).toHaveLength(2);
  for (const budget of all) {
    expect(budget).toMatchObject({ domain: 'quota', rule: 'tenant', limit: 100, window_s: 1, shadow_mode: false, more_proxies: 0 });
    expect(budget.proxies).toHaveLength(1);
    // The counter's descriptor is the bucket's: one budget per bucket here.
    expect(budget.descriptor).toEqual(budget.proxies[0].bucket);
  }
  const rows = all.flatMap((b) => b.proxies);
  for (const p of rows) {
    expect(p).toMatchObject({ proxy: PROXY_NAME, local: true, assignment: { kind: 'token_bucket' } });
    expect(p.stream).toMatch(/^[0-9a-f]+\.[0-9]+$/);
    // About 100 requests per second asked, all of them granted (the limit is 100/s each).
    expect(p.demand).toBeGreaterThan(30);
    expect(p.share).toBeGreaterThan(30);
    expect(p.report_age_s).toBeGreaterThanOrEqual(0);
    expect(p.report_age_s).toBeLessThan(2);
  }
  expect(rows.map((p) => p.bucket).sort()).toEqual([[['tenant', `${'a'.repeat(64)}…`]], [['tenant', 'acme']]].sort());
}, 30_000);

it('renders a table per budget with the proxy as it named itself, as text', async () => {
  const p = page!;
  await traffic(500);
  await p.waitFor(`document.querySelectorAll('.rlqs-budget tbody tr').length === 2`, 'both budgets on the page');
  const row = await p.evaluate<string[]>(
    `[...document.querySelectorAll('.rlqs-budget tbody tr')].map((tr) => [...tr.children].map((td) => td.textContent)).find((r) => r[1] === 'tenant=acme')`,
  );
  expect(row[0]).toBe(PROXY_NAME);
  expect(row[2]).toMatch(/^[0-9]+\.[0-9]\/s$/);
  expect(row[3]).toMatch(/^[0-9]+\.[0-9]\/s$/);
  expect(row[4]).toMatch(/^token bucket: [0-9]+ per [0-9]+ s, max [0-9]+$/);
  expect(row[5]).toMatch(/^[0-9]+\.[0-9] s ago$/);
  expect(await p.evaluate(`document.getElementById('rlqs').hidden === false && document.querySelector('#rlqs h2').textContent`)).toBe('Quota streams (RLQS)');
  expect(await p.evaluate(`document.getElementById('owned') === null`)).toBe(true);
}, 30_000);
