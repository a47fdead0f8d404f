import { parseArgs } from 'node:util';
import { describeConfig } from '../config/describe';
import { loadConfigPath } from '../config/files';
import { ConfigError } from '../config/config-error';
import { ALGORITHMS, type Algorithm } from '../limiter/types';
import { regionSyncInterval, SettingsError } from '../settings/settings';
import type { CliIo } from './io';

export const VALIDATE_USAGE = 'usage: slidegate validate [--default-algorithm NAME] [--ignore-dot-files] [--merge-domain-config] PATH';

const TRUE = new Set(['1', 't', 'T', 'true', 'TRUE', 'True']);

/** `slidegate validate --help`. */
export const VALIDATE_HELP = [
  VALIDATE_USAGE,
  '  Loads a config file or directory as the server would, prints each rule, and exits 0 when it is valid',
  '  (1 otherwise, with the file and the path of the first error).',
  '  --default-algorithm NAME   algorithm of rules that name none (default: DEFAULT_ALGORITHM or sliding_window)',
  '  --ignore-dot-files         skip files and directories whose name starts with a dot (RUNTIME_IGNOREDOTFILES)',
].join('\n');

/**
 * `slidegate validate PATH`: loads a config file or directory exactly as the server would and prints
 * what it understood, then its warnings (ignored keys, skipped files) on stderr. Exit code 0 when
 * valid, 1 otherwise (the message names the file and path). RUNTIME_IGNOREDOTFILES and
 * MERGE_DOMAIN_CONFIG are read from the environment as the server reads them; the flags force them on.
 * REGION_SYNC_INTERVAL too, by the server's own code: a `scope: global` limit's window holds ten of them.
 */
export async function runValidate(args: readonly string[], io: CliIo, env: NodeJS.ProcessEnv = process.env): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...args],
      allowPositionals: true,
      options: {
        'default-algorithm': { type: 'string' },
        'ignore-dot-files': { type: 'boolean', default: false },
        'merge-domain-config': { type: 'boolean', default: false },
      },
    });
  } catch (err) {
    io.err(`${(err as Error).message}\n${VALIDATE_USAGE}`);
    return 1;
  }
  if (parsed.positionals.length !== 1) {
    io.err(VALIDATE_USAGE);
    return 1;
  }
  const algorithm = parsed.values['default-algorithm'] ?? env.DEFAULT_ALGORITHM ?? 'sliding_window';
  if (!ALGORITHMS.includes(algorithm as Algorithm)) {
    io.err(`unknown algorithm "${algorithm}" (expected one of ${ALGORITHMS.join(', ')})`);
    return 1;
  }
  let regionSyncIntervalMs: number;
  try {
    regionSyncIntervalMs = regionSyncInterval(env);
  } catch (err) {
    if (!(err instanceof SettingsError)) throw err;
    io.err(err.message);
    return 1;
  }
  const path = parsed.positionals[0];
  try {
    const config = await loadConfigPath(path, {
      defaultAlgorithm: algorithm as Algorithm,
      regionSyncIntervalMs,
      ignoreDotFiles: parsed.values['ignore-dot-files'] === true || TRUE.has(env.RUNTIME_IGNOREDOTFILES ?? ''),
      mergeDomains: parsed.values['merge-domain-config'] === true || TRUE.has(env.MERGE_DOMAIN_CONFIG ?? ''),
    });
    for (const line of describeConfig(config)) io.out(line);
    for (const warning of config.warnings) io.err(`warning: ${warning}`);
    io.out(`${path}: OK (${config.domains.size} domain${config.domains.size === 1 ? '' : 's'})`);
    return 0;
  } catch (err) {
    io.err(err instanceof ConfigError ? err.message : `${path}: ${(err as Error).message}`);
    return 1;
  }
}
