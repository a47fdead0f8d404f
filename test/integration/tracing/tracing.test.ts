import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { grpcServiceDefinitions } from '../../../src/wire/grpc-definitions';
import { grpc, rlsClient } from '../../helpers/grpc-client';
import { freePort } from '../../helpers/redis';

/**
 * TRACING_ENABLED against a real OTLP receiver (an HTTP endpoint in the test taking OTLP/HTTP JSON
 * at /v1/traces): every ShouldRateLimit call becomes a server span that continues the trace of the
 * call's `traceparent`, with the domain and the decision as attributes and the TRACING_SERVICE_*
 * resource, on both gRPC transports. The built service (dist/src/main.js) runs as its own process,
 * as deployed: the OTLP exporter loads its HTTP agent with a dynamic import() that jest's module
 * sandbox does not run.
 */

const MAIN_JS = path.resolve(__dirname, '../../../dist/src/main.js');

interface OtlpAttribute {
  key: string;
  value: { stringValue?: string; intValue?: number | string };
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes: OtlpAttribute[];
}
interface ReceivedSpan {
  readonly span: OtlpSpan;
  readonly resource: Record<string, string | undefined>;
}

const CONFIG = 'domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1}\n';

/** The service with tracing on, as a child process; resolves once it answers SERVING; stop() ends it. */
async function startTracedService(env: Record<string, string>): Promise<{ addr: string; stop(): Promise<void>; output(): string }> {
  if (!fs.existsSync(MAIN_JS)) throw new Error(`${MAIN_JS} is missing: build first (npx tsc -p tsconfig.json, or make test)`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'slidegate-tracing-'));
  fs.writeFileSync(path.join(dir, 'edge.yaml'), CONFIG);
  const grpcPort = await freePort();
  const child = spawn(process.execPath, [MAIN_JS], {
    env: {
      PATH: process.env.PATH,
      CONFIG_PATH: dir,
      BACKEND_TYPE: 'memory',
      GRPC_HOST: '127.0.0.1',
      GRPC_PORT: String(grpcPort),
      HOST: '127.0.0.1',
      PORT: '0',
      DEBUG_HOST: '127.0.0.1',
      DEBUG_PORT: '0',
      WARM_UP_CALLS: '1000',
      LOG_LEVEL: 'info',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (c: Buffer) => (output += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
  const addr = `127.0.0.1:${grpcPort}`;
  const probe = rlsClient(addr);
  try {
    const until = Date.now() + 15_000;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`service exited with ${child.exitCode}: ${output}`);
      if ((await probe.healthCheck('', { deadlineMs: 500 }).catch(() => undefined)) === 'SERVING') break;
      if (Date.now() > until) throw new Error(`service did not become SERVING: ${output}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  } catch (err) {
    // A service that never served is not left behind (it would keep jest from exiting).
    child.kill('SIGKILL');
    throw err;
  } finally {
    probe.close();
  }
  return {
    addr,
    output: () => output,
    stop: async () => {
      // SIGTERM: a graceful stop exports the spans still buffered.
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

function attributes(list: readonly OtlpAttribute[]): Record<string, string | undefined> {
  return Object.fromEntries(list.map((a) => [a.key, a.value.stringValue ?? (a.value.intValue === undefined ? undefined : String(a.value.intValue))]));
}

/** One call with `traceparent` in its metadata; resolves to the overall code. */
function callWithTrace(addr: string, traceparent: string, user: string): Promise<string> {
  const Client = grpc.makeGenericClientConstructor(grpcServiceDefinitions().rls, 'RateLimitService');
  const client = new Client(addr, grpc.credentials.createInsecure()) as unknown as grpc.Client & {
    shouldRateLimit(request: unknown, metadata: grpc.Metadata, callback: (err: Error | null, res: { overallCode: string }) => void): void;
  };
  const metadata = new grpc.Metadata();
  metadata.set('traceparent', traceparent);
  return new Promise((resolve, reject) =>
    client.shouldRateLimit(
      { domain: 'edge', descriptors: [{ entries: [{ key: 'user', value: user }] }] },
      metadata,
      (err: Error | null, res: { overallCode: string }) => {
        client.close();
        if (err) reject(err);
        else resolve(res.overallCode);
      },
    ),
  );
}

describe('tracing of ShouldRateLimit over OTLP', () => {
  const received: ReceivedSpan[] = [];
  let receiver: http.Server;

  beforeAll(async () => {
    receiver = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        if (req.url === '/v1/traces' && req.headers['content-type']?.startsWith('application/json')) {
          const payload = JSON.parse(body) as { resourceSpans: { resource: { attributes: OtlpAttribute[] }; scopeSpans: { spans: OtlpSpan[] }[] }[] };
          for (const rs of payload.resourceSpans) {
            for (const ss of rs.scopeSpans) for (const span of ss.spans) received.push({ span, resource: attributes(rs.resource.attributes) });
          }
        }
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  });

  afterAll(async () => {
    await new Promise((r) => receiver.close(r));
  });

  test.each(['http2', 'grpc-js'])('GRPC_TRANSPORT=%s: a server span per call, child of the caller, with domain and decision', async (transport) => {
    const svc = await startTracedService({
      GRPC_TRANSPORT: transport,
      TRACING_ENABLED: 'true',
      TRACING_SERVICE_NAME: 'envoy-ratelimit',
      TRACING_SERVICE_NAMESPACE: 'envoy-gateway-system',
      TRACING_SERVICE_INSTANCE_ID: 'pod-1',
      // The standard exporter variables: where, and JSON so that the test reads it without the OTLP schema.
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/v1/traces`,
      OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
      OTEL_BSP_SCHEDULE_DELAY: '50',
    });
    const traceId = transport === 'http2' ? '4bf92f3577b34da6a3ce929d0e0e4736' : '5cf92f3577b34da6a3ce929d0e0e4737';
    const parentId = '00f067aa0ba902b7';
    try {
      const codes = [
        await callWithTrace(svc.addr, `00-${traceId}-${parentId}-01`, 'alice'),
        await callWithTrace(svc.addr, `00-${traceId}-${parentId}-01`, 'alice'),
      ];
      expect(codes).toEqual(['OK', 'OVER_LIMIT']);
      const until = Date.now() + 5_000;
      while (received.filter((r) => r.span.traceId === traceId).length < 2 && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    } finally {
      await svc.stop();
    }
    const spans = received.filter((r) => r.span.traceId === traceId);
    expect(spans).toHaveLength(2);
    for (const { span, resource } of spans) {
      expect(span.parentSpanId).toBe(parentId);
      expect(span.name).toBe('envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit');
      expect(span.kind).toBe(2); // SPAN_KIND_SERVER
      expect(resource).toMatchObject({ 'service.name': 'envoy-ratelimit', 'service.namespace': 'envoy-gateway-system', 'service.instance.id': 'pod-1' });
    }
    const decisions = spans.map(({ span }) => attributes(span.attributes)).map((a) => [a.domain, a['ratelimit.overall_code'], a['rpc.grpc.status_code']]);
    expect(decisions.sort()).toEqual([
      ['edge', 'OK', '0'],
      ['edge', 'OVER_LIMIT', '0'],
    ]);
  });
});
