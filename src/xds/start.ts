import type { Logger } from '../log';
import type { Metrics } from '../metrics';
import type { HealthState } from '../server/health';
import type { Settings } from '../settings';
import { XdsConfigSource } from './xds-config-source';

/**
 * Starts the xDS config source as the service runs it: config loads and rejections counted in the
 * same metrics as file loads, health SERVING from the first applied config on (a control plane that
 * goes away later changes nothing), and the start itself as the reference does it: it waits for the
 * first config, unless FORCE_START_WITHOUT_INITIAL_CONFIG lets the service report healthy at once
 * (calls are answered UNAVAILABLE until a config arrives, and Envoy's failure_mode_deny decides).
 */
export async function startXdsConfig(options: {
  readonly settings: Settings;
  readonly logger: Logger;
  readonly health: HealthState;
  readonly metrics: Pick<Metrics, 'recordConfigLoad'>;
  /** After every applied config (the denial cache must be emptied). */
  readonly onLoad: () => void;
}): Promise<XdsConfigSource> {
  const { settings, logger, health, metrics } = options;
  const source = new XdsConfigSource({
    settings,
    logger,
    onLoad: (config, resources) => {
      options.onLoad();
      metrics.recordConfigLoad(true);
      // HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: a config without a domain serves nothing, so it is not healthy.
      health.set('config', !settings.healthyWithAtLeastOneConfigLoaded || config.domains.size > 0);
      logger.info({ server: settings.xds.serverUrl, resources, domains: [...config.domains.keys()] }, 'config loaded');
      for (const warning of config.warnings) logger.warn({ server: settings.xds.serverUrl }, `config: ${warning}`);
    },
    onError: (err) => {
      metrics.recordConfigLoad(false);
      logger.error({ server: settings.xds.serverUrl, err: err.message }, 'config load failed; keeping the previous config');
    },
  });
  source.start();
  if (settings.forceStartWithoutInitialConfig) {
    health.set('config', !settings.healthyWithAtLeastOneConfigLoaded);
  } else {
    logger.info({ server: settings.xds.serverUrl }, 'waiting for the first config from the xDS control plane');
    await source.firstConfig();
  }
  return source;
}
