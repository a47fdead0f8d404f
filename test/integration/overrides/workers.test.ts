import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as http2 from 'node:http2';
import * as os from 'node:os';
import * as path from 'node:path';
import { protoRoot } from '../../../src/wire/proto';
import { overridesClient, tokensFile, within } from '../../helpers/overrides';
import { freePort, startRedis, type RedisServer } from '../../helpers/redis';

/**
 * WORKERS=2 (the built service, dist/src/main.js): each worker keeps the overrides in its own
 * process, so an override set through whichever worker took the API call must be answered by every
 * worker within OVERRIDES_SYNC_INTERVAL.
 */

const MAIN_JS = path.resolve(__dirname, '../../../dist/src/main.js');
const RLS_PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit';
const root = protoRoot();
const RequestType = root.lookupType('envoy.service.ratelimit.v3.RateLimitRequest');
const ResponseType = root.lookupType('envoy.service.ratelimit.v3.RateLimitResponse');
const TOKEN = 'ops-token-0123456789abcdef';

/** The limit one fresh connection (handed to the workers in turn) is answered for `api_key=value`, asked without counting. */
function limitOnFreshConnection(port: number, value: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://127.0.0.1:${port}`);
    session.once('error', reject);
    const payload = RequestType.encode({ domain: 'edge', descriptors: [{ entries: [{ key: 'api_key', value }], hitsAddend: { value: 0 } }] }).finish();
    const body = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), payload]);
    body.writeUInt32BE(payload.length, 1);
    const stream = session.request({ ':method': 'POST', ':path': RLS_PATH, 'content-type': 'application/grpc', te: 'trailers' });
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => {
      session.close();
      const reply = ResponseType.decode(Buffer.concat(chunks).subarray(5)) as unknown as { statuses: { currentLimit?: { requestsPerUnit: number } }[] };
      resolve(reply.statuses[0].currentLimit?.requestsPerUnit ?? 0);
    });
    stream.on('error', reject);
    stream.end(body);
  });
}

describe('runtime overrides under WORKERS=2', () => {
  let redis: RedisServer;
  let child: ChildProcess;
  let configDir: string;
  let tokens: ReturnType<typeof tokensFile>;

  beforeAll(async () => {
    if (!fs.existsSync(MAIN_JS)) throw new Error(`${MAIN_JS} is missing: build first (npx tsc -p tsconfig.json, or make test)`);
    redis = await startRedis();
    tokens = tokensFile({ ops: TOKEN });
    configDir = fs.mkdtempSync(path.join(os.tmpdir(), 'slidegate-overrides-workers-'));
    fs.writeFileSync(
      path.join(configDir, 'edge.yaml'),
      'domain: edge\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 10}\n',
    );
  });
  afterAll(async () => {
    if (child && child.exitCode === null) child.kill('SIGKILL');
    await redis?.stop();
    tokens?.remove();
    if (configDir) fs.rmSync(configDir, { recursive: true, force: true });
  });

  it('has every worker answer an override within 1 s of its setting through one of them', async () => {
    const [grpcPort, httpPort] = [await freePort(), await freePort()];
    child = spawn(process.execPath, [MAIN_JS], {
      env: {
        PATH: process.env.PATH,
        WORKERS: '2',
        BACKEND_TYPE: 'redis',
        REDIS_URL: redis.url,
        CONFIG_PATH: configDir,
        GRPC_HOST: '127.0.0.1',
        GRPC_PORT: String(grpcPort),
        HOST: '127.0.0.1',
        PORT: String(httpPort),
        DEBUG_HOST: '127.0.0.1',
        DEBUG_PORT: '0',
        LOG_LEVEL: 'error',
        STORE_TIMEOUT_MS: '1000',
        ADMIN_TOKENS_FILE: tokens.path,
      },
      stdio: 'ignore',
    });
    // Both workers answer (six fresh connections in a row, handed out in turn).
    await within('both workers serving', 15_000, async () => {
      const limits = await Promise.all(Array.from({ length: 6 }, () => limitOnFreshConnection(grpcPort, 'probe').catch(() => 0)));
      return limits.every((l) => l === 10);
    });
    const put = await overridesClient(httpPort, TOKEN).put({
      domain: 'edge',
      descriptor: [{ key: 'api_key', value: 'vip' }],
      rate_limit: { unit: 'minute', requests_per_unit: 77 },
    });
    expect(put.status).toBe(200);
    const ms = await within('the override on every worker', 3_000, async () => {
      const limits = await Promise.all(Array.from({ length: 6 }, () => limitOnFreshConnection(grpcPort, 'vip')));
      return limits.every((l) => l === 77);
    });
    expect(ms).toBeLessThan(1_000);
  });
});
