import { availableParallelism } from 'node:os';
import type { GeneratorName } from './load-result';
import { encodeRateLimitRequest, type BenchDescriptor } from './rls-codec';

/**
 * What `make bench` measures: the request bodies of each workload, the service's config for them,
 * and the list of scenarios of a full run and of a tiny (smoke) run.
 */

/**
 * `http2` is the service's default transport (its own HTTP/2 layer, src/http2); `grpc-js` the
 * alternative. `node-http2` exists only as a no-op server on node's http2 module: the machine-speed
 * figure that the reference server's numbers were quoted beside.
 */
export type Transport = 'grpc-js' | 'http2' | 'node-http2';
export type Backend = 'memory' | 'redis';
export type Workload =
  'one' | 'five' | 'five-fw' | 'five-sl' | 'five-tb' | 'five-lb' | 'keys10k' | 'attack' | 'bucket' | 'one-lease' | 'five-lease' | 'one-global';

/** Every workload, in the order their request files are written. */
export const WORKLOADS: readonly Workload[] = [
  'one',
  'five',
  'five-fw',
  'five-sl',
  'five-tb',
  'five-lb',
  'keys10k',
  'attack',
  'bucket',
  'one-lease',
  'five-lease',
  'one-global',
];

/**
 * The five-descriptor workloads by algorithm (`five` is the default sliding window): the same five
 * descriptors, each on a rule of that algorithm, whose keys start with the prefix here.
 */
const FIVE_BY_ALGORITHM = {
  'five-fw': { prefix: 'fw_', rule: 'algorithm: fixed_window', text: 'fixed window' },
  'five-sl': { prefix: 'sl_', rule: 'algorithm: sliding_log', text: 'sliding log' },
  'five-tb': { prefix: 'tb_', rule: 'algorithm: token_bucket, burst: 1000000000', text: 'token bucket' },
  'five-lb': { prefix: 'lb_', rule: 'algorithm: leaky_bucket, burst: 1000000000', text: 'leaky bucket' },
} as const;

/**
 * The leased workloads (`lease: true`): the one- and five-descriptor calls on rules of the same
 * limits and windows (sliding window), whose keys start with this prefix.
 */
const LEASE_PREFIX = 'ls_';

/**
 * The global workload (`scope: global`): one descriptor on a rule of one minute (a global window
 * holds at least ten region syncs), whose key starts with this prefix. Its service runs with
 * REGION set and a global store of its own (bench/run.ts); every other service reads the rule as a
 * leased one.
 */
const GLOBAL_PREFIX = 'gl_';

/** The five descriptors' keys, values and units (their windows differ, as a real route's rules do). */
const FIVE: readonly (readonly [key: string, value: string, unit: string])[] = [
  ['client', 'c1', 'second'],
  ['path', '/api/v1/items', 'second'],
  ['method', 'GET', 'second'],
  ['tenant', 't1', 'minute'],
  ['region', 'eu-west', 'hour'],
];

/** A workload that sends the five descriptors, whatever their algorithm. */
export function isFive(w: Workload): boolean {
  return w === 'five' || w === 'five-lease' || w in FIVE_BY_ALGORITHM;
}

/** A workload on `lease: true` rules: decided in each process once its lease has synced (see LEASE_WARMUP_S). */
export function isLeased(w: Workload): boolean {
  return w === 'one-lease' || w === 'five-lease' || isGlobal(w);
}

/** A workload on a `scope: global` rule: its service runs in a region (REGION, GLOBAL_REDIS_URL), leased within it. */
export function isGlobal(w: Workload): boolean {
  return w === 'one-global';
}

/**
 * The shortest warm-up of a leased scenario, seconds: a lease decides in process only after its
 * first background sync (LEASE_SYNC_INTERVAL, 250 ms), and each worker holds its own; until then
 * its calls go to Redis. Four sync intervals, whatever `--warmup` says.
 */
export const LEASE_WARMUP_S = 1;

/**
 * The shortest first warm-up of a global scenario, seconds: the region's part of the limit is
 * divided at the region's syncs (REGION_SYNC_INTERVAL, 1 s), the first of them when the counter is
 * first called; three of them, whatever `--warmup` says. Later rounds warm up as leased rows do.
 */
export const GLOBAL_WARMUP_S = 3;

