import { describeRedisTarget, parseRedisTarget, reconnectDelayMs, type RedisSettings } from '../../../../src/store/redis/connection';
import { loadSettings, SettingsError } from '../../../../src/settings/settings';

function redisSettings(env: Record<string, string>): RedisSettings {
  return loadSettings({ BACKEND_TYPE: 'redis', ...env }).redis;
}

const files: Record<string, Buffer> = {
  '/certs/ca.pem': Buffer.from('CA'),
  '/certs/client.pem': Buffer.from('CERT'),
  '/certs/client.key': Buffer.from('KEY'),
};
const readFile = (p: string): Buffer => {
  const f = files[p];
  if (!f) throw new Error('ENOENT');
  return f;
};

describe('parseRedisTarget', () => {
  it('reads host:port as a single Redis', () => {
    expect(parseRedisTarget(redisSettings({ REDIS_URL: 'redis.default.svc:6380' }))).toEqual({
      type: 'single',
      options: { host: 'redis.default.svc', port: 6380, db: undefined, username: undefined, password: undefined },
    });
  });

  it('defaults the port to 6379 and accepts bracketed IPv6 addresses', () => {
    expect(parseRedisTarget(redisSettings({ REDIS_URL: 'redis' })).options).toMatchObject({ host: 'redis', port: 6379 });
    expect(parseRedisTarget(redisSettings({ REDIS_URL: '[::1]:7000' })).options).toMatchObject({ host: '::1', port: 7000 });
  });

  it('reads redis:// URLs with credentials and database, and rediss:// as TLS', () => {
    const t = parseRedisTarget(redisSettings({ REDIS_URL: 'redis://alice:p%40ss@10.0.0.1:6390/2' }));
    expect(t.options).toMatchObject({ host: '10.0.0.1', port: 6390, db: 2, username: 'alice', password: 'p@ss' });
    expect(t.options).not.toHaveProperty('tls');
    const s = parseRedisTarget(redisSettings({ REDIS_URL: 'rediss://:secret@cache.example:6380' }), { readFile });
    expect(s.options).toMatchObject({ host: 'cache.example', port: 6380, password: 'secret' });
    expect(s.options).toHaveProperty('tls');
  });

  it('takes REDIS_AUTH as a password or as user:password, over URL credentials', () => {
    expect(parseRedisTarget(redisSettings({ REDIS_URL: 'h:1', REDIS_AUTH: 'pw' })).options).toMatchObject({ password: 'pw' });
    expect(parseRedisTarget(redisSettings({ REDIS_URL: 'redis://u:x@h:1', REDIS_AUTH: 'bob:pa:ss' })).options).toMatchObject({
      username: 'bob',
      password: 'pa:ss',
    });
  });

  it('reads a unix socket path with REDIS_SOCKET_TYPE=unix', () => {
    expect(parseRedisTarget(redisSettings({ REDIS_URL: '/var/run/redis.sock', REDIS_SOCKET_TYPE: 'unix' })).options).toEqual({
      path: '/var/run/redis.sock',
      username: undefined,
      password: undefined,
    });
    expect(() => parseRedisTarget(redisSettings({ REDIS_URL: 'localhost:6379', REDIS_SOCKET_TYPE: 'unix' }))).toThrow(SettingsError);
  });

  it('reads the sentinel form mastername,host:port,host:port', () => {
    const t = parseRedisTarget(redisSettings({ REDIS_TYPE: 'sentinel', REDIS_URL: 'mymaster, s1:26379 ,s2:26380', REDIS_AUTH: 'pw' }));
    expect(t).toMatchObject({
      type: 'sentinel',
      masterName: 'mymaster',
      options: {
        name: 'mymaster',
        sentinels: [
          { host: 's1', port: 26379 },
          { host: 's2', port: 26380 },
        ],
        password: 'pw',
        failoverDetector: true,
      },
    });
  });

  it('authenticates to the sentinels with REDIS_SENTINEL_AUTH, apart from REDIS_AUTH', () => {
    const env = { REDIS_TYPE: 'sentinel', REDIS_URL: 'm,s1:26379', REDIS_AUTH: 'master-pw' };
    expect(parseRedisTarget(redisSettings({ ...env, REDIS_SENTINEL_AUTH: 'sentinel-pw' })).options).toMatchObject({
      password: 'master-pw',
      sentinelPassword: 'sentinel-pw',
    });
    expect(parseRedisTarget(redisSettings({ ...env, REDIS_SENTINEL_AUTH: 'watcher:sentinel-pw' })).options).toMatchObject({
      sentinelUsername: 'watcher',
      sentinelPassword: 'sentinel-pw',
    });
    expect(parseRedisTarget(redisSettings(env)).options).not.toHaveProperty('sentinelPassword');
  });

  it('rejects a sentinel list without a master name or without sentinels', () => {
    expect(() => parseRedisTarget(redisSettings({ REDIS_TYPE: 'sentinel', REDIS_URL: 's1:26379,s2:26379' }))).toThrow(/mastername/);
    expect(() => parseRedisTarget(redisSettings({ REDIS_TYPE: 'sentinel', REDIS_URL: 'mymaster' }))).toThrow(/mastername/);
  });

  it('reads the cluster form host:port,host:port as seed nodes', () => {
    const t = parseRedisTarget(redisSettings({ REDIS_TYPE: 'cluster', REDIS_URL: 'n1:7000,n2:7001,redis://n3:7002', REDIS_AUTH: 'pw' }));
    expect(t).toMatchObject({
      type: 'cluster',
      nodes: [
        { host: 'n1', port: 7000 },
        { host: 'n2', port: 7001 },
        { host: 'n3', port: 7002 },
      ],
      options: { redisOptions: { password: 'pw' } },
    });
  });

  it('rejects a list for a single Redis and malformed addresses, naming REDIS_URL', () => {
    expect(() => parseRedisTarget(redisSettings({ REDIS_URL: 'a:1,b:2' }))).toThrow(/REDIS_URL/);
    expect(() => parseRedisTarget(redisSettings({ REDIS_URL: 'a:b:c' }))).toThrow(/REDIS_URL/);
    expect(() => parseRedisTarget(redisSettings({ REDIS_URL: 'host:99999' }))).toThrow(/REDIS_URL/);
    expect(() => parseRedisTarget(redisSettings({ REDIS_URL: 'redis://h:1/x' }))).toThrow(/REDIS_URL/);
  });

  it('loads the TLS CA and client certificate and can skip only the hostname check', () => {
    const t = parseRedisTarget(
      redisSettings({
        REDIS_URL: 'h:6379',
        REDIS_TLS: 'true',
        REDIS_TLS_CACERT: '/certs/ca.pem',
        REDIS_TLS_CLIENT_CERT: '/certs/client.pem',
        REDIS_TLS_CLIENT_KEY: '/certs/client.key',
        REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: 'true',
      }),
      { readFile },
    );
    const tls = (t.options as { tls: Record<string, unknown> }).tls;
    expect(tls.ca).toEqual(Buffer.from('CA'));
    expect(tls.cert).toEqual(Buffer.from('CERT'));
    expect(tls.key).toEqual(Buffer.from('KEY'));
    expect(typeof tls.checkServerIdentity).toBe('function');
    expect((tls.checkServerIdentity as () => unknown)()).toBeUndefined();
    expect(tls).not.toHaveProperty('rejectUnauthorized');
  });

  it('names the variable of an unreadable TLS file', () => {
    expect(() => parseRedisTarget(redisSettings({ REDIS_URL: 'h:1', REDIS_TLS: 'true', REDIS_TLS_CACERT: '/nope' }), { readFile })).toThrow(/REDIS_TLS_CACERT/);
  });

  it('reads the global store from GLOBAL_REDIS_* by the same code, naming those variables in its errors', () => {
    const global = (env: Record<string, string>) => loadSettings({ REDIS_URL: 'local:6379', REGION: 'eu', ...env }).regions!.redis;
    expect(parseRedisTarget(global({ GLOBAL_REDIS_URL: 'rediss://u:pw@global:6380/2' }), { readFile })).toMatchObject({
      type: 'single',
      options: { host: 'global', port: 6380, db: 2, username: 'u', password: 'pw', tls: {} },
    });
    expect(parseRedisTarget(global({ GLOBAL_REDIS_TYPE: 'cluster', GLOBAL_REDIS_URL: 'g1:7000,g2:7001', GLOBAL_REDIS_AUTH: 'pw' }))).toEqual({
      type: 'cluster',
      nodes: [
        { host: 'g1', port: 7000 },
        { host: 'g2', port: 7001 },
      ],
      options: { redisOptions: { password: 'pw' } },
    });
    const failure = (env: Record<string, string>): SettingsError => {
      try {
        parseRedisTarget(global(env), { readFile });
      } catch (err) {
        return err as SettingsError;
      }
      throw new Error('no error');
    };
    expect(failure({ GLOBAL_REDIS_URL: 'a:1,b:2' }).message).toBe(
      'invalid setting GLOBAL_REDIS_URL: GLOBAL_REDIS_TYPE=single takes one address (use sentinel or cluster for lists)',
    );
    expect(failure({ GLOBAL_REDIS_URL: 'host:99999' }).variable).toBe('GLOBAL_REDIS_URL');
    expect(failure({ GLOBAL_REDIS_URL: 'h:1', GLOBAL_REDIS_TLS: 'true', GLOBAL_REDIS_TLS_CLIENT_KEY: '/nope' }).variable).toBe('GLOBAL_REDIS_TLS_CLIENT_KEY');
    expect(failure({ GLOBAL_REDIS_TYPE: 'sentinel', GLOBAL_REDIS_URL: 'mymaster' }).message).toContain('GLOBAL_REDIS_TYPE=sentinel expects');
  });

  it('uses TLS for sentinels and the master they name when REDIS_TLS is set', () => {
    const t = parseRedisTarget(redisSettings({ REDIS_TYPE: 'sentinel', REDIS_URL: 'm,s:1', REDIS_TLS: 'true' }), { readFile });
    expect(t.options).toMatchObject({ enableTLSForSentinelMode: true });
    expect(t.options).toHaveProperty('sentinelTLS');
  });
});

