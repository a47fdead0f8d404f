import { configLocation, configSourceOptions } from '../../../src/config/source';
import { loadSettings } from '../../../src/settings/settings';

// Loading and reloading from files: test/integration/config/source-reload.test.ts.

describe('where the config lives', () => {
  test('CONFIG_PATH wins over the runtime directories', () => {
    expect(configLocation(loadSettings({ CONFIG_PATH: '/etc/slidegate/edge.yaml', RUNTIME_ROOT: '/data' }))).toBe('/etc/slidegate/edge.yaml');
  });

  test('otherwise it is RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY', () => {
    expect(configLocation(loadSettings({ RUNTIME_ROOT: '/data', RUNTIME_SUBDIRECTORY: 'ratelimit' }))).toBe('/data/ratelimit/config');
    expect(configLocation(loadSettings({}))).toBe('/srv/runtime_data/current/config');
    expect(configLocation(loadSettings({ RUNTIME_ROOT: '/data', RUNTIME_APPDIRECTORY: 'rules' }))).toBe('/data/rules');
  });

  test('source options carry the dotfile policy and watch the runtime root only for the runtime layout', () => {
    const runtime = configSourceOptions(loadSettings({ RUNTIME_ROOT: '/data', RUNTIME_IGNOREDOTFILES: 'true', DEFAULT_ALGORITHM: 'fixed_window' }));
    expect(runtime).toEqual({
      path: '/data/config',
      defaultAlgorithm: 'fixed_window',
      ignoreDotFiles: true,
      mergeDomains: false,
      watchRoot: '/data',
      beside: { dir: '/data', prefix: 'config.' },
    });
    expect(configSourceOptions(loadSettings({ CONFIG_PATH: '/etc/x.yaml' })).watchRoot).toBe(false);
    expect(configSourceOptions(loadSettings({ RUNTIME_WATCH_ROOT: 'false' })).watchRoot).toBe(false);
  });
});
