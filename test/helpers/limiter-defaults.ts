import type { RateLimiterOptions } from '../../src/limiter/rate-limiter';

/** The limiter options the unit tests start from: sliding windows, no shadow mode, denied requests free, near limit at 80%. */
export const LIMITER_DEFAULTS: Pick<RateLimiterOptions, 'shadowMode' | 'countDenied' | 'defaultAlgorithm' | 'nearLimitRatio'> = Object.freeze({
  shadowMode: false,
  countDenied: false,
  defaultAlgorithm: 'sliding_window',
  nearLimitRatio: 0.8,
});
