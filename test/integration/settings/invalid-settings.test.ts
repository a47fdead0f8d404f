import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';

describe('the service process with an invalid setting', () => {
  const mainJs = path.resolve(__dirname, '../../../dist/src/main.js');

  const run = (env: Record<string, string>) => {
    if (!fs.existsSync(mainJs)) throw new Error(`${mainJs} is missing: build first (npx tsc -p tsconfig.json, or make test)`);
    return spawnSync(process.execPath, [mainJs], { env: { PATH: process.env.PATH, ...env }, encoding: 'utf8', timeout: 15_000 });
  };

  it.each([
    ['GRPC_PORT', { GRPC_PORT: 'not-a-port' }],
    ['REDIS_URL', { BACKEND_TYPE: 'redis' }],
    ['BACKEND_TYPE', { BACKEND_TYPE: 'memcache' }],
    ['LIMIT_RESET_HEADER', { LIMIT_RESET_HEADER: 'Reset\nInjected: yes' }],
    ['GLOBAL_REDIS_URL', { REDIS_URL: '127.0.0.1:1', REGION: 'eu' }],
    ['REGION', { REDIS_URL: '127.0.0.1:1', GLOBAL_REDIS_URL: '127.0.0.1:1' }],
    ['REGION_TTL', { REDIS_URL: '127.0.0.1:1', REGION: 'eu', GLOBAL_REDIS_URL: '127.0.0.1:1', REGION_TTL: '1s' }],
  ])('exits 1 with exactly one stderr line naming %s', (variable, env) => {
    const result = run(env);
    expect(result.status).toBe(1);
    expect(result.stderr.endsWith('\n')).toBe(true);
    const lines = result.stderr.split('\n').filter((l) => l !== '');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(variable);
    expect(result.stdout).toBe('');
  });
});
