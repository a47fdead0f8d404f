import * as net from 'node:net';
import { Writable } from 'node:stream';
import { createLogger } from '../../../src/log';
import { startRedis, type RedisServer } from '../../helpers/redis';
import { startTestService } from '../../helpers/service';

/**
 * At start the service measures the Redis round trip and reports a STORE_TIMEOUT_MS far below it:
 * a real redis-server behind a proxy that holds every chunk 15 ms each way.
 */

const DELAY_MS = 15;

let redis: RedisServer;
let proxy: net.Server;
let proxyPort: number;

beforeAll(async () => {
  redis = await startRedis();
  proxy = net.createServer((client) => {
    const upstream = net.connect(redis.port, '127.0.0.1');
    const relay = (from: net.Socket, to: net.Socket): void => {
      from.on('data', (chunk) => setTimeout(() => to.writable && to.write(chunk), DELAY_MS));
      from.on('close', () => setTimeout(() => to.destroy(), DELAY_MS));
      from.on('error', () => to.destroy());
    };
    relay(client, upstream);
    relay(upstream, client);
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  proxyPort = (proxy.address() as net.AddressInfo).port;
});

afterAll(async () => {
  proxy?.close();
  await redis?.stop();
});

async function startupWarnings(storeTimeoutMs: number): Promise<string[]> {
  const lines: string[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString().split('\n')) if (line !== '') lines.push(JSON.parse(line).msg as string);
      done();
    },
  });
  const svc = await startTestService({
    config: { 'edge.yaml': 'domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 2}\n' },
    env: { REDIS_URL: `127.0.0.1:${proxyPort}`, BACKEND_TYPE: 'redis', STORE_TIMEOUT_MS: String(storeTimeoutMs), WARM_UP_CALLS: '0' },
    logger: createLogger({ level: 'warn', format: 'json', destination }),
  });
  await svc.stop();
  return lines.filter((l) => l.startsWith('STORE_TIMEOUT_MS'));
}

describe('STORE_TIMEOUT_MS against the measured Redis round trip', () => {
  it('warns at start when the deadline is under twice the round trip', async () => {
    const [line, ...rest] = await startupWarnings(10);
    expect(rest).toEqual([]);
    expect(line).toMatch(/^STORE_TIMEOUT_MS=10 is below twice the measured Redis round trip \((\d+\.\d) ms, median of 5 PINGs\)/);
    expect(Number(/\((\d+\.\d) ms/.exec(line!)![1])).toBeGreaterThanOrEqual(2 * DELAY_MS);
  });

  it('says nothing when the deadline leaves room', async () => {
    expect(await startupWarnings(2_000)).toEqual([]);
  });
});
