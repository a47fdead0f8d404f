import type { RedisSettings, Settings } from './settings';

/**
 * Settings as logged: secrets (REDIS_AUTH, a password inside REDIS_URL, the same of GLOBAL_REDIS_*, the values of
 * CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS, which carry a control plane's tokens) replaced by "***".
 */
export function maskSettings(settings: Settings): Settings {
  const { redis, xds, regions } = settings;
  return {
    ...settings,
    xds: { ...xds, additionalHeaders: Object.fromEntries(Object.keys(xds.additionalHeaders).map((name) => [name, '***'])) },
    redis: maskRedis(redis),
    ...(regions === undefined ? {} : { regions: { ...regions, redis: maskRedis(regions.redis) } }),
  };
}

function maskRedis(redis: RedisSettings): RedisSettings {
  return {
    ...redis,
    auth: redis.auth === undefined ? undefined : '***',
    sentinelAuth: redis.sentinelAuth === undefined ? undefined : '***',
    url: redis.url === undefined ? undefined : maskUrlPasswords(redis.url),
  };
}

/** Hides the password of every `scheme://user:password@host` (and `:password@host`) in a REDIS_URL list. */
export function maskUrlPasswords(url: string): string {
  return url.replace(/(\/\/[^:/@,]*:)[^@,]*@/g, '$1***@');
}