describe('describeRedisTarget', () => {
  it('never shows credentials', () => {
    const d = describeRedisTarget(
      redisSettings({ REDIS_URL: 'redis://alice:hunter2@h:1,rediss://:hunter3@g:2', REDIS_TYPE: 'cluster', REDIS_AUTH: 'bob:hunter4' }),
    );
    expect(d).not.toMatch(/hunter|alice|bob/);
    expect(d).toContain('h:1');
    expect(d).toContain('g:2');
    expect(d).toContain('auth=***');
  });

  it('names the type and the addresses', () => {
    expect(describeRedisTarget(redisSettings({ REDIS_TYPE: 'sentinel', REDIS_URL: 'mymaster,s1:26379' }))).toBe('redis sentinel mymaster,s1:26379');
  });
});

describe('reconnectDelayMs', () => {
  it('grows exponentially from about 50 ms and stays under the cap', () => {
    expect(reconnectDelayMs(1, 1_000)).toBeLessThanOrEqual(50);
    expect(reconnectDelayMs(1, 1_000)).toBeGreaterThanOrEqual(40);
    expect(reconnectDelayMs(3, 1_000)).toBeGreaterThanOrEqual(160);
    for (let i = 1; i < 50; i++) expect(reconnectDelayMs(i, 1_000)).toBeLessThanOrEqual(1_000);
  });
});
