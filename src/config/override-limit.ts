import { InvalidRequestError } from '../limiter/errors';
import type { OverrideLimit } from '../limiter/overrides';
import type { Algorithm } from '../limiter/types';
import { ConfigError } from './config-error';
import { parseRateLimitValue } from './rule-reader';

/**
 * How a runtime override's `rate_limit` is read (src/limiter/overrides.ts): by the code that reads a
 * config file's, its errors as InvalidRequestError naming the field (`rate_limit.unit: unknown unit
 * "sec"`), which the override API answers with 400. A `scope: global` limit's window is checked
 * against REGION_SYNC_INTERVAL (`regionSyncIntervalMs`, its default when absent) as a file's is.
 */
export function overrideLimitParser(defaultAlgorithm: Algorithm, regionSyncIntervalMs?: number): (rateLimit: unknown) => OverrideLimit {
  return (rateLimit) => {
    try {
      return parseRateLimitValue('override', rateLimit, { defaultAlgorithm, regionSyncIntervalMs });
    } catch (err) {
      if (err instanceof ConfigError) throw new InvalidRequestError(err.path === '' ? err.detail : `${err.path}: ${err.detail}`);
      throw err;
    }
  };
}
