import { overrideLimitParser } from '../config/override-limit';
import type { Logger } from '../log';
import type { Metrics } from '../metrics/metrics';
import { OverrideAdmin, OverrideReader, type OverrideChange } from '../limiter/override-admin';
import { OverrideSync } from '../limiter/override-sync';
import { OverrideTable } from '../limiter/overrides';
import type { OverridesStore } from '../limiter/overrides-store';
import type { RateLimitConfig } from '../limiter/rules';
import type { Clock } from '../limiter/types';
import type { Settings } from '../settings/settings';

/**
 * Runtime overrides in this process: the table the limiter reads, kept up to the store by a tick
 * twice per OVERRIDES_SYNC_INTERVAL (so that a change reaches this process within the interval even
 * when a poll is slow to answer), the API's operations on them, and one audit line and one metric
 * per change.
 */

export interface RuntimeOverrides {
  readonly table: OverrideTable;
  readonly sync: OverrideSync;
  readonly admin: OverrideAdmin;
  /** The first read of the store, within `waitMs`; false when it did not finish (the ticks go on trying). */
  load(waitMs: number): Promise<boolean>;
  /** Starts the ticks. */
  start(): void;
  stop(): void;
}

/** The wall clock: `expires_at` and `updated_at` are times of day. */
const WALL_CLOCK: Clock = { nowMs: () => Date.now() };

export function runtimeOverrides(options: {
  readonly settings: Pick<Settings, 'overrides' | 'defaultAlgorithm' | 'requestLimits' | 'regions'>;
  readonly store: OverridesStore;
  readonly config: () => RateLimitConfig | undefined;
  readonly logger: Logger;
  readonly metrics: Pick<Metrics, 'recordOverrideChange' | 'attachOverrides'>;
  /** Called whenever the table changed: decisions remembered under the old overrides are dropped. */
  readonly onApplied: () => void;
  readonly clock?: Clock;
}): RuntimeOverrides {
  const { settings, logger, metrics } = options;
  const clock = options.clock ?? WALL_CLOCK;
  const table = new OverrideTable();
  metrics.attachOverrides(table);
  const reader = new OverrideReader(overrideLimitParser(settings.defaultAlgorithm, settings.regions?.syncIntervalMs));
  const parseLimit = (rateLimit: unknown) => reader.limitOf(rateLimit);
  // The audit trail: at info whatever LOG_LEVEL says above it (the default, warn, would leave it out), silent stays silent.
  const audit = logger.level === 'silent' || logger.isLevelEnabled('info') ? logger : logger.child({}, { level: 'info' });
  const observer = {
    onChange(change: OverrideChange): void {
      metrics.recordOverrideChange(change.domain, change.action);
      audit.info(
        {
          action: change.action,
          domain: change.domain,
          descriptor: change.descriptor,
          actor: change.actor,
          version: change.version,
          old: change.before ?? null,
          new: change.after ?? null,
        },
        'override changed',
      );
    },
  };
  let admin: OverrideAdmin | undefined;
  const sync = new OverrideSync({
    store: options.store,
    table,
    read: (stored) => reader.read(stored),
    clock,
    onApplied: options.onApplied,
    onUnreadable: (stored, err) =>
      logger.warn({ id: stored.id, version: stored.version, err: err.message }, 'cannot read a stored override; it does not apply here'),
    onExpired: (removed) => admin?.expired(removed),
  });
  admin = new OverrideAdmin({
    store: options.store,
    table,
    sync,
    config: options.config,
    parseLimit,
    clock,
    maxCount: settings.overrides.maxCount,
    maxBytes: settings.overrides.maxBytes,
    requestLimits: settings.requestLimits,
    observer,
    onSyncError: (err) => logger.warn({ err: errorText(err) }, 'override written; this process follows it at its next sync'),
  });
  let timer: NodeJS.Timeout | undefined;
  let failing = false;
  const tick = (): void => {
    sync.tick().then(
      () => {
        if (failing) logger.info('overrides follow the store again');
        failing = false;
      },
      (err: unknown) => {
        if (!failing) logger.warn({ err: errorText(err) }, 'cannot read the overrides from the store; the ones in force stay until it answers');
        failing = true;
      },
    );
  };
  return {
    table,
    sync,
    admin,
    load: (waitMs) =>
      new Promise<boolean>((resolve) => {
        const timeout = setTimeout(() => resolve(false), waitMs);
        sync.sync().then(
          () => {
            clearTimeout(timeout);
            resolve(true);
          },
          (err: unknown) => {
            clearTimeout(timeout);
            logger.warn({ err: errorText(err) }, 'cannot read the overrides from the store yet; serving without them until it answers');
            failing = true;
            resolve(false);
          },
        );
      }),
    start: () => {
      if (timer !== undefined) return;
      timer = setInterval(tick, settings.overrides.syncIntervalMs / 2);
      timer.unref();
    },
    stop: () => {
      if (timer !== undefined) clearInterval(timer);
      timer = undefined;
    },
  };
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
