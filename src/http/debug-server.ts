import * as http from 'node:http';
import type { Entry } from '../limiter/types';
import type { RuleMatch } from '../config/describe';
import { allow, pathOf, RoutedHttpServer, send, sendMetrics, type HttpListenerOptions } from './http-base';
import type { MetricsExposition } from '../metrics/sinks';
import type { MergedTop } from '../top/live-top';
import { parseTopQuery, rulesReport, topReport } from '../top/top-report';
import { TOP_PAGE, TOP_PAGE_CSP } from './top-page';
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
 * - GET /top?domain=D&by=denied|allowed|near_limit&limit=N: who is being limited, the heaviest
 *   descriptors of every rule over the recent window, merged across workers and replicas (JSON);
 * - GET /top/rules: the same per rule, with each rule's limit, totals and steps (the page's data);
 * - GET /: the live page of /top/rules when the live view is on, else the list of endpoints.
 * Operators expose this port only inside the cluster; it reveals the config and the descriptors
 * callers send (their values cut to a bounded length), nothing else.
 */

export interface DebugServerOptions extends HttpListenerOptions {
  /** Lines of the config in force; empty before the first load. */
  readonly rlconfig: () => readonly string[];
  /** The rule a descriptor matches, for /rlmatch; the endpoint answers 404 when absent. */
  readonly match?: (domain: string, entries: readonly Entry[]) => RuleMatch;
  readonly metrics?: MetricsExposition;
  /** The live view (TOP_ENABLED); /top, /top/rules and the page answer 404 when absent. */
  readonly top?: () => Promise<MergedTop>;
  /** Extra fields of /top/rules (the page shows `rlqs`, the quota streams, when given). */
  readonly topExtras?: () => Record<string, unknown>;
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
        if (this.options.top === undefined) send(res, 200, this.index());
        else {
          res.setHeader('Content-Security-Policy', TOP_PAGE_CSP);
          res.setHeader('Cache-Control', 'no-store');
          send(res, 200, TOP_PAGE, 'text/html; charset=utf-8');
        }
        return;
      case '/top':
        if (this.options.top === undefined) break;
        if (!allow(req, res, 'GET, HEAD')) return;
        this.top(req, res, this.options.top);
        return;
      case '/top/rules':
        if (this.options.top === undefined) break;
        if (!allow(req, res, 'GET, HEAD')) return;
        this.topRules(res, this.options.top);
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

  private top(req: http.IncomingMessage, res: http.ServerResponse, top: () => Promise<MergedTop>): void {
    const query = parseTopQuery(new URLSearchParams((req.url ?? '').slice(pathOf(req.url).length + 1)));
    if (typeof query === 'string') {
      send(res, 400, `${query}\nusage: /top?domain=D&by=denied|allowed|near_limit&limit=N\n`);
      return;
    }
    this.answerTop(res, top, (merged) => ({ ...topReport(merged.view, merged.replicas, query), ...completeness(merged) }));
  }

  private topRules(res: http.ServerResponse, top: () => Promise<MergedTop>): void {
    this.answerTop(res, top, (merged) => rulesReport(merged.view, merged.replicas, { ...completeness(merged), ...this.options.topExtras?.() }));
  }

  private answerTop(res: http.ServerResponse, top: () => Promise<MergedTop>, report: (merged: MergedTop) => object): void {
    res.setHeader('Cache-Control', 'no-store');
    top().then(
      (merged) => send(res, 200, JSON.stringify(report(merged)) + '\n', 'application/json'),
      (err: unknown) => {
        this.options.logger?.error({ err }, 'cannot compute the live view');
        send(res, 500, 'cannot compute the live view\n');
      },
    );
  }

  private index(): string {
    const available = ENDPOINTS.filter(
      ([path]) => (path !== '/metrics' || this.options.metrics !== undefined) && (!path.startsWith('/rlmatch') || this.options.match !== undefined),
    );
    return available.map(([path, what]) => `${path}: ${what}`).join('\n') + '\n';
  }
}

/** Marks a view that misses the other replicas (the shared store could not be read). */
function completeness(merged: MergedTop): { incomplete?: true } {
  return merged.complete ? {} : { incomplete: true };
}
