import { cpuQuotaCores, type CgroupFiles } from '../../../src/settings/cpu-quota';
import { loadSettings, type HostCpus } from '../../../src/settings/settings';

/** cgroup files as a container would show them. */
function files(contents: Record<string, string>): CgroupFiles {
  return { read: (path) => contents[path] };
}

describe('cpuQuotaCores', () => {
  it.each([
    ['200000 100000\n', 2],
    ['150000 100000\n', 2],
    ['50000 100000\n', 1],
    ['400000 100000\n', 4],
  ])('reads cgroup v2 cpu.max "%s" as %i CPUs, rounding up', (cpuMax, cores) => {
    expect(cpuQuotaCores(files({ '/sys/fs/cgroup/cpu.max': cpuMax }))).toBe(cores);
  });

  it('reads no quota from cgroup v2 "max"', () => {
    expect(cpuQuotaCores(files({ '/sys/fs/cgroup/cpu.max': 'max 100000\n' }))).toBeUndefined();
  });

  it('falls back to cgroup v1, where -1 means no quota', () => {
    const v1 = (quota: string) => files({ '/sys/fs/cgroup/cpu/cpu.cfs_quota_us': `${quota}\n`, '/sys/fs/cgroup/cpu/cpu.cfs_period_us': '100000\n' });
    expect(cpuQuotaCores(v1('300000'))).toBe(3);
    expect(cpuQuotaCores(v1('-1'))).toBeUndefined();
  });

  it('reads nothing outside a cgroup, or from a file it cannot parse', () => {
    expect(cpuQuotaCores(files({}))).toBeUndefined();
    expect(cpuQuotaCores(files({ '/sys/fs/cgroup/cpu.max': 'garbage' }))).toBeUndefined();
  });
});

describe('default WORKERS with Redis', () => {
  const host = (parallelism: number, quota: number | undefined): HostCpus => ({ parallelism: () => parallelism, quota: () => quota });
  const redis = { REDIS_URL: 'redis:6379' };

  it("is the container's CPU quota when it has one, not the node's cores", () => {
    expect(loadSettings(redis, host(32, 2)).workers).toBe(2);
  });

  it('is one per core without a quota, or when the quota exceeds the cores', () => {
    expect(loadSettings(redis, host(6, undefined)).workers).toBe(6);
    expect(loadSettings(redis, host(4, 16)).workers).toBe(4);
  });

  it('never exceeds 64, and an explicit WORKERS wins', () => {
    expect(loadSettings(redis, host(128, undefined)).workers).toBe(64);
    expect(loadSettings({ ...redis, WORKERS: '3' }, host(32, 2)).workers).toBe(3);
  });

  it('stays 1 with the memory store whatever the quota', () => {
    expect(loadSettings({}, host(32, 8)).workers).toBe(1);
  });
});