/** Runtime overrides the overrides rows load before the service starts (bench/overrides.ts): one on the call's descriptor. */
export const OVERRIDES_LOADED = 100_000;

export interface ScenarioSpec {
  /** Unique; `--only` matches it. Shape: `<target>[@<rate>-<conns>c]/<generator>`. */
  readonly name: string;
  readonly description: string;
  /** `max`: as fast as the generator goes; `rate`: a fixed call rate, to read latency below saturation. */
  readonly kind: 'max' | 'rate';
  readonly target: 'noop' | 'service';
  readonly transport: Transport;
  readonly backend?: Backend;
  readonly workload: Workload;
  readonly generator: GeneratorName;
  readonly connections: number;
  /** Processes serving calls: a no-op server's, or the service's default for its store. */
  readonly workers: number;
  /** Calls per second over all connections (kind `rate` only). */
  readonly rps?: number;
  /**
   * The no-op scenario this one is measured against: same transport, generator, bodies and process
   * count. Their runs alternate (no-op, service, no-op, ...), so that a machine that slows down or
   * speeds up during the run shifts both alike. For kind `max` its decisions/s is the ceiling.
   */
  readonly ceiling?: string;
  /** Runtime overrides loaded before the service starts (bench/overrides.ts); none when absent. */
  readonly overrides?: number;
  /** The scenario this one is compared with: measured in the same rounds (its ceiling, it, this one, ...), `vs beside` the run-by-run ratio. */
  readonly beside?: string;
}

export interface ScenarioPlanOptions {
  readonly tiny: boolean;
  /** The generator of the scenarios that repeat one call: h2load when installed. */
  readonly primary: GeneratorName;
  /** The generator of the scenarios whose calls differ from each other: http2-load unless told otherwise. */
  readonly varied: GeneratorName;
  /** Total rate of the fixed-rate scenarios. */
  readonly rate: number;
}

/** The domain every workload uses. */
export const DOMAIN = 'bench';

// Limits far above any reachable rate keep the normal keys under their limit; `attacker` allows one
// hit per hour, so after its first call every attacker key is over its limit for the whole run.
/** The service's config for every workload. */
export const CONFIG_YAML = `domain: ${DOMAIN}
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: method
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1000000000}
  - key: region
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
  - key: attacker
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 1000000000, algorithm: token_bucket, burst: 1000000000}
${Object.values(FIVE_BY_ALGORITHM)
  .flatMap(({ prefix, rule }) =>
    FIVE.map(([key, , unit]) => `  - key: ${prefix}${key}\n    rate_limit: {unit: ${unit}, requests_per_unit: 1000000000, ${rule}}\n`),
  )
  .join(
    '',
  )}${FIVE.map(([key, , unit]) => `  - key: ${LEASE_PREFIX}${key}\n    rate_limit: {unit: ${unit}, requests_per_unit: 1000000000, lease: true}\n`).join('')}  - key: ${GLOBAL_PREFIX}client
    rate_limit: {unit: minute, requests_per_unit: 1000000000, scope: global}
`;

const d = (key: string, value: string): BenchDescriptor => ({ entries: [[key, value]] });

/**
 * The service's WORKERS default (src/settings/settings.ts) for a store: one per core (at most 64) with Redis,
 * 1 with memory. The benchmark starts the service with it and gives each ceiling as many processes.
 */
export function defaultWorkers(backend: Backend): number {
  return backend === 'redis' ? Math.min(64, availableParallelism()) : 1;
}

/** Connections of the two h2load processes of the attack mix: 9 on the attacker body, 1 on the normal one. */
export const ATTACK_MIX_CONNECTIONS = { attacker: 9, normal: 1 } as const;

/** The attack share the mix aims at: the normal process is paced at (1 - share) x the attacker's calls/s. */
export const ATTACK_MIX_SHARE = 0.9;

/**
 * The two bodies of the h2load attack mix (protobuf, without the gRPC frame): one attacker key,
 * over its limit once it has been called once, and one normal key.
 */
export function attackMixBodies(): { attacker: Buffer; normal: Buffer } {
  return { attacker: encodeRateLimitRequest(DOMAIN, [d('attacker', 'a-mix')]), normal: encodeRateLimitRequest(DOMAIN, [d('client', 'n-mix')]) };
}

