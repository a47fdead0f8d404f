import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { loadavg } from 'node:os';
import Redis from 'ioredis';
import { DECIDE_SCRIPT } from '../src/store/redis/script';
import { freePort } from './processes';

/**
 * Redis CPU per counter of the DECIDE script, measured by Redis itself (INFO commandstats: usec per
 * EVALSHA over counters per call). Starts its own redis-server on a free port and sends batches
 * shaped like the five-descriptor bench: 50 requests of 5 sliding-window counters (windows of a
 * second, a second, a second, a minute and an hour), either the same
 * 5 keys in every request (one hot client) or 5 keys of its own per request (50 clients). With
 * `--against file.lua`, that script runs too, its rounds interleaved with this build's, so a busy
 * machine slows both alike; the load average is printed beside each round.
 *
 *   node dist/bench/lua-cost.js [--rounds 5] [--calls 3000] [--against /tmp/old.lua]
 */

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

const ROUNDS = Number(arg('rounds') ?? 5);
const CALLS = Number(arg('calls') ?? 3000);
const REQUESTS = 50;
const COUNTERS = 5;
// The bench's five descriptors (second, second, second, minute, hour), limits high enough that
// every request is allowed and charged, as under its load.
const SPECS = [1_000, 1_000, 1_000, 60_000, 3_600_000].map((w) => `sw:${w}:1000000000:1:1`);

/** The EVALSHA arguments of one batch: `clients` distinct clients, requests spread over them in turn. */
function batchArgs(sha: string, clients: number): (string | number)[] {
  const keys: string[] = [];
  const argv: string[] = [];
  for (let r = 0; r < REQUESTS; r++) {
    argv.push('0', String(COUNTERS));
    for (let c = 0; c < COUNTERS; c++) {
      keys.push(`rl{c${r % clients}:d${c}}`);
      argv.push(SPECS[c]);
    }
  }
  return [sha, keys.length, ...keys, ...argv];
}

async function evalshaUsec(redis: Redis): Promise<{ calls: number; usec: number }> {
  const info = (await redis.info('commandstats')).split('\r\n').find((l) => l.startsWith('cmdstat_evalsha:'));
  if (info === undefined) throw new Error('no EVALSHA in INFO commandstats');
  const field = (name: string): number => Number(new RegExp(`${name}=([0-9.]+)`).exec(info)?.[1]);
  return { calls: field('calls'), usec: field('usec') };
}

/** Redis usec per counter for CALLS batches of one shape, pipelined 8 deep. */
async function measure(redis: Redis, sha: string, clients: number): Promise<number> {
  await redis.flushall();
  await redis.config('RESETSTAT');
  const args = batchArgs(sha, clients);
  for (let done = 0; done < CALLS; done += 8) {
    const pipe = redis.pipeline();
    for (let i = 0; i < 8; i++) pipe.call('EVALSHA', ...args);
    const replies = await pipe.exec();
    for (const [err] of replies ?? []) if (err) throw err;
  }
  const { calls, usec } = await evalshaUsec(redis);
  return usec / calls / (REQUESTS * COUNTERS);
}

/** A client of the server just started, once it accepts connections (within 5 s). */
async function connectWhenUp(port: number): Promise<Redis> {
  for (let attempt = 0; ; attempt++) {
    const redis = new Redis({ port, host: '127.0.0.1', lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    redis.on('error', () => undefined);
    try {
      await redis.connect();
      return redis;
    } catch (err) {
      redis.disconnect();
      if (attempt >= 50) throw err;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

async function main(): Promise<void> {
  const port = await freePort();
  const server: ChildProcess = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  try {
    const redis = await connectWhenUp(port);
    const scripts: { name: string; sha: string }[] = [{ name: 'this build', sha: (await redis.script('LOAD', DECIDE_SCRIPT)) as string }];
    const against = arg('against');
    if (against !== undefined) scripts.push({ name: against, sha: (await redis.script('LOAD', readFileSync(against, 'utf8'))) as string });
    for (let round = 1; round <= ROUNDS; round++) {
      for (const shape of [
        { name: 'same 5 keys', clients: 1 },
        { name: '50 clients', clients: REQUESTS },
      ]) {
        for (const s of scripts) {
          const perCounter = await measure(redis, s.sha, shape.clients);
          console.log(`round ${round}  ${shape.name.padEnd(12)} ${s.name.padEnd(16)} ${perCounter.toFixed(3)} us/counter  (load ${loadavg()[0].toFixed(2)})`);
        }
      }
    }
    redis.disconnect();
  } finally {
    server.kill('SIGKILL');
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
