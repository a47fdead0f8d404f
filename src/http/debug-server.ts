import * as http from 'node:http';
import type { Entry } from '../limiter/types';
import type { RuleMatch } from '../config/describe';
import { allow, pathOf, RoutedHttpServer, send, sendMetrics, type HttpListenerOptions } from './http-base';
import type { MetricsExposition } from '../metrics/sinks';
import type { MergedTop } from '../top/live-top';
import { parseTopQuery, rulesReport, topReport, type OverrideMarks } from '../top/top-report';
import { TOP_PAGE, TOP_PAGE_CSP } from './top-page';
import type { RlqsView } from '../service/rlqs-service';

/**
 * The debug endpoints on DEBUG_HOST:DEBUG_PORT (6070), as the reference server's debug port; each
 * one is an entry of DebugServer.endpoints (its path, its line in the index, its handler). Operators
 * expose this port only inside the cluster; it reveals the config and the descriptors callers send
 * (their values cut to a bounded length), nothing else.
 */

export interface DebugServerOptions extends HttpListenerOptions {
  /** Lines of the config in force; empty before the first load. */
  readonly rlconfig: () => readonly string[];
  /** The rule a descriptor matches, for /rlmatch; the endpoint answers 404 when absent. */
  readonly match?: (domain: string, entries: readonly Entry[]) => RuleMatch;
  readonly metrics?: MetricsExposition;
  /** The live view (TOP_ENABLED); /top, /top/rules and the page answer 404 when absent. */
  readonly top?: () => Promise<MergedTop>;
  /** Marks the descriptors a runtime override decides, in /top and on the page. */
  readonly overrideMarks?: OverrideMarks;
  /** Extra fields of /top/rules (the page shows `rlqs`, the quota streams, when given). */
  readonly topExtras?: () => Record<string, unknown>;
  /** The quota streams and shares, for /rlqs; the endpoint answers 404 when absent. */
  readonly quota?: () => RlqsView;
  /** This process's leases (`lease: true` limits on a shared store), for /leases; the endpoint answers 404 when absent. */
  readonly leases?: () => unknown;
  /** This process's region parts (`scope: global` limits), for /regions; the endpoint answers 404 when absent. */
  readonly regions?: () => unknown;
}

type Handler = (req: http.IncomingMessage, res: http.ServerResponse, path: string) => void;

/** One debug endpoint. */
interface Endpoint {
  readonly path: string;
  /** Its line in the index of `/`: what follows the path there; unlisted when undefined. */
  readonly index?: string;
  /** The methods it takes (others answer 405); undefined: the handler checks them. */
  readonly methods?: string;
  /** Undefined when this server does not serve it (the option it reads was not given): 404. */
  readonly handler: Handler | undefined;
}

export class DebugServer extends RoutedHttpServer {
  private readonly endpoints: ReadonlyMap<string, Endpoint>;

  constructor(private readonly options: DebugServerOptions) {
    super(options);
    const { match, quota, leases, regions, metrics, top } = options;
    const list: Endpoint[] = [
      // The live page of /top/rules when the live view is on, else the index of the endpoints.
      { path: '/', methods: 'GET, HEAD', handler: (_req, res) => this.root(res) },
      // ?domain=D&by=denied|allowed|near_limit&limit=N: who is being limited, the heaviest descriptors
      // of every rule over the recent window, merged across workers and replicas (JSON).
      { path: '/top', methods: 'GET, HEAD', handler: top && ((req, res, path) => this.top(req, res, path, top)) },
      // The same per rule, with each rule's limit, totals and steps (the page's data).
      { path: '/top/rules', methods: 'GET, HEAD', handler: top && ((_req, res) => this.topRules(res, top)) },
      // The loaded rules, one line per rule (src/config/describe.ts).
      {
        path: '/rlconfig',
        index: ': the rate-limit rules in force, one line per rule',
        methods: 'GET, HEAD',
        handler: (_req, res) => {
          const lines = this.options.rlconfig();
          send(res, 200, lines.length === 0 ? '' : lines.join('\n') + '\n');
        },
      },
      // ?domain=D&entry=k=v[&entry=k2=v2...]: which rule one descriptor matches, in JSON, with its whole
      // window (the wire's current_limit carries the unit but not unit_multiplier), and whether the
      // domain is loaded at all (`slidegate client` asks it).
      {
        path: '/rlmatch',
        index: '?domain=D&entry=k=v: the rule one descriptor matches, with its window (JSON)',
        methods: 'GET, HEAD',
        handler: match && ((req, res, path) => rlmatch(req, res, path, match)),
      },
      // The quota streams (RLQS) of this process and the shares of every rule they use, in JSON: each
      // proxy's demand, admitted rate and share on every replica, the counter's usage.
      {
        path: '/rlqs',
        index: ': quota streams (RLQS) and the shares of every rule they use (JSON)',
        methods: 'GET, HEAD',
        handler: quota && ((_req, res) => send(res, 200, JSON.stringify(quota(), null, 2) + '\n', 'application/json')),
      },
      // The leases of this process (`lease: true`), in JSON: each counter's part, demand, pending hits.
      {
        path: '/leases',
        index: ': leased limits held by this process, with their parts and demand (JSON)',
        methods: 'GET, HEAD',
        handler: leases && ((_req, res) => send(res, 200, JSON.stringify(leases(), null, 2) + '\n', 'application/json')),
      },
      // The global limits (`scope: global`) of this process, in JSON: each region's part, demand, last sync, cut-off state.
      {
        path: '/regions',
        index: ": global limits (scope: global) held by this process, with each region's part, demand and partition state (JSON)",
        methods: 'GET, HEAD',
        handler: regions && ((_req, res) => send(res, 200, JSON.stringify(regions(), null, 2) + '\n', 'application/json')),
      },
      // The Prometheus exposition (when metrics are given).
      { path: '/metrics', index: ': Prometheus metrics', handler: metrics && ((req, res) => sendMetrics(req, res, metrics, this.options.logger)) },
    ];
    this.endpoints = new Map(list.map((e) => [e.path, e]));
  }