/** Request messages of a workload (protobuf, without the gRPC frame) and descriptors per request. */
export function workloadBodies(w: Workload): { bodies: Buffer[]; descriptors: number } {
  switch (w) {
    case 'one':
    case 'one-lease':
    case 'one-global': {
      const prefix = w === 'one' ? '' : w === 'one-lease' ? LEASE_PREFIX : GLOBAL_PREFIX;
      return { bodies: [encodeRateLimitRequest(DOMAIN, [d(`${prefix}client`, 'c1')])], descriptors: 1 };
    }
    case 'five':
    case 'five-lease':
    case 'five-fw':
    case 'five-sl':
    case 'five-tb':
    case 'five-lb': {
      const prefix = w === 'five' ? '' : w === 'five-lease' ? LEASE_PREFIX : FIVE_BY_ALGORITHM[w].prefix;
      return {
        bodies: [
          encodeRateLimitRequest(
            DOMAIN,
            FIVE.map(([key, value]) => d(prefix + key, value)),
          ),
        ],
        descriptors: 5,
      };
    }
    case 'keys10k':
      return { bodies: Array.from({ length: 10_000 }, (_, i) => encodeRateLimitRequest(DOMAIN, [d('client', `c${i}`)])), descriptors: 1 };
    case 'bucket':
      return { bodies: [encodeRateLimitRequest(DOMAIN, [d('bucket', 'c1')])], descriptors: 1 };
    case 'attack':
      // 90 attacker keys (over their limit after one call) for every 10 normal ones, interleaved.
      return {
        bodies: Array.from({ length: 100 }, (_, i) => encodeRateLimitRequest(DOMAIN, [i % 10 === 9 ? d('client', `n${i}`) : d('attacker', `a${i}`)])),
        descriptors: 1,
      };
  }
}

const WORKLOAD_LABEL: Record<Workload, string> = {
  one: '1-descriptor',
  five: '5-descriptors',
  'five-fw': '5-descriptors-fixed-window',
  'five-sl': '5-descriptors-sliding-log',
  'five-tb': '5-descriptors-token-bucket',
  'five-lb': '5-descriptors-leaky-bucket',
  keys10k: '10k-keys',
  attack: 'attack-90pct',
  bucket: '1-token-bucket',
  'one-lease': '1-descriptor-lease',
  'five-lease': '5-descriptors-lease',
  'one-global': '1-descriptor-global',
};
const WORKLOAD_TEXT: Record<Workload, string> = {
  one: 'one descriptor, one key',
  five: 'five descriptors per call (one all-or-nothing decision over five counters)',
  'five-fw': `five descriptors per call on ${FIVE_BY_ALGORITHM['five-fw'].text} rules`,
  'five-sl': `five descriptors per call on ${FIVE_BY_ALGORITHM['five-sl'].text} rules`,
  'five-tb': `five descriptors per call on ${FIVE_BY_ALGORITHM['five-tb'].text} rules`,
  'five-lb': `five descriptors per call on ${FIVE_BY_ALGORITHM['five-lb'].text} rules`,
  keys10k: '10,000 distinct keys in turn',
  attack: '90% of calls on keys already over their limit, 10% normal',
  bucket: 'one descriptor, one key, on a token-bucket rule',
  'one-lease': 'one descriptor, one key, on a `lease: true` rule (decided in each process against its part of the limit)',
  'five-lease': 'five descriptors per call on `lease: true` rules (decided in each process against its part of each limit)',
  'one-global':
    'one descriptor, one key, on a `scope: global` rule of one minute (REGION set, a second redis-server the global store; ' +
    "decided in each process against its part of the region's part)",
};

const MIX_TEXT =
  `two h2load processes at once: ${ATTACK_MIX_CONNECTIONS.attacker} connections posting a key over its limit, ` +
  `${ATTACK_MIX_CONNECTIONS.normal} posting a normal key at a paced rate (the attack share is measured)`;

