import type { RateLimitConfig } from '../limiter/rules';

/** Where the config in force comes from: files (./source) or an xDS control plane (src/xds). */
export interface ConfigProvider {
  /** The config in force; undefined until one has been applied. */
  current(): RateLimitConfig | undefined;
  /** Count of configs applied so far; compare to spot a change. */
  readonly generation: number;
  /** Stops following changes; the last config stays current. */
  close(): void;
}
