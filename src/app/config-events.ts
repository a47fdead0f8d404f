import type { ConfigEvents } from '../config/config-provider';
import type { Logger } from '../log';
import type { Metrics } from '../metrics/metrics';
import type { HealthState } from '../service/health';
import type { Settings } from '../settings/settings';

/**
 * The one handler for both config sources (files and xDS): cached decisions are dropped (they were made
 * under the old limits), the load is counted, health follows HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED
 * (a config without a domain serves nothing), and the config's warnings are logged. `where` names the
 * source in every log line ({path} or {server}).
 */
export function configEvents(options: {
  readonly settings: Pick<Settings, 'healthyWithAtLeastOneConfigLoaded'>;
  readonly logger: Logger;
  readonly health: HealthState;
  readonly metrics: Pick<Metrics, 'recordConfigLoad'>;
  readonly where: Record<string, unknown>;
  /** Called first on every applied config. */
  readonly onApplied: () => void;
}): ConfigEvents {
  const { settings, logger, health, metrics, where } = options;
  return {
    applied(config, detail) {
      options.onApplied();
      metrics.recordConfigLoad(true);
      health.set('config', !settings.healthyWithAtLeastOneConfigLoaded || config.domains.size > 0);
      logger.info({ ...where, ...detail, domains: [...config.domains.keys()] }, 'config loaded');
      for (const warning of config.warnings) logger.warn(where, `config: ${warning}`);
    },
    rejected(err) {
      metrics.recordConfigLoad(false);
      logger.error({ ...where, err: err instanceof Error ? err.message : String(err) }, 'config load failed; keeping the previous config');
    },
  };
}
