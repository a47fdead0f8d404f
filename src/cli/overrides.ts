import * as http from 'node:http';
import * as https from 'node:https';
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { parse as parseYaml } from 'yaml';
import type { CliIo } from './io';
import { parseDescriptor } from './client';

/**
 * `slidegate overrides set|get|list|delete|import`: the override API on the HTTP port
 * (src/http/overrides-api.ts), with the token in SLIDEGATE_ADMIN_TOKEN (never an argument: a
 * command line is readable by every user of the machine). `import` sends a file of overrides
 * (YAML, or NDJSON: one JSON object per line) on parallel keep-alive connections, waiting out the
 * API's 429 and 503 answers, and prints how many it applied, how fast, and each one refused.
 */

export const OVERRIDES_USAGE = [
  'usage: slidegate overrides <set|get|list|delete|import> [options]   (token: SLIDEGATE_ADMIN_TOKEN)',
  '  set     --domain D --descriptor k=v[,k=v] --rate-limit YAML [--expires-at RFC3339] [--note TEXT]',
  '  get     --domain D --descriptor k=v[,k=v]',
  '  list    --domain D [--limit N]            every override of the domain, one JSON line each',
  '  delete  --domain D --descriptor k=v[,k=v]',
  '  import  FILE [--concurrency N]            a YAML list (or {overrides: [...]}) or NDJSON file of overrides',
  '  common: --url URL (the HTTP port; default http://127.0.0.1:8080), --timeout-ms MS (default 10000)',
].join('\n');

export const OVERRIDES_HELP = [
  OVERRIDES_USAGE,
  '',
  '  An override replaces the rate limit of exactly one descriptor of a domain, on every replica sharing the',
  "  store, within OVERRIDES_SYNC_INTERVAL. --rate-limit takes what a config file's rate_limit takes, as YAML",
  '  or JSON: --rate-limit "{unit: minute, requests_per_unit: 100}". Each answer is printed as JSON.',
  "  Exit 0 on success, 3 when get or delete finds no override, 1 on any error (the API's message printed).",
  '  An import file holds objects of the API\'s shape: {domain, descriptor: [{key, value}] or "k=v,k2=v2",',
  '  rate_limit, expires_at, note}. It exits 1 when any of them was refused.',
].join('\n');

export const OVERRIDES_EXIT = Object.freeze({ ok: 0, error: 1, notFound: 3 });

const DEFAULT_URL = 'http://127.0.0.1:8080';
const PATH = '/v1/overrides';
/** Retries of one import item refused for a while (429, 503), each after the API's Retry-After. */
const IMPORT_RETRIES = 30;
/** Refusals printed at most (the count says the rest). */
const MAX_PRINTED_FAILURES = 100;

interface Answer {
  readonly status: number;
  readonly body: unknown;
  /** Seconds the API asks to wait (Retry-After), when it says. */
  readonly retryAfterS: number | undefined;
}

/** The API over one keep-alive agent. */
class ApiClient {
  private readonly agent: http.Agent;
  private readonly base: URL;

  constructor(
    url: string,
    private readonly token: string,
    private readonly timeoutMs: number,
    connections: number,
  ) {
    this.base = new URL(url);
    if (this.base.protocol !== 'http:' && this.base.protocol !== 'https:') throw new Error(`--url: expected http:// or https://, got ${url}`);
    const Agent = this.base.protocol === 'https:' ? https.Agent : http.Agent;
    this.agent = new Agent({ keepAlive: true, maxSockets: connections });
  }

  request(method: string, query: string, body?: unknown): Promise<Answer> {
    const text = body === undefined ? undefined : JSON.stringify(body);
    const transport = this.base.protocol === 'https:' ? https : http;
    return new Promise((resolve, reject) => {
      const req = transport.request(
        new URL(`${PATH}${query}`, this.base),
        {
          method,
          agent: this.agent,
          timeout: this.timeoutMs,
          headers: {
            authorization: `Bearer ${this.token}`,
            ...(text === undefined ? {} : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) }),
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => {
            const raw = Buffer.concat(chunks).toString('utf8');
            let parsed: unknown = raw.trim();
            try {
              parsed = JSON.parse(raw);
            } catch {
              // A plain-text answer (a 404 of a server without the API): kept as text.
            }
            const retry = Number(res.headers['retry-after']);
            resolve({ status: res.statusCode ?? 0, body: parsed, retryAfterS: Number.isFinite(retry) ? retry : undefined });
          });
          res.on('error', reject);
        },
      );
      req.on('timeout', () => req.destroy(new Error(`no answer within ${this.timeoutMs} ms`)));
      req.on('error', reject);
      req.end(text);
    });
  }

  close(): void {
    this.agent.destroy();
  }
}

