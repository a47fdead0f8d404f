import type { ColdStartResult } from './cold-start';
import type { ImportMeasure } from './overrides';
import type { LoadResult } from './load-result';
import type { ScenarioSpec } from './scenarios';

/** The JSON that `make bench` writes to bench/results/<date>.json. */

/** One repeat of one scenario. */
export interface RunMeasure {
  readonly load: LoadResult;
  readonly wallS: number;
  /** CPU cores used by the target (the service's primary and every worker), user + system. */
  readonly cpuCores: number;
  /** Resident memory of the target at the end of the run, summed over its processes. */
  readonly rssMiB: number;
  readonly redisCpuCores?: number;
  /** Script calls (EVALSHA, ...) per successful call: round trips to Redis per decision. */
  readonly redisScriptsPerDecision?: number;
  /** Every command Redis executed per successful call, those inside scripts included. */
  readonly redisCommandsPerDecision?: number;
  /** Commands the scripts ran (redis.call) per counter decided: successful calls x descriptors per call. */
  readonly luaCommandsPerCounter?: number;
  /** Script time (INFO commandstats) per counter decided, microseconds. */
  readonly scriptUsPerCounter?: number;
  /** The machine's 1-minute load average when the run ended. */
  readonly loadAverage?: number;
}

/** Medians over the repeats (errors: the sum). */
export interface ScenarioSummary {
  readonly decisionsPerS: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly p999Ms: number;
  /** Failed calls over all repeats, gRPC errors included. */
  readonly errors: number;
  /** Calls over all repeats. */
  readonly calls: number;
  /** decisionsPerS / the ceiling scenario's (a no-op server, same transport, generator and bodies). */
  readonly ratioToCeiling?: number;
  /** CPU of the target and its redis-server per successful call, microseconds. */
  readonly cpuUsPerCall?: number;
  /**
   * The ceiling's cpuUsPerCall / this one's: the ratio of decisions/s the two would reach with the
   * machine's CPU to themselves. A generator that saturates first bounds the no-op server and
   * inflates ratioToCeiling, not this; but CPU per call moves with the host as well (see report.ts).
   */
  readonly cpuRatioToCeiling?: number;
  readonly redisScriptsPerDecision?: number;
  readonly redisCommandsPerDecision?: number;
  readonly luaCommandsPerCounter?: number;
  readonly scriptUsPerCounter?: number;
  readonly cpuCores: number;
  readonly redisCpuCores?: number;
  readonly rssMiB: number;
  /** h2load-mix: the attacker's share of all calls, as measured. */
  readonly attackShare?: number;
  /** decisionsPerS / the `beside` scenario's, median of the run-by-run ratios (the two measured in the same rounds). */
  readonly ratioToBeside?: number;
  /** p99Ms less the `beside` scenario's, ms: the median of the run-by-run differences. */
  readonly p99MsOverBeside?: number;
  /** Median of the runs' 1-minute load averages. */
  readonly loadAverage?: number;
}

export interface ScenarioResult extends ScenarioSpec {
  readonly descriptors: number;
  readonly runs: readonly RunMeasure[];
  readonly summary?: ScenarioSummary;
  readonly error?: string;
}

export interface Machine {
  readonly nproc: number;
  readonly cpuModel: string;
  readonly memoryGiB: number;
  readonly os: string;
  readonly node: string;
  readonly redis?: string;
  readonly h2load?: string;
}

export interface BenchSettings {
  readonly tiny: boolean;
  readonly repeats: number;
  readonly durationS: number;
  readonly warmupS: number;
  readonly streams: number;
  readonly rate: number;
  readonly generator: string;
  readonly only?: string;
}

export interface BenchResult {
  readonly date: string;
  readonly machine: Machine;
  readonly options: BenchSettings;
  readonly scenarios: readonly ScenarioResult[];
  /** Fresh services driven at a fixed rate from their first answer (bench/cold-start.ts); absent when not measured. */
  readonly coldStart?: readonly ColdStartResult[];
  /** `slidegate overrides import` into a fresh service per store (bench/overrides.ts); absent when not measured. */
  readonly overrideImport?: readonly ImportMeasure[];
}
