import type * as http from 'node:http';
import { InvalidRequestError, NotReadyError } from '../limiter/errors';
import { DEFAULT_PAGE_SIZE, OverrideCapError, type OverrideAdmin } from '../limiter/override-admin';
import { StoreUnavailableError } from '../limiter/store';
import { monotonicClock, type Clock, type Entry } from '../limiter/types';
import type { Logger } from '../log';
import type { AdminTokens } from './admin-tokens';
import { send } from './http-base';

/**
 * The override API on the HTTP port (PORT), JSON in and out, every request with `Authorization:
 * Bearer TOKEN` (ADMIN_TOKENS_FILE):
 * - PUT /v1/overrides {domain, descriptor, rate_limit, expires_at?, note?}: 200 and the override as stored;
 * - GET /v1/overrides?domain=D[&limit=N][&cursor=C]: {overrides, next}; ...&descriptor=K=V,K2=V2: one override, or 404;
 * - DELETE /v1/overrides {domain, descriptor}: 200 and the override removed, or 404.
 * No token or a wrong one: 401 and nothing more. A bad body or query: 400 naming the field. Past a
 * cap: 413 (OVERRIDES_MAX_BODY_BYTES), 429 (OVERRIDES_MAX_REQUESTS_PER_SECOND, per token and
 * process) or 507 (OVERRIDES_MAX, OVERRIDES_MAX_BYTES), each naming its cap; nothing stored changes.
 * The work is the core's (src/limiter/override-admin.ts); this module only translates.
 */

export const OVERRIDES_PATH = '/v1/overrides';

export interface OverridesApiOptions {
  readonly admin: OverrideAdmin;
  readonly tokens: AdminTokens;
  /** OVERRIDES_MAX_BODY_BYTES. */
  readonly maxBodyBytes: number;
  /** OVERRIDES_MAX_REQUESTS_PER_SECOND: per token, in this process; as many at once. */
  readonly maxRequestsPerSecond: number;
  readonly clock?: Clock;
}

/** A request body as text, or the answer that refused it (the HTTP server reads it against its budget). */
export type BodyRead = { readonly text: string } | { readonly status: 413 | 503; readonly message: string };
export type BodyReader = (req: http.IncomingMessage, res: http.ServerResponse, maxBytes: number, cap: string) => Promise<BodyRead>;

/** Each token's allowance of requests: a bucket of `rate` refilled at `rate` per second. */
class TokenRates {
  private readonly buckets = new Map<string, { tokens: number; atMs: number }>();

  constructor(
    private readonly rate: number,
    private readonly clock: Clock,
  ) {}

  take(name: string): boolean {
    const now = this.clock.nowMs();
    let b = this.buckets.get(name);
    if (b === undefined) {
      // One bucket per name of the tokens file (at most MAX_TOKENS, and those that were in it).
      if (this.buckets.size >= 10_000) this.buckets.clear();
      b = { tokens: this.rate, atMs: now };
      this.buckets.set(name, b);
    }
    b.tokens = Math.min(this.rate, b.tokens + ((now - b.atMs) * this.rate) / 1_000);
    b.atMs = now;
    if (b.tokens < 1) return false;
    b.tokens -= 1;
    return true;
  }
}

export class OverridesApi {
  private readonly rates: TokenRates;

  constructor(
    private readonly options: OverridesApiOptions,
    private readonly readBody: BodyReader,
    private readonly logger?: Logger,
  ) {
    this.rates = new TokenRates(options.maxRequestsPerSecond, options.clock ?? monotonicClock);
  }

  handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    res.setHeader('Cache-Control', 'no-store');
    const actor = this.options.tokens.check(req.headers.authorization);
    if (actor === undefined) {
      res.setHeader('WWW-Authenticate', 'Bearer');
      refuse(req, res, 401, { error: 'unauthorized' });
      return;
    }
    if (!this.rates.take(actor)) {
      res.setHeader('Retry-After', '1');
      refuse(req, res, 429, {
        error: `OVERRIDES_MAX_REQUESTS_PER_SECOND: more than ${this.options.maxRequestsPerSecond} requests per second with this token`,
        cap: 'OVERRIDES_MAX_REQUESTS_PER_SECOND',
      });
      return;
    }
    switch (req.method) {
      case 'GET':
      case 'HEAD':
        this.answer(res, this.get(req));
        return;
      case 'PUT':
        this.withBody(req, res, (body) => this.options.admin.put(body, actor));
        return;
      case 'DELETE':
        this.withBody(req, res, (body) => this.options.admin.remove(body, actor));
        return;
      default:
        res.setHeader('Allow', 'GET, HEAD, PUT, DELETE');
        refuse(req, res, 405, { error: 'method not allowed' });
    }
  }

  private get(req: http.IncomingMessage): Promise<object | undefined> {
    try {
      const url = req.url ?? '';
      const query = new URLSearchParams(url.includes('?') ? url.slice(url.indexOf('?') + 1) : '');
      const domain = query.get('domain') ?? '';
      if (domain === '') throw new InvalidRequestError('domain: required (?domain=D)');
      const entries = entriesOf(query);
      if (entries !== undefined) return this.options.admin.get(domain, entries);
      const limitText = query.get('limit');
      const limit = limitText === null ? DEFAULT_PAGE_SIZE : /^[0-9]{1,7}$/.test(limitText) ? Number(limitText) : NaN;
      return this.options.admin.list(domain, query.get('cursor') ?? undefined, limit);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  private withBody(req: http.IncomingMessage, res: http.ServerResponse, run: (body: unknown) => Promise<object | undefined>): void {
    this.readBody(req, res, this.options.maxBodyBytes, 'OVERRIDES_MAX_BODY_BYTES').then(
      (read) => {
        if (!('text' in read)) {
          if (read.status === 503) res.setHeader('Retry-After', '1');
          refuse(req, res, read.status, { error: read.message.trim(), ...(read.status === 413 ? { cap: 'OVERRIDES_MAX_BODY_BYTES' } : {}) });
          return;
        }
        let body: unknown;
        try {
          body = JSON.parse(read.text);
        } catch {
          sendJson(res, 400, { error: 'body: not JSON' });
          return;
        }
        let pending: Promise<object | undefined>;
        try {
          pending = run(body);
        } catch (err) {
          pending = Promise.reject(err);
        }
        this.answer(res, pending);
      },
      (err: unknown) => this.fail(res, err),
    );
  }

  private answer(res: http.ServerResponse, pending: Promise<object | undefined>): void {
    pending.then(
      (value) => {
        if (value === undefined) sendJson(res, 404, { error: 'no override for this descriptor' });
        else sendJson(res, 200, value);
      },
      (err: unknown) => this.fail(res, err),
    );
  }

  private fail(res: http.ServerResponse, err: unknown): void {
    if (err instanceof InvalidRequestError) sendJson(res, 400, { error: err.message });
    else if (err instanceof OverrideCapError) sendJson(res, 507, { error: err.message, cap: err.cap });
    else if (err instanceof NotReadyError || err instanceof StoreUnavailableError) {
      res.setHeader('Retry-After', '1');
      sendJson(res, 503, { error: err.message });
    } else {
      this.logger?.error({ err }, 'override API request failed');
      sendJson(res, 500, { error: 'internal error' });
    }
  }
}

/** The descriptor of a query: `descriptor=K=V,K2=V2`, or `entry=K=V` once per entry (for values holding a comma); undefined when neither. */
function entriesOf(query: URLSearchParams): Entry[] | undefined {
  const descriptor = query.get('descriptor');
  const items = descriptor !== null ? descriptor.split(',') : query.getAll('entry');
  if (descriptor === null && items.length === 0) return undefined;
  return items.map((item) => {
    const eq = item.indexOf('=');
    if (eq <= 0) throw new InvalidRequestError(`descriptor: expected K=V,K2=V2 (or entry=K=V per entry), got "${item.slice(0, 64)}"`);
    return { key: item.slice(0, eq), value: item.slice(eq + 1) };
  });
}

function sendJson(res: http.ServerResponse, status: number, value: object): void {
  send(res, status, `${JSON.stringify(value)}\n`, 'application/json');
}

/** Answers and closes the connection: a refused request's body is neither read nor kept. */
function refuse(req: http.IncomingMessage, res: http.ServerResponse, status: number, value: object): void {
  res.setHeader('Connection', 'close');
  sendJson(res, status, value);
  req.resume();
}
