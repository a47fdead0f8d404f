import * as fs from 'node:fs';
import * as path from 'node:path';
import { REFERENCE_SETTINGS, referenceSettingWarnings } from '../../../src/settings/reference-settings';
import { loadSettings } from '../../../src/settings/settings';

/**
 * Every variable of the reference server's settings is either read by loadSettings or, when set, named
 * in one start-up warning. The list of names is kept in test/fixtures/reference-settings.txt.
 */

const REFERENCE_NAMES = fs
  .readFileSync(path.join(__dirname, '../../fixtures/reference-settings.txt'), 'utf8')
  .split('\n')
  .map((l) => l.trim())
  .filter((l) => l !== '' && !l.startsWith('#'));

/** The names loadSettings looks up in `env` (every property read goes through the proxy). */
function namesRead(env: Record<string, string>): Set<string> {
  const read = new Set<string>();
  const recording = new Proxy(env, {
    get(target, name) {
      if (typeof name === 'string') read.add(name);
      return target[name as string];
    },
  });
  loadSettings(recording);
  return read;
}

const honoured = REFERENCE_NAMES.filter((n) => REFERENCE_SETTINGS[n]?.kind === 'honoured');
const warned = REFERENCE_NAMES.filter((n) => REFERENCE_SETTINGS[n]?.kind === 'warned');

describe('the reference settings table', () => {
  it("lists the reference server's 114 variables, each once", () => {
    expect(REFERENCE_NAMES).toHaveLength(114);
    expect(new Set(REFERENCE_NAMES).size).toBe(114);
  });

  it('has exactly one entry for every reference variable, and no other', () => {
    expect(Object.keys(REFERENCE_SETTINGS).sort()).toEqual([...REFERENCE_NAMES].sort());
    expect(honoured.length + warned.length).toBe(114);
  });

  it.each(honoured)('%s is read by loadSettings and not warned about', (name) => {
    expect(namesRead({}).has(name)).toBe(true);
    expect(referenceSettingWarnings({ [name]: 'x' }).filter((w) => w.startsWith(`${name}=`))).toEqual([]);
  });

  it.each(warned)('%s, when set, gives one warning line that names it', (name) => {
    const lines = loadSettings({ BACKEND_TYPE: 'memory', [name]: 'x' }).warnings;
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(new RegExp(`^${name}=(x|\\*\\*\\*) is not supported: \\S`));
    expect(lines[0]).not.toContain('\n');
  });

  it('says nothing for a warned variable that is unset or empty', () => {
    expect(loadSettings({ BACKEND_TYPE: 'memory', MEMCACHE_HOST_PORT: '', TRACING_ENABLED: '' }).warnings).toEqual([]);
  });

  it('says nothing for values that mean the same here', () => {
    const same = {
      CONFIG_TYPE: 'FILE',
      FORCE_START_WITHOUT_INITIAL_CONFIG: 'true',
      STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: 'true',
      REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: 'true',
      REDIS_POOL_ON_EMPTY_BEHAVIOR: 'WAIT',
      REDIS_PERSECOND: 'false',
      TRACING_ENABLED: 'false',
    };
    expect(referenceSettingWarnings(same)).toEqual([]);
    expect(referenceSettingWarnings({ ...same, STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: 'false' })).toEqual([
      expect.stringMatching(/^STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=false is not supported: .*COUNT_DENIED_REQUESTS=true/),
    ]);
  });

  it('does not log secrets of warned variables', () => {
    const [line] = referenceSettingWarnings({ REDIS_PERSECOND_AUTH: 'hunter2' });
    expect(line).toContain('REDIS_PERSECOND_AUTH=***');
    expect(line).not.toContain('hunter2');
  });
});
