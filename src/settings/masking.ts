import type { Settings } from './settings';

/**
 * Settings as logged: secrets (REDIS_AUTH, a password inside REDIS_URL, the values of
 * CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS, which carry a control plane's tokens) replaced by "***".
 */
export function maskSettings(settings: Settings): Settings {
  const { redis, xds } = settings;
  return {
    ...settings,
    xds: { ...xds, additionalHeaders: Object.fromEntries(Object.keys(xds.additionalHeaders).map((name) => [name, '***'])) },
    redis: {
      ...redis,
      auth: redis.auth === undefined ? undefined : '***',
      sentinelAuth: redis.sentinelAuth === undefined ? undefined : '***',
      url: redis.url === undefined ? undefined : maskUrlPasswords(redis.url),
    },
  };
}

/** Hides the password of every `scheme://user:password@host` (and `:password@host`) in a REDIS_URL list. */
export function maskUrlPasswords(url: string): string {
  return url.replace(/(\/\/[^:/@,]*:)[^@,]*@/g, '$1***@');
}
