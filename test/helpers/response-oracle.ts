import { CODE_NUMBER, durationFromMs, UINT32_MAX, UNIT_NUMBER } from '../../src/wire/convert';
import type { RateLimitResponse } from '../../src/limiter/types';
import type { WireDescriptorStatus, WireRateLimitResponse } from '../../src/wire/proto';
import { structToWire } from '../../src/wire/struct-codec';

/**
 * The limiter's response as a protobufjs RateLimitResponse object, written field by field from the
 * proto: the oracle the service's one encoder (frameResponse) is checked against.
 */
export function responseToWire(response: RateLimitResponse): WireRateLimitResponse {
  const statuses: WireDescriptorStatus[] = new Array(response.statuses.length);
  for (let i = 0; i < response.statuses.length; i++) {
    const s = response.statuses[i];
    const out: WireDescriptorStatus = { code: CODE_NUMBER[s.code], limitRemaining: clampUint32(s.limitRemaining) };
    if (s.currentLimit) {
      out.currentLimit = {
        requestsPerUnit: clampUint32(s.currentLimit.requestsPerUnit),
        unit: UNIT_NUMBER[s.currentLimit.unit],
        name: s.currentLimit.name ?? '',
      };
    }
    if (s.durationUntilResetMs !== undefined) out.durationUntilReset = durationFromMs(s.durationUntilResetMs);
    statuses[i] = out;
  }
  const wire: WireRateLimitResponse = {
    overallCode: response.overallCode === 'OVER_LIMIT' ? CODE_NUMBER.OVER_LIMIT : CODE_NUMBER.OK,
    statuses,
    responseHeadersToAdd: response.responseHeaders.map((h) => ({ key: h.key, value: h.value })),
  };
  if (response.dynamicMetadata !== undefined) wire.dynamicMetadata = structToWire(response.dynamicMetadata);
  return wire;
}

function clampUint32(n: number): number {
  if (!(n > 0)) return 0;
  return n >= UINT32_MAX ? UINT32_MAX : Math.floor(n);
}
