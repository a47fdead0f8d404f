import { UNIT_MS, type DescriptorStatus } from './types';

/**
 * Rate-limit response headers built from a request's descriptor statuses.
 *
 * The most constrained descriptor speaks for the request, as in the reference server: the first
 * OVER_LIMIT one when any is denied, else the one with the lowest remaining quota. Descriptors
 * that matched no rule carry no limit and never speak.
 *
 * Classic trio (`LIMIT_RESPONSE_HEADERS_ENABLED`), values as the reference server sends them:
 *   RateLimit-Limit: <L>   RateLimit-Remaining: <remaining>   RateLimit-Reset: <seconds, rounded up>
 * IETF draft pair (`LIMIT_DRAFT_HEADERS_ENABLED`, draft-ietf-httpapi-ratelimit-headers, structured fields):
 *   RateLimit-Policy: "<name>";q=<L>;w=<window seconds>   RateLimit: "<name>";r=<remaining>;t=<seconds>
 */

export interface HeaderValue {
  readonly key: string;
  readonly value: string;
}

/** Which headers to add and their names (LIMIT_RESPONSE_HEADERS_ENABLED, LIMIT_*_HEADER, LIMIT_DRAFT_HEADERS_ENABLED). */
export interface ResponseHeaderOptions {
  /** The classic trio. */
  readonly enabled: boolean;
  readonly limitHeader: string;
  readonly remainingHeader: string;
  readonly resetHeader: string;
  /** The IETF draft pair. */
  readonly draftEnabled: boolean;
}

const NONE: readonly HeaderValue[] = Object.freeze([]);

/** Headers for one response; empty when neither header set is enabled or no descriptor matched a limit. */
export function rateLimitHeaders(statuses: readonly DescriptorStatus[], opts: ResponseHeaderOptions): HeaderValue[] {
  if (!opts.enabled && !opts.draftEnabled) return NONE as HeaderValue[];
  const s = mostConstrained(statuses);
  if (s === undefined || s.currentLimit === undefined) return NONE as HeaderValue[];

  const limit = s.currentLimit.requestsPerUnit;
  const remaining = s.code === 'OVER_LIMIT' ? 0 : s.limitRemaining;
  // Rounded up so that a client waiting that long is never early.
  const reset = s.durationUntilResetMs === undefined ? 0 : Math.ceil(s.durationUntilResetMs / 1000);

  const out: HeaderValue[] = [];
  if (opts.enabled) {
    out.push(
      { key: opts.limitHeader, value: String(limit) },
      { key: opts.remainingHeader, value: String(remaining) },
      { key: opts.resetHeader, value: String(reset) },
    );
  }
  if (opts.draftEnabled) {
    const policy = policyName(s.currentLimit.name);
    const windowMs = s.currentLimit.windowMs ?? UNIT_MS[s.currentLimit.unit];
    const windowSeconds = Math.max(1, Math.ceil(windowMs / 1000));
    out.push({ key: 'RateLimit-Policy', value: `${policy};q=${limit};w=${windowSeconds}` }, { key: 'RateLimit', value: `${policy};r=${remaining};t=${reset}` });
  }
  return out;
}

/** The first OVER_LIMIT status with a limit, else the limited status with the lowest remaining (first on ties). */
export function mostConstrained(statuses: readonly DescriptorStatus[]): DescriptorStatus | undefined {
  let best: DescriptorStatus | undefined;
  for (const s of statuses) {
    if (s.currentLimit === undefined) continue;
    if (s.code === 'OVER_LIMIT') return s;
    if (best === undefined || s.limitRemaining < best.limitRemaining) best = s;
  }
  return best;
}

// sf-string: printable ASCII only, with '"' and '\' escaped; anything else is replaced so the
// field always parses. Unnamed limits share the policy name "default".
const PLAIN = /^[\x20-\x21\x23-\x5b\x5d-\x7e]*$/;

function policyName(name: string | undefined): string {
  if (name === undefined || name === '') return '"default"';
  if (PLAIN.test(name)) return `"${name}"`;
  return `"${name.replace(/[\\"]/g, (c) => '\\' + c).replace(/[^\x20-\x7e]/g, '?')}"`;
}
