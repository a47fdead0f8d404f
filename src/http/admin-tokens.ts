import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync, statSync, realpathSync } from 'node:fs';

/**
 * ADMIN_TOKENS_FILE: who may change runtime overrides. One token per line, `NAME TOKEN` (blank lines
 * and lines starting with `#` aside); NAME is what every change is logged under. The file is read at
 * start (a bad one stops the start, naming the file and the line) and read again whenever it changes
 * (its resolved path, inode, size or time: a Kubernetes Secret swaps a link): a bad new version keeps
 * the tokens in force and is logged. Removing a line revokes that token within a second.
 *
 * A token is checked against every token of the file, each comparison on SHA-256 digests of equal
 * length with timingSafeEqual and none cut short: how long a check takes says nothing of how much
 * of a token was right, nor of which one matched.
 */

/** Bytes of the file at most; tokens at most; a token's characters at least and at most. */
export const MAX_TOKENS_FILE_BYTES = 1024 * 1024;
export const MAX_TOKENS = 1_000;
export const MIN_TOKEN_CHARS = 16;
export const MAX_TOKEN_CHARS = 4_096;
const NAME = /^[A-Za-z0-9][A-Za-z0-9_.@:-]{0,63}$/;
const TOKEN = /^[\x21-\x7e]+$/;

/** A bad tokens file: names the file and the line. */
export class AdminTokensError extends Error {
  constructor(file: string, line: number, detail: string) {
    super(`ADMIN_TOKENS_FILE ${file}${line > 0 ? `: line ${line}` : ''}: ${detail}`);
    this.name = 'AdminTokensError';
  }
}

interface Token {
  readonly name: string;
  readonly digest: Buffer;
}

/** The tokens of a file, read again when it changes. */
export class AdminTokens {
  private tokens: readonly Token[];
  private fingerprint: string;
  private timer: NodeJS.Timeout | undefined;

  private constructor(
    private readonly file: string,
    tokens: readonly Token[],
    fingerprint: string,
  ) {
    this.tokens = tokens;
    this.fingerprint = fingerprint;
  }

  /** Reads the file; throws AdminTokensError naming the file (and the line) when it cannot be used. */
  static load(file: string): AdminTokens {
    const tokens = readTokens(file);
    try {
      return new AdminTokens(file, tokens, fingerprintOf(file));
    } catch (err) {
      throw new AdminTokensError(file, 0, (err as Error).message);
    }
  }

  /** The names of the tokens in force. */
  get names(): readonly string[] {
    return this.tokens.map((t) => t.name);
  }

  /** The name of the token an `Authorization` header carries (`Bearer TOKEN`), or undefined: none, or not one of the file's. */
  check(authorization: string | undefined): string | undefined {
    if (authorization === undefined || authorization.length > MAX_TOKEN_CHARS + 16) return undefined;
    const m = /^Bearer[ ]+(\S+)\s*$/i.exec(authorization);
    // A header that is no bearer token is checked all the same (against a digest of nothing): no answer comes sooner.
    const digest = sha256(m === null ? '' : m[1]);
    let name: string | undefined;
    for (const t of this.tokens) {
      if (timingSafeEqual(digest, t.digest) && m !== null) name = t.name;
    }
    return name;
  }

  /** Reads the file again whenever it changes (polled every `intervalMs`); `onError` hears of a new version that cannot be used. */
  watch(intervalMs: number, events: { onReload?: (names: readonly string[]) => void; onError?: (err: Error) => void }): void {
    if (this.timer !== undefined) return;
    let lastError: string | undefined;
    this.timer = setInterval(() => {
      let fingerprint: string;
      try {
        fingerprint = fingerprintOf(this.file);
      } catch (err) {
        fingerprint = `unreadable: ${(err as Error).message}`;
      }
      if (fingerprint === this.fingerprint) return;
      try {
        this.tokens = readTokens(this.file);
        this.fingerprint = fingerprint;
        lastError = undefined;
        events.onReload?.(this.names);
      } catch (err) {
        // Said once per version of the file; the tokens in force stay.
        const message = (err as Error).message;
        if (message !== lastError) events.onError?.(err as Error);
        lastError = message;
      }
    }, intervalMs);
    this.timer.unref();
  }

  close(): void {
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
  }
}

function sha256(text: string): Buffer {
  return createHash('sha256').update(text).digest();
}

function fingerprintOf(file: string): string {
  const s = statSync(file);
  return `${realpathSync(file)}:${s.ino}:${s.size}:${s.mtimeMs}:${s.ctimeMs}`;
}

function readTokens(file: string): Token[] {
  let text: string;
  try {
    if (statSync(file).size > MAX_TOKENS_FILE_BYTES) throw new AdminTokensError(file, 0, `larger than ${MAX_TOKENS_FILE_BYTES} bytes`);
    text = readFileSync(file, 'utf8');
  } catch (err) {
    if (err instanceof AdminTokensError) throw err;
    throw new AdminTokensError(file, 0, (err as Error).message);
  }
  const tokens: Token[] = [];
  const names = new Set<string>();
  const digests = new Set<string>();
  text.split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const parts = line.split(/\s+/);
    if (parts.length !== 2) throw new AdminTokensError(file, i + 1, 'expected NAME TOKEN');
    const [name, token] = parts;
    if (!NAME.test(name)) throw new AdminTokensError(file, i + 1, 'a NAME is 1 to 64 letters, digits and _.@:- (starting with a letter or digit)');
    if (names.has(name)) throw new AdminTokensError(file, i + 1, `the name ${name} is given twice`);
    if (!TOKEN.test(token) || token.length < MIN_TOKEN_CHARS || token.length > MAX_TOKEN_CHARS) {
      throw new AdminTokensError(file, i + 1, `a TOKEN is ${MIN_TOKEN_CHARS} to ${MAX_TOKEN_CHARS} printable characters without spaces`);
    }
    const digest = sha256(token);
    if (digests.has(digest.toString('hex'))) throw new AdminTokensError(file, i + 1, 'a token given twice (one token, one name)');
    if (tokens.length >= MAX_TOKENS) throw new AdminTokensError(file, i + 1, `more than ${MAX_TOKENS} tokens`);
    names.add(name);
    digests.add(digest.toString('hex'));
    tokens.push({ name, digest });
  });
  return tokens;
}
