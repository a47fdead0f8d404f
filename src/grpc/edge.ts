import type { RateLimitDecider } from '../limiter/types';
import type { Logger } from '../log';
import type { CallTracer } from '../tracing/call-tracer';
import type { Settings } from '../settings/settings';
import type { HealthState } from '../service/health';
import type { ServiceReplays } from '../service/rls-service';
import type { StreamingMethod } from '../service/streaming';

/**
 * The options both gRPC transports take (GRPC_TRANSPORT: ./http2-server, ./grpc-js-server); what
 * they serve is src/service/rls-service.ts. Nothing here loads grpc-js.
 */

export interface GrpcServerOptions {
  readonly limiter: RateLimitDecider;
  readonly health: HealthState;
  readonly settings: Pick<Settings, 'grpcHost' | 'grpcPort' | 'grpcMaxMessageBytes' | 'grpcTls' | 'grpcMaxConnections' | 'h2'> &
    Partial<Pick<Settings, 'grpcUds' | 'grpcMaxConnectionAgeMs' | 'grpcMaxConnectionAgeGraceMs'>>;
  readonly logger: Logger;
  /** One span per ShouldRateLimit call (TRACING_ENABLED); absent when tracing is off. */
  readonly tracer?: CallTracer;
  /** Repeats of requests answered from local denials, answered by their bytes (src/limiter/replay.ts); absent: none kept. */
  readonly replays?: ServiceReplays;
  /** Bidirectional streaming methods served beside RLS and health (src/service/streaming.ts), by path. */
  readonly streamingMethods?: readonly StreamingMethod[];
}
