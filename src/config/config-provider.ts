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

/** What the service does when a config source applies or rejects a config, whichever source it is. */
export interface ConfigEvents {
  /** A config became current; `detail` (the files read, the xDS resources) goes into the log line. */
  applied(config: RateLimitConfig, detail: Record<string, unknown>): void;
  /** A load failed: the previous config stays current. */
  rejected(err: unknown): void;
}
