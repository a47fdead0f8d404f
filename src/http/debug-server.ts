import * as http from 'node:http';
import type { Entry } from '../limiter/types';
import type { RuleMatch } from '../config/describe';
import { allow, pathOf, RoutedHttpServer, send, sendMetrics, type HttpListenerOptions } from './http-base';
import type { MetricsExposition } from '../metrics/sinks';
import type { RlqsView } from '../service/rlqs-service';

/**
 * The debug endpoints on DEBUG_HOST:DEBUG_PORT (6070), as the reference server's debug port:
 * - GET /rlconfig: the loaded rules, one line per rule (src/config/describe.ts);
 * - GET /rlmatch?domain=D&entry=k=v[&entry=k2=v2...]: which rule one descriptor matches, in JSON,
 *   with its whole window (the wire's current_limit carries the unit but not unit_multiplier), and
 *   whether the domain is loaded at all (`slidegate client` asks it);
 * - GET /rlqs: the quota streams (RLQS) of this process and the shares of every rule they use, in
 *   JSON: each proxy's demand, admitted rate and share on every replica, the counter's usage;
 * - GET /metrics: the Prometheus exposition (when metrics are given);
 * - GET /: the list of endpoints.
 * Sensitive: /rlconfig and /rlmatch reveal every rule (domains, keys, the values that get their own
 * limits, the limits themselves), /metrics the traffic per rule. Keep it off any Service or ingress;
 * reach it with a port-forward or from the pod itself.
 */

export interface DebugServerOptions extends HttpListenerOptions {
  /** Lines of the config in force; empty before the first load. */
  readonly rlconfig: () => readonly string[];
  /** The rule a descriptor matches, for /rlmatch; the endpoint answers 404 when absent. */
  readonly match?: (domain: string, entries: readonly Entry[]) => RuleMatch;
  readonly metrics?: MetricsExposition;
  /** The quota streams and shares, for /rlqs; the endpoint answers 404 when absent. */
  readonly quota?: () => RlqsView;
}

const ENDPOINTS: readonly (readonly [path: string, what: string])[] = [
  ['/rlconfig', 'the rate-limit rules in force, one line per rule'],
  ['/rlmatch?domain=D&entry=k=v', 'the rule one descriptor matches, with its window (JSON)'],
  ['/rlqs', 'quota streams (RLQS) and the shares of every rule they use (JSON)'],
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
      case '/rlmatch':
        if (this.options.match === undefined) break;
        if (!allow(req, res, 'GET, HEAD')) return;
        this.rlmatch(req, res, this.options.match);
        return;
      case '/rlqs':
        if (this.options.quota === undefined) break;
        if (!allow(req, res, 'GET, HEAD')) return;
        send(res, 200, JSON.stringify(this.options.quota(), null, 2) + '\n', 'application/json');
        return;
      case '/metrics':
        if (metrics === undefined) break;
        sendMetrics(req, res, metrics, this.options.logger);
        return;
    }
    send(res, 404, 'not found\n');
  }

  private rlmatch(req: http.IncomingMessage, res: http.ServerResponse, match: NonNullable<DebugServerOptions['match']>): void {
    const query = new URLSearchParams((req.url ?? '').slice(pathOf(req.url).length + 1));
    const domain = query.get('domain');
    const entries = query.getAll('entry').map((e) => ({ key: e.slice(0, e.indexOf('=')), value: e.slice(e.indexOf('=') + 1) }));
    if (!domain || entries.length === 0 || entries.some((e) => e.key === '')) {
      send(res, 400, 'usage: /rlmatch?domain=D&entry=key=value[&entry=key=value...]\n');
      return;
    }
    send(res, 200, JSON.stringify(match(domain, entries)) + '\n', 'application/json');
  }

  private index(): string {
    const available = ENDPOINTS.filter(
      ([path]) => (path !== '/metrics' || this.options.metrics !== undefined) && (!path.startsWith('/rlmatch') || this.options.match !== undefined),
    );
    return available.map(([path, what]) => `${path}: ${what}`).join('\n') + '\n';
  }
}
