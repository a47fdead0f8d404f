import * as grpc from '@grpc/grpc-js';
import type { RateLimitResponse } from '../limiter/types';
import { requestFromWire, responseToWire } from './convert';
import type { ServingStatus } from './health';
import { grpcServiceDefinitions } from './grpc-definitions';
import { grpcFailure, type GrpcServerOptions } from './grpc-edge';
import { ServingStatusNumber, type WireRateLimitRequest, type WireRateLimitResponse } from './proto';
import { grpcServerCredentials } from './tls';

/**
 * The gRPC edge on grpc-js (GRPC_TRANSPORT=grpc-js): envoy.service.ratelimit.v3.RateLimitService
 * and grpc.health.v1.Health. Errors are classified by ./grpc-edge. A response never carries
 * overall_code UNKNOWN.
 */

export type { GrpcServerOptions, RateLimitDecider } from './grpc-edge';

type HealthRequest = { service: string };

/** Time for the last answers (and the ended Watch streams) to reach the socket before the cut. */
const DRAIN_FLUSH_MS = 50;
type HealthResponse = { status: number };

/** Builds the listening address, bracketing IPv6 literals. */
export function bindAddress(host: string, port: number): string {
  return host.includes(':') && !host.startsWith('[') ? `[${host}]:${port}` : `${host}:${port}`;
}

export class GrpcServer {
  private readonly server: grpc.Server;
  private readonly watchers = new Set<grpc.ServerWritableStream<HealthRequest, HealthResponse>>();
  private stopping: Promise<void> | undefined;
  /** Unary calls not yet answered; stop() waits for them, then cuts what is left (idle connections). */
  private inFlight = 0;
  private onDrained: (() => void) | undefined;

  constructor(private readonly options: GrpcServerOptions) {
    const { grpcMaxMessageBytes, grpcMaxConnectionAgeMs, grpcMaxConnectionAgeGraceMs } = options.settings;
    this.server = new grpc.Server({
      'grpc.max_receive_message_length': grpcMaxMessageBytes,
      // grpc-js adds the same ±10% jitter to the age as grpc-go; 0 means never, as there.
      ...(grpcMaxConnectionAgeMs ? { 'grpc.max_connection_age_ms': grpcMaxConnectionAgeMs } : {}),
      ...(grpcMaxConnectionAgeMs && grpcMaxConnectionAgeGraceMs !== undefined
        ? { 'grpc.max_connection_age_grace_ms': grpcMaxConnectionAgeGraceMs }
        : {}),
    });
    const { rls, health } = grpcServiceDefinitions();
    this.server.addService(rls, { shouldRateLimit: this.shouldRateLimit });
    this.server.addService(health, { check: this.check, watch: this.watch });
  }

  /** Binds GRPC_HOST:GRPC_PORT, or the Unix socket GRPC_UDS, and starts serving; resolves to the bound port (0 on a socket). */
  start(): Promise<number> {
    const { grpcHost, grpcPort, grpcTls, grpcUds } = this.options.settings;
    const address = grpcUds !== undefined ? `unix:${grpcUds}` : bindAddress(grpcHost, grpcPort);
    return new Promise((resolve, reject) => {
      this.server.bindAsync(address, grpcServerCredentials(grpcTls), (err, port) => {
        if (err) reject(err);
        else resolve(grpcUds !== undefined ? 0 : port);
      });
    });
  }

  /**
   * Graceful stop: health goes NOT_SERVING, Watch streams are told and closed, new calls are refused,
   * in-flight calls finish; whatever is still open after `graceMs` is cut. Idempotent.
   */
  stop(graceMs: number): Promise<void> {
    this.stopping ??= new Promise<void>((resolve) => {
      this.options.health.beginShutdown();
      for (const call of this.watchers) call.end();
      this.watchers.clear();
      const timer = setTimeout(() => {
        this.server.forceShutdown();
        resolve();
      }, graceMs);
      this.server.tryShutdown(() => {
        clearTimeout(timer);
        resolve();
      });
      // tryShutdown also waits for connections with nothing in flight, some of which (one that never
      // sent the HTTP/2 preface) never close on their own: once every call is answered, cut them.
      this.whenDrained(() =>
        setTimeout(() => {
          this.server.forceShutdown();
          clearTimeout(timer);
          resolve();
        }, DRAIN_FLUSH_MS).unref(),
      );
    });
    return this.stopping;
  }

  private whenDrained(then: () => void): void {
    if (this.inFlight === 0) then();
    else this.onDrained = then;
  }

  /** Counts a unary call until its callback runs. */
  private track<T>(callback: grpc.sendUnaryData<T>): grpc.sendUnaryData<T> {
    this.inFlight++;
    return (err, value) => {
      callback(err, value);
      if (--this.inFlight === 0 && this.onDrained !== undefined) {
        const drained = this.onDrained;
        this.onDrained = undefined;
        drained();
      }
    };
  }

  private readonly shouldRateLimit = (
    call: grpc.ServerUnaryCall<WireRateLimitRequest, WireRateLimitResponse>,
    untracked: grpc.sendUnaryData<WireRateLimitResponse>,
  ): void => {
    const callback = this.track(untracked);
    let pending: Promise<RateLimitResponse>;
    try {
      pending = this.options.limiter.shouldRateLimit(requestFromWire(call.request));
    } catch (err) {
      callback(this.fail(err));
      return;
    }
    pending.then(
      (response) => callback(null, responseToWire(response)),
      (err: unknown) => callback(this.fail(err)),
    );
  };

  private fail(err: unknown): Partial<grpc.StatusObject> {
    return grpcFailure(err, this.options.logger);
  }

  private readonly check = (
    call: grpc.ServerUnaryCall<HealthRequest, HealthResponse>,
    callback: grpc.sendUnaryData<HealthResponse>,
  ): void => {
    const status = this.options.health.status(call.request.service);
    if (status === undefined) {
      callback({ code: grpc.status.NOT_FOUND, details: `unknown service "${call.request.service}"` });
      return;
    }
    callback(null, { status: ServingStatusNumber[status] });
  };

  private readonly watch = (call: grpc.ServerWritableStream<HealthRequest, HealthResponse>): void => {
    const health = this.options.health;
    const service = call.request.service;
    const status = health.status(service);
    if (this.stopping) {
      call.write({ status: ServingStatusNumber.NOT_SERVING });
      call.end();
      return;
    }
    if (status === undefined) {
      // The protocol keeps the stream open: the service may appear later.
      call.write({ status: ServingStatusNumber.SERVICE_UNKNOWN });
    } else {
      call.write({ status: ServingStatusNumber[status] });
    }
    const unsubscribe =
      status === undefined
        ? () => undefined
        : health.subscribe((next: ServingStatus) => call.write({ status: ServingStatusNumber[next] }));
    this.watchers.add(call);
    const done = (): void => {
      unsubscribe();
      this.watchers.delete(call);
    };
    call.on('cancelled', done);
    call.on('close', done);
    call.on('error', done);
  };
}
