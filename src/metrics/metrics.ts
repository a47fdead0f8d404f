import { createHash } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client';
import { classify, type ErrorMetric } from '../errors';
import type { DescriptorOutcome, LocalDenialListener, RateLimitDecider, RateLimitRequest, RateLimitResponse, ReservationEvent } from '../limiter/types';
import type { ServiceReplays } from '../service/rls-service';
import type { QuotaRuleTotals } from '../sharing/quota/quota-budgets';
import type { LeaseObserver, LeaseView } from '../sharing/leases/lease';
import type { RegionObserver, RegionPartView } from '../sharing/regions/region-shares';
import type { RlqsObserver } from '../service/rlqs-service';
import { TalliedCounter, TalliedHistogram } from './tallies';
import type { Settings } from '../settings/settings';

/**
 * Every counter and histogram of the service, in one place.
 *
 * Names follow the reference server so that dashboards and alerts carry over:
 * - statsd (USE_STATSD): `ratelimit.service.rate_limit.<domain>.<descriptor>.total_hits` etc., as the
 *   reference emits them;
 * - Prometheus (GET /metrics): the names its statsd-exporter mapping produces,
 *   `ratelimit_service_rate_limit_total_hits{domain, descriptor}` etc., where `descriptor` is the rule's
 *   key path (`tenant_acme.path`); values of key-only levels appear only for `detailed_metric` rules.
 *
 * Cardinality is bounded: at most `maxSeries` distinct (domain, descriptor) label sets are kept, of at
 * most `maxSeriesBytes` estimated bytes; any further one is folded into `descriptor="overflow"` of its
 * domain, so clients sending random values to a detailed rule cannot grow memory without bound. A
 * descriptor label longer than `maxLabelLength` (values are the caller's to pick) is cut and ends in a
 * hash of the whole, so long labels stay apart and no label or statsd name is longer than that.
 */

/** What the limiter reports for one matched counter of one request (see DescriptorOutcome). */
export type DescriptorEvent = DescriptorOutcome;

/** Minimal statsd client surface (hot-shots' StatsD satisfies it); injectable for tests. */
export interface StatsdSink {
  increment(stat: string, value: number): void;
  timing(stat: string, milliseconds: number): void;
  close(callback?: (error?: Error) => void): void;
}

/** What a statsd client could not send. */
export interface StatsdDrops {
  /** Lines dropped at the bound of what is held for the agent. */
  readonly lines: number;
  /** Their bytes, and the bytes a closed connection still held. */
  readonly bytes: number;
}

/** Kinds of failed ShouldRateLimit calls (the error catalogue's `metric`): the store could not answer, or anything else. */
export type CallErrorKind = ErrorMetric;

export interface MetricsOptions {
  /** Store adapter name; store errors are counted as `<name>_error` (`redis_error`, as the reference). */
  readonly storeName?: string;
  /** Distinct (domain, descriptor) label sets kept before folding into "overflow"; default 10,000. */
  readonly maxSeries?: number;
  /** Estimated bytes of those series before folding into "overflow"; default 16 MiB. */
  readonly maxSeriesBytes?: number;
  /** Longest descriptor label kept whole (longer ones are cut, with a hash); default 256. */
  readonly maxLabelLength?: number;
  /** Process metrics (CPU, memory, event loop, GC); default true. */
  readonly defaultMetrics?: boolean;
  /** Where statsd lines go; none when omitted. */
  readonly statsd?: StatsdSink;
  /** What the statsd client dropped for an agent not taking lines (read at each scrape). */
  readonly statsdDrops?: () => StatsdDrops;
}

/** Latency buckets in seconds, for a 20 ms budget: 0.1 ms .. 50 ms. */
export const LATENCY_BUCKETS_SECONDS: readonly number[] = Object.freeze([0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05]);

export const DEFAULT_MAX_SERIES = 10_000;
export const DEFAULT_MAX_SERIES_BYTES = 16 * 1024 * 1024;
export const DEFAULT_MAX_LABEL_LENGTH = 256;
export const OVERFLOW_LABEL = 'overflow';

/**
 * What one series costs besides its labels' characters (its six tallies and their prom-client
 * children), and how many times those characters are held (the label sets, the statsd names, and
 * prom-client's own keys).
 */
const SERIES_OVERHEAD_BYTES = 800;
const SERIES_LABEL_COPIES = 8;
/** Hex digits of the hash that ends a cut label. */
const LABEL_HASH_LENGTH = 16;

interface Inc {
  inc(value: number): void;
}

/** The cached children of one (domain, descriptor): a request costs two map lookups, no string work. */
interface Series {
  readonly totalHits: Inc;
  readonly overLimit: Inc;
  readonly nearLimit: Inc;
  readonly withinLimit: Inc;
  readonly shadowMode: Inc;
  readonly overLimitWithLocalCache: Inc;
  /** statsd names, built once per series; undefined without statsd. */
  readonly stat?: {
    readonly totalHits: string;
    readonly overLimit: string;
    readonly nearLimit: string;
    readonly withinLimit: string;
    readonly shadowMode: string;
    readonly overLimitWithLocalCache: string;
  };
}

const RULE_LABELS = ['domain', 'descriptor'] as const;
type RuleLabel = (typeof RULE_LABELS)[number];
const METHOD = 'ShouldRateLimit';

