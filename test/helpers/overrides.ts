import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

/** The override API as tests call it: JSON in and out over fetch, with a token. */

export interface ApiAnswer {
  readonly status: number;
  readonly body: any;
  readonly headers: Headers;
}

export interface OverridesClient {
  put(override: object): Promise<ApiAnswer>;
  get(query: string): Promise<ApiAnswer>;
  del(target: object): Promise<ApiAnswer>;
  /** Any request, raw: method, path and query, headers, body text. */
  raw(method: string, pathAndQuery: string, options?: { headers?: Record<string, string>; body?: string }): Promise<ApiAnswer>;
}

/** A client of the API on 127.0.0.1:`port` sending `token` (none: no Authorization header). */
export function overridesClient(port: number, token: string | undefined): OverridesClient {
  const raw = async (method: string, pathAndQuery: string, options: { headers?: Record<string, string>; body?: string } = {}): Promise<ApiAnswer> => {
    const headers: Record<string, string> = { ...(token === undefined ? {} : { authorization: `Bearer ${token}` }), ...options.headers };
    if (options.body !== undefined) headers['content-type'] ??= 'application/json';
    const res = await fetch(`http://127.0.0.1:${port}${pathAndQuery}`, { method, headers, body: options.body });
    const text = await res.text();
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {
      // Not JSON (a 404 of a server without the API): the text.
    }
    return { status: res.status, body, headers: res.headers };
  };
  return {
    raw,
    put: (override) => raw('PUT', '/v1/overrides', { body: JSON.stringify(override) }),
    get: (query) => raw('GET', `/v1/overrides?${query}`),
    del: (target) => raw('DELETE', '/v1/overrides', { body: JSON.stringify(target) }),
  };
}

/** A tokens file (ADMIN_TOKENS_FILE) in a fresh directory: `NAME TOKEN` per pair; rewrite() replaces its lines. */
export function tokensFile(tokens: Record<string, string>): { path: string; rewrite(tokens: Record<string, string>): void; remove(): void } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'slidegate-tokens-'));
  const file = path.join(dir, 'tokens');
  const write = (t: Record<string, string>): void =>
    fs.writeFileSync(
      file,
      `# test tokens\n${Object.entries(t)
        .map(([name, token]) => `${name} ${token}\n`)
        .join('')}`,
    );
  write(tokens);
  return { path: file, rewrite: write, remove: () => fs.rmSync(dir, { recursive: true, force: true }) };
}

/** Polls `check` every 20 ms until it holds; resolves to the ms it took, or rejects naming `what` past `timeoutMs`. */
export async function within(what: string, timeoutMs: number, check: () => Promise<boolean>): Promise<number> {
  const started = performance.now();
  for (;;) {
    if (await check()) return performance.now() - started;
    if (performance.now() - started > timeoutMs) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
