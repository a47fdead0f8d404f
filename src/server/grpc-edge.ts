import { classify, publicMessage } from '../errors';
import type { RateLimitDecider } from '../limiter/types';
import type { Logger } from '../log';
import type { Settings } from '../settings';
import type { HealthState } from './health';

/**
 * What both gRPC transports share (GRPC_TRANSPORT: ./http2-grpc-server, ./grpc-server): their
 * options and the answer to a failed call, from the error catalogue (src/errors.ts). Nothing here
 * loads grpc-js.
 */

export type { RateLimitDecider } from '../limiter/types';

export interface GrpcServerOptions {
  readonly limiter: RateLimitDecider;
  readonly health: HealthState;
  readonly settings: Pick<Settings, 'grpcHost' | 'grpcPort' | 'grpcMaxMessageBytes' | 'grpcTls'> &
    Partial<Pick<Settings, 'grpcUds' | 'grpcMaxConnectionAgeMs' | 'grpcMaxConnectionAgeGraceMs'>>;
  readonly logger: Logger;
}

/** The status and message a failed ShouldRateLimit call answers with; logs it when the catalogue says so. */
export function grpcFailure(err: unknown, logger: Logger): { code: number; details: string } {
  const kind = classify(err);
  if (kind.logLevel !== 'silent') logger[kind.logLevel]({ err, code: kind.code }, 'ShouldRateLimit failed');
  return { code: kind.grpcStatus, details: publicMessage(kind, err) };
}
