import type { BenchResult, Machine, ScenarioResult, ScenarioSummary } from './bench-result';
import { median, TIMEOUT_MS } from './latency';
import { fmt, markdownTable } from './markdown';
import { barChartSvg } from './svg';

/** Turns a BenchResult into the Markdown tables, the SVG chart and the blocks of README.md and docs/performance.md. */

/**
 * envoyproxy/ratelimit with Redis on a 2-CPU machine, measured separately with the same h2load
 * settings. Quoted for comparison; no run of `make bench` measures it. `noopHttp2` is a no-op node
 * http2 server (1 process, one descriptor) on that same machine: set beside this run's no-op figure,
 * it tells how fast the two machines are relative to each other.
 */
export const REFERENCE_FIGURES = {
  maxOneDescriptor: 16_500,
  maxFiveDescriptors: 11_700,
  p99MsAt8kOver4: 15,
  p99MsAt8kOver40: 23,
  noopHttp2: 31_100,
} as const;

/** A one-line description of the machine. */
export function machineLine(m: Machine): string {
  const redis = m.redis ? `, ${m.redis.replace(/ sha=.*/, '')}` : '';
  return `${m.nproc} CPUs (${m.cpuModel}), ${m.memoryGiB} GiB RAM, ${m.os}, Node ${m.node}${redis}${m.h2load ? `, ${m.h2load}` : ''}`;
}

function errorsCell(s: ScenarioSummary): string {
  if (s.errors === 0) return '0';
  return `${fmt(s.errors)} (${fmt((100 * s.errors) / Math.max(1, s.calls), 2)}%)`;
}

/** The throughput table's columns. */
const BENCH_COLUMNS = [
  'scenario / generator',
  'processes',
  'decisions/s',
  'p50 ms',
  'p99 ms',
  'p99.9 ms',
  'errors',
  'vs ceiling',
  'CPU µs/call',
  'vs ceiling, CPU',
  'Redis calls/decision',
  'Redis cmds/decision',
  'Lua cmds/counter',
  'script µs/counter',
  'CPU %',
  'RSS MiB',
];

/**
 * Commands per decision: two decimals, or two significant digits below 0.1 (a leased row's few
 * background commands per thousand calls would read 0.00).
 */
export function fmtPerDecision(n: number): string {
  if (n >= 0.1 || n === 0 || !Number.isFinite(n)) return fmt(n, 2);
  return fmt(n, Math.min(6, 1 - Math.floor(Math.log10(n))));
}

/** The throughput table: every `max` scenario, medians of the repeats. */
export function benchTable(result: BenchResult): string {
  const rows = result.scenarios
    .filter((s) => s.kind === 'max')
    .map((s) => {
      const m = s.summary;
      if (!m) return [s.name, String(s.workers ?? '-'), 'failed', ...Array<string>(BENCH_COLUMNS.length - 3).fill('-')];
      return [
        s.name,
        String(s.workers ?? '-'),
        fmt(m.decisionsPerS),
        fmt(m.p50Ms, 2),
        fmt(m.p99Ms, 2),
        fmt(m.p999Ms, 2),
        errorsCell(m),
        m.ratioToCeiling === undefined ? '-' : fmt(m.ratioToCeiling, 2),
        m.cpuUsPerCall === undefined ? '-' : fmt(m.cpuUsPerCall, 2),
        m.cpuRatioToCeiling === undefined ? '-' : fmt(m.cpuRatioToCeiling, 2),
        m.redisScriptsPerDecision === undefined ? '-' : fmtPerDecision(m.redisScriptsPerDecision),
        m.redisCommandsPerDecision === undefined ? '-' : fmtPerDecision(m.redisCommandsPerDecision),
        m.luaCommandsPerCounter === undefined ? '-' : fmt(m.luaCommandsPerCounter, 3),
        m.scriptUsPerCounter === undefined ? '-' : fmt(m.scriptUsPerCounter, 2),
        fmt(m.cpuCores * 100),
        fmt(m.rssMiB),
      ];
    });
  return markdownTable(BENCH_COLUMNS, rows, ['l', ...Array<'r'>(BENCH_COLUMNS.length - 1).fill('r')]);
}

