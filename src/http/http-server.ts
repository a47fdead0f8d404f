import * as http from 'node:http';
import { classify, publicMessage } from '../errors';
import type { RateLimitRequest, RateLimitResponse } from '../limiter/types';
import type { Logger } from '../log';
import { requestFromJson, responseToJson } from '../wire/json-codec';
import { allow, pathOf, RoutedHttpServer, send, sendMetrics } from './http-base';
import type { MetricsExposition } from '../metrics/sinks';

/**
 * The HTTP edge on HOST:PORT, as the reference server's:
 * - GET /healthcheck: 200 "OK" while serving, 500 otherwise (load balancers and kubelet probes);
 * - GET /livez: 200 whenever the process answers at all (liveness: a store outage is no reason to
 *   restart it, a blocked event loop makes the probe time out);
 * - GET /readyz: 200 while the service can answer calls (readiness; see HttpServerOptions.isReady), 503 otherwise;
 * - POST /json: a RateLimitRequest in proto JSON (lowerCamelCase or snake_case field names), answered
 *   with the RateLimitResponse in proto JSON: 200 when OK, 429 when OVER_LIMIT, 400 for a bad body,
 *   503 when the store (or the config) is not available, 500 otherwise;
 * - GET /metrics: the Prometheus text exposition (when metrics are given).
 */

/** What /json needs from the limiter. */
export interface JsonDecider {
  shouldRateLimit(request: RateLimitRequest): Promise<RateLimitResponse>;
}

export interface HttpServerOptions {
  readonly host: string;
  /** 0 picks a free port; start() resolves to the bound one. */
  readonly port: number;
  /** True while the service serves (drives /healthcheck). */
  readonly isServing: () => boolean;
  /** True while the service can answer calls (drives /readyz); isServing when absent. */
  readonly isReady?: () => boolean;
  readonly limiter: JsonDecider;
  /** Serves GET /metrics when set. */
  readonly metrics?: MetricsExposition;
  readonly logger?: Logger;
  /** Largest accepted /json body; default 1 MiB. */
  readonly maxBodyBytes?: number;
}

const DEFAULT_MAX_BODY = 1024 * 1024;

export class HttpServer extends RoutedHttpServer {
  private readonly maxBody: number;

  constructor(private readonly options: HttpServerOptions) {
    super(options);
    this.maxBody = options.maxBodyBytes ?? DEFAULT_MAX_BODY;
  }

  protected route(req: http.IncomingMessage, res: http.ServerResponse): void {
    const path = pathOf(req.url);
    switch (path) {
      case '/healthcheck':
        if (!allow(req, res, 'GET, HEAD')) return;
        if (this.options.isServing()) send(res, 200, 'OK\n');
        else send(res, 500, 'NOT_SERVING\n');
        return;
      case '/livez':
        if (!allow(req, res, 'GET, HEAD')) return;
        send(res, 200, 'OK\n');
        return;
      case '/readyz':
        if (!allow(req, res, 'GET, HEAD')) return;
        if ((this.options.isReady ?? this.options.isServing)()) send(res, 200, 'OK\n');
        else send(res, 503, 'NOT_READY\n');
        return;
      case '/json':
        if (!allow(req, res, 'POST')) return;
        this.json(req, res);
        return;
      case '/metrics':
        if (this.options.metrics === undefined) break;
        sendMetrics(req, res, this.options.metrics, this.options.logger);
        return;
    }
    send(res, 404, 'not found\n');
  }

  private json(req: http.IncomingMessage, res: http.ServerResponse): void {
    readBody(req, this.maxBody).then(
      (body) => {
        if (body === undefined) {
          send(res, 413, `request body larger than ${this.maxBody} bytes\n`);
          return;
        }
        let request: RateLimitRequest;
        try {
          request = requestFromJson(body);
        } catch (err) {
          this.fail(res, err);
          return;
        }
        let pending: Promise<RateLimitResponse>;
        try {
          pending = this.options.limiter.shouldRateLimit(request);
        } catch (err) {
          this.fail(res, err);
          return;
        }
        pending.then(
          (response) => {
            for (const h of response.responseHeaders) res.setHeader(h.key, h.value);
            send(res, response.overallCode === 'OVER_LIMIT' ? 429 : 200, JSON.stringify(responseToJson(response)), 'application/json');
          },
          (err: unknown) => this.fail(res, err),
        );
      },
      (err: unknown) => this.fail(res, err),
    );
  }

  private fail(res: http.ServerResponse, err: unknown): void {
    const kind = classify(err);
    if (kind.logLevel !== 'silent') this.options.logger?.[kind.logLevel]({ err, code: kind.code }, '/json failed');
    send(res, kind.httpStatus, `${publicMessage(kind, err)}\n`);
  }
}

/** The body as text, or undefined when it exceeds `max` bytes (the rest is drained, not buffered). */
function readBody(req: http.IncomingMessage, max: number): Promise<string | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let tooLarge = false;
    req.on('data', (chunk: Buffer) => {
      if (tooLarge) return;
      size += chunk.length;
      if (size > max) {
        tooLarge = true;
        chunks.length = 0;
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => resolve(tooLarge ? undefined : Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}