/**
 * Every statsd name the service sends (USE_STATSD, USE_DOG_STATSD, and USE_PROMETHEUS through its
 * mapping), the reference's where it has one: a new metric's statsd name is an entry here. A name
 * ending in `.` is completed per call (a kind, a policy, a rule's domain and descriptor).
 */
const STATSD_NAMES = {
  totalRequests: `ratelimit_server.${METHOD}.total_requests`,
  responseTime: `ratelimit_server.${METHOD}.response_time`,
  /** + `<store>_error` or `service_error`. */
  callError: 'ratelimit.service.call.should_rate_limit.',
  configLoadSuccess: 'ratelimit.service.config_load_success',
  configLoadError: 'ratelimit.service.config_load_error',
  localCacheHits: 'ratelimit.service.local_cache_hits',
  /** + the failure's kind. */
  storeError: 'ratelimit.service.store_error.',
  /** + the failure policy. */
  storeFallback: 'ratelimit.service.store_fallback.',
  globalShadowMode: 'ratelimit.service.global_shadow_mode',
  /** + `<domain>.<action>`: a runtime override set, removed or expired. */
  overrideChange: 'ratelimit.service.override_changes.',
  /** + `<domain>.<descriptor>.` and a rule counter's name (total_hits, over_limit, ...). */
  rule: 'ratelimit.service.rate_limit.',
} as const;

