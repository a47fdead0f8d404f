import { descriptor } from '../../helpers/grpc-client';
import { openPage, type BrowserPage } from '../../helpers/headless-browser';
import { startTestService, type TestService } from '../../helpers/service';

/**
 * The live page on the debug port, in a real headless browser (Debian's chromium): it renders the
 * table of every domain and rule from /top/rules, and updates itself after new traffic without a
 * reload. Descriptor values are the callers' bytes: the page shows them as text, never as markup.
 * (docs/top-page.png is made by ./page-traffic.test.ts.) Hourly windows: the counts asserted never
 * straddle a window's end, where a sliding window's estimate would let more calls through.
 */

const EDGE = `
domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: tenant
    value: acme
    descriptors:
      - key: path
        rate_limit: {name: acme_reports, unit: second, unit_multiplier: 30, requests_per_unit: 20}
`;

let svc: TestService;
let page: BrowserPage | undefined;

async function call(domain: string, pairs: [string, string][], times: number): Promise<void> {
  for (let i = 0; i < times; i++) await svc.client.shouldRateLimit({ domain, descriptors: [descriptor(pairs)] });
}

/** The rows of one rule's table, as text cells. */
const rowsOf = (rule: string) =>
  `[...document.querySelectorAll('.rule[data-rule="${rule}"] tbody tr')].map((tr) => [...tr.children].map((td) => td.textContent))`;

beforeAll(async () => {
  svc = await startTestService({ config: { 'edge.yaml': EDGE } });
  await call('edge', [['api_key', 'mallory']], 60);
  await call('edge', [['api_key', 'alice']], 4);
  await call('edge', [['api_key', '<img src=x onerror="document.body.dataset.owned=1">']], 1);
  await call(
    'edge',
    [
      ['tenant', 'acme'],
      ['path', '/reports/daily'],
    ],
    24,
  );
  page = await openPage(`http://127.0.0.1:${svc.service.debugPort}/`);
}, 60_000);

afterAll(async () => {
  await page?.close();
  await svc?.stop();
});

it('renders every rule with its limit, denied share and chart, and the descriptors by denials', async () => {
  const p = page!;
  await p.waitFor(`document.querySelectorAll('.rule').length === 2`, 'both rules on the page');
  expect(await p.evaluate(rowsOf('api_key'))).toEqual([
    ['api_key=mallory', '55', '5', '1', 'exact'],
    ['api_key=alice', '0', '4', '0', 'exact'],
    ['api_key=<img src=x onerror="document.body.dataset.owned=1">', '0', '1', '0', 'exact'],
  ]);
  expect(await p.evaluate(`document.querySelector('.rule[data-rule="api_key"] .limit').textContent`)).toBe('5 per hour, sliding_window');
  expect(await p.evaluate(`document.querySelector('.rule[data-rule="api_key"] .share').textContent`)).toBe('84.6% denied (55 of 65), 1 near limit');
  expect(await p.evaluate(`document.querySelector('.rule[data-rule="tenant_acme.path"] .limit').textContent`)).toBe(
    '20 per 30 seconds, sliding_window (acme_reports)',
  );
  // The chart: one bar group per step, with bars where there were decisions.
  expect(await p.evaluate(`document.querySelectorAll('.rule[data-rule="api_key"] svg.chart rect').length > 1`)).toBe(true);
  expect(await p.evaluate(`document.querySelector('section.domain h2').textContent`)).toBe('domain edge');
  // A value that looks like markup stayed text.
  expect(await p.evaluate(`document.body.dataset.owned === undefined && document.querySelectorAll('main img').length === 0`)).toBe(true);
});

it('updates the table by itself after new traffic', async () => {
  const p = page!;
  const before = await p.evaluate<string>('document.body.dataset.updated');
  await call('edge', [['api_key', 'alice']], 3);
  await call('edge', [['api_key', 'carol']], 1);
  await p.waitFor(
    `JSON.stringify(${rowsOf('api_key')}.map((r) => r.slice(0, 3))) === JSON.stringify([['api_key=mallory', '55', '5'], ['api_key=alice', '2', '5'], ['api_key=<img src=x onerror="document.body.dataset.owned=1">', '0', '1'], ['api_key=carol', '0', '1']])`,
    'alice and carol updated on the page',
  );
  expect(await p.evaluate<string>('document.body.dataset.updated')).not.toBe(before);
}, 30_000);
