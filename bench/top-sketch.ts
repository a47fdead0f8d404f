import { loadavg } from 'node:os';
import type { DescriptorOutcome, Limit } from '../src/limiter/types';
import { TopSketch } from '../src/top/top-sketch';

/**
 * What the live view (src/top) adds to a decision, in process: nanoseconds per outcome recorded
 * into the sketch, for a few descriptors repeating (every one stays in its summary) and for many
 * distinct descriptors cycling (every outcome of a new one evicts an entry). Rounds of the cases
 * are interleaved so that a busy machine slows them alike; the load average is printed beside.
 *
 *   node dist/bench/top-sketch.js [--rounds 5] [--outcomes 2000000] [--entries 64]
 */

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
}

const LIMIT: Limit = {
  requestsPerUnit: 100,
  unit: 'minute',
  unitMultiplier: 1,
  windowMs: 60_000,
  algorithm: 'sliding_window',
  burst: 100,
  subWindows: 1,
  strict: false,
  unlimited: false,
};
const RULE = { statKey: 'api_key', limit: LIMIT, shadowMode: false };

function outcomes(distinct: number, denied: boolean): DescriptorOutcome[] {
  const list: DescriptorOutcome[] = [];
  for (let i = 0; i < distinct; i++) {
    list.push({
      domain: 'edge',
      statKey: RULE.statKey,
      hits: 1,
      overLimit: denied ? 1 : 0,
      nearLimit: 0,
      withinLimit: denied ? 0 : 1,
      shadowMode: 0,
      overLimitWithLocalCache: 0,
      rule: RULE,
      key: `edge|sw60000|api_key=caller-${i}`,
    });
  }
  return list;
}

/** Nanoseconds per recorded outcome over `count` outcomes cycling through `list`, on a fresh sketch. */
function measure(list: readonly DescriptorOutcome[], count: number, entries: number): number {
  const sketch = new TopSketch({ windowMs: 60_000, entries, maxRules: 100, nowMs: 0 });
  // Warm: the summaries full and the code optimised before the clock starts.
  for (let i = 0; i < 200_000; i++) sketch.record(list[i % list.length]);
  const start = process.hrtime.bigint();
  for (let i = 0; i < count; i++) sketch.record(list[i % list.length]);
  return Number(process.hrtime.bigint() - start) / count;
}

function main(): void {
  const rounds = arg('rounds', 5);
  const count = arg('outcomes', 2_000_000);
  const entries = arg('entries', 64);
  const cases: [string, DescriptorOutcome[]][] = [
    ['5 repeating keys, allowed', outcomes(5, false)],
    ['20,000 distinct keys cycling, allowed', outcomes(20_000, false)],
    ['20,000 distinct keys cycling, denied', outcomes(20_000, true)],
  ];
  const results = cases.map((): number[] => []);
  const loadBefore = loadavg()[0];
  for (let r = 0; r < rounds; r++) cases.forEach(([, list], i) => results[i].push(measure(list, count, entries)));
  const loadAfter = loadavg()[0];
  console.log(`TOP_ENTRIES ${entries}, ${count} outcomes per round, ${rounds} rounds; load average ${loadBefore.toFixed(2)} -> ${loadAfter.toFixed(2)}`);
  cases.forEach(([name], i) => {
    const sorted = [...results[i]].sort((a, b) => a - b);
    const median = sorted[Math.floor(sorted.length / 2)];
    console.log(`${name}: median ${median.toFixed(1)} ns per outcome (${sorted[0].toFixed(1)} to ${sorted[sorted.length - 1].toFixed(1)})`);
  });
}

main();
