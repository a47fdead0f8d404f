import type * as protobuf from 'protobufjs';
import { InvalidRequestError } from '../limiter/errors';
import type { QuotaAction, QuotaUsage } from '../limiter/quota-budgets';
import type { QuotaStrategy } from '../limiter/quota-share';
import { loadProtoFiles } from './proto';

/**
 * Wire codec of the quota stream (RLQS): RateLimitQuotaUsageReports bytes into plain reports, bucket
 * actions into RateLimitQuotaResponse message bytes (the transport frames them). The messages are per report interval, not per
 * request, so protobufjs does the work (no hand-written codec as for the hot RLS messages).
 */

export const RLQS_PROTO = 'envoy/service/rate_limit_quota/v3/rlqs.proto';
export const RLQS_SERVICE = 'envoy.service.rate_limit_quota.v3.RateLimitQuotaService';
/** The method's HTTP/2 :path. */
export const RLQS_PATH = `/${RLQS_SERVICE}/StreamRateLimitQuotas`;

export interface UsageReport {
  /** Empty when the message leaves it out (the protocol asks for it on the first message only). */
  readonly domain: string;
  readonly usages: readonly QuotaUsage[];
}

interface Types {
  readonly reports: protobuf.Type;
  readonly response: protobuf.Type;
}

let types: Types | undefined;

function rlqsTypes(): Types {
  if (types === undefined) {
    const root = loadProtoFiles([RLQS_PROTO]);
    types = {
      reports: root.lookupType('envoy.service.rate_limit_quota.v3.RateLimitQuotaUsageReports'),
      response: root.lookupType('envoy.service.rate_limit_quota.v3.RateLimitQuotaResponse'),
    };
  }
  return types;
}

interface DecodedUsage {
  bucketId?: { bucket?: Record<string, string> } | null;
  timeElapsed?: { seconds?: number | string | protobuf.Long; nanos?: number } | null;
  numRequestsAllowed?: number | string | protobuf.Long;
  numRequestsDenied?: number | string | protobuf.Long;
}

/** A uint64/int64 as a number (counts beyond 2^53 lose precision; the budgets cap counts far below). */
function num(value: number | string | protobuf.Long | undefined | null): number {
  if (value === undefined || value === null) return 0;
  return typeof value === 'number' ? value : Number(value.toString());
}

/**
 * Decodes one usage-report message. Throws InvalidRequestError when the bytes are not the message
 * (a stream's malformed message is the client's error: INVALID_ARGUMENT), or a bucket has no id or
 * an empty key or value.
 */
export function decodeUsageReports(bytes: Uint8Array): UsageReport {
  let decoded: { domain?: string; bucketQuotaUsages?: DecodedUsage[] };
  try {
    decoded = rlqsTypes().reports.decode(bytes) as unknown as typeof decoded;
  } catch (err) {
    throw new InvalidRequestError(`cannot decode RateLimitQuotaUsageReports: ${(err as Error).message}`);
  }
  const usages = (decoded.bucketQuotaUsages ?? []).map((u, i): QuotaUsage => {
    const pairs = u.bucketId?.bucket;
    if (pairs === undefined || Object.keys(pairs).length === 0)
      throw new InvalidRequestError(`bucket_quota_usages[${i}].bucket_id: must have at least one pair`);
    const bucket = Object.entries(pairs)
      .map(([key, value]) => ({ key, value }))
      .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
    for (const e of bucket) {
      if (e.key === '' || e.value === '') throw new InvalidRequestError(`bucket_quota_usages[${i}].bucket_id: keys and values must not be empty`);
    }
    const seconds = num(u.timeElapsed?.seconds);
    if (seconds < 0) throw new InvalidRequestError(`bucket_quota_usages[${i}].time_elapsed: must not be negative`);
    return { bucket, timeElapsedSeconds: seconds, allowed: num(u.numRequestsAllowed), denied: num(u.numRequestsDenied) };
  });
  return { domain: decoded.domain ?? '', usages };
}

function strategyMessage(strategy: QuotaStrategy): Record<string, unknown> {
  switch (strategy.kind) {
    case 'allow_all':
      return { blanketRule: 0 };
    case 'deny_all':
      return { blanketRule: 1 };
    case 'token_bucket':
      return {
        tokenBucket: {
          maxTokens: strategy.maxTokens,
          tokensPerFill: { value: strategy.tokensPerFill },
          fillInterval: { seconds: strategy.fillIntervalSeconds, nanos: 0 },
        },
      };
  }
}

/** One RateLimitQuotaResponse with `actions`, as message bytes. */
export function encodeQuotaResponse(actions: readonly QuotaAction[]): Uint8Array {
  const type = rlqsTypes().response;
  const message = type.fromObject({
    bucketAction: actions.map((a) => {
      const bucketId = { bucket: Object.fromEntries(a.bucket.map((e) => [e.key, e.value])) };
      if (a.abandon === true) return { bucketId, abandonAction: {} };
      return {
        bucketId,
        quotaAssignmentAction: { assignmentTimeToLive: { seconds: a.ttlSeconds, nanos: 0 }, rateLimitStrategy: strategyMessage(a.strategy) },
      };
    }),
  });
  return type.encode(message).finish();
}