/** The attack share each h2load-mix scenario measured (attacker calls / all calls), or '' without one. */
export function attackShareLine(result: BenchResult): string {
  const measured = result.scenarios.filter((s) => s.summary?.attackShare !== undefined);
  if (measured.length === 0) return '';
  const shares = measured.map((s) => `${s.name} ${fmt(100 * s.summary!.attackShare!, 1)}%`).join(', ');
  return `Attack share measured in the h2load mix (attacker calls / all calls): ${shares}.`;
}

/** Each row with runtime overrides loaded, measured beside the row without: the run-by-run ratio and the load average, or ''. */
export function besideLine(result: BenchResult): string {
  const measured = result.scenarios.filter((s) => s.overrides !== undefined && s.beside !== undefined && s.summary?.ratioToBeside !== undefined);
  if (measured.length === 0) return '';
  const rows = measured.map((s) => {
    const load = s.summary!.loadAverage === undefined ? '' : `, load average ${fmt(s.summary!.loadAverage, 2)}`;
    return `${s.name} ${fmt(s.summary!.ratioToBeside!, 3)} of ${s.beside}${load}`;
  });
  return `Runtime overrides loaded, measured in the same rounds as the row without them (median of the run-by-run ratios of decisions/s): ${rows.join('; ')}.`;
}

/**
 * Each `scope: global` row beside the same call on a regional leased rule, measured in the same
 * rounds: p99 of both, the median of the run-by-run p99 differences, decisions/s as a ratio (flat
 * out) and the load average; or ''.
 */
export function globalLine(result: BenchResult): string {
  const measured = result.scenarios.filter((s) => s.workload === 'one-global' && s.beside !== undefined && s.summary?.p99MsOverBeside !== undefined);
  if (measured.length === 0) return '';
  const rows = measured.map((s) => {
    const m = s.summary!;
    const other = result.scenarios.find((x) => x.name === s.beside)?.summary;
    const at = s.kind === 'rate' ? `at ${fmt(s.rps!)} calls/s over ${s.connections} connections` : 'flat out';
    const p99 = other === undefined ? `p99 ${fmt(m.p99Ms, 2)} ms` : `p99 ${fmt(m.p99Ms, 2)} ms against ${fmt(other.p99Ms, 2)} ms`;
    const over = `${m.p99MsOverBeside! >= 0 ? '+' : ''}${fmt(m.p99MsOverBeside!, 2)} ms`;
    const ratio = s.kind === 'max' && m.ratioToBeside !== undefined ? `, ${fmt(m.ratioToBeside, 3)} of its decisions/s` : '';
    const load = m.loadAverage === undefined ? '' : `, load average ${fmt(m.loadAverage, 2)}`;
    return `${at}, ${p99} (run by run ${over})${ratio}${load}`;
  });
  return (
    "A `scope: global` rule (its region's part kept in step with a global store in the background) beside the same call on a regional " +
    `leased rule, the two services measured in the same rounds (one process each): ${rows.join('; ')}.`
  );
}

/** The override import measured per store (`slidegate overrides import`), or ''. */
export function importLine(result: BenchResult): string {
  const measured = result.overrideImport;
  if (measured === undefined || measured.length === 0) return '';
  const parts = measured.map((m) =>
    m.error !== undefined
      ? `${m.store}: failed`
      : `${m.store} ${fmt(m.perSecond)} a second (${fmt(m.overrides)} in ${fmt(m.seconds, 2)} s, load average ${fmt(m.loadAverage, 2)})`,
  );
  return `\`slidegate overrides import\` of an NDJSON file into a fresh service (settings as shipped, the command's 16 connections): ${parts.join('; ')}.`;
}

