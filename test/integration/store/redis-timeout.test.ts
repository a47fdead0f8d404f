import * as net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { startTestService } from '../../helpers/service';

// REDIS_TIMEOUT is the reference's dial timeout. A Redis that accepts the TCP connection but never
// completes the TLS handshake shows it: the service gives up on the dial after REDIS_TIMEOUT and dials
// again (after its reconnect backoff), instead of waiting the built-in 2 s.

interface SilentServer {
  readonly port: number;
  /** Connections accepted so far: one per dial. */
  accepted(): number;
  close(): Promise<void>;
}

async function silentServer(): Promise<SilentServer> {
  const sockets = new Set<net.Socket>();
  let accepted = 0;
  const server = net.createServer((socket) => {
    accepted += 1;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    accepted: () => accepted,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Dials a silent Redis receives within `windowMs` of the service's start, with REDIS_TIMEOUT=`redisTimeout`. */
async function dialsWithin(windowMs: number, redisTimeout: string): Promise<number> {
  const redis = await silentServer();
  const started = Date.now();
  const service = await startTestService({
    config: { 'rules.yaml': 'domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n' },
    env: { BACKEND_TYPE: 'redis', REDIS_URL: `127.0.0.1:${redis.port}`, REDIS_TLS: 'true', REDIS_TIMEOUT: redisTimeout, WARM_UP_CALLS: '0' },
  });
  try {
    await sleep(Math.max(0, windowMs - (Date.now() - started)));
    return redis.accepted();
  } finally {
    await service.stop();
    await redis.close();
  }
}

describe('REDIS_TIMEOUT', () => {
  it('ends a dial that never completes after REDIS_TIMEOUT and dials again', async () => {
    // 250 ms per dial plus a backoff of about 50, 100, 200 ms between them: 4 dials by 1.3 s, 5 by 1.75 s.
    expect(await dialsWithin(2_500, '250ms')).toBeGreaterThanOrEqual(4);
  });

  it('keeps waiting on the first dial while REDIS_TIMEOUT has not passed', async () => {
    expect(await dialsWithin(2_500, '10s')).toBe(1);
  });
});
