import { writeFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { overrideId, overrideJson } from '../src/limiter/overrides';
import { repoRoot } from './paths';
import { spawnTracked } from './processes';
import type { Target } from './targets';
import { writeOverridesFile } from '../src/store/memory-overrides';
import { loadSettings } from '../src/settings/settings';
import { createRedisClient, parseRedisTarget } from '../src/store/redis/connection';
import { RedisOverrides } from '../src/store/redis/redis-overrides';

/**
 * The runtime overrides a benchmark row loads before the service starts (bench/scenarios.ts,
 * OVERRIDES_LOADED): one on the descriptor the row's calls send, the same limit as its rule (so the
 * answers do not change, only the path that decides them), and the rest on other values of the same
 * rule, which the calls never send.
 */

/** The rule's own limit (CONFIG_YAML's `client`): the overrides change no answer. */
const RATE_LIMIT = { unit: 'second', requests_per_unit: 1_000_000_000 };

/** The descriptor of override `i`: `client=c1` (the one-descriptor workload's) first, then `client=o1`, `client=o2`, ... */
function descriptorOf(i: number): { key: string; value: string }[] {
  return [{ key: 'client', value: i === 0 ? 'c1' : `o${i}` }];
}

/** The overrides as stored: id and JSON. */
export function benchOverrides(domain: string, count: number): { id: string; json: string }[] {
  const out: { id: string; json: string }[] = [];
  for (let i = 0; i < count; i++) {
    const descriptor = descriptorOf(i);
    const json = overrideJson({ domain, descriptor, rateLimit: RATE_LIMIT, updatedAtMs: Date.now(), updatedBy: 'bench' });
    out.push({ id: overrideId(domain, descriptor), json });
  }
  return out;
}

/** An OVERRIDES_FILE holding them (the memory store's). */
export function writeBenchOverridesFile(file: string, domain: string, count: number): Promise<void> {
  return writeOverridesFile(file, benchOverrides(domain, count));
}

/** Writes them into Redis under `keyPrefix` (the service's CACHE_KEY_PREFIX), 256 writes in flight. */
export async function loadRedisOverrides(port: number, keyPrefix: string, domain: string, count: number): Promise<void> {
  const client = createRedisClient(parseRedisTarget(loadSettings({ BACKEND_TYPE: 'redis', REDIS_URL: `127.0.0.1:${port}` }).redis));
  try {
    for (let waited = 0; client.status !== 'ready'; waited += 20) {
      if (waited > 10_000) throw new Error(`loading the bench overrides: redis on ${port} not ready`);
      await new Promise((r) => setTimeout(r, 20));
    }
    const store = new RedisOverrides({ client, keyPrefix, timeoutMs: 10_000 });
    const all = benchOverrides(domain, count);
    let next = 0;
    const writer = async (): Promise<void> => {
      while (next < all.length) {
        const o = all[next++];
        const outcome = await store.put({ id: o.id, json: o.json, expiresAtMs: undefined, nowMs: Date.now(), maxCount: count, maxBytes: 2 ** 36 });
        if (!outcome.ok) throw new Error(`loading the bench overrides: refused by the ${outcome.cap} cap`);
      }
    };
    await Promise.all(Array.from({ length: 256 }, writer));
  } finally {
    client.disconnect();
  }
}

/** `slidegate overrides import` of one file into one service, as `make bench` measures it. */
export interface ImportMeasure {
  /** memory, memory with OVERRIDES_FILE, or redis. */
  readonly store: string;
  readonly overrides: number;
  readonly seconds: number;
  /** Overrides applied per second, as the command reports it. */
  readonly perSecond: number;
  /** The machine's 1-minute load average when it ended. */
  readonly loadAverage: number;
  readonly error?: string;
}

/**
 * Imports `count` overrides (an NDJSON file, the built command, its default 16 connections) into
 * the service `start` starts with the API on (its settings as shipped otherwise), and stops it.
 */
export async function measureImport(o: {
  readonly store: string;
  readonly count: number;
  readonly domain: string;
  readonly tmp: string;
  readonly start: (env: Readonly<Record<string, string>>) => Promise<Target>;
}): Promise<ImportMeasure> {
  const token = 'bench-token-0123456789abcdef';
  const tokens = join(o.tmp, 'admin-tokens');
  writeFileSync(tokens, `bench ${token}\n`);
  const file = join(o.tmp, `import-${o.count}.ndjson`);
  const lines = Array.from({ length: o.count }, (_, i) => JSON.stringify({ domain: o.domain, descriptor: descriptorOf(i), rate_limit: RATE_LIMIT }));
  writeFileSync(file, `${lines.join('\n')}\n`);
  const target = await o.start({ ADMIN_TOKENS_FILE: tokens });
  try {
    const cli = join(repoRoot(__dirname), 'dist', 'src', 'cli.js');
    const child = spawnTracked(process.execPath, [cli, 'overrides', 'import', file, '--url', `http://127.0.0.1:${target.httpPort}`], {
      env: { PATH: process.env.PATH, SLIDEGATE_ADMIN_TOKEN: token },
    });
    let stdout = '';
    child.stdout?.on('data', (d: Buffer) => (stdout += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    const m = /imported (\d+) of (\d+) overrides in ([0-9.]+) s \((\d+) per second\)/.exec(stdout);
    const loadAverage = loadavg()[0];
    if (code !== 0 || m === null || Number(m[1]) !== o.count) {
      return { store: o.store, overrides: o.count, seconds: NaN, perSecond: NaN, loadAverage, error: `exit ${code}: ${stdout}${child.stderrTail()}` };
    }
    return { store: o.store, overrides: o.count, seconds: Number(m[3]), perSecond: Number(m[4]), loadAverage };
  } finally {
    await target.stop();
  }
}