/** The fixed-rate table: the service beside the no-op server at the same rate and connections. */
export function rateTable(result: BenchResult): string {
  // The leased and global rows at a fixed rate are set beside each other instead (globalLine).
  const rated = result.scenarios.filter((s) => s.kind === 'rate' && s.workload === 'one');
  const keys = [...new Set(rated.map((s) => `${s.rps}/${s.connections}`))];
  const rows = keys.map((k) => {
    const [rps, conns] = k.split('/').map(Number);
    const pick = (target: 'noop' | 'service'): ScenarioSummary | undefined =>
      rated.find((s) => s.target === target && s.rps === rps && s.connections === conns)?.summary;
    const svc = pick('service');
    const noop = pick('noop');
    const lat = (m?: ScenarioSummary): string[] => (m ? [fmt(m.p50Ms, 2), fmt(m.p99Ms, 2), fmt(m.p999Ms, 2)] : ['-', '-', '-']);
    return [`${fmt(rps)}/s over ${conns} conns`, ...lat(svc), svc ? errorsCell(svc) : '-', svc ? fmt(svc.cpuCores * 100) : '-', ...lat(noop)];
  });
  return markdownTable(['calls', 'redis p50 ms', 'p99 ms', 'p99.9 ms', 'errors', 'CPU %', 'no-op p50 ms', 'no-op p99 ms', 'no-op p99.9 ms'], rows, [
    'l',
    'r',
    'r',
    'r',
    'r',
    'r',
    'r',
    'r',
    'r',
  ]);
}

/** The cold-start table (bench/cold-start.ts), or '' when the run did not measure it. */
export function coldStartTable(result: BenchResult): string {
  const cold = result.coldStart;
  if (cold === undefined || cold.length === 0) return '';
  const rows = cold.map((c) => {
    const name = `\`WARM_UP_CALLS=${c.warmUpCalls}\`${c.isDefault ? ' (default)' : c.warmUpCalls === 0 ? ' (off)' : ''}`;
    const m = c.summary;
    if (!m) return [name, 'failed', '-', '-', '-', '-', '-'];
    const calls = median(c.runs.map((r) => r.calls));
    return [
      name,
      String(c.runs.length),
      `${fmt(m.overTimeout)} (${fmt((100 * m.overTimeout) / Math.max(1, calls), 2)}%)`,
      c.runs.map((r) => fmt(r.overTimeout)).join(', '),
      fmt(m.p999Ms, 1),
      fmt(m.maxMs, 1),
      String(m.errors),
    ];
  });
  const c0 = cold[0];
  return (
    `Cold start: a new service (Redis, default workers) driven at ${fmt(c0.rps)} calls/s over ${c0.connections} connections (h2load \`--rps\`) ` +
    `for ${c0.durationS} s from its first answer, a new service each run, the variants in turns; medians of the runs:\n\n` +
    markdownTable(['service', 'runs', `calls over ${TIMEOUT_MS} ms`, 'per run', 'p99.9 ms', 'max ms', 'errors'], rows, ['l', 'r', 'r', 'r', 'r', 'r', 'r'])
  );
}

