import { execFile } from 'node:child_process';
import * as path from 'node:path';
import { answerSplit, formatSplit, parseSamples } from '../../load/ghz-answers';
import { descriptor } from '../../helpers/grpc-client';
import { request } from '../../helpers/http-request';
import { startTestService, type TestService } from '../../helpers/service';

/**
 * The split of a load test's answers by overall code, from the server's own /metrics before and
 * after (test/load/ghz-answers.ts), and run-ghz.sh printing it beside its run.
 */

const ROOT = path.resolve(__dirname, '..', '..', '..');

const EDGE = `
domain: edge
descriptors:
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 3}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 100}
`;

let svc: TestService | undefined;
afterEach(async () => {
  await svc?.stop();
  svc = undefined;
});

test('the answers between two scrapes: OK and OVER_LIMIT calls, no failed call, and per rule the hits within and over', async () => {
  svc = await startTestService({ config: { 'edge.yaml': EDGE } });
  const port = svc.service.httpPort;
  const scrape = async (): Promise<string> => (await request(port, 'GET', '/metrics')).text;
  // Calls before the first scrape are not the run's.
  await svc.client.shouldRateLimit({ domain: 'edge', descriptors: [descriptor([['api_key', 'early']])] });
  const before = parseSamples(await scrape());
  for (let i = 0; i < 5; i++) {
    await svc.client.shouldRateLimit({ domain: 'edge', descriptors: [descriptor([['api_key', 'k']]), descriptor([['path', '/p']])] });
  }
  await svc.client.shouldRateLimit({ domain: 'edge', descriptors: [descriptor([['path', '/q']])], hitsAddend: 2 });
  // A domain without rules is answered OK.
  await svc.client.shouldRateLimit({ domain: 'nope', descriptors: [descriptor([['api_key', 'k']])] });
  const split = answerSplit(before, parseSamples(await scrape()));

  expect(split.ok).toBe(5);
  expect(split.failed.size).toBe(0);
  expect(split.overLimit).toBe(2);
  expect(split.rules).toEqual([
    { domain: 'edge', descriptor: 'api_key', within: 3, over: 2 },
    // The denied calls' other descriptor is within its limit (nothing charged: all or nothing).
    { domain: 'edge', descriptor: 'path', within: 7, over: 0 },
  ]);
  const text = formatSplit(split);
  expect(text).toMatch(/OK +5 \(71\.4 %\)/);
  expect(text).toMatch(/OVER_LIMIT +2 \(28\.6 %\)/);
  expect(text).toContain('api_key');
});

test('run-ghz.sh --smoke sends each message of ghz.json once and prints their split by overall code', async () => {
  const out = await new Promise<{ stdout: string; stderr: string }>((resolve, reject) =>
    execFile('bash', ['test/load/run-ghz.sh', '--smoke'], { cwd: ROOT, timeout: 60_000 }, (err, stdout, stderr) =>
      err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve({ stdout, stderr }),
    ),
  );
  const sent = out.stdout.split('\n').filter((l) => /^data\[\d+\] /.test(l));
  expect(sent.length).toBeGreaterThanOrEqual(5);
  const ok = sent.filter((l) => / OK /.test(l)).length;
  const over = sent.filter((l) => / OVER_LIMIT /.test(l)).length;
  expect(out.stdout).toMatch(new RegExp(`\\n  OK +${ok}\\b`));
  expect(out.stdout).toMatch(new RegExp(`\\n  OVER_LIMIT +${over}\\b`));
  expect(out.stdout).toContain('failed calls         0');
  // statsd is off: nothing complains about an agent that is not there.
  expect(out.stderr).not.toMatch(/statsd/i);
}, 90_000);
