import type { ConfigEvents } from '../config/config-provider';
import type { Logger } from '../log';
import type { HealthState } from '../service/health';
import type { Settings } from '../settings/settings';
import { XDS_FORMAT_NOTE } from './rate-limit-config';
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
  /** The service's handler of applied and rejected configs (the same as for files). */
  readonly events: ConfigEvents;
}): Promise<XdsConfigSource> {
  const { settings, logger, health, events } = options;
  const source = new XdsConfigSource({
    settings,
    logger,
    onLoad: (config, resources) => events.applied(config, { resources }),
    onError: (err) => events.rejected(err),
  });
  logger.info(XDS_FORMAT_NOTE);
  source.start();
  if (settings.forceStartWithoutInitialConfig) {
    health.set('config', !settings.healthyWithAtLeastOneConfigLoaded);
  } else {
    logger.info({ server: settings.xds.serverUrl }, 'waiting for the first config from the xDS control plane');
    await source.firstConfig();
  }
  return source;
}
