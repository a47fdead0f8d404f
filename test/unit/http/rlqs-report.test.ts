import { MAX_PROXIES, rlqsReport } from '../../../src/http/rlqs-report';
import type { ProxyShareView, RlqsView } from '../../../src/service/rlqs-service';

/** The quota streams as the live page gets them: bounded, cut, this replica's proxies first. */

const remote = (i: number): ProxyShareView => ({ member: `other.${i}.0`, demand: i, allowed: i, share: i, local: false });

function view(proxies: ProxyShareView[]): RlqsView {
  return {
    replica: 'abc',
    openStreams: 1,
    streams: [],
    budgets: 1,
    bytes: 0,
    maxBytes: 1,
    heldBytes: 0,
    rules: [
      {
        domain: 'quota',
        statKey: 'tenant',
        counter: 'quota|sw1000|tenant=acme',
        limit: 100,
        windowMs: 1_000,
        shadow: false,
        used: 40,
        proxies,
        overshoot: 0,
        unlisted: 0,
      },
    ],
  };
}

describe('rlqsReport', () => {
  it('is empty while no budget is in use', () => {
    expect(rlqsReport({ replica: 'abc', openStreams: 0, streams: [], budgets: 0, bytes: 0, maxBytes: 1, heldBytes: 0, rules: [] })).toEqual([]);
  });

  it("lists this replica's proxies first, then by demand, and counts those past the cap", () => {
    const local: ProxyShareView = {
      member: 'abc.0.0',
      demand: null,
      allowed: 0,
      share: 12.5,
      local: true,
      stream: 'abc.0',
      proxy: `${'n'.repeat(100)}`,
      bucket: [{ key: 'tenant', value: 'v'.repeat(70) }],
      assignment: { kind: 'token_bucket', maxTokens: 1, tokensPerFill: 12, fillIntervalSeconds: 1 },
      reportAgeMs: 1_500,
    };
    const [budget] = rlqsReport(view([...Array.from({ length: MAX_PROXIES + 10 }, (_, i) => remote(i)), local]));
    expect(budget).toMatchObject({
      domain: 'quota',
      rule: 'tenant',
      descriptor: [['tenant', 'acme']],
      limit: 100,
      window_s: 1,
      shadow_mode: false,
      used: 40,
      more_proxies: 11,
    });
    expect(budget.proxies).toHaveLength(MAX_PROXIES);
    expect(budget.proxies[0]).toEqual({
      proxy: `${'n'.repeat(64)}…`,
      stream: 'abc.0',
      bucket: [['tenant', `${'v'.repeat(64)}…`]],
      demand: null,
      share: 12.5,
      assignment: { kind: 'token_bucket', max_tokens: 1, tokens_per_fill: 12, fill_interval_s: 1 },
      report_age_s: 1.5,
      local: true,
    });
    expect(budget.proxies[1]).toEqual({
      proxy: `other.${MAX_PROXIES + 9}.0`,
      stream: null,
      bucket: null,
      demand: MAX_PROXIES + 9,
      share: MAX_PROXIES + 9,
      assignment: null,
      report_age_s: null,
      local: false,
    });
  });
});
