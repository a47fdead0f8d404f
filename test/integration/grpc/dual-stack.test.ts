import { execFile } from 'node:child_process';
import * as path from 'node:path';

/**
 * HOST, GRPC_HOST and DEBUG_HOST set to "::" (as Istio's sample sets them) accept IPv4 and IPv6
 * clients alike, on every port and with both gRPC transports. "::" listens on every interface, so
 * the service runs in a network namespace of its own (`unshare -rn`, loopback only): nothing
 * outside the test can reach it. The built service is used: build first (make test does).
 */

const ROOT = path.resolve(__dirname, '../../..');

/** Runs in the namespace: starts the service on "::" and asks every port over 127.0.0.1 and ::1. */
const PROBE = `
const { startService } = require(${JSON.stringify(path.join(ROOT, 'dist/src/main.js'))});
const { loadSettings } = require(${JSON.stringify(path.join(ROOT, 'dist/src/settings/settings.js'))});
const { createRlsClient } = require(${JSON.stringify(path.join(ROOT, 'dist/src/cli/rls-client.js'))});
const { silentLogger } = require(${JSON.stringify(path.join(ROOT, 'dist/src/log.js'))});
const http = require('node:http');
const httpStatus = (host, port, path) => new Promise((resolve) => {
  http.get({ host, port, path, timeout: 3000 }, (res) => { res.resume(); resolve(res.statusCode); }).on('error', (e) => resolve(e.code));
});
(async () => {
  const results = {};
  for (const transport of ['http2', 'grpc-js']) {
    const settings = loadSettings({
      CONFIG_PATH: ${JSON.stringify(path.join(ROOT, 'examples'))}, BACKEND_TYPE: 'memory', WARM_UP_CALLS: '0', GRPC_TRANSPORT: transport,
      GRPC_HOST: '::', GRPC_PORT: '18081', HOST: '::', PORT: '18080', DEBUG_HOST: '::', DEBUG_PORT: '16070',
    });
    const service = await startService(settings, { logger: silentLogger() });
    for (const [family, host] of [['ipv4', '127.0.0.1'], ['ipv6', '::1']]) {
      const client = createRlsClient({ address: family === 'ipv6' ? '[::1]:18081' : '127.0.0.1:18081' });
      const grpc = await client.healthCheck('ratelimit', { deadlineMs: 3000 }).catch((e) => String(e.code ?? e.message));
      client.close();
      results[transport + ' ' + family] = { grpc, http: await httpStatus(host, 18080, '/livez'), debug: await httpStatus(host, 16070, '/rlconfig') };
    }
    await service.close();
  }
  process.stdout.write(JSON.stringify(results));
})().catch((e) => { process.stderr.write(String(e && e.stack || e)); process.exit(1); });
`;

function runInOwnNetwork(script: string): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile('unshare', ['-rn', 'sh', '-c', 'ip link set lo up && exec "$0" -e "$1"', process.execPath, script], { timeout: 60_000 }, (err, stdout, stderr) =>
      err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout),
    );
  });
}

test('a "::" listener answers IPv4 and IPv6 clients on the gRPC, HTTP and debug ports, with both transports', async () => {
  const results = JSON.parse(await runInOwnNetwork(PROBE));
  const ok = { grpc: 'SERVING', http: 200, debug: 200 };
  expect(results).toEqual({ 'http2 ipv4': ok, 'http2 ipv6': ok, 'grpc-js ipv4': ok, 'grpc-js ipv6': ok });
}, 90_000);
