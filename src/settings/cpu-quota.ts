import { readFileSync } from 'node:fs';

/**
 * The CPU limit of the container this process runs in, from its cgroup: `cpu.max` under cgroup v2
 * ("200000 100000" = 2 CPUs; "max 100000" = no limit), else `cpu.cfs_quota_us` / `cpu.cfs_period_us`
 * under cgroup v1 (quota -1 = no limit). A Kubernetes `resources.limits.cpu` lands there. The node's
 * core count says nothing about it: a pod limited to 2 CPUs on a 32-core node that forks a worker
 * per core gets 32 processes' memory and 2 CPUs' time.
 */

/** Where the cgroup files are read; tests point it elsewhere. */
export interface CgroupFiles {
  /** Returns a file's text, or undefined when it cannot be read. */
  read(path: string): string | undefined;
}

const CGROUP_V2_CPU_MAX = '/sys/fs/cgroup/cpu.max';
const CGROUP_V1_QUOTA = '/sys/fs/cgroup/cpu/cpu.cfs_quota_us';
const CGROUP_V1_PERIOD = '/sys/fs/cgroup/cpu/cpu.cfs_period_us';

const systemFiles: CgroupFiles = {
  read: (path) => {
    try {
      return readFileSync(path, 'utf8');
    } catch {
      return undefined;
    }
  },
};

/** CPUs the quota allows, rounded up (1.5 CPUs -> 2); undefined when there is no quota or no cgroup. */
export function cpuQuotaCores(files: CgroupFiles = systemFiles): number | undefined {
  const v2 = files.read(CGROUP_V2_CPU_MAX);
  if (v2 !== undefined) {
    const [quota, period] = v2.trim().split(/\s+/);
    return coresOf(quota, period ?? '100000');
  }
  const quota = files.read(CGROUP_V1_QUOTA);
  const period = files.read(CGROUP_V1_PERIOD);
  if (quota === undefined || period === undefined) return undefined;
  return coresOf(quota.trim(), period.trim());
}

function coresOf(quotaText: string, periodText: string): number | undefined {
  if (quotaText === 'max') return undefined;
  const quota = Number(quotaText);
  const period = Number(periodText);
  if (!Number.isFinite(quota) || !Number.isFinite(period) || quota <= 0 || period <= 0) return undefined;
  return Math.max(1, Math.ceil(quota / period));
}
