import * as http from 'node:http';
import { classify, publicMessage } from '../errors';
import type { RateLimitRequest, RateLimitResponse } from '../limiter/types';
import { requestFromJson, responseToJson } from '../wire/json-codec';
import { allow, pathOf, RoutedHttpServer, send, sendMetrics, type HttpListenerOptions } from './http-base';
import type { MetricsExposition } from '../metrics/sinks';
import { OVERRIDES_PATH, OverridesApi, type BodyRead, type OverridesApiOptions } from './overrides-api';

/**
 * The HTTP edge on HOST:PORT, as the reference server's:
 * - GET /healthcheck: 200 "OK" while serving, 500 otherwise (load balancers and kubelet probes);
 * - GET /livez: 200 whenever the process answers at all (liveness: a store outage is no reason to
 *   restart it, a blocked event loop makes the probe time out);
 * - GET /readyz: 200 while the service can answer calls (readiness; see HttpServerOptions.isReady), 503 otherwise;
 * - POST /json: a RateLimitRequest in proto JSON (lowerCamelCase or snake_case field names), answered
 *   with the RateLimitResponse in proto JSON: 200 when OK, 429 when OVER_LIMIT, 400 for a bad body,
 *   503 when the store (or the config) is not available, 500 otherwise;
 * - GET /metrics: the Prometheus text exposition (when metrics are given);
 * - /v1/overrides: the runtime override API (./overrides-api.ts), only with ADMIN_TOKENS_FILE (404 without).
 */

/** What /json needs from the limiter. */
export interface JsonDecider {
  shouldRateLimit(request: RateLimitRequest): Promise<RateLimitResponse>;
}

export interface HttpServerOptions extends HttpListenerOptions {
  /** True while the service serves (drives /healthcheck). */
  readonly isServing: () => boolean;
  /** True while the service can answer calls (drives /readyz); isServing when absent. */
  readonly isReady?: () => boolean;
  readonly limiter: JsonDecider;
  /** Serves GET /metrics when set. */
  readonly metrics?: MetricsExposition;
  /** Largest accepted /json body; default 1 MiB. */
  readonly maxBodyBytes?: number;
  /** /json body bytes held at once over every request still being read or answered; default 16 MiB. */
  readonly jsonBufferBytes?: number;
  /**
   * When set, POST /json answers 403 with this reason: the gRPC port demands client certificates,
   * and /json (plaintext, no certificate) would be a way around them.
   */
  readonly jsonRefusal?: string;
  /** The runtime override API (ADMIN_TOKENS_FILE); /v1/overrides answers 404 without it. Its bodies share the /json budget. */
  readonly overrides?: OverridesApiOptions;
}

const DEFAULT_MAX_BODY = 1024 * 1024;
const DEFAULT_JSON_BUFFER = 16 * 1024 * 1024;

/** A body as text, or the answer that refused it. */
type Body = BodyRead;

export class HttpServer extends RoutedHttpServer {
  private readonly maxBody: number;
  private readonly bufferBytes: number;
  /** Body bytes held now (/json and the override API), over every request (released when its response is done). */
  private buffered = 0;
  private readonly overrides: OverridesApi | undefined;

  constructor(private readonly options: HttpServerOptions) {
    super(options);
    this.maxBody = options.maxBodyBytes ?? DEFAULT_MAX_BODY;
    this.bufferBytes = options.jsonBufferBytes ?? DEFAULT_JSON_BUFFER;
    this.overrides =
      options.overrides === undefined
        ? undefined
        : new OverridesApi(options.overrides, (req, res, maxBytes, cap) => this.readBody(req, res, maxBytes, cap), options.logger);
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
      case OVERRIDES_PATH:
        if (this.overrides === undefined) break;
        this.overrides.handle(req, res);
        return;
    }
    send(res, 404, 'not found\n');
  }

  private json(req: http.IncomingMessage, res: http.ServerResponse): void {
    if (this.options.jsonRefusal !== undefined) {
      refuse(req, res, 403, `${this.options.jsonRefusal}\n`);
      return;
    }
    this.readBody(req, res, this.maxBody, 'HTTP_JSON_MAX_BODY_BYTES').then(
      (read) => {
        if (!('text' in read)) {
          if (read.status === 503) res.setHeader('Retry-After', '1');
          refuse(req, res, read.status, read.message);
          return;
        }
        const body = read.text;
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

  /**
   * The body as text, held against the server-wide budget until the response is done; a body past
   * `maxBody` (413, naming `cap`) or past what the budget has left (503) is refused as soon as it is
   * seen, without keeping what arrived of it. Slow bodies are cut by the listener's request deadline (408).
   */
  private readBody(req: http.IncomingMessage, res: http.ServerResponse, maxBody: number, cap: string): Promise<Body> {
    return new Promise((resolve, reject) => {
      const tooLarge: Body = { status: 413, message: `request body larger than ${maxBody} bytes (${cap})\n` };
      const declared = Number(req.headers['content-length']);
      if (declared > maxBody) {
        resolve(tooLarge);
        return;
      }
      const chunks: Buffer[] = [];
      let held = 0;
      const release = (): void => {
        this.buffered -= held;
        held = 0;
      };
      res.once('close', release);
      const stop = (body: Body): void => {
        req.off('data', onData);
        chunks.length = 0;
        release();
        resolve(body);
      };
      const onData = (chunk: Buffer): void => {
        if (held + chunk.length > maxBody) stop(tooLarge);
        else if (this.buffered + chunk.length > this.bufferBytes) stop({ status: 503, message: 'too many request bytes being read at once; retry\n' });
        else {
          held += chunk.length;
          this.buffered += chunk.length;
          chunks.push(chunk);
        }
      };
      req.on('data', onData);
      req.on('end', () => resolve({ text: Buffer.concat(chunks).toString('utf8') }));
      req.on('error', reject);
    });
  }
}

/** Answers and closes the connection: the rest of the request body is neither read nor kept. */
function refuse(req: http.IncomingMessage, res: http.ServerResponse, status: number, message: string): void {
  res.setHeader('Connection', 'close');
  send(res, status, message);
  req.resume();
}