/** slidegate with Redis in this run (when given) beside the reference server's separately measured figures. */
export function comparisonTable(result?: BenchResult): string {
  const find = (f: (s: ScenarioResult) => boolean): ScenarioSummary | undefined => result?.scenarios.find((s) => f(s) && s.summary)?.summary;
  const primary = (s: ScenarioResult): boolean => s.generator !== 'grpc-js-load' && s.transport === 'http2' && s.target === 'service' && s.backend === 'redis';
  const maxOf = (w: ScenarioResult['workload']): string => {
    const m = find((s) => primary(s) && s.kind === 'max' && s.workload === w);
    return m ? fmt(m.decisionsPerS) : '-';
  };
  const p99At = (conns: number): string => {
    const m = find((s) => primary(s) && s.kind === 'rate' && s.workload === 'one' && s.rps === 8000 && s.connections === conns);
    return m ? `${fmt(m.p99Ms, 1)} ms` : '-';
  };
  const noop = find(
    (s) => s.target === 'noop' && s.kind === 'max' && s.transport === 'node-http2' && s.workers === 1 && s.workload === 'one' && s.generator === 'h2load',
  );
  const ours = result ? [maxOf('one'), maxOf('five'), p99At(4), p99At(40), noop ? fmt(noop.decisionsPerS) : '-'] : Array<string>(5).fill('run `make bench`');
  const r = REFERENCE_FIGURES;
  return markdownTable(
    ['with Redis, h2load -t 1 -m 50', 'slidegate, this run', 'envoyproxy/ratelimit (measured separately on its own machine, not in this run)'],
    [
      ['machine speed: no-op node http2 server, 1 process, max calls/s', ours[4], fmt(r.noopHttp2)],
      ['max decisions/s, 1 descriptor, 4 conns', ours[0], fmt(r.maxOneDescriptor)],
      ['max decisions/s, 5 descriptors, 4 conns', ours[1], fmt(r.maxFiveDescriptors)],
      ['p99 at 8,000 calls/s, 4 conns', ours[2], `${r.p99MsAt8kOver4} ms`],
      ['p99 at 8,000 calls/s, 40 conns', ours[3], `${r.p99MsAt8kOver40} ms`],
    ],
    ['l', 'r', 'r'],
  );
}

/** Throughput of the `max` scenarios and p99 of every scenario. */
export function benchSvg(result: BenchResult): string {
  const ok = result.scenarios.filter((s) => s.summary);
  return barChartSvg({
    title: `slidegate: throughput and tail latency (${result.date}, ${result.machine.nproc} CPUs)`,
    series: [`median of ${result.options.repeats} runs`],
    panels: [
      {
        title: 'Decisions per second',
        unit: 'thousands',
        decimals: 1,
        groups: ok.filter((s) => s.kind === 'max').map((s) => ({ label: s.name, values: [s.summary!.decisionsPerS / 1000] })),
      },
      { title: 'p99 latency', unit: 'ms', decimals: 2, groups: ok.map((s) => ({ label: s.name, values: [s.summary!.p99Ms] })) },
    ],
  });
}

/** The standalone Markdown written next to the JSON. */
export function resultMarkdown(result: BenchResult): string {
  const share = attackShareLine(result);
  const beside = besideLine(result);
  const global = globalLine(result);
  const imported = importLine(result);
  const cold = coldStartTable(result);
  return [
    `# make bench, ${result.date}`,
    '',
    `Machine: ${machineLine(result.machine)}.`,
    '',
    benchTable(result),
    '',
    ...(share ? [share, ''] : []),
    ...(beside ? [beside, ''] : []),
    ...(global ? [global, ''] : []),
    rateTable(result),
    '',
    ...(cold ? [cold, ''] : []),
    ...(imported ? [imported, ''] : []),
    comparisonTable(result),
    '',
  ].join('\n');
}

const GENERATORS =
  'h2load `-t 1 -c 4 -m 50` posting one prebuilt call; for the attack scenarios, *h2load-mix*: two h2load processes at once, ' +
  '`-c 9 -m 50` posting a key already over its limit as fast as it can and `-c 1 -m 50` posting a normal key at a fixed rate ' +
  '(`--rps`: a ninth of what the attacker process alone reaches against the first target of the pair, so that about 90% of the calls attack), ' +
  'their counts summed and their latency logs merged (the attack share reached is measured and given below the table); bench/http2-load.ts (raw node:http2, 4 connections, 50 streams each) ' +
  'where calls need many different bodies, and to re-measure the attack mix over 100 keys; bench/grpc-js-load.ts, a grpc-js client, ' +
  're-measures one attack scenario as a check on the counting';

/**
 * The block between `<!-- bench:start -->` and `<!-- bench:end -->`: method, tables and chart of a
 * full run, or the method and a placeholder when there is no result yet. `base` prefixes repository
 * paths (README: '', docs/: '../').
 */
