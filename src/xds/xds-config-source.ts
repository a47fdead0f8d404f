import type { ConfigError } from '../config/config-error';
import type { ConfigProvider } from '../config/config-provider';
import type { RateLimitConfig } from '../limiter/rules';
import type { Logger } from '../log';
import type { Settings } from '../settings/settings';
import { AdsClient } from './ads-client';
import { configFromResources, RATE_LIMIT_CONFIG_TYPE_URL, resourceNames, type AnyResource } from './rate-limit-config';

/**
 * The config from an xDS control plane (CONFIG_TYPE=GRPC_XDS_SOTW): every response of the ADS
 * stream is validated as files are (./rate-limit-config) and, when valid, replaces the config in
 * force as a whole and is ACKed; an invalid one is NACKed with the error (resource and path) and
 * changes nothing. Loads and failures are reported through the same callbacks as file loads.
 */

export interface XdsConfigSourceOptions {
  readonly settings: Pick<Settings, 'xds' | 'defaultAlgorithm' | 'mergeDomainConfig' | 'regions'>;
  readonly logger: Logger;
  /** A config became current, with the names of the resources it came from. */
  readonly onLoad?: (config: RateLimitConfig, sources: readonly string[]) => void;
  /** A response was rejected (the previous config stays current). */
  readonly onError?: (err: ConfigError | Error) => void;
}

export class XdsConfigSource implements ConfigProvider {
  private config: RateLimitConfig | undefined;
  private applied = 0;
  private readonly client: AdsClient;
  private readonly firstWaiters: ((config: RateLimitConfig) => void)[] = [];

  constructor(private readonly options: XdsConfigSourceOptions) {
    this.client = new AdsClient({
      settings: options.settings.xds,
      typeUrl: RATE_LIMIT_CONFIG_TYPE_URL,
      onResources: this.onResources,
      logger: options.logger,
    });
  }

  get generation(): number {
    return this.applied;
  }

  current(): RateLimitConfig | undefined {
    return this.config;
  }

  /** Connects; configs arrive from then on. */
  start(): void {
    this.client.start();
  }

  /** Resolves with the first config applied (at once when there is one already). */
  firstConfig(): Promise<RateLimitConfig> {
    if (this.config !== undefined) return Promise.resolve(this.config);
    return new Promise((resolve) => this.firstWaiters.push(resolve));
  }

  close(): void {
    this.client.close();
  }

  private readonly onResources = (resources: readonly AnyResource[], version: string): string | undefined => {
    let config: RateLimitConfig;
    try {
      const { defaultAlgorithm, mergeDomainConfig, regions } = this.options.settings;
      config = configFromResources(resources, { defaultAlgorithm, mergeDomains: mergeDomainConfig, regionSyncIntervalMs: regions?.syncIntervalMs });
    } catch (err) {
      const error = err instanceof Error ? err : new Error(String(err));
      this.options.logger.warn({ version }, 'xDS config rejected (NACK)');
      this.options.onError?.(error);
      return error.message;
    }
    this.config = config;
    this.applied++;
    this.options.logger.info({ version, resources: resources.length }, 'xDS config applied (ACK)');
    try {
      this.options.onLoad?.(config, resourceNames(resources));
    } catch (err) {
      this.options.onError?.(err instanceof Error ? err : new Error(String(err)));
    }
    for (const resolve of this.firstWaiters.splice(0)) resolve(config);
    return undefined;
  };
}