  protected route(req: http.IncomingMessage, res: http.ServerResponse): void {
    const path = pathOf(req.url);
    const endpoint = this.endpoints.get(path);
    if (endpoint?.handler === undefined) {
      send(res, 404, 'not found\n');
      return;
    }
    if (endpoint.methods !== undefined && !allow(req, res, endpoint.methods)) return;
    endpoint.handler(req, res, path);
  }

  private root(res: http.ServerResponse): void {
    if (this.options.top === undefined) {
      send(res, 200, this.index());
      return;
    }
    res.setHeader('Content-Security-Policy', TOP_PAGE_CSP);
    res.setHeader('Cache-Control', 'no-store');
    send(res, 200, TOP_PAGE, 'text/html; charset=utf-8');
  }

  private top(req: http.IncomingMessage, res: http.ServerResponse, path: string, top: () => Promise<MergedTop>): void {
    const query = parseTopQuery(queryOf(req, path));
    if (typeof query === 'string') {
      send(res, 400, `${query}\nusage: ${path}?domain=D&by=denied|allowed|near_limit&limit=N\n`);
      return;
    }
    this.answerTop(res, top, (merged) => ({ ...topReport(merged.view, merged.replicas, query, this.options.overrideMarks), ...completeness(merged) }));
  }

  private topRules(res: http.ServerResponse, top: () => Promise<MergedTop>): void {
    this.answerTop(res, top, (merged) =>
      rulesReport(merged.view, merged.replicas, { ...completeness(merged), ...this.options.topExtras?.() }, this.options.overrideMarks),
    );
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

  /** The served endpoints that have a line in the index, one line each. */
  private index(): string {
    const lines: string[] = [];
    for (const { path, index, handler } of this.endpoints.values()) if (index !== undefined && handler !== undefined) lines.push(path + index);
    return lines.join('\n') + '\n';
  }
}

function rlmatch(req: http.IncomingMessage, res: http.ServerResponse, path: string, match: NonNullable<DebugServerOptions['match']>): void {
  const query = queryOf(req, path);
  const domain = query.get('domain');
  const entries = query.getAll('entry').map((e) => ({ key: e.slice(0, e.indexOf('=')), value: e.slice(e.indexOf('=') + 1) }));
  if (!domain || entries.length === 0 || entries.some((e) => e.key === '')) {
    send(res, 400, `usage: ${path}?domain=D&entry=key=value[&entry=key=value...]\n`);
    return;
  }
  send(res, 200, JSON.stringify(match(domain, entries)) + '\n', 'application/json');
}

/** The query of a request to `path`. */
function queryOf(req: http.IncomingMessage, path: string): URLSearchParams {
  return new URLSearchParams((req.url ?? '').slice(path.length + 1));
}

/** Marks a view that misses the other replicas (the shared store could not be read). */
function completeness(merged: MergedTop): { incomplete?: true } {
  return merged.complete ? {} : { incomplete: true };
}
