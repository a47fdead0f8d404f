import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { LOOPBACK_ANY_PORT } from '../../helpers/service';

/**
 * The built service (dist/src/main.js) names every reference variable it does not support in one warning
 * line at start, and says when it runs on the per-process embedded store.
 */

const MAIN_JS = path.resolve(__dirname, '../../../dist/src/main.js');

interface LogLine {
  readonly level: number;
  readonly msg: string;
}

/** Starts the service and resolves with its log lines once it listens (or rejects if it exits first). */
function startLogged(env: Record<string, string>): Promise<{ child: ChildProcess; lines: LogLine[] }> {
  if (!fs.existsSync(MAIN_JS)) throw new Error(`${MAIN_JS} is missing: build first (npx tsc -p tsconfig.json)`);
  const configDir = fs.mkdtempSync(path.join(os.tmpdir(), 'slidegate-warn-'));
  // A config with a rule: an empty directory has a warning of its own (every request would be allowed).
  fs.writeFileSync(path.join(configDir, 'edge.yaml'), 'domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n');
  const child = spawn(process.execPath, [MAIN_JS], {
    env: {
      PATH: process.env.PATH,
      CONFIG_PATH: configDir,
      ...LOOPBACK_ANY_PORT,
      USE_STATSD: 'false',
      WARM_UP_CALLS: '0',
      LOG_FORMAT: 'json',
      LOG_LEVEL: 'info',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: LogLine[] = [];
  return new Promise((resolve, reject) => {
    let buffered = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      buffered += chunk.toString();
      const parts = buffered.split('\n');
      buffered = parts.pop()!;
      for (const part of parts) {
        const line = JSON.parse(part) as LogLine;
        lines.push(line);
        if (line.msg === 'gRPC listening') resolve({ child, lines });
      }
    });
    child.once('exit', (code) => reject(new Error(`service exited with ${code}: ${JSON.stringify(lines)}`)));
  }).finally(() => fs.rmSync(configDir, { recursive: true, force: true })) as Promise<{ child: ChildProcess; lines: LogLine[] }>;
}

function stop(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

describe('start-up warnings of the service process', () => {
  it('names each unsupported reference variable once, and the per-process embedded store', async () => {
    const { child, lines } = await startLogged({
      MEMCACHE_HOST_PORT: 'memcached:11211',
      REDIS_POOL_SIZE: '20',
      STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: 'true',
    });
    await stop(child);
    const warnings = lines.filter((l) => l.level === 40).map((l) => l.msg);
    expect(warnings).toEqual([
      expect.stringMatching(/^REDIS_POOL_SIZE=20 is not supported: /),
      expect.stringMatching(/^MEMCACHE_HOST_PORT=memcached:11211 is not supported: /),
      expect.stringMatching(/^neither BACKEND_TYPE nor REDIS_URL is set: .*per process/),
    ]);
  });

  it('says nothing when every variable set is honoured', async () => {
    const { child, lines } = await startLogged({ BACKEND_TYPE: 'memory', LOG_LEVEL: 'Info', CONFIG_TYPE: 'FILE' });
    await stop(child);
    expect(lines.filter((l) => l.level >= 40)).toEqual([]);
  });
});