/** The scenarios of a run, every ceiling before what it bounds (bench/run.ts measures the two in alternation). */
export function scenarioPlan(opts: ScenarioPlanOptions): ScenarioSpec[] {
  const specs: ScenarioSpec[] = [];
  const p = opts.primary;
  const v = opts.varied;
  const connectionsOf = (generator: GeneratorName): number =>
    generator === 'h2load-mix' ? ATTACK_MIX_CONNECTIONS.attacker + ATTACK_MIX_CONNECTIONS.normal : 4;
  const text = (workload: Workload, generator: GeneratorName): string =>
    generator === 'h2load-mix' ? `${WORKLOAD_TEXT[workload]}; ${MIX_TEXT}` : WORKLOAD_TEXT[workload];
  // A ceiling runs as many processes as the service it bounds: `-w2` in its name when more than one.
  const noop = (transport: Transport, requested: Workload, generator: GeneratorName, workers: number): string => {
    // A no-op server does not read the rule: one descriptor is one descriptor, whatever its algorithm.
    const workload = requested === 'bucket' || requested === 'one-lease' || requested === 'one-global' ? 'one' : isFive(requested) ? 'five' : requested;
    const name = `noop-${transport}${workers > 1 ? `-w${workers}` : ''}${workload === 'one' ? '' : '-' + WORKLOAD_LABEL[workload]}/${generator}`;
    if (specs.some((s) => s.name === name)) return name;
    const procs = workers > 1 ? `, ${workers} processes` : '';
    specs.push({
      name,
      description: `no-op ${transport} server${procs} (the ceiling), ${text(workload, generator)}`,
      kind: 'max',
      target: 'noop',
      transport,
      workload,
      generator,
      connections: connectionsOf(generator),
      workers,
    });
    return name;
  };
  /**
   * A service scenario, preceded by its ceiling unless `ceiling` is false (cross-checks of another
   * generator); with `overrides`, that many runtime overrides loaded, measured beside the same row
   * without; with `beside`, measured beside the same row on that workload.
   */
  const svc = (
    backend: Backend,
    workload: Workload,
    generator: GeneratorName,
    o: { ceiling?: boolean; transport?: Transport; overrides?: number; beside?: Workload } = {},
  ): void => {
    const transport = o.transport ?? 'http2';
    // A leased row runs one process, as the memory rows do: what it measures is a decision at the
    // memory store's speed, beside them (each process is a replica, whatever their number).
    const workers = isLeased(workload) ? 1 : defaultWorkers(backend);
    const ceiling = o.ceiling === false ? undefined : noop(transport, workload, generator, workers);
    const suffix = transport === 'http2' ? '' : `-${transport}`;
    const plain = `${backend}-${WORKLOAD_LABEL[workload]}${suffix}/${generator}`;
    const loaded = o.overrides === undefined ? '' : `-${fmtRate(o.overrides)}-overrides`;
    const beside = o.overrides !== undefined ? plain : o.beside === undefined ? undefined : `${backend}-${WORKLOAD_LABEL[o.beside]}${suffix}/${generator}`;
    specs.push({
      ...(o.overrides === undefined ? {} : { overrides: o.overrides }),
      ...(beside === undefined ? {} : { beside }),
      name: `${backend}-${WORKLOAD_LABEL[workload]}${suffix}${loaded}/${generator}`,
      description:
        `${backend} store${transport === 'http2' ? '' : `, GRPC_TRANSPORT=${transport}`}, ${text(workload, generator)}` +
        (o.overrides === undefined ? '' : `, ${o.overrides} runtime overrides loaded (one on the call's descriptor)`),
      kind: 'max',
      target: 'service',
      transport,
      backend,
      workload,
      generator,
      connections: connectionsOf(generator),
      workers,
      ceiling,
    });
  };
  const rate = (target: 'noop' | 'service', connections: number, rps: number): void => {
    // The no-op server at the same rate runs as many processes as the service beside it.
    const workers = defaultWorkers('redis');
    const name = (who: 'noop' | 'service'): string =>
      `${who === 'noop' ? `noop-http2${workers > 1 ? `-w${workers}` : ''}` : 'redis-1-descriptor'}@${fmtRate(rps)}-${connections}c/${p}`;
    const noopName = name('noop');
    specs.push({
      name: name(target),
      description: `${target === 'noop' ? `no-op http2 server (${workers} process${workers > 1 ? 'es' : ''})` : 'redis store, one descriptor'}, ${rps} calls/s over ${connections} connections`,
      kind: 'rate',
      target,
      transport: 'http2',
      backend: target === 'noop' ? undefined : 'redis',
      workload: 'one',
      generator: p,
      connections,
      workers,
      rps,
      ceiling: target === 'service' && specs.some((x) => x.name === noopName) ? noopName : undefined,
    });
  };
  /**
   * A leased workload at a fixed rate, one process (as its `max` row), without a ceiling; with
   * `beside`, measured in the same rounds as that workload's row at the same rate and connections.
   */
  const leasedRate = (workload: Workload, connections: number, rps: number, beside?: Workload): void => {
    const name = (w: Workload): string => `redis-${WORKLOAD_LABEL[w]}@${fmtRate(rps)}-${connections}c/${p}`;
    specs.push({
      name: name(workload),
      description: `redis store, ${WORKLOAD_TEXT[workload]}, ${rps} calls/s over ${connections} connections`,
      kind: 'rate',
      target: 'service',
      transport: 'http2',
      backend: 'redis',
      workload,
      generator: p,
      connections,
      workers: 1,
      rps,
      ...(beside === undefined ? {} : { beside: name(beside) }),
    });
  };
  // The attack mix needs h2load; without it, the node generator that varies bodies runs it alone.
  const attackGenerator: GeneratorName = p === 'h2load' ? 'h2load-mix' : v;

  if (opts.tiny) {
    // One of each moving part: both generators that vary bodies, h2load's success counting (one
    // body, and the two-body attack mix), both stores, worker processes (redis, and its ceiling),
    // and a fixed-rate run low enough to hold on a busy machine.
    svc('memory', 'one', p);
    svc('redis', 'one', p);
    svc('redis', 'one-lease', p);
    svc('redis', 'one-global', p, { beside: 'one-lease' });
    svc('memory', 'attack', v);
    if (attackGenerator !== v) svc('memory', 'attack', attackGenerator);
    if (v !== 'grpc-js-load') svc('redis', 'attack', 'grpc-js-load', { ceiling: false });
    rate('service', 4, opts.rate);
    return specs;
  }
  noop('node-http2', 'one', p, 1);
  for (const backend of ['memory', 'redis'] as const) {
    svc(backend, 'one', p);
    // The decision with 100,000 runtime overrides in force, in the same rounds as the row above.
    svc(backend, 'one', p, { overrides: OVERRIDES_LOADED });
    svc(backend, 'bucket', p);
    svc(backend, 'five', p);
    for (const w of Object.keys(FIVE_BY_ALGORITHM) as (keyof typeof FIVE_BY_ALGORITHM)[]) {
      // Redis keeps one log record per admitted request (the memory store one per millisecond): at
      // full speed under a limit never reached, each decision would read tens of thousands of them.
      if (backend === 'redis' && w === 'five-sl') continue;
      svc(backend, w, p);
    }
  }
  // Leases change nothing on the memory store: only Redis has rows of them.
  svc('redis', 'one-lease', p);
  // A global limit decides as a leased one does, its region's part kept in step in the background:
  // measured in the rounds of the leased row, flat out and at a fixed rate (where p99 is latency, not queueing).
  svc('redis', 'one-global', p, { beside: 'one-lease' });
  leasedRate('one-lease', 4, opts.rate);
  leasedRate('one-global', 4, opts.rate, 'one-lease');
  svc('redis', 'five-lease', p);
  svc('redis', 'one', p, { transport: 'grpc-js' });
  svc('memory', 'keys10k', v);
  svc('redis', 'keys10k', v);
  svc('memory', 'attack', attackGenerator);
  svc('redis', 'attack', attackGenerator);
  // The same mix through the node generators, which cycle through 100 keys: a check on the h2load
  // mix's counting (and, for grpc-js-load, on http2-load's).
  if (attackGenerator !== v) {
    svc('memory', 'attack', v, { ceiling: false });
    svc('redis', 'attack', v, { ceiling: false });
  }
  if (v !== 'grpc-js-load') svc('redis', 'attack', 'grpc-js-load', { ceiling: false });
  for (const connections of [4, 40]) {
    rate('noop', connections, opts.rate);
    rate('service', connections, opts.rate);
  }
  return specs;
}

/** 8000 -> "8k", 1500 -> "1.5k", 500 -> "500". */
export function fmtRate(rps: number): string {
  return rps >= 1000 ? `${Number((rps / 1000).toFixed(1))}k` : String(rps);
}