/** The error an answer carries, as one line. */
function errorOf(answer: Answer): string {
  const body = answer.body as { error?: unknown } | string;
  const message = typeof body === 'object' && body !== null && typeof body.error === 'string' ? body.error : String(body);
  if (answer.status === 404 && typeof body === 'string') return `HTTP 404: ${message} (is ADMIN_TOKENS_FILE set on the service?)`;
  return `HTTP ${answer.status}: ${message}`;
}

/** `slidegate overrides ...`; resolves to its exit code. */
export async function runOverrides(args: readonly string[], io: CliIo, env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const [command, ...rest] = args;
  let values: Record<string, string | undefined>;
  let positionals: string[];
  try {
    const parsed = parseArgs({
      args: rest,
      allowPositionals: command === 'import',
      options: {
        url: { type: 'string', default: DEFAULT_URL },
        'timeout-ms': { type: 'string', default: '10000' },
        domain: { type: 'string' },
        descriptor: { type: 'string' },
        'rate-limit': { type: 'string' },
        'expires-at': { type: 'string' },
        note: { type: 'string' },
        limit: { type: 'string' },
        concurrency: { type: 'string', default: '16' },
      },
    });
    values = parsed.values as Record<string, string | undefined>;
    positionals = parsed.positionals;
  } catch (err) {
    io.err(`${(err as Error).message}\n${OVERRIDES_USAGE}`);
    return OVERRIDES_EXIT.error;
  }
  const token = env.SLIDEGATE_ADMIN_TOKEN;
  if (token === undefined || token === '') {
    io.err(`SLIDEGATE_ADMIN_TOKEN is not set: it holds the token the service knows from its ADMIN_TOKENS_FILE\n${OVERRIDES_USAGE}`);
    return OVERRIDES_EXIT.error;
  }
  const timeoutMs = Number(values['timeout-ms']);
  const concurrency = Number(values.concurrency);
  if (!Number.isInteger(timeoutMs) || timeoutMs <= 0 || !Number.isInteger(concurrency) || concurrency < 1 || concurrency > 256) {
    io.err(`--timeout-ms and --concurrency (1 to 256) take positive integers\n${OVERRIDES_USAGE}`);
    return OVERRIDES_EXIT.error;
  }
  let api: ApiClient;
  try {
    api = new ApiClient(values.url!, token, timeoutMs, command === 'import' ? concurrency : 1);
  } catch (err) {
    io.err((err as Error).message);
    return OVERRIDES_EXIT.error;
  }
  try {
    switch (command) {
      case 'set':
        return await set(api, values, io);
      case 'get':
      case 'delete':
        return await one(api, command, values, io);
      case 'list':
        return await list(api, values, io);
      case 'import':
        if (positionals.length !== 1) throw new UsageError('import takes one FILE');
        return await importFile(api, positionals[0], concurrency, io);
      default:
        throw new UsageError(command === undefined ? 'a subcommand is required' : `unknown subcommand "${command}"`);
    }
  } catch (err) {
    io.err(err instanceof UsageError ? `${err.message}\n${OVERRIDES_USAGE}` : `${values.url}: ${(err as Error).message}`);
    return OVERRIDES_EXIT.error;
  } finally {
    api.close();
  }
}

class UsageError extends Error {}

function required(values: Record<string, string | undefined>, name: string): string {
  const v = values[name];
  if (v === undefined || v === '') throw new UsageError(`--${name} is required`);
  return v;
}

function target(values: Record<string, string | undefined>): { domain: string; descriptor: { key: string; value: string }[] } {
  const domain = required(values, 'domain');
  try {
    return { domain, descriptor: parseDescriptor(required(values, 'descriptor')) };
  } catch (err) {
    throw new UsageError(`--descriptor: ${(err as Error).message}`);
  }
}

async function set(api: ApiClient, values: Record<string, string | undefined>, io: CliIo): Promise<number> {
  const body: Record<string, unknown> = { ...target(values) };
  let rateLimit: unknown;
  try {
    rateLimit = parseYaml(required(values, 'rate-limit'));
  } catch (err) {
    throw err instanceof UsageError ? err : new UsageError(`--rate-limit: not YAML or JSON: ${(err as Error).message.split('\n')[0]}`);
  }
  body.rate_limit = rateLimit;
  if (values['expires-at'] !== undefined) body.expires_at = values['expires-at'];
  if (values.note !== undefined) body.note = values.note;
  return printed(await api.request('PUT', '', body), io);
}

async function one(api: ApiClient, command: 'get' | 'delete', values: Record<string, string | undefined>, io: CliIo): Promise<number> {
  const { domain, descriptor } = target(values);
  const answer =
    command === 'delete'
      ? await api.request('DELETE', '', { domain, descriptor })
      : await api.request('GET', `?${new URLSearchParams([['domain', domain], ...descriptor.map((e): [string, string] => ['entry', `${e.key}=${e.value}`])])}`);
  if (answer.status === 404 && typeof answer.body === 'object') {
    io.err(`no override of this descriptor in domain "${domain}"`);
    return OVERRIDES_EXIT.notFound;
  }
  return printed(answer, io);
}

