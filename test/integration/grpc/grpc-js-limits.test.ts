import * as net from 'node:net';
import { encodeHeaderBlock } from '../../../src/http2/hpack';
import { Flag, frame, FrameType } from '../../../src/http2/frames';
import { headersFrame, isType, RawClient } from '../../helpers/h2-raw-client';
import { spawnService, type SpawnedService } from '../../helpers/spawned-service';

/**
 * GRPC_TRANSPORT=grpc-js holds peers to the limits of the own HTTP/2 layer, from the same settings:
 * streams per connection, connections on the port, a connection's idle time and handshake time, and
 * a flood of PINGs. Against the built service in its own process, spoken to in raw HTTP/2. Where
 * node:http2 answers differently from the own layer (a stream past the limit ends the connection
 * rather than being refused alone), the test says so.
 */

const EDGE = 'domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 10}\n';
const ENHANCE_YOUR_CALM = 0xb;

const RLS_REQUEST = encodeHeaderBlock([
  [':method', 'POST'],
  [':scheme', 'http'],
  [':path', '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit'],
  [':authority', 'localhost'],
  ['content-type', 'application/grpc'],
  ['te', 'trailers'],
]);

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function grpcJs(env: Record<string, string> = {}): Promise<SpawnedService> {
  return spawnService({ config: { 'edge.yaml': EDGE }, env: { GRPC_TRANSPORT: 'grpc-js', ...env } });
}

jest.setTimeout(20_000);

describe('GRPC_TRANSPORT=grpc-js holds peers to the HTTP/2 limits', () => {
  it('serves at most H2_MAX_CONCURRENT_STREAMS streams of one connection, and ends a connection that opens more', async () => {
    const svc = await grpcJs({ H2_MAX_CONCURRENT_STREAMS: '4' });
    try {
      const client = await RawClient.connect(svc.grpcPort);
      client.send(frame(FrameType.SETTINGS, Flag.ACK, 0));
      const settings = await client.waitFor((f) => f.type === FrameType.SETTINGS && (f.flags & Flag.ACK) === 0);
      expect(settings!.payload.readUInt16BE(0)).toBe(3); // SETTINGS_MAX_CONCURRENT_STREAMS ...
      expect(settings!.payload.readUInt32BE(2)).toBe(4); // ... 4
      // Six calls whose request messages never come: node:http2 takes the fifth as a protocol error of
      // the connection, which it ends; no stream past the fourth is ever served.
      for (let id = 1; id <= 11; id += 2) client.send(headersFrame(id, Flag.END_HEADERS, RLS_REQUEST));
      await client.waitFor(isType(FrameType.GOAWAY));
      expect(client.goaway()?.lastStreamId).toBe(7);
      await client.waitClosed();
      expect(client.frames.filter((f) => f.streamId > 7)).toEqual([]);
      // A peer within the limit is served on a connection of its own.
      const legit = await RawClient.connect(svc.grpcPort);
      legit.send(frame(FrameType.SETTINGS, Flag.ACK, 0));
      for (let id = 1; id <= 7; id += 2) legit.send(headersFrame(id, Flag.END_HEADERS, RLS_REQUEST));
      await sleep(300);
      expect(legit.goaway()).toBeUndefined();
      expect(legit.frames.filter(isType(FrameType.RST_STREAM))).toEqual([]);
      legit.close();
    } finally {
      await svc.stop();
    }
  });

  it('closes connections past GRPC_MAX_CONNECTIONS as they arrive', async () => {
    const svc = await grpcJs({ GRPC_MAX_CONNECTIONS: '10' });
    try {
      const peers = Array.from({ length: 25 }, () => {
        const socket = net.connect(svc.grpcPort, '127.0.0.1');
        const peer = { socket, closed: false };
        socket.on('error', () => undefined);
        socket.on('close', () => (peer.closed = true));
        return peer;
      });
      const deadline = Date.now() + 2_000;
      while (peers.filter((p) => p.closed).length < 15 && Date.now() < deadline) await sleep(50);
      await sleep(100);
      expect(peers.filter((p) => p.closed)).toHaveLength(15);
      for (const p of peers) p.socket.destroy();
    } finally {
      await svc.stop();
    }
  });

  it('closes a connection without calls after H2_IDLE_TIMEOUT_MS, with GOAWAY', async () => {
    const svc = await grpcJs({ H2_IDLE_TIMEOUT_MS: '500' });
    try {
      const started = Date.now();
      const client = await RawClient.connect(svc.grpcPort);
      client.send(frame(FrameType.SETTINGS, Flag.ACK, 0));
      await client.waitFor(isType(FrameType.GOAWAY), 5_000);
      const after = Date.now() - started;
      expect(client.goaway()?.code).toBe(0);
      // grpc-js checks the idle time at the timeout and again after it: between one and two timeouts.
      expect(after).toBeGreaterThanOrEqual(450);
      expect(after).toBeLessThan(2_500);
      await client.waitClosed(3_000);
    } finally {
      await svc.stop();
    }
  });

  it('closes a connection that sends no preface within H2_HANDSHAKE_TIMEOUT_MS', async () => {
    const svc = await grpcJs({ H2_HANDSHAKE_TIMEOUT_MS: '300' });
    try {
      const started = Date.now();
      const socket = net.connect(svc.grpcPort, '127.0.0.1');
      socket.on('error', () => undefined);
      const closedAfter = await new Promise<number>((resolve) => socket.on('close', () => resolve(Date.now() - started)));
      expect(closedAfter).toBeGreaterThanOrEqual(250);
      expect(closedAfter).toBeLessThan(2_000);
      // One that completes its handshake stays.
      const client = await RawClient.connect(svc.grpcPort);
      client.send(frame(FrameType.SETTINGS, Flag.ACK, 0));
      await sleep(600);
      expect(client.closed).toBe(false);
      client.close();
    } finally {
      await svc.stop();
    }
  });

  it('sends GOAWAY ENHANCE_YOUR_CALM to a peer that floods PINGs, and keeps serving others', async () => {
    const svc = await grpcJs();
    try {
      const client = await RawClient.connect(svc.grpcPort);
      client.send(frame(FrameType.SETTINGS, Flag.ACK, 0));
      for (let i = 0; i < 50; i++) client.send(frame(FrameType.PING, 0, 0, Buffer.alloc(8, i)));
      await client.waitFor(isType(FrameType.GOAWAY), 3_000);
      expect(client.goaway()?.code).toBe(ENHANCE_YOUR_CALM);
      await client.waitClosed(3_000);
      // Ten pings at once and then one a second are a keepalive, not a flood.
      const calm = await RawClient.connect(svc.grpcPort);
      calm.send(frame(FrameType.SETTINGS, Flag.ACK, 0));
      for (let i = 0; i < 10; i++) calm.send(frame(FrameType.PING, 0, 0, Buffer.alloc(8, i)));
      for (let i = 0; i < 2; i++) {
        await sleep(1_100);
        calm.send(frame(FrameType.PING, 0, 0, Buffer.alloc(8, 100 + i)));
      }
      await sleep(300);
      expect(calm.frames.filter((f) => f.type === FrameType.PING && (f.flags & Flag.ACK) !== 0)).toHaveLength(12);
      expect(calm.goaway()).toBeUndefined();
      calm.close();
    } finally {
      await svc.stop();
    }
  });
});