export function docsBlock(result: BenchResult | undefined, base: string): string {
  const method = result
    ? `Measured by \`make bench\` on ${result.date}: ${result.machine.nproc} CPUs (${result.machine.cpuModel}), ` +
      `${result.machine.memoryGiB} GiB RAM, ${result.machine.os}, Node ${result.machine.node}. ` +
      `The service runs as shipped (\`GRPC_TRANSPORT=http2\`; \`WORKERS\` left at its default: 1 with memory, ` +
      `${result.scenarios.find((s) => s.backend === 'redis' && s.workers)?.workers ?? 'one per core'} with Redis), ` +
      `beside its own redis-server and the load generator on the same cores, over 127.0.0.1. `
    : 'Measured by `make bench` (the machine is named with the results: nproc, CPU model, memory). ' +
      'The service runs as shipped (`GRPC_TRANSPORT=http2`, `WORKERS` at its default), beside its own redis-server and the load generator on the same cores, over 127.0.0.1. ';
  const parts = [
    method +
      `Load: ${GENERATORS}. ${result ? `Medians of ${result.options.repeats} runs of ${result.options.durationS} s after a ${result.options.warmupS} s warm-up. ` : ''}` +
      '*vs ceiling* divides decisions/s by what a no-op server (it parses the call and answers OK, deciding nothing) reaches on the same transport ' +
      'with the same generator, bodies and number of processes (*processes*: 1 with memory; with Redis as many node:cluster workers as the service runs, ' +
      "the no-op rows marked `-w<N>`): the share of the machine's gRPC capacity that remains once every call is decided; 1.00 would mean deciding is free. " +
      'A no-op row and the row it bounds are measured in alternation (no-op, service, no-op, ...) and *vs ceiling* is the median of the run-by-run ratios, ' +
      'so that a machine whose speed drifts during the run (shared hosts do) shifts both alike. ' +
      '*CPU µs/call* is the CPU the service (all its processes) and its redis-server spent per successful call, and *vs ceiling, CPU* the no-op ' +
      "server's CPU per call divided by it: what *vs ceiling* would read if each had the machine to itself. The two agree when the server is the " +
      'bottleneck; when the load generator saturates first (the no-op row then uses well under a core per process), *vs ceiling* reads high. ' +
      'Neither is a constant of the code: CPU per call moves with the host too (a server woken for fewer calls at a time spends more per call; ' +
      'the same no-op server has read 2.1 and 4.5 µs per call on two days on this kind of machine), so compare builds in alternation, on one machine. ' +
      'Rows without a ratio re-measure a scenario with another generator. *errors* counts every failed call, gRPC errors included; ' +
      'an OVER_LIMIT answer is a successful call.',
  ];
  if (result) {
    const share = attackShareLine(result);
    const beside = besideLine(result);
    const global = globalLine(result);
    const imported = importLine(result);
    const cold = coldStartTable(result);
    parts.push(
      benchTable(result),
      ...(share ? [share] : []),
      ...(beside ? [beside] : []),
      ...(global ? [global] : []),
      "Fixed rate (h2load `--rps`, which sends each connection's share in bursts), the no-op http2 server with as many processes at the same rate beside:",
      rateTable(result),
      ...(cold ? [cold] : []),
      ...(imported ? [imported] : []),
    );
  } else {
    parts.push('No published run yet: run `make bench` on an otherwise idle machine to fill in the tables here.');
  }
  parts.push(
    'Against the reference server (its figures were measured separately, on its own 2-CPU machine, not by this run; the first row, the same no-op server on both machines, tells how their speeds compare):',
    comparisonTable(result),
  );
  if (result)
    parts.push(
      `![throughput and p99](${base}bench/results/${result.date}.svg)\n\nRaw numbers: [bench/results/${result.date}.json](${base}bench/results/${result.date}.json).`,
    );
  if (base === '') parts.push('Method, scenarios and columns in detail: [docs/performance.md](docs/performance.md).');
  return parts.join('\n\n');
}
