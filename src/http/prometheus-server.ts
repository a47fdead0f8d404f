import type * as http from 'node:http';
import type { Logger } from '../log';
import { pathOf, RoutedHttpServer, send, sendMetrics, type HttpLimits } from './http-base';
import type { MetricsExposition } from '../metrics/sinks';

/**
 * USE_PROMETHEUS's own listener, as the reference's: PROMETHEUS_ADDR (`:9090`, every interface),
 * answering GET PROMETHEUS_PATH (`/metrics`) with the mapped series (src/metrics/mapped-metrics.ts).
 */

export interface PrometheusServerOptions {
  /** Undefined: every interface. */
  readonly host?: string;
  /** 0 picks a free port; start() resolves to the bound one. */
  readonly port: number;
  readonly path: string;
  readonly metrics: MetricsExposition;
  readonly logger?: Logger;
  readonly limits?: HttpLimits;
}

export class PrometheusServer extends RoutedHttpServer {
  constructor(private readonly options: PrometheusServerOptions) {
    // An empty host is Node's "every interface" (IPv6 and IPv4 where available), Go's ":9090".
    super({ host: options.host ?? '', port: options.port, limits: options.limits, logger: options.logger });
  }

  protected route(req: http.IncomingMessage, res: http.ServerResponse): void {
    if (pathOf(req.url) === this.options.path) sendMetrics(req, res, this.options.metrics, this.options.logger);
    else send(res, 404, 'not found\n');
  }
}