async function list(api: ApiClient, values: Record<string, string | undefined>, io: CliIo): Promise<number> {
  const domain = required(values, 'domain');
  const limit = values.limit ?? '1000';
  let cursor: string | null = null;
  do {
    const query: string = `?${new URLSearchParams([['domain', domain], ['limit', limit], ...(cursor === null ? [] : [['cursor', cursor] as [string, string]])])}`;
    const answer = await api.request('GET', query);
    if (answer.status !== 200) {
      io.err(errorOf(answer));
      return OVERRIDES_EXIT.error;
    }
    const page = answer.body as { overrides: unknown[]; next: string | null };
    for (const o of page.overrides) io.out(JSON.stringify(o));
    cursor = page.next;
  } while (cursor !== null);
  return OVERRIDES_EXIT.ok;
}

function printed(answer: Answer, io: CliIo): number {
  if (answer.status !== 200) {
    io.err(errorOf(answer));
    return OVERRIDES_EXIT.error;
  }
  io.out(JSON.stringify(answer.body));
  return OVERRIDES_EXIT.ok;
}

/** The overrides of an import file, each with where it was (a line of NDJSON, an item of YAML). */
export function readImport(text: string): { readonly at: string; readonly override: unknown }[] {
  const lines = text.split('\n');
  const filled = lines.map((l, i) => ({ line: l.trim(), at: i + 1 })).filter((l) => l.line !== '' && !l.line.startsWith('#'));
  // NDJSON: every line an object. Anything else is read as YAML (which JSON is too).
  if (filled.length > 0 && filled.every((l) => l.line.startsWith('{') && l.line.endsWith('}'))) {
    try {
      return filled.map((l) => ({ at: `line ${l.at}`, override: JSON.parse(l.line) as unknown }));
    } catch {
      // Not NDJSON after all (a YAML flow mapping per line): read as YAML below.
    }
  }
  const doc = parseYaml(text) as unknown;
  const items = Array.isArray(doc) ? doc : (doc as { overrides?: unknown } | null)?.overrides;
  if (!Array.isArray(items)) throw new UsageError('an import file is a YAML list of overrides, {overrides: [...]}, or one JSON object per line');
  return items.map((override, i) => ({ at: `item ${i}`, override }));
}

/** An import item as the API takes it: a descriptor written `k=v,k2=v2` becomes its entries. */
function apiShape(override: unknown): unknown {
  if (typeof override !== 'object' || override === null) return override;
  const o = override as Record<string, unknown>;
  return typeof o.descriptor === 'string' ? { ...o, descriptor: parseDescriptor(o.descriptor) } : o;
}

async function importFile(api: ApiClient, file: string, concurrency: number, io: CliIo): Promise<number> {
  let items: { at: string; override: unknown }[];
  try {
    items = readImport(await readFile(file, 'utf8'));
  } catch (err) {
    throw new UsageError(`${file}: ${(err as Error).message.split('\n')[0]}`);
  }
  const started = performance.now();
  let next = 0;
  let applied = 0;
  const failures: string[] = [];
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const { at, override } = items[next++];
      let body: unknown;
      try {
        body = apiShape(override);
      } catch (err) {
        failures.push(`${at}: ${(err as Error).message}`);
        continue;
      }
      for (let attempt = 0; ; attempt++) {
        let answer: Answer;
        try {
          answer = await api.request('PUT', '', body);
        } catch (err) {
          // A connection cut under a request (the server closed a kept-alive one): sent again on another.
          if (attempt < IMPORT_RETRIES) continue;
          failures.push(`${at}: ${(err as Error).message}`);
          break;
        }
        if (answer.status === 200) {
          applied++;
          break;
        }
        // Throttled or busy: wait as asked, then again.
        if ((answer.status === 429 || answer.status === 503) && attempt < IMPORT_RETRIES) {
          await new Promise((r) => setTimeout(r, 1_000 * Math.min(answer.retryAfterS ?? 1, 10) * (0.5 + Math.random() / 2)));
          continue;
        }
        failures.push(`${at}: ${errorOf(answer)}`);
        break;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, items.length) }, worker));
  const seconds = (performance.now() - started) / 1000;
  for (const f of failures.slice(0, MAX_PRINTED_FAILURES)) io.err(f);
  if (failures.length > MAX_PRINTED_FAILURES) io.err(`... and ${failures.length - MAX_PRINTED_FAILURES} more refused`);
  io.out(
    `imported ${applied} of ${items.length} overrides in ${seconds.toFixed(2)} s (${Math.round(applied / Math.max(seconds, 1e-3))} per second)${failures.length > 0 ? `; ${failures.length} refused` : ''}`,
  );
  return failures.length === 0 ? OVERRIDES_EXIT.ok : OVERRIDES_EXIT.error;
}
