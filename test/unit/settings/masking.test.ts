import { maskSettings, maskUrlPasswords } from '../../../src/settings/masking';
import { loadSettings } from '../../../src/settings/settings';

describe('maskSettings', () => {
  it('hides REDIS_AUTH, REDIS_SENTINEL_AUTH, the passwords inside REDIS_URL and the xDS headers’ values', () => {
    const settings = loadSettings({
      REDIS_URL: 'redis://app:s3cret@redis-1:6379,redis://:other@redis-2:6379',
      REDIS_AUTH: 'top',
      REDIS_SENTINEL_AUTH: 'sentinel-pass',
      CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: 'authorization:Bearer abc,x-tenant:acme',
    });
    const masked = maskSettings(settings);
    expect(masked.redis.url).toBe('redis://app:***@redis-1:6379,redis://:***@redis-2:6379');
    expect(masked.redis.auth).toBe('***');
    expect(masked.redis.sentinelAuth).toBe('***');
    expect(masked.xds.additionalHeaders).toEqual({ authorization: '***', 'x-tenant': '***' });
    expect(JSON.stringify(masked)).not.toMatch(/s3cret|other@|:"top"|sentinel-pass|Bearer|acme/);
  });

  it('hides the same secrets of the global store (GLOBAL_REDIS_*)', () => {
    const masked = maskSettings(
      loadSettings({
        REDIS_URL: 'local:6379',
        REGION: 'eu',
        GLOBAL_REDIS_URL: 'rediss://app:gl0bal@global:6380',
        GLOBAL_REDIS_AUTH: 'gtop',
        GLOBAL_REDIS_SENTINEL_AUTH: 'gsentinel',
      }),
    );
    expect(masked.regions?.redis).toMatchObject({ url: 'rediss://app:***@global:6380', auth: '***', sentinelAuth: '***' });
    expect(masked.regions?.region).toBe('eu');
    expect(JSON.stringify(masked)).not.toMatch(/gl0bal|gtop|gsentinel/);
  });

  it('leaves unset secrets unset and never writes the settings it masks', () => {
    const settings = loadSettings({ REDIS_URL: 'redis://redis:6379' });
    const masked = maskSettings(settings);
    expect(masked.redis.url).toBe('redis://redis:6379');
    expect(masked.redis.auth).toBeUndefined();
    expect(masked.redis.sentinelAuth).toBeUndefined();
    expect(settings.redis.url).toBe('redis://redis:6379');
    expect(masked.grpcPort).toBe(settings.grpcPort);
  });
});

describe('maskUrlPasswords', () => {
  it('hides a password with or without a user, and keeps a URL without one', () => {
    expect(maskUrlPasswords('rediss://user:p%40ss@host:6380/0')).toBe('rediss://user:***@host:6380/0');
    expect(maskUrlPasswords('redis://:pw@host')).toBe('redis://:***@host');
    expect(maskUrlPasswords('redis://host:6379')).toBe('redis://host:6379');
  });
});
