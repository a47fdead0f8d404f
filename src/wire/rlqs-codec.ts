import { MalformedMessageError } from '../errors';
import { InvalidRequestError } from '../limiter/errors';
import type { QuotaAction, QuotaUsage } from '../sharing/quota/quota-budgets';
import type { QuotaStrategy } from '../sharing/quota/quota-share';
import type { Entry } from '../limiter/types';
import { Reader } from './rls-codec';

/**
 * Wire codec of the quota stream (RLQS), by hand as RLS's (./rls-codec.ts): RateLimitQuotaUsageReports
 * bytes into plain reports, bucket actions into RateLimitQuotaResponse message bytes (the transport
 * frames them). Many proxies report many buckets each every interval, and a budget shared by many
 * proxies sends a changed assignment to each of them at every division: a bucket id is encoded once
 * (by its pairs' array) whatever the number of answers naming it. test/unit/wire/rlqs-codec.test.ts
 * checks both ways against protobufjs, on random messages too.
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

/**
 * An int64 varint. A negative one is its 64-bit two's complement, ten bytes with bit 63 (the lowest
 * bit of the tenth) set; Reader.varint() reads it as a number near 2^64, where a double cannot tell
 * -1 from 0: the sign comes from that bit (the magnitude of a negative value matters to no caller).
 */
function int64(r: Reader): number {
  const start = r.pos;
  const n = r.varint();
  if (r.pos - start < 10 || (r.buf[r.pos - 1] & 1) === 0) return n;
  return Math.min(-1, n - 2 ** 64);
}

/** Narrows the reader to a length-delimited field starting here; returns the bounds to restore (see leave). */
function enter(r: Reader): number {
  const end = r.lengthEnd();
  const outer = r.end;
  r.end = end;
  return outer;
}

/** Back out of the field entered: the cursor is past it. */
function leave(r: Reader, outer: number): void {
  r.pos = r.end;
  r.end = outer;
}

/** BucketId's map entries, appended to `pairs` in the order they came (see bucketOf). */
function decodeBucketId(r: Reader, pairs: Entry[]): void {
  while (r.pos < r.end) {
    const tag = r.varint();
    if (tag !== 0x0a) {
      r.skip(tag & 7);
      continue;
    }
    const outer = enter(r);
    let key = '';
    let value = '';
    while (r.pos < r.end) {
      const t = r.varint();
      if (t === 0x0a) key = r.string();
      else if (t === 0x12) value = r.string();
      else r.skip(t & 7);
    }
    leave(r, outer);
    pairs.push({ key, value });
  }
}

interface UsageFields {
  /** The id's entries as they came, a key possibly more than once. */
  readonly pairs: Entry[];
  hasId: boolean;
  seconds: number;
  allowed: number;
  denied: number;
}

function decodeUsage(r: Reader): UsageFields {
  const u: UsageFields = { pairs: [], hasId: false, seconds: 0, allowed: 0, denied: 0 };
  while (r.pos < r.end) {
    const tag = r.varint();
    if (tag === 0x0a) {
      // A message field sent twice merges: the map gains the second one's entries.
      u.hasId = true;
      const outer = enter(r);
      decodeBucketId(r, u.pairs);
      leave(r, outer);
    } else if (tag === 0x12) {
      const outer = enter(r);
      while (r.pos < r.end) {
        const t = r.varint();
        if (t === 0x08) u.seconds = int64(r);
        else r.skip(t & 7);
      }
      leave(r, outer);
    } else if (tag === 0x18) u.allowed = r.varint();
    else if (tag === 0x20) u.denied = r.varint();
    else r.skip(tag & 7);
  }
  return u;
}

/** A map's entries sorted by key, a key sent more than once keeping its last value (as a protobuf map does), in O(n log n). */
function bucketOf(pairs: Entry[]): Entry[] {
  if (pairs.length < 2) return pairs;
  // Stable: of equal keys the one that came last stays last.
  pairs.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  const out: Entry[] = [];
  for (let i = 0; i < pairs.length; i++) if (i + 1 === pairs.length || pairs[i + 1].key !== pairs[i].key) out.push(pairs[i]);
  return out;
}

/**
 * Decodes one usage-report message, by hand (with the RLS codec's Reader: a report of many buckets
 * comes from every proxy every interval, and the generic decoder made an object, a Long and a string of
 * each count). Throws InvalidRequestError when the bytes are not the message (a stream's malformed
 * message is the client's error: INVALID_ARGUMENT), or a bucket has no id or an empty key or value.
 * Counts beyond 2^53 lose precision (the budgets cap them far below).
 */
