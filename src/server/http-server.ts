import * as http from 'node:http';
import { classify, InvalidRequestError, publicMessage } from '../errors';
import type { RateLimitRequest, RateLimitResponse, Unit } from '../limiter/types';
import type { Logger } from '../log';
import { durationFromMs, requestFromWire } from './convert';
import { allow, pathOf, RoutedHttpServer, send, sendMetrics, type MetricsExposition } from './http-base';
import type { WireDescriptor, WireRateLimitRequest, WireUnitName } from './proto';

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

/* ---------- proto JSON <-> limiter types ---------- */

type Json = Record<string, unknown>;

const REQUEST_FIELDS = new Set(['domain', 'descriptors', 'hitsAddend']);
const DESCRIPTOR_FIELDS = new Set(['entries', 'limit', 'hitsAddend']);
const ENTRY_FIELDS = new Set(['key', 'value']);
const LIMIT_FIELDS = new Set(['requestsPerUnit', 'unit']);

/** lower_snake_case -> lowerCamelCase; proto JSON parsers accept both spellings of a field. */
function camel(name: string): string {
  return name.includes('_') ? name.replace(/_([a-z0-9])/g, (_m, c: string) => c.toUpperCase()) : name;
}

/** The object's fields under their camelCase names; rejects unknown and duplicate fields. */
function fields(value: unknown, where: string, known: ReadonlySet<string>): Map<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new InvalidRequestError(`${where}: expected an object`);
  const out = new Map<string, unknown>();
  for (const [name, v] of Object.entries(value as Json)) {
    const key = camel(name);
    if (!known.has(key)) throw new InvalidRequestError(`${where}: unknown field "${name}"`);
    if (out.has(key)) throw new InvalidRequestError(`${where}: field "${name}" given twice`);
    // proto JSON: null means "default value".
    if (v !== null) out.set(key, v);
  }
  return out;
}

function string(value: unknown, where: string): string {
  if (value === undefined) return '';
  if (typeof value !== 'string') throw new InvalidRequestError(`${where}: expected a string`);
  return value;
}

/** A uint32/uint64 field: a JSON number or a decimal string, as proto JSON allows. */
function count(value: unknown, where: string): number {
  if (value === undefined) return 0;
  const n = typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < 0) throw new InvalidRequestError(`${where}: expected a non-negative integer`);
  return n;
}

function array(value: unknown, where: string): unknown[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) throw new InvalidRequestError(`${where}: expected an array`);
  return value;
}

function descriptorFromJson(value: unknown, where: string): WireDescriptor {
  const f = fields(value, where, DESCRIPTOR_FIELDS);
  const entries = array(f.get('entries'), `${where}.entries`).map((e, j) => {
    const ef = fields(e, `${where}.entries[${j}]`, ENTRY_FIELDS);
    return { key: string(ef.get('key'), `${where}.entries[${j}].key`), value: string(ef.get('value'), `${where}.entries[${j}].value`) };
  });
  const out: WireDescriptor = { entries };
  const limit = f.get('limit');
  if (limit !== undefined) {
    const lf = fields(limit, `${where}.limit`, LIMIT_FIELDS);
    const unit = lf.get('unit') ?? 'UNKNOWN';
    if (typeof unit !== 'string' && typeof unit !== 'number') throw new InvalidRequestError(`${where}.limit.unit: expected a unit name`);
    out.limit = {
      requestsPerUnit: count(lf.get('requestsPerUnit'), `${where}.limit.requests_per_unit`),
      unit: typeof unit === 'string' ? (unit.toUpperCase() as WireUnitName) : unit,
    };
  }
  // google.protobuf.UInt64Value is a bare number (or string) in proto JSON; the object form is accepted too.
  const hits = f.get('hitsAddend');
  if (hits !== undefined) {
    const v = typeof hits === 'object' && hits !== null && !Array.isArray(hits) ? (hits as Json).value : hits;
    out.hitsAddend = { value: count(v, `${where}.hits_addend`) };
  }
  return out;
}

/** A proto-JSON RateLimitRequest as the limiter's request. Throws InvalidRequestError naming the bad field. */
export function requestFromJson(body: string): RateLimitRequest {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch (err) {
    throw new InvalidRequestError(`invalid JSON: ${(err as Error).message}`);
  }
  const f = fields(parsed, 'request', REQUEST_FIELDS);
  const wire: WireRateLimitRequest = {
    domain: string(f.get('domain'), 'domain'),
    descriptors: array(f.get('descriptors'), 'descriptors').map((d, i) => descriptorFromJson(d, `descriptors[${i}]`)),
    hitsAddend: count(f.get('hitsAddend'), 'hits_addend'),
  };
  return requestFromWire(wire);
}

const UNIT_NAME: Readonly<Record<Unit, WireUnitName>> = {
  second: 'SECOND',
  minute: 'MINUTE',
  hour: 'HOUR',
  day: 'DAY',
  week: 'WEEK',
  month: 'MONTH',
  year: 'YEAR',
};

/** A Duration in proto JSON: seconds with 0 or 3 fractional digits and an "s" suffix ("1s", "1.500s"). */
function durationJson(ms: number): string {
  const d = durationFromMs(ms);
  const millis = d.nanos / 1_000_000;
  return millis === 0 ? `${d.seconds}s` : `${d.seconds}.${String(millis).padStart(3, '0')}s`;
}

/** The limiter's response in proto JSON; fields with default values are left out, as proto JSON does. */
export function responseToJson(response: RateLimitResponse): Json {
  const statuses = response.statuses.map((s) => {
    const out: Json = { code: s.code };
    if (s.currentLimit !== undefined) {
      const cl: Json = { requestsPerUnit: s.currentLimit.requestsPerUnit, unit: UNIT_NAME[s.currentLimit.unit] };
      if (s.currentLimit.name) cl.name = s.currentLimit.name;
      out.currentLimit = cl;
    }
    if (s.limitRemaining > 0) out.limitRemaining = s.limitRemaining;
    if (s.durationUntilResetMs !== undefined) out.durationUntilReset = durationJson(s.durationUntilResetMs);
    return out;
  });
  const json: Json = { overallCode: response.overallCode === 'OVER_LIMIT' ? 'OVER_LIMIT' : 'OK', statuses };
  if (response.responseHeaders.length > 0) json.responseHeadersToAdd = response.responseHeaders.map((h) => ({ key: h.key, value: h.value }));
  // A Struct's proto JSON is the plain object itself.
  if (response.dynamicMetadata !== undefined) json.dynamicMetadata = response.dynamicMetadata as Json;
  return json;
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
