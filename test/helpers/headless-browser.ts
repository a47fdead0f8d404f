import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable, Writable } from 'node:stream';

/**
 * A real headless browser for page tests: Debian's `chromium`, driven over the DevTools protocol
 * on a pipe (--remote-debugging-pipe: JSON messages separated by NUL on fds 3 and 4), so nothing
 * beyond the browser itself is needed. A missing browser fails the test loudly (`make tools`
 * installs it); it never skips.
 */

const BROWSERS = ['chromium', 'chromium-browser'];

/** The browser binary, or a clear error. */
export function browserBinary(): string {
  for (const bin of BROWSERS) {
    try {
      execFileSync(bin, ['--version'], { stdio: 'ignore' });
      return bin;
    } catch {
      // try the next name
    }
  }
  throw new Error('chromium is not installed: the page tests need it (make tools, or apt-get install chromium)');
}

interface Reply {
  readonly id?: number;
  readonly result?: Record<string, unknown>;
  readonly error?: { readonly message: string };
}

/** One page in a headless browser. */
export interface BrowserPage {
  /** The value of a JavaScript expression evaluated in the page (awaited when it is a promise). */
  evaluate<T>(expression: string): Promise<T>;
  /** Polls `expression` until it is truthy; rejects with `what` after `timeoutMs`. */
  waitFor<T>(expression: string, what: string, timeoutMs?: number): Promise<T>;
  /** A PNG of the page as it is shown now. */
  screenshot(): Promise<Buffer>;
  close(): Promise<void>;
}

/** Opens `url` in a fresh headless browser of the given viewport size. */
export async function openPage(url: string, viewport = { width: 1200, height: 900 }): Promise<BrowserPage> {
  const profile = mkdtempSync(join(tmpdir(), 'slidegate-browser-'));
  const child: ChildProcess = spawn(
    browserBinary(),
    [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--no-first-run',
      '--disable-extensions',
      '--disable-background-networking',
      '--disable-background-timer-throttling',
      '--disable-renderer-backgrounding',
      '--remote-debugging-pipe',
      `--user-data-dir=${profile}`,
      `--window-size=${viewport.width},${viewport.height}`,
      'about:blank',
    ],
    { stdio: ['ignore', 'ignore', 'ignore', 'pipe', 'pipe'] },
  );
  const input = child.stdio[3] as Writable;
  const output = child.stdio[4] as Readable;
  const waiting = new Map<number, (reply: Reply) => void>();
  let buffered = Buffer.alloc(0);
  let nextId = 0;
  let exited = false;
  const exit = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  void exit.then(() => {
    exited = true;
    for (const settle of waiting.values()) settle({ error: { message: 'the browser exited' } });
    waiting.clear();
  });
  output.on('data', (chunk: Buffer) => {
    buffered = Buffer.concat([buffered, chunk]);
    for (let end = buffered.indexOf(0); end >= 0; end = buffered.indexOf(0)) {
      const reply = JSON.parse(buffered.subarray(0, end).toString('utf8')) as Reply;
      buffered = buffered.subarray(end + 1);
      if (reply.id !== undefined) {
        waiting.get(reply.id)?.(reply);
        waiting.delete(reply.id);
      }
    }
  });
  const send = (method: string, params: Record<string, unknown> = {}, sessionId?: string): Promise<Record<string, unknown>> =>
    new Promise((resolve, reject) => {
      if (exited) return reject(new Error(`${method}: the browser exited`));
      const id = ++nextId;
      waiting.set(id, (reply) => (reply.error !== undefined ? reject(new Error(`${method}: ${reply.error.message}`)) : resolve(reply.result ?? {})));
      input.write(JSON.stringify(sessionId === undefined ? { id, method, params } : { id, method, params, sessionId }) + '\0');
    });
  const close = async (): Promise<void> => {
    if (!exited) {
      await send('Browser.close').catch(() => undefined);
      const killer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exit;
      clearTimeout(killer);
    }
    rmSync(profile, { recursive: true, force: true });
  };
  try {
    const { targetId } = (await send('Target.createTarget', { url })) as { targetId: string };
    const { sessionId } = (await send('Target.attachToTarget', { targetId, flatten: true })) as { sessionId: string };
    await send('Emulation.setDeviceMetricsOverride', { width: viewport.width, height: viewport.height, deviceScaleFactor: 1, mobile: false }, sessionId);
    const evaluate = async <T>(expression: string): Promise<T> => {
      const result = (await send('Runtime.evaluate', { expression, returnByValue: true, awaitPromise: true }, sessionId)) as {
        result: { value?: T };
        exceptionDetails?: { text: string; exception?: { description?: string } };
      };
      if (result.exceptionDetails !== undefined) {
        throw new Error(`${expression}: ${result.exceptionDetails.exception?.description ?? result.exceptionDetails.text}`);
      }
      return result.result.value as T;
    };
    return {
      evaluate,
      async waitFor<T>(expression: string, what: string, timeoutMs = 10_000): Promise<T> {
        const deadline = Date.now() + timeoutMs;
        for (;;) {
          const value = await evaluate<T>(expression);
          if (value) return value;
          if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
      },
      async screenshot(): Promise<Buffer> {
        const { data } = (await send('Page.captureScreenshot', { format: 'png', captureBeyondViewport: true }, sessionId)) as { data: string };
        return Buffer.from(data, 'base64');
      },
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}