export function decodeUsageReports(bytes: Uint8Array): UsageReport {
  const buf = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const r = new Reader(buf, 0, buf.length);
  let domain = '';
  const decoded: UsageFields[] = [];
  try {
    while (r.pos < r.end) {
      const tag = r.varint();
      if (tag === 0x0a) domain = r.string();
      else if (tag === 0x12) {
        const outer = enter(r);
        decoded.push(decodeUsage(r));
        leave(r, outer);
      } else r.skip(tag & 7);
    }
  } catch (err) {
    if (!(err instanceof MalformedMessageError)) throw err;
    throw new InvalidRequestError(`cannot decode RateLimitQuotaUsageReports: ${err.message}`);
  }
  const usages = decoded.map((u, i): QuotaUsage => {
    if (!u.hasId || u.pairs.length === 0) throw new InvalidRequestError(`bucket_quota_usages[${i}].bucket_id: must have at least one pair`);
    const bucket = bucketOf(u.pairs);
    for (const e of bucket) {
      if (e.key === '' || e.value === '') throw new InvalidRequestError(`bucket_quota_usages[${i}].bucket_id: keys and values must not be empty`);
    }
    if (u.seconds < 0) throw new InvalidRequestError(`bucket_quota_usages[${i}].time_elapsed: must not be negative`);
    return { bucket, timeElapsedSeconds: u.seconds, allowed: u.allowed, denied: u.denied };
  });
  return { domain, usages };
}

function pushVarint(out: number[], n: number): void {
  while (n >= 0x80) {
    out.push((n & 0x7f) | 0x80);
    n = Math.floor(n / 0x80);
  }
  out.push(n);
}

/** A length-delimited field: `tag`, the length, then `body`. */
function pushField(out: number[], tag: number, body: readonly number[]): void {
  out.push(tag);
  pushVarint(out, body.length);
  for (const b of body) out.push(b);
}

/** A message whose one field is a varint (field 1): Duration with seconds only, UInt32Value. */
function firstVarint(n: number): number[] {
  const out: number[] = [];
  if (n !== 0) {
    out.push(0x08);
    pushVarint(out, n);
  }
  return out;
}

/** envoy.type.v3.RateLimitStrategy: a blanket rule (its enum written even when 0: it is a oneof member) or a token bucket. */
function strategyBody(strategy: QuotaStrategy): number[] {
  switch (strategy.kind) {
    case 'allow_all':
      return [0x08, 0];
    case 'deny_all':
      return [0x08, 1];
    case 'token_bucket': {
      const bucket = firstVarint(strategy.maxTokens);
      pushField(bucket, 0x12, firstVarint(strategy.tokensPerFill));
      pushField(bucket, 0x1a, firstVarint(strategy.fillIntervalSeconds));
      const out: number[] = [];
      pushField(out, 0x1a, bucket);
      return out;
    }
  }
}

/** A bucket id's BucketId message, by its pairs' array (the budgets hand the same array for one bucket). */
const encodedBucketIds = new WeakMap<QuotaAction['bucket'], Buffer>();

function bucketIdBytes(pairs: QuotaAction['bucket']): Buffer {
  let bytes = encodedBucketIds.get(pairs);
  if (bytes !== undefined) return bytes;
  const parts: Buffer[] = [];
  for (const e of pairs) {
    const key = Buffer.from(e.key);
    const value = Buffer.from(e.value);
    const entry: number[] = [0x0a];
    pushVarint(entry, key.length);
    const middle: number[] = [0x12];
    pushVarint(middle, value.length);
    const entryLength = entry.length + key.length + middle.length + value.length;
    const head: number[] = [0x0a];
    pushVarint(head, entryLength);
    parts.push(Buffer.from(head), Buffer.from(entry), key, Buffer.from(middle), value);
  }
  bytes = Buffer.concat(parts);
  encodedBucketIds.set(pairs, bytes);
  return bytes;
}

/** One BucketAction as message bytes: bucket_id (1), then quota_assignment_action (2) or abandon_action (3). */
function encodeAction(a: QuotaAction): Uint8Array {
  const id = bucketIdBytes(a.bucket);
  const head: number[] = [0x0a];
  pushVarint(head, id.length);
  const tail: number[] = [];
  if (a.abandon === true) tail.push(0x1a, 0);
  else {
    const assignment: number[] = [];
    pushField(assignment, 0x12, firstVarint(a.ttlSeconds));
    pushField(assignment, 0x1a, strategyBody(a.strategy));
    pushField(tail, 0x12, assignment);
  }
  return Buffer.concat([Buffer.from(head), id, Buffer.from(tail)]);
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

/** One RateLimitQuotaResponse with `actions`, as message bytes. */
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