// statsd's line format reserves ':', '|', '@' and '#'; names with them (or whitespace) would be misparsed.
const STATSD_UNSAFE = /[:|@#\s]/g;

function statsdSafe(s: string): string {
  return s.replace(STATSD_UNSAFE, '_');
}

/** What the lease gauges read of the leases at a scrape. */
export interface LeaseSource {
  readonly size: number;
  /** Estimated bytes the leases hold. */
  readonly bytes: number;
  /** Estimated bytes per second their syncs send and read back. */
  readonly syncBytes: number;
  view(max: number): { readonly leases: readonly LeaseView[] };
}

/** What the region gauges read of the region parts at a scrape. */
export interface RegionSource {
  readonly region: string;
  view(max: number): { readonly parts: readonly RegionPartView[] };
}

/** Region parts summed per rule at a scrape. */
interface RegionRuleTotals {
  readonly domain: string;
  readonly descriptor: string;
  part: number;
  demand: number;
  syncAge: number;
  partitioned: number;
}

/** Leases summed per rule at a scrape. */
interface LeaseRuleTotals {
  readonly domain: string;
  readonly descriptor: string;
  share: number;
  demand: number;
}

/** What the override gauge reads of the runtime overrides at a scrape. */
export interface OverrideSource {
  countsByDomain(): ReadonlyMap<string, number>;
}

/** What the RLQS gauges read of the quota service at a scrape. */
export interface QuotaSource {
  readonly streamCount: number;
  /** Estimated bytes its streams hold. */
  readonly bytes: number;
  ruleTotals(): readonly QuotaRuleTotals[];
}

export class Metrics {
  /** This service's own registry (never prom-client's global one). */
  readonly registry = new Registry();

  private readonly maxSeries: number;
  private readonly maxSeriesBytes: number;
  private readonly maxLabelLength: number;
  private readonly statsd?: StatsdSink;
  private readonly storeErrorType: string;

  // The counters a call touches are tallied (./tallies): the request path only adds numbers.
  private readonly totalHits: TalliedCounter<RuleLabel>;
  private readonly overLimit: TalliedCounter<RuleLabel>;
  private readonly nearLimit: TalliedCounter<RuleLabel>;
  private readonly withinLimit: TalliedCounter<RuleLabel>;
  private readonly shadowMode: TalliedCounter<RuleLabel>;
  private readonly overLimitWithLocalCache: TalliedCounter<RuleLabel>;

  private readonly storeErrors: Inc;
  private readonly serviceErrors: Inc;
  private readonly latency: TalliedHistogram<'grpc_method'>;
  private readonly requests: Inc;
  private readonly answeredOk: Inc;
  private readonly answeredOverLimit: Inc;
  private readonly configLoadSuccess: Counter;
  private readonly configLoadError: Counter;
  private readonly localCacheHits: Inc;
  private readonly globalShadowModeCount: Counter;
  private readonly quotaReported: Counter<'domain' | 'descriptor' | 'outcome'>;
  private readonly quotaStoreErrors: Counter;
  private readonly reservationCalls: Counter<'domain' | 'descriptor' | 'outcome'>;
  private readonly reservationsHeld: Gauge<'domain' | 'descriptor'>;
  /** Rule label sets of the reservation series (bounded by maxSeries like the rule counters). */
  private readonly reservationSeries = new Set<string>();
  /** Rule label sets of the reported-requests counter (bounded by maxSeries like the rule counters). */
  private readonly quotaSeries = new Set<string>();
  /** The quota service, read at each scrape by the RLQS gauges; undefined until attached. */
  private quota: QuotaSource | undefined;
  /** The leases, read at each scrape by the lease gauges; undefined until attached (a store without leases). */
  private leases: LeaseSource | undefined;
  private regions: RegionSource | undefined;
  private readonly regionObserver: RegionObserver;
  private readonly leaseSettled: Counter<'domain' | 'descriptor'>;
  private readonly leaseRefused: Counter<'reason'>;
  private readonly leaseStoreErrors: Counter;
  /** Rule label sets of the settled-hits counter (bounded by maxSeries like the rule counters). */
  private readonly leaseSeries = new Set<string>();
  private readonly storeErrorsByKind: Counter<'kind'>;
  /** The runtime overrides the override gauge reads at each scrape; undefined until attached. */
  private overrides: OverrideSource | undefined;
  private readonly overrideChanges: Counter<'domain' | 'action'>;
  /** Domains of the override change counter (bounded by maxSeries like the rule counters). */
  private readonly overrideDomains = new Set<string>();
  private readonly storeFallbacks: Counter<'policy'>;
  // Children by label value: the label sets are small and fixed, the lookups repeat.
  private readonly storeErrorChildren = new Map<string, Inc>();
  private readonly storeFallbackChildren = new Map<string, Inc>();

  private storeHealthy: () => boolean = () => true;
  private readonly series = new Map<string, Map<string, Series>>();
  private readonly overflow = new Map<string, Series>();
  private seriesCount = 0;
  private seriesBytesHeld = 0;

  constructor(options: MetricsOptions = {}) {
    this.maxSeries = options.maxSeries ?? DEFAULT_MAX_SERIES;
    this.maxSeriesBytes = options.maxSeriesBytes ?? DEFAULT_MAX_SERIES_BYTES;
    this.maxLabelLength = Math.max(options.maxLabelLength ?? DEFAULT_MAX_LABEL_LENGTH, 2 * LABEL_HASH_LENGTH);
    this.statsd = options.statsd;
    this.storeErrorType = `${options.storeName ?? 'store'}_error`;
    const registers = [this.registry];
    const rule = (what: string, help: string) =>
      new TalliedCounter<RuleLabel>({ name: `ratelimit_service_rate_limit_${what}`, help, labelNames: RULE_LABELS, registers });

    this.totalHits = rule('total_hits', 'Hits checked against a rule.');
    this.overLimit = rule('over_limit', 'Hits denied by a rule.');
    this.nearLimit = rule('near_limit', 'Allowed hits past NEAR_LIMIT_RATIO of a rule.');
    this.withinLimit = rule('within_limit', 'Hits allowed by a rule.');
    this.shadowMode = rule('shadow_mode', 'Hits a shadow-mode rule would have denied.');
    this.overLimitWithLocalCache = rule('over_limit_with_local_cache', 'Hits denied from the local denial cache.');

    const callErrors = new TalliedCounter({
      name: 'ratelimit_service_should_rate_limit_error',
      help: 'Failed ShouldRateLimit calls by kind (store: <store>_error; other: service_error).',
      labelNames: ['err_type'],
      registers,
    });
    this.storeErrors = callErrors.tally({ err_type: this.storeErrorType });
    this.serviceErrors = callErrors.tally({ err_type: 'service_error' });

    this.latency = new TalliedHistogram({
      name: 'ratelimit_service_response_time_seconds',
      help: 'ShouldRateLimit latency, from request decoded to response ready.',
      labelNames: ['grpc_method'],
      buckets: LATENCY_BUCKETS_SECONDS,
      labelSet: { grpc_method: METHOD },
      registers,
    });
    this.requests = new TalliedCounter({
      name: 'ratelimit_service_total_requests',
      help: 'ShouldRateLimit calls answered (any outcome).',
      labelNames: ['grpc_method'],
      registers,
    }).tally({ grpc_method: METHOD });
    // What a load test's client cannot tell apart (both are gRPC OK): answers by overall_code.
    const answers = new TalliedCounter({
      name: 'ratelimit_service_responses_total',
      help: 'ShouldRateLimit answers by overall_code (OK includes what SHADOW_MODE let through).',
      labelNames: ['overall_code'],
      registers,
    });
    this.answeredOk = answers.tally({ overall_code: 'OK' });
    this.answeredOverLimit = answers.tally({ overall_code: 'OVER_LIMIT' });

    this.configLoadSuccess = new Counter({ name: 'ratelimit_service_config_load_success', help: 'Config loads that succeeded.', registers });
    this.configLoadError = new Counter({
      name: 'ratelimit_service_config_load_error',
      help: 'Config loads that failed (the previous config stays).',
      registers,
    });
    this.localCacheHits = new TalliedCounter({
      name: 'ratelimit_service_local_cache_hits',
      help: 'Requests denied from the local denial cache.',
      registers,
    }).tally({});
    this.globalShadowModeCount = new Counter({
      name: 'ratelimit_service_global_shadow_mode',
      help: 'Requests answered OK only because SHADOW_MODE is on.',
      registers,
    });

    // Read when scraped; under WORKERS the lowest of the workers' (one that cannot reach the store is enough).
    const storeHealthy = (): boolean => this.storeHealthy();
    new Gauge({
      name: 'ratelimit_service_store_healthy',
      help: '1 while the store answers (Redis reachable and its health probe passing), else 0.',
      registers,
      aggregator: 'min',
      collect(this: Gauge) {
        this.set(storeHealthy() ? 1 : 0);
      },
    });

    this.storeErrorsByKind = new Counter({
      name: 'ratelimit_service_store_errors_total',
      help: 'Failed store calls by kind (timeout, disconnected, error, refund), whether or not a failure policy answered them.',
      labelNames: ['kind'],
      registers,
    });
    this.storeFallbacks = new Counter({
      name: 'ratelimit_service_store_fallbacks_total',
      help: 'Calls answered by STORE_FAILURE_POLICY (allow, deny, local) instead of the store.',
      labelNames: ['policy'],
      registers,
    });

    this.quotaReported = new Counter({
      name: 'ratelimit_service_rlqs_reported_requests_total',
      help: 'Requests quota proxies (RLQS) reported, by rule and outcome (allowed, denied).',
      labelNames: ['domain', 'descriptor', 'outcome'],
      registers,
    });
    this.quotaStoreErrors = new Counter({
      name: 'ratelimit_service_rlqs_store_errors_total',
      help: 'Quota store calls (charge, demand exchange) that failed; the last shares stayed in force.',
      registers,
    });
    this.reservationCalls = new Counter({
      name: 'ratelimit_service_reservations_total',
      help: 'Reservation calls by rule and outcome (held, denied, full, reused, committed, unknown, released, lapsed).',
      labelNames: ['domain', 'descriptor', 'outcome'],
      registers,
    });
    this.reservationsHeld = new Gauge({
      name: 'ratelimit_service_reservations_held',
      help: 'Reservations held on the descriptor of a rule that this process decided last (all of them for a rule of one descriptor).',
      labelNames: ['domain', 'descriptor'],
      registers,
    });
    const quota = (): QuotaSource | undefined => this.quota;
    scrapedGauge(registers, 'ratelimit_service_rlqs_streams', 'Open quota streams (RLQS) on this process.', () => quota()?.streamCount ?? 0);
    scrapedGauge(
      registers,
      'ratelimit_service_rlqs_memory_bytes',
      'Estimated bytes the quota streams (RLQS) of this process hold (RLQS_MAX_MEMORY_BYTES bounds it).',
      () => quota()?.bytes ?? 0,
    );
    // One pass over the budgets per scrape (O(budgets), whatever the streams), shared by the four gauges.
    perRuleGauges<QuotaRuleTotals>(
      registers,
      'ratelimit_service_rlqs_',
      () => quota()?.ruleTotals() ?? [],
      (r) => r.statKey,
      [
        ['proxies', 'Quota proxies sharing a rule, on every replica.', (r) => r.proxies],
        ['demand', 'Requests per second the proxies of a rule ask for (known demands, every replica).', (r) => r.demand],
        ['assigned', "Requests per second assigned to this process's proxies of a rule.", (r) => r.assigned],
        ['overshoot', 'Requests per window the proxies of a rule admitted above its limit (every replica).', (r) => r.overshoot],
      ],
    );

    this.leaseSettled = new Counter({
      name: 'ratelimit_service_lease_settled_hits_total',
      help: 'Hits decided in process on leased limits (lease: true) and written to the shared counter, by rule.',
      labelNames: RULE_LABELS,
      registers,
    });
    this.leaseRefused = new Counter({
      name: 'ratelimit_service_lease_refused_total',
      help: 'Leased counters of calls decided by the store because they could not hold a part, by reason: keys, memory, traffic (LEASE_MAX_KEYS, LEASE_MAX_BYTES, LEASE_MAX_SYNC_BYTES_PER_SECOND), replicas (its ledger or demand exchange holds LEASE_MAX_REPLICAS others).',
      labelNames: ['reason'],
      registers,
    });
    this.leaseStoreErrors = new Counter({
      name: 'ratelimit_service_lease_store_errors_total',
      help: 'Lease settlements and demand exchanges that failed; the part stayed in force until LEASE_TTL and the hits pending.',
      registers,
    });
    const leases = (): LeaseSource | undefined => this.leases;
    scrapedGauge(registers, 'ratelimit_service_leases', 'Leased counters this process holds a part of.', () => leases()?.size ?? 0);
    scrapedGauge(
      registers,
      'ratelimit_service_lease_memory_bytes',
      'Estimated bytes the leases of this process hold (LEASE_MAX_BYTES bounds it).',
      () => leases()?.bytes ?? 0,
    );
    scrapedGauge(
      registers,
      'ratelimit_service_lease_sync_bytes_per_second',
      'Estimated bytes per second the lease syncs of this process send to Redis and read back (LEASE_MAX_SYNC_BYTES_PER_SECOND bounds new leases).',
      () => leases()?.syncBytes ?? 0,
    );
    const maxSeries = this.maxSeries;
    perRuleGauges<LeaseRuleTotals>(
      registers,
      'ratelimit_service_lease_',
      () => leaseRuleTotals(leases(), maxSeries),
      (r) => r.descriptor,
      [
        ['share', "Hits per second of a leased rule's limits that this process may admit (its parts, summed over the rule's counters).", (r) => r.share],
        ['demand', 'Hits per second asked of a leased rule on this process (admitted or not, measured at the last syncs).', (r) => r.demand],
      ],
    );

    // Global limits (`scope: global`): per rule and this process's region; registered whether or not REGION is set.
    const regionLabels = [...RULE_LABELS, 'region'] as const;
    const regionSettled = new Counter({
      name: 'ratelimit_service_region_settled_hits_total',
      help: 'Hits of global limits (scope: global) admitted by this process and settled to the global counter, by rule and region.',
      labelNames: regionLabels,
      registers,
    });
    const regionFailures = new Counter({
      name: 'ratelimit_service_region_sync_failures_total',
      help: 'Syncs of global limits with the global store (or the regional check) that failed, by rule and region; the part holds until REGION_TTL.',
      labelNames: regionLabels,
      registers,
    });
    const regions = (): RegionSource | undefined => this.regions;
    perRuleGauges<RegionRuleTotals>(
      registers,
      'ratelimit_service_region_',
      () => regionRuleTotals(regions(), maxSeries),
      (r) => r.descriptor,
      [
        ['part', "Hits per window of a global rule's limits this region may admit now (its parts, summed over the rule's counters).", (r) => r.part],
        ['demand', 'Hits per second asked of a global rule in this region (every live replica of it, at the last syncs).', (r) => r.demand],
        ['sync_age_seconds', "Seconds since the oldest of a global rule's counters last synced with the global store.", (r) => r.syncAge],
        ['partitioned', "1 while one of a global rule's counters runs on GLOBAL_FALLBACK: no sync went through for REGION_TTL.", (r) => r.partitioned],
      ],
      () => ({ region: regions()?.region ?? '' }),
    );
    const regionSeries = new Set<string>();
    const regionLabelsOf = (domain: string, statKey: string): { domain: string; descriptor: string; region: string } => {
      const key = `${domain}\u0000${statKey}`;
      let descriptor = statKey;
      if (!regionSeries.has(key)) {
        if (regionSeries.size >= maxSeries) descriptor = OVERFLOW_LABEL;
        else regionSeries.add(key);
      }
      return { domain, descriptor, region: regions()?.region ?? '' };
    };
    this.regionObserver = {
      onSettled: (domain, statKey, hits) => regionSettled.inc(regionLabelsOf(domain, statKey), hits),
      onSyncError: (domain, statKey) => regionFailures.inc(regionLabelsOf(domain, statKey)),
    };

    const overrides = (): OverrideSource | undefined => this.overrides;
    new Gauge({
      name: 'ratelimit_service_overrides',
      help: 'Runtime overrides in force, by domain (every worker holds them all: under WORKERS the highest of theirs).',
      labelNames: ['domain'],
      registers,
      aggregator: 'max',
      collect() {
        this.reset();
        let n = 0;
        let overflow = 0;
        for (const [domain, count] of overrides()?.countsByDomain() ?? []) {
          if (n++ < maxSeries) this.set({ domain }, count);
          else overflow += count;
        }
        if (overflow > 0) this.set({ domain: OVERFLOW_LABEL }, overflow);
      },
    });
    this.overrideChanges = new Counter({
      name: 'ratelimit_service_override_changes_total',
      help: 'Runtime overrides changed by this process, by domain and action (create, update, delete, expire).',
      labelNames: ['domain', 'action'],
      registers,
    });

    const drops = options.statsdDrops;
    if (drops !== undefined) {
      const dropCounter = (name: string, help: string, value: (d: StatsdDrops) => number): void => {
        new Counter({
          name,
          help,
          registers,
          collect() {
            this.reset();
            this.inc(value(drops()));
          },
        });
      };
      dropCounter(
        'ratelimit_service_statsd_dropped_lines_total',
        'statsd lines dropped because the agent was not taking them (STATSD_MAX_QUEUED_BYTES).',
        (d) => d.lines,
      );
      dropCounter('ratelimit_service_statsd_dropped_bytes_total', 'Bytes of those lines, and bytes a closed statsd connection still held.', (d) => d.bytes);
    }

    if (options.defaultMetrics ?? true) collectDefaultMetrics({ register: this.registry });
  }

  /** Counts one matched counter of one request (the limiter's observer). Cheap: two map lookups. */
  onDescriptor(e: DescriptorEvent): void {
    const s = this.seriesFor(e.domain, e.statKey);
    if (e.hits > 0) s.totalHits.inc(e.hits);
    if (e.overLimit > 0) s.overLimit.inc(e.overLimit);
    if (e.nearLimit > 0) s.nearLimit.inc(e.nearLimit);
    if (e.withinLimit > 0) s.withinLimit.inc(e.withinLimit);
    if (e.shadowMode > 0) s.shadowMode.inc(e.shadowMode);
    const cached = e.overLimitWithLocalCache;
    if (cached > 0) s.overLimitWithLocalCache.inc(cached);
    const stat = s.stat;
    if (stat !== undefined) {
      const sd = this.statsd!;
      if (e.hits > 0) sd.increment(stat.totalHits, e.hits);
      if (e.overLimit > 0) sd.increment(stat.overLimit, e.overLimit);
      if (e.nearLimit > 0) sd.increment(stat.nearLimit, e.nearLimit);
      if (e.withinLimit > 0) sd.increment(stat.withinLimit, e.withinLimit);
      if (e.shadowMode > 0) sd.increment(stat.shadowMode, e.shadowMode);
      if (cached > 0) sd.increment(stat.overLimitWithLocalCache, cached);
    }
  }

  /** One answered ShouldRateLimit call (any outcome), with its latency in milliseconds. */
  recordCall(durationMs: number): void {
    this.latency.record(durationMs / 1000);
    this.requests.inc(1);
    if (this.statsd !== undefined) {
      this.statsd.increment(STATSD_NAMES.totalRequests, 1);
      this.statsd.timing(STATSD_NAMES.responseTime, durationMs);
    }
  }

  /** One ShouldRateLimit answer, by its overall code (recorded beside recordCall). */
  recordAnswer(overLimit: boolean): void {
    (overLimit ? this.answeredOverLimit : this.answeredOk).inc(1);
  }

  /** One failed ShouldRateLimit call. */
  recordError(kind: CallErrorKind): void {
    const type = kind === 'store' ? this.storeErrorType : 'service_error';
    (kind === 'store' ? this.storeErrors : this.serviceErrors).inc(1);
    this.statsd?.increment(STATSD_NAMES.callError + type, 1);
  }

  /** One config load (initial or reload). */
  recordConfigLoad(ok: boolean): void {
    (ok ? this.configLoadSuccess : this.configLoadError).inc(1);
    this.statsd?.increment(ok ? STATSD_NAMES.configLoadSuccess : STATSD_NAMES.configLoadError, 1);
  }

  /** One request denied from the local denial cache. */
  recordLocalCacheHit(): void {
    this.localCacheHits.inc(1);
    this.statsd?.increment(STATSD_NAMES.localCacheHits, 1);
  }

  /** One failed store call of the given kind (the store's own view; a failure policy may still have answered). */
  recordStoreError(kind: string): void {
    labelled(this.storeErrorChildren, kind, () => this.storeErrorsByKind.labels({ kind })).inc(1);
    this.statsd?.increment(STATSD_NAMES.storeError + statsdSafe(kind), 1);
  }

  /** One call answered by the store failure policy instead of the store. */
  recordStoreFallback(policy: string): void {
    labelled(this.storeFallbackChildren, policy, () => this.storeFallbacks.labels({ policy })).inc(1);
    this.statsd?.increment(STATSD_NAMES.storeFallback + statsdSafe(policy), 1);
  }

  /** The store's event hooks (createStore's third argument), bound to these metrics; nothing is recorded while `muted()`. */
  storeHooks(muted: () => boolean = () => false): { onStoreError: (kind: string) => void; onCacheHit: () => void; onFallback: (policy: string) => void } {
    return {
      onStoreError: (kind) => {
        if (!muted()) this.recordStoreError(kind);
      },
      onCacheHit: () => {
        if (!muted()) this.recordLocalCacheHit();
      },
      onFallback: (policy) => {
        if (!muted()) this.recordStoreFallback(policy);
      },
    };
  }

  /** The leases the lease gauges read at each scrape. */
  attachLeases(leases: LeaseSource): void {
    this.leases = leases;
  }

  /** The region parts the region gauges read at each scrape (`scope: global` limits); returns their observer. */
  attachRegions(regions: RegionSource): RegionObserver {
    this.regions = regions;
    return this.regionObserver;
  }

  /** The leases' observer: settled hits per rule, refusals and failed store calls. */
  readonly leaseObserver: LeaseObserver = {
    onSettled: (domain, statKey, hits) => {
      const key = `${domain}\u0000${statKey}`;
      let descriptor = statKey;
      if (!this.leaseSeries.has(key)) {
        if (this.leaseSeries.size >= this.maxSeries) descriptor = OVERFLOW_LABEL;
        else this.leaseSeries.add(key);
      }
      this.leaseSettled.inc({ domain, descriptor }, hits);
    },
    onLeaseRefused: (reason) => this.leaseRefused.inc({ reason }),
    onStoreError: () => this.leaseStoreErrors.inc(),
  };

  /** The runtime overrides the override gauge reads at each scrape. */
  attachOverrides(overrides: OverrideSource): void {
    this.overrides = overrides;
  }

  /** One change of a runtime override made by this process (through its API, or an expiry it removed from the store). */
  recordOverrideChange(domain: string, action: string): void {
    let label = domain;
    if (!this.overrideDomains.has(domain)) {
      if (this.overrideDomains.size >= this.maxSeries) label = OVERFLOW_LABEL;
      else this.overrideDomains.add(domain);
    }
    this.overrideChanges.inc({ domain: label, action });
    this.statsd?.increment(`${STATSD_NAMES.overrideChange}${statsdSafe(label)}.${statsdSafe(action)}`, 1);
  }

  /** The quota service whose streams and budgets the RLQS gauges read at each scrape. */
  attachQuota(quota: QuotaSource): void {
    this.quota = quota;
  }

  /** The quota service's observer: reported usage per rule, and failed store calls. */
  readonly quotaObserver: RlqsObserver = {
    onReport: (domain, statKey, allowed, denied) => {
      const key = `${domain}\u0000${statKey}`;
      let descriptor = statKey;
      if (!this.quotaSeries.has(key)) {
        if (this.quotaSeries.size >= this.maxSeries) descriptor = OVERFLOW_LABEL;
        else this.quotaSeries.add(key);
      }
      if (allowed > 0) this.quotaReported.inc({ domain, descriptor, outcome: 'allowed' }, allowed);
      if (denied > 0) this.quotaReported.inc({ domain, descriptor, outcome: 'denied' }, denied);
    },
    onStoreError: () => this.quotaStoreErrors.inc(),
  };

  /** One request answered by a replay of local denials (src/limiter/replay.ts): a local cache hit like any other. */
  onReplay(): void {
    this.recordLocalCacheHit();
  }

  /** One reservation call (limiter observer): its outcome, the holds it found lapsed, what its descriptor holds now. */
  onReservation(e: ReservationEvent): void {
    const key = `${e.domain}\u0000${e.rule.statKey}`;
    let descriptor = e.rule.statKey;
    if (!this.reservationSeries.has(key)) {
      if (this.reservationSeries.size >= this.maxSeries) descriptor = OVERFLOW_LABEL;
      else this.reservationSeries.add(key);
    }
    const labels = { domain: e.domain, descriptor };
    this.reservationCalls.inc({ ...labels, outcome: e.outcome });
    if (e.lapsed > 0) this.reservationCalls.inc({ ...labels, outcome: 'lapsed' }, e.lapsed);
    if (descriptor !== OVERFLOW_LABEL) this.reservationsHeld.set(labels, e.held);
  }

  /** Where ratelimit_service_store_healthy is read from (the store's isHealthy); healthy until set. */
  watchStore(isHealthy: () => boolean): void {
    this.storeHealthy = isHealthy;
  }

  /** One request that was OVER_LIMIT but answered OK because of the global SHADOW_MODE (limiter observer). */
  onGlobalShadowMode(_domain?: string): void {
    this.globalShadowModeCount.inc(1);
    this.statsd?.increment(STATSD_NAMES.globalShadowMode, 1);
  }

  /** Distinct (domain, descriptor) label sets currently kept (overflow excluded). */
  get seriesSize(): number {
    return this.seriesCount;
  }

  /** Estimated bytes of the series kept (overflow excluded). */
  get seriesBytes(): number {
    return this.seriesBytesHeld;
  }

  /** The Prometheus text exposition. */
  text(): Promise<string> {
    return this.registry.metrics();
  }

  /** Content-Type of text(). */
  get contentType(): string {
    return this.registry.contentType;
  }

  /** Flushes and closes the statsd client, if any. Never rejects. */
  close(): Promise<void> {
    const sd = this.statsd;
    if (sd === undefined) return Promise.resolve();
    return new Promise((resolve) => sd.close(() => resolve()));
  }

  private seriesFor(domain: string, statKey: string): Series {
    // Both are bounded by now: the domain is a configured one, the label cut to maxLabelLength.
    const label = statKey.length > this.maxLabelLength ? cutLabel(statKey, this.maxLabelLength) : statKey;
    let byKey = this.series.get(domain);
    if (byKey === undefined) {
      if (this.seriesCount >= this.maxSeries) return this.overflowFor(OVERFLOW_LABEL);
      byKey = new Map();
      this.series.set(domain, byKey);
    }
    let s = byKey.get(label);
    if (s === undefined) {
      const bytes = SERIES_OVERHEAD_BYTES + SERIES_LABEL_COPIES * (domain.length + label.length);
      if (this.seriesCount >= this.maxSeries || this.seriesBytesHeld + bytes > this.maxSeriesBytes) return this.overflowFor(domain);
      s = this.makeSeries(domain, label);
      byKey.set(label, s);
      this.seriesCount++;
      this.seriesBytesHeld += bytes;
    }
    return s;
  }

  // Overflow series exist once per domain already kept (plus one for unknown domains), so they stay bounded too.
  private overflowFor(domain: string): Series {
    let s = this.overflow.get(domain);
    if (s === undefined) {
      s = this.makeSeries(domain, OVERFLOW_LABEL);
      this.overflow.set(domain, s);
    }
    return s;
  }

  private makeSeries(domain: string, descriptor: string): Series {
    const labels = { domain, descriptor };
    let stat: Series['stat'];
    if (this.statsd !== undefined) {
      const base = `${STATSD_NAMES.rule}${statsdSafe(domain)}.${statsdSafe(descriptor)}.`;
      stat = {
        totalHits: base + 'total_hits',
        overLimit: base + 'over_limit',
        nearLimit: base + 'near_limit',
        withinLimit: base + 'within_limit',
        shadowMode: base + 'shadow_mode',
        overLimitWithLocalCache: base + 'over_limit_with_local_cache',
      };
    }
    return {
      totalHits: this.totalHits.tally(labels),
      overLimit: this.overLimit.tally(labels),
      nearLimit: this.nearLimit.tally(labels),
      withinLimit: this.withinLimit.tally(labels),
      shadowMode: this.shadowMode.tally(labels),
      overLimitWithLocalCache: this.overLimitWithLocalCache.tally(labels),
      stat,
    };
  }
}

/** The service's metrics; `statsd` receives the statsd-named counters and timings (./sinks.ts). */
export function createMetrics(
  settings: Pick<Settings, 'backendType'> & Partial<Pick<Settings, 'metricLimits'>>,
  options: Pick<MetricsOptions, 'statsd' | 'statsdDrops' | 'defaultMetrics'> = {},
): Metrics {
  return new Metrics({ storeName: settings.backendType, ...settings.metricLimits, ...options });
}

/**
 * `label` cut to `max` characters, the last of them a hash of the whole: labels that share a long
 * beginning stay apart, and none is longer than `max` (nor splits a character's surrogate pair).
 */
export function cutLabel(label: string, max: number): string {
  let keep = max - LABEL_HASH_LENGTH - 1;
  const last = label.charCodeAt(keep - 1);
  if (last >= 0xd800 && last <= 0xdbff) keep--;
  const hash = createHash('sha256').update(label).digest('hex').slice(0, LABEL_HASH_LENGTH);
  return `${label.slice(0, keep)}~${hash}`;
}

/**
 * Wraps a decider so that every call is timed and every failure counted, whichever edge (gRPC,
 * HTTP /json) made it, under the error catalogue's metric: store failures as `<store>_error`,
 * anything else (bad requests and a missing config included) as `service_error`.
 */
export function instrumentDecider(decider: RateLimitDecider, metrics: Metrics): RateLimitDecider {
  const failed = (started: number, err: unknown): Promise<never> => {
    metrics.recordCall(performance.now() - started);
    metrics.recordError(classify(err).metric);
    return Promise.reject(err);
  };
  return {
    shouldRateLimit(request: RateLimitRequest, onLocalDenial?: LocalDenialListener): Promise<RateLimitResponse> {
      const started = performance.now();
      let pending: Promise<RateLimitResponse>;
      try {
        pending = decider.shouldRateLimit(request, onLocalDenial);
      } catch (err) {
        return failed(started, err);
      }
      return pending.then(
        (response) => {
          metrics.recordCall(performance.now() - started);
          metrics.recordAnswer(response.overallCode === 'OVER_LIMIT');
          return response;
        },
        (err: unknown) => failed(started, err),
      );
    },
  };
}

/** Wraps the replays so that every call they answer is timed as a call like any other. */
export function instrumentReplays(replays: ServiceReplays, metrics: Metrics): ServiceReplays {
  return {
    answer(key: string): Buffer | undefined {
      const started = performance.now();
      const answer = replays.answer(key);
      if (answer !== undefined) {
        metrics.recordCall(performance.now() - started);
        // A replay repeats a denial.
        metrics.recordAnswer(true);
      }
      return answer;
    },
    remembering: (key) => replays.remembering(key),
  };
}

/** The labelled child of a counter, looked up once per label value (the set of values is small and fixed). */
function labelled(children: Map<string, Inc>, value: string, create: () => Inc): Inc {
  let child = children.get(value);
  if (child === undefined) {
    child = create();
    children.set(value, child);
  }
  return child;
}

/** The region parts summed per rule (at most maxSeries rules; the rest under OVERFLOW_LABEL). */
function regionRuleTotals(source: RegionSource | undefined, maxSeries: number): RegionRuleTotals[] {
  if (source === undefined) return [];
  const byRule = new Map<string, RegionRuleTotals>();
  for (const p of source.view(Number.MAX_SAFE_INTEGER).parts) {
    let descriptor = p.rule;
    let id = `${p.domain}\u0000${descriptor}`;
    if (!byRule.has(id) && byRule.size >= maxSeries) {
      descriptor = OVERFLOW_LABEL;
      id = `${p.domain}\u0000${OVERFLOW_LABEL}`;
    }
    let t = byRule.get(id);
    if (t === undefined) {
      t = { domain: p.domain, descriptor, part: 0, demand: 0, syncAge: 0, partitioned: 0 };
      byRule.set(id, t);
    }
    t.part += p.part;
    if (Number.isFinite(p.demand)) t.demand += p.demand;
    if (Number.isFinite(p.syncAgeSeconds)) t.syncAge = Math.max(t.syncAge, p.syncAgeSeconds);
    if (p.cutOff) t.partitioned = 1;
  }
  return [...byRule.values()];
}

/** The leases' parts and demand summed per rule (at most maxSeries rules; the rest under OVERFLOW_LABEL). */
function leaseRuleTotals(source: LeaseSource | undefined, maxSeries: number): LeaseRuleTotals[] {
  if (source === undefined) return [];
  const byRule = new Map<string, LeaseRuleTotals>();
  for (const l of source.view(Number.MAX_SAFE_INTEGER).leases) {
    const domain = l.domain;
    let descriptor = l.rule;
    let id = `${domain}\u0000${descriptor}`;
    if (!byRule.has(id) && byRule.size >= maxSeries) {
      descriptor = OVERFLOW_LABEL;
      id = `${domain}\u0000${OVERFLOW_LABEL}`;
    }
    let t = byRule.get(id);
    if (t === undefined) {
      t = { domain, descriptor, share: 0, demand: 0 };
      byRule.set(id, t);
    }
    t.share += l.share;
    if (Number.isFinite(l.demand)) t.demand += l.demand;
  }
  return [...byRule.values()];
}

/** A gauge set at each scrape to `value()`. */
function scrapedGauge(registers: Registry[], name: string, help: string, value: () => number): void {
  new Gauge({
    name,
    help,
    registers,
    collect() {
      this.set(value());
    },
  });
}

/**
 * Gauges per rule (`<prefix><name>{domain,descriptor}`), all read from one pass over `rows()` at a
 * scrape: the rows are kept 100 ms, so the gauges of one scrape share them.
 */
function perRuleGauges<T extends { readonly domain: string }>(
  registers: Registry[],
  prefix: string,
  rows: () => readonly T[],
  descriptorOf: (row: T) => string,
  gauges: readonly (readonly [name: string, help: string, value: (row: T) => number])[],
  extraLabels?: () => Readonly<Record<string, string>>,
): void {
  const extra = extraLabels?.() ?? {};
  let kept: { readonly at: number; readonly rows: readonly T[] } | undefined;
  const current = (): readonly T[] => {
    const now = performance.now();
    if (kept === undefined || now - kept.at > 100) kept = { at: now, rows: rows() };
    return kept.rows;
  };
  for (const [name, help, value] of gauges) {
    new Gauge({
      name: `${prefix}${name}`,
      help,
      labelNames: [...RULE_LABELS, ...Object.keys(extra)],
      registers,
      collect() {
        this.reset();
        const labels = extraLabels?.() ?? {};
        for (const r of current()) this.set({ ...labels, domain: r.domain, descriptor: descriptorOf(r) }, value(r));
      },
    });
  }
}
