import * as grpc from '@grpc/grpc-js';
import { createRlsClient, type RlsClient, type RlsRequestInput } from '../../src/cli/rls-client';

/**
 * A typed grpc-js client for the RLS and health services (the one `slidegate client` uses),
 * plus small builders that keep requests readable in tests.
 */

export type { DecodedDescriptorStatus, DecodedRateLimitResponse, HealthStatusName, HealthWatch, RlsClient, RlsRequestInput } from '../../src/cli/rls-client';

export type Descriptor = RlsRequestInput['descriptors'][number];

/** A client for host:port; close() it after the test. */
export function rlsClient(address: string, options: { maxReceiveBytes?: number } = {}): RlsClient {
  return createRlsClient({ address, ...options });
}

/** A descriptor from ordered [key, value] pairs, with optional override and own hits. */
export function descriptor(pairs: [string, string][], extra: Omit<Descriptor, 'entries'> = {}): Descriptor {
  return { entries: pairs.map(([key, value]) => ({ key, value })), ...extra };
}

/** The gRPC status code a rejected call carries (undefined when it did not fail). */
export async function grpcCode(call: Promise<unknown>): Promise<grpc.status | undefined> {
  try {
    await call;
    return undefined;
  } catch (err) {
    return (err as grpc.ServiceError).code;
  }
}

export { grpc };
