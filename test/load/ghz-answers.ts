import * as fs from 'node:fs';
import * as http from 'node:http';

/**
 * What a load test's answers were, from the server's own counters: OK and OVER_LIMIT are both gRPC
 * OK, so ghz's summary counts them together. `run-ghz.sh` takes a snapshot of /metrics before the
 * run and prints the difference after it:
 *   node dist/test/load/ghz-answers.js snapshot http://127.0.0.1:8080/metrics before.prom
 *   node dist/test/load/ghz-answers.js report http://127.0.0.1:8080/metrics before.prom
 */

/** One sample's name with its labels as written (`name{a="b"}`) -> its value. */
export type Samples = ReadonlyMap<string, number>;

/** The counter samples of a Prometheus text exposition (comments and malformed lines skipped). */
export function parseSamples(text: string): Samples {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const cut = line.lastIndexOf(' ');
    const value = Number(line.slice(cut + 1));
    if (cut > 0 && Number.isFinite(value)) out.set(line.slice(0, cut), value);
  }
  return out;
}

export interface RuleCounts {
  readonly domain: string;
  readonly descriptor: string;
  readonly within: number;
  readonly over: number;
}

export interface AnswerSplit {
  readonly ok: number;
  readonly overLimit: number;
  /** Failed calls by err_type. */
  readonly failed: ReadonlyMap<string, number>;
  /** Hits per rule that changed during the run, most denied first. */
  readonly rules: readonly RuleCounts[];
}

const RULE_SAMPLE = /^ratelimit_service_rate_limit_(within_limit|over_limit)\{domain="((?:[^"\\]|\\.)*)",descriptor="((?:[^"\\]|\\.)*)"\}$/;
const ERROR_SAMPLE = /^ratelimit_service_should_rate_limit_error\{err_type="([^"]*)"\}$/;

/** The answers between two snapshots of the same server. */
export function answerSplit(before: Samples, after: Samples): AnswerSplit {
  const delta = (name: string): number => (after.get(name) ?? 0) - (before.get(name) ?? 0);
  const failed = new Map<string, number>();
  const rules = new Map<string, { domain: string; descriptor: string; within: number; over: number }>();
  for (const name of after.keys()) {
    const error = ERROR_SAMPLE.exec(name);
    if (error !== null && delta(name) > 0) failed.set(error[1], delta(name));
    const rule = RULE_SAMPLE.exec(name);
    if (rule === null || delta(name) === 0) continue;
    const key = `${rule[2]}\u0000${rule[3]}`;
    const counts = rules.get(key) ?? { domain: rule[2], descriptor: rule[3], within: 0, over: 0 };
    if (rule[1] === 'within_limit') counts.within += delta(name);
    else counts.over += delta(name);
    rules.set(key, counts);
  }
  return {
    ok: delta('ratelimit_service_responses_total{overall_code="OK"}'),
    overLimit: delta('ratelimit_service_responses_total{overall_code="OVER_LIMIT"}'),
    failed,
    rules: [...rules.values()].sort((a, b) => b.over - a.over || b.within - a.within || a.descriptor.localeCompare(b.descriptor)),
  };
}

/** The split as text, for beside ghz's summary. */
export function formatSplit(split: AnswerSplit): string {
  const answered = split.ok + split.overLimit;
  const share = (n: number): string => (answered === 0 ? '' : ` (${((100 * n) / answered).toFixed(1)} %)`);
  const num = (n: number): string => n.toLocaleString('en-US').padStart(10);
  const lines = [
    '',
    "Answers by overall code (the server's ratelimit_service_responses_total, before and after the run):",
    `  OK          ${num(split.ok)}${share(split.ok)}`,
    `  OVER_LIMIT  ${num(split.overLimit)}${share(split.overLimit)}`,
  ];
  const failures = [...split.failed.entries()];
  lines.push(
    failures.length === 0 ? '  failed calls         0' : `  failed calls  ${failures.map(([type, n]) => `${type} ${n.toLocaleString('en-US')}`).join(', ')}`,
  );
  if (split.rules.length > 0) {
    lines.push(
      '',
      'Descriptor statuses per rule, in hits (hits_addend counted):',
      `  ${'domain'.padEnd(10)} ${'rule'.padEnd(36)} ${'within'.padStart(10)} ${'over'.padStart(10)}`,
    );
    for (const r of split.rules) lines.push(`  ${r.domain.padEnd(10)} ${r.descriptor.padEnd(36)} ${num(r.within)} ${num(r.over)}`);
  }
  return `${lines.join('\n')}\n`;
}

function fetchText(url: string): Promise<string> {
  return new Promise((resolve, reject) => {
    http
      .get(url, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => (res.statusCode === 200 ? resolve(Buffer.concat(chunks).toString()) : reject(new Error(`${url}: HTTP ${res.statusCode}`))));
      })
      .on('error', reject);
  });
}

async function main(): Promise<void> {
  const [mode, url, file] = process.argv.slice(2);
  if ((mode !== 'snapshot' && mode !== 'report') || !url || !file) throw new Error('usage: ghz-answers snapshot|report METRICS_URL FILE');
  const text = await fetchText(url);
  if (mode === 'snapshot') fs.writeFileSync(file, text);
  else process.stdout.write(formatSplit(answerSplit(parseSamples(fs.readFileSync(file, 'utf8')), parseSamples(text))));
}

if (require.main === module) {
  main().catch((err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  });
}
