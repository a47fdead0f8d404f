import type { Limit, OutcomeRule } from '../../src/limiter/types';

/** A minute-aligned instant the live-view tests start at. */
export const TOP_T0 = 1_700_000_000_000 - (1_700_000_000_000 % 60_000);

/** 5 per minute on a sliding window: the limit of the live-view tests' rule. */
export const FIVE_PER_MINUTE: Limit = Object.freeze({
  requestsPerUnit: 5,
  unit: 'minute',
  unitMultiplier: 1,
  windowMs: 60_000,
  algorithm: 'sliding_window',
  burst: 5,
  subWindows: 1,
  strict: false,
  unlimited: false,
});

/** The rule the live-view tests' outcomes name. */
export const API_KEY_RULE: OutcomeRule = Object.freeze({ statKey: 'api_key', limit: FIVE_PER_MINUTE, shadowMode: false });
