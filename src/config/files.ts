import { readdir, readFile, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { ConfigError } from './config-error';
import { type RateLimitConfig } from '../limiter/rules';
import { buildConfig, type BuildOptions } from './rule-tree';
import { parseConfigText, type ParseOptions } from './rule-reader';
/**
 * Config files on disk: which files a config directory holds (as the reference reads them), their
 * texts, and the config they build together.
 */

export interface ListOptions {
  /** Skip files and directories whose name starts with '.' (RUNTIME_IGNOREDOTFILES). */
  readonly ignoreDotFiles?: boolean;
  /**
   * Also read what lies beside the config directory under a name starting with `prefix` (a file,
   * or every file of a folder): the reference's watched-root layout (RUNTIME_WATCH_ROOT) reads
   * `$RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY` and keeps every name starting with `$RUNTIME_APPDIRECTORY.`,
   * so a `config.yaml` beside `config/` is a config file there.
   */
  readonly beside?: { readonly dir: string; readonly prefix: string };
}

export interface LoadOptions extends ParseOptions, BuildOptions, ListOptions {}

/** One config file's name (as it appears in errors) and text. */
export interface ConfigText {
  readonly file: string;
  readonly text: string;
}

/** parseConfigText over every file, then buildConfig. */
export function configFromTexts(files: readonly ConfigText[], opts: ParseOptions & BuildOptions, warnings?: readonly string[]): RateLimitConfig {
  return buildConfig(
    files.map((f) => parseConfigText(f.file, f.text, opts)),
    opts,
    warnings,
  );
}

function readFailure(file: string, err: unknown): ConfigError {
  // Node's fs messages end with ", <syscall> '<path>'"; the path is already the error's file.
  const message = typeof err === 'object' && err !== null && 'message' in err ? String(err.message) : String(err);
  return new ConfigError(file, '', `cannot read: ${message.replace(/, \w+ '.*'$/, '')}`);
}

/** The files listConfigFiles found, and what it skipped that deserves a warning. */
export interface ConfigListing {
  readonly files: readonly string[];
  readonly warnings: readonly string[];
}

/**
 * The config files at `path`: the path itself when it is a file, else every file under the
 * directory, recursively, whatever its name or extension, in name order (a ConfigMap key such as
 * `ratelimit` or `rules.conf` is a config file like any other). As the reference's runtime loader:
 * links to files are followed, links to directories are not (skipped with a warning), and with
 * `ignoreDotFiles` names starting with '.' are skipped, directories included. Names starting with
 * '..' are always skipped: they are the Kubernetes ConfigMap's `..data` link and timestamped
 * directories, whose files also appear as top-level links. Throws ConfigError when the path, a
 * directory or a listed file is unreadable, a dangling link included: dropping a domain silently
 * would lift its limits.
 */
export async function findConfigFiles(path: string, opts: ListOptions = {}): Promise<ConfigListing> {
  const files: string[] = [];
  const warnings: string[] = [];
  let unreadable: ConfigError | undefined;
  let info;
  try {
    info = await stat(path);
  } catch (err) {
    unreadable = readFailure(path, err);
  }
  if (info?.isFile()) files.push(path);
  else if (info?.isDirectory()) await walkDirectory(path, opts, files, warnings);
  else if (info !== undefined) throw new ConfigError(path, '', 'not a file or a directory');
  const beside = opts.beside;
  if (
    beside !== undefined &&
    (await stat(beside.dir).then(
      (s) => s.isDirectory(),
      () => false,
    ))
  ) {
    await walkDirectory(beside.dir, opts, files, warnings, (name) => name.startsWith(beside.prefix));
  }
  // A missing config directory is an error unless something beside it was found.
  if (unreadable !== undefined && files.length === 0) throw unreadable;
  return { files, warnings };
}

/** Every file under `dir` (see findConfigFiles); `accept` filters the names of its own entries, not of deeper ones. */
async function walkDirectory(
  dir: string,
  opts: ListOptions,
  files: string[],
  warnings: string[],
  accept: (name: string) => boolean = () => true,
): Promise<void> {
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch (err) {
    throw readFailure(dir, err);
  }
  entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const entry of entries) {
    const name = entry.name;
    if (!accept(name) || name.startsWith('..') || (opts.ignoreDotFiles === true && name.startsWith('.'))) continue;
    const full = join(dir, name);
    if (entry.isDirectory()) {
      await walkDirectory(full, opts, files, warnings);
      continue;
    }
    let target;
    try {
      target = entry.isSymbolicLink() ? await stat(full) : entry;
    } catch (err) {
      throw readFailure(full, err);
    }
    if (target.isFile()) files.push(full);
    else if (target.isDirectory()) warnings.push(`${full}: skipped: a link to a directory is not followed (link its files instead)`);
    else warnings.push(`${full}: skipped: not a regular file`);
  }
}

/** The files findConfigFiles finds, without its warnings. */
export async function listConfigFiles(path: string, opts: ListOptions = {}): Promise<string[]> {
  return [...(await findConfigFiles(path, opts)).files];
}

/** The texts of every file findConfigFiles finds, and its warnings. */
export interface ConfigTexts {
  readonly texts: readonly ConfigText[];
  readonly warnings: readonly string[];
}

/** Reads every file findConfigFiles finds. */
export async function readConfigTexts(path: string, opts: ListOptions = {}): Promise<ConfigTexts> {
  const listing = await findConfigFiles(path, opts);
  const texts = await Promise.all(
    listing.files.map(async (file) => {
      try {
        return { file, text: await readFile(file, 'utf8') };
      } catch (err) {
        throw readFailure(file, err);
      }
    }),
  );
  return { texts, warnings: listing.warnings };
}

/** Loads a config file, or every config file under a directory. Throws ConfigError. */
export async function loadConfigPath(path: string, opts: LoadOptions): Promise<RateLimitConfig> {
  const read = await readConfigTexts(path, opts);
  return configFromTexts(read.texts, opts, read.warnings);
}
