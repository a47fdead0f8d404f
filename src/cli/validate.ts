import { parseArgs } from 'node:util';
import { describeConfig } from '../config/describe';
import { loadConfigPath } from '../config/load';
import { ConfigError } from '../config/config-error';
import { ALGORITHMS, type Algorithm } from '../limiter/types';
import type { CliIo } from './io';

export const VALIDATE_USAGE = 'usage: slidegate validate [--default-algorithm NAME] [--ignore-dot-files] PATH';

/**
 * `slidegate validate PATH`: loads a config file or directory exactly as the server would and prints
 * what it understood. Exit code 0 when valid, 1 otherwise (the message names the file and path).
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
  const path = parsed.positionals[0];
  try {
    const config = await loadConfigPath(path, {
      defaultAlgorithm: algorithm as Algorithm,
      ignoreDotFiles: parsed.values['ignore-dot-files'] === true,
    });
    for (const line of describeConfig(config)) io.out(line);
    io.out(`${path}: OK (${config.domains.size} domain${config.domains.size === 1 ? '' : 's'})`);
    return 0;
  } catch (err) {
    io.err(err instanceof ConfigError ? err.message : `${path}: ${(err as Error).message}`);
    return 1;
  }
}
