import type { GeneratorName } from './load-result';
import { encodeRateLimitRequest, type BenchDescriptor } from './rls-codec';

/**
 * What `make bench` measures: the request bodies of each workload, the service's config for them,
 * and the list of scenarios of a full run and of a tiny (smoke) run.
 */

export type Transport = 'grpc-js' | 'http2';
export type Backend = 'memory' | 'redis';
export type Workload = 'one' | 'five' | 'keys10k' | 'attack';

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
  /** Calls per second over all connections (kind `rate` only). */
  readonly rps?: number;
  /** The scenario whose decisions/s is this one's ceiling: a no-op server, same transport, generator and bodies. */
  readonly ceiling?: string;
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
`;

const d = (key: string, value: string): BenchDescriptor => ({ entries: [[key, value]] });

/** Request messages of a workload (protobuf, without the gRPC frame) and descriptors per request. */
export function workloadBodies(w: Workload): { bodies: Buffer[]; descriptors: number } {
  switch (w) {
    case 'one':
      return { bodies: [encodeRateLimitRequest(DOMAIN, [d('client', 'c1')])], descriptors: 1 };
    case 'five':
      return {
        bodies: [encodeRateLimitRequest(DOMAIN, [d('client', 'c1'), d('path', '/api/v1/items'), d('method', 'GET'), d('tenant', 't1'), d('region', 'eu-west')])],
        descriptors: 5,
      };
    case 'keys10k':
      return { bodies: Array.from({ length: 10_000 }, (_, i) => encodeRateLimitRequest(DOMAIN, [d('client', `c${i}`)])), descriptors: 1 };
    case 'attack':
      // 90 attacker keys (over their limit after one call) for every 10 normal ones, interleaved.
      return {
        bodies: Array.from({ length: 100 }, (_, i) => encodeRateLimitRequest(DOMAIN, [i % 10 === 9 ? d('client', `n${i}`) : d('attacker', `a${i}`)])),
        descriptors: 1,
      };
  }
}

const WORKLOAD_LABEL: Record<Workload, string> = { one: '1-descriptor', five: '5-descriptors', keys10k: '10k-keys', attack: 'attack-90pct' };
const WORKLOAD_TEXT: Record<Workload, string> = {
  one: 'one descriptor, one key',
  five: 'five descriptors per call (one all-or-nothing decision over five counters)',
  keys10k: '10,000 distinct keys in turn',
  attack: '90% of calls on keys already over their limit, 10% normal',
};

/** The scenarios of a run, in the order they are measured (every ceiling before what it bounds). */
export function scenarioPlan(opts: ScenarioPlanOptions): ScenarioSpec[] {
  const specs: ScenarioSpec[] = [];
  const p = opts.primary;
  const v = opts.varied;
  const noop = (transport: Transport, workload: Workload, generator: GeneratorName): string => {
    const name = `noop-${transport}${workload === 'one' ? '' : '-' + WORKLOAD_LABEL[workload]}/${generator}`;
    specs.push({ name, description: `no-op ${transport} server (the ceiling), ${WORKLOAD_TEXT[workload]}`, kind: 'max', target: 'noop', transport, workload, generator, connections: 4 });
    return name;
  };
  const svc = (backend: Backend, workload: Workload, generator: GeneratorName, ceiling?: string, transport: Transport = 'http2'): void => {
    const suffix = transport === 'http2' ? '' : `-${transport}`;
    specs.push({
      name: `${backend}-${WORKLOAD_LABEL[workload]}${suffix}/${generator}`,
      description: `${backend} store${transport === 'http2' ? '' : `, GRPC_TRANSPORT=${transport}`}, ${WORKLOAD_TEXT[workload]}`,
      kind: 'max',
      target: 'service',
      transport,
      backend,
      workload,
      generator,
      connections: 4,
      ceiling,
    });
  };
  const rate = (target: 'noop' | 'service', connections: number, rps: number): void => {
    const who = target === 'noop' ? 'noop-http2' : 'redis-1-descriptor';
    specs.push({
      name: `${who}@${fmtRate(rps)}-${connections}c/${p}`,
      description: `${target === 'noop' ? 'no-op http2 server' : 'redis store, one descriptor'}, ${rps} calls/s over ${connections} connections`,
      kind: 'rate',
      target,
      transport: 'http2',
      backend: target === 'noop' ? undefined : 'redis',
      workload: 'one',
      generator: p,
      connections,
      rps,
    });
  };

  if (opts.tiny) {
    // One of each moving part: both generators that vary bodies, h2load's success counting, both
    // stores, worker processes (redis), and a fixed-rate run low enough to hold on a busy machine.
    const ceiling = noop('http2', 'one', p);
    svc('memory', 'one', p, ceiling);
    svc('redis', 'one', p, ceiling);
    const attack = noop('http2', 'attack', v);
    svc('memory', 'attack', v, attack);
    if (v !== 'grpc-js-load') svc('redis', 'attack', 'grpc-js-load');
    rate('service', 4, opts.rate);
    return specs;
  }
  const grpcJs = noop('grpc-js', 'one', p);
  const http2 = noop('http2', 'one', p);
  for (const backend of ['memory', 'redis'] as const) {
    svc(backend, 'one', p, http2);
    svc(backend, 'five', p, http2);
  }
  svc('redis', 'one', p, grpcJs, 'grpc-js');
  const keys = noop('http2', 'keys10k', v);
  svc('memory', 'keys10k', v, keys);
  svc('redis', 'keys10k', v, keys);
  const attack = noop('http2', 'attack', v);
  svc('memory', 'attack', v, attack);
  svc('redis', 'attack', v, attack);
  // The same calls through a second, independent client: a check on http2-load's counting.
  if (v !== 'grpc-js-load') svc('redis', 'attack', 'grpc-js-load');
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
