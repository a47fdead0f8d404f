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
  readonly action: protobuf.Type;
}

let types: Types | undefined;

function rlqsTypes(): Types {
  if (types === undefined) {
    const root = loadProtoFiles([RLQS_PROTO]);
    types = {
      reports: root.lookupType('envoy.service.rate_limit_quota.v3.RateLimitQuotaUsageReports'),
      response: root.lookupType('envoy.service.rate_limit_quota.v3.RateLimitQuotaResponse'),
      action: root.lookupType('envoy.service.rate_limit_quota.v3.RateLimitQuotaResponse.BucketAction'),
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
  if (typeof value === 'number') return value;
  if (typeof value === 'string') return Number(value);
  // From its two halves: the text form would allocate a string and several Longs per count.
  return (value.unsigned ? value.high >>> 0 : value.high) * 0x1_0000_0000 + (value.low >>> 0);
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

/** One BucketAction as message bytes. */
function encodeAction(a: QuotaAction): Uint8Array {
  const type = rlqsTypes().action;
  const bucketId = { bucket: Object.fromEntries(a.bucket.map((e) => [e.key, e.value])) };
  const message =
    a.abandon === true
      ? { bucketId, abandonAction: {} }
      : { bucketId, quotaAssignmentAction: { assignmentTimeToLive: { seconds: a.ttlSeconds, nanos: 0 }, rateLimitStrategy: strategyMessage(a.strategy) } };
  return type.encode(type.fromObject(message)).finish();
}

/**
 * The last encoding of an assignment, by its strategy object: the budgets hand a subscription's
 * strategy object (the one last sent to it) and its bucket's id array for as long as the assignment
 * holds, so a stream's periodic answer costs a copy of each action, not an encoding.
 */
const encodedActions = new WeakMap<QuotaStrategy, { readonly bucket: QuotaAction['bucket']; readonly ttlSeconds: number; readonly bytes: Uint8Array }>();

function actionBytes(a: QuotaAction): Uint8Array {
  if (a.abandon === true) return encodeAction(a);
  const seen = encodedActions.get(a.strategy);
  if (seen !== undefined && seen.bucket === a.bucket && seen.ttlSeconds === a.ttlSeconds) return seen.bytes;
  const bytes = encodeAction(a);
  encodedActions.set(a.strategy, { bucket: a.bucket, ttlSeconds: a.ttlSeconds, bytes });
  return bytes;
}

/** The length of a varint. */
function varintLength(n: number): number {
  let length = 1;
  while (n >= 0x80) {
    n = Math.floor(n / 0x80);
    length++;
  }
  return length;
}

/** Field 1 (bucket_action), length-delimited: its tag byte. */
const BUCKET_ACTION_TAG = (1 << 3) | 2;

/** One RateLimitQuotaResponse with `actions`, as message bytes (the repeated field written here, each action encoded by protobufjs). */
export function encodeQuotaResponse(actions: readonly QuotaAction[]): Uint8Array {
  const parts = actions.map(actionBytes);
  let size = 0;
  for (const p of parts) size += 1 + varintLength(p.length) + p.length;
  const out = Buffer.allocUnsafe(size);
  let at = 0;
  for (const p of parts) {
    out[at++] = BUCKET_ACTION_TAG;
    for (let n = p.length; ; n = Math.floor(n / 0x80)) {
      if (n < 0x80) {
        out[at++] = n;
        break;
      }
      out[at++] = (n & 0x7f) | 0x80;
    }
    out.set(p, at);
    at += p.length;
  }
  return out;
}
