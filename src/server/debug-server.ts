import * as http from 'node:http';
import type { Logger } from '../log';
import { allow, pathOf, RoutedHttpServer, send, sendMetrics, type MetricsExposition } from './http-base';

/**
 * The debug endpoints on DEBUG_HOST:DEBUG_PORT (6070), as the reference server's debug port:
 * - GET /rlconfig: the loaded rules, one line per rule (src/config/describe.ts);
 * - GET /metrics: the Prometheus exposition (when metrics are given);
 * - GET /: the list of endpoints.
 * Operators expose this port only inside the cluster; it reveals the config, nothing else.
 */

export interface DebugServerOptions {
  readonly host: string;
  /** 0 picks a free port; start() resolves to the bound one. */
  readonly port: number;
  /** Lines of the config in force; empty before the first load. */
  readonly rlconfig: () => readonly string[];
  readonly metrics?: MetricsExposition;
  readonly logger?: Logger;
}

const ENDPOINTS: readonly (readonly [path: string, what: string])[] = [
  ['/rlconfig', 'the rate-limit rules in force, one line per rule'],
  ['/metrics', 'Prometheus metrics'],
];

export class DebugServer extends RoutedHttpServer {
  constructor(private readonly options: DebugServerOptions) {
    super(options);
  }

  protected route(req: http.IncomingMessage, res: http.ServerResponse): void {
    const metrics = this.options.metrics;
    switch (pathOf(req.url)) {
      case '/':
        if (!allow(req, res, 'GET, HEAD')) return;
        send(res, 200, this.index());
        return;
      case '/rlconfig': {
        if (!allow(req, res, 'GET, HEAD')) return;
        const lines = this.options.rlconfig();
        send(res, 200, lines.length === 0 ? '' : lines.join('\n') + '\n');
        return;
      }
      case '/metrics':
        if (metrics === undefined) break;
        sendMetrics(req, res, metrics, this.options.logger);
        return;
    }
    send(res, 404, 'not found\n');
  }

  private index(): string {
    const available = ENDPOINTS.filter(([path]) => path !== '/metrics' || this.options.metrics !== undefined);
    return available.map(([path, what]) => `${path}: ${what}`).join('\n') + '\n';
  }
}
