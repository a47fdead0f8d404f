import { InvalidRequestError, NotReadyError } from '../errors';
import type { RateLimitDecider } from '../limiter/types';
import type { Logger } from '../log';
import type { Settings } from '../settings';
import { StoreUnavailableError } from '../limiter/store';
import { GrpcStatus } from './grpc-framing';
import type { HealthState } from './health';

/**
 * What both gRPC transports share (GRPC_TRANSPORT: ./http2-grpc-server, ./grpc-server): their
 * options and the one place errors are classified. InvalidRequestError -> INVALID_ARGUMENT;
 * StoreUnavailableError and NotReadyError -> UNAVAILABLE (so Envoy's failure_mode_deny decides);
 * anything else -> INTERNAL, logged once by the transport. Nothing here loads grpc-js.
 */

export type { RateLimitDecider } from '../limiter/types';

export interface GrpcServerOptions {
  readonly limiter: RateLimitDecider;
  readonly health: HealthState;
  readonly settings: Pick<Settings, 'grpcHost' | 'grpcPort' | 'grpcMaxMessageBytes' | 'grpcTls'> &
    Partial<Pick<Settings, 'grpcUds' | 'grpcMaxConnectionAgeMs' | 'grpcMaxConnectionAgeGraceMs'>>;
  readonly logger: Logger;
}

/** The status and message a failed ShouldRateLimit call answers with. */
export function classifyError(err: unknown): { code: number; details: string } {
  if (err instanceof InvalidRequestError) return { code: GrpcStatus.INVALID_ARGUMENT, details: err.message };
  if (err instanceof StoreUnavailableError || err instanceof NotReadyError) {
    return { code: GrpcStatus.UNAVAILABLE, details: err.message };
  }
  return { code: GrpcStatus.INTERNAL, details: 'internal error' };
}
