import { createHash } from 'node:crypto';
import { watch, type FSWatcher } from 'node:fs';
import { realpath, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { Algorithm } from '../limiter/types';
import type { Settings } from '../settings/settings';
import { configFromTexts, listConfigFiles, readConfigTexts, type ConfigText, type ListOptions } from './files';
import type { ConfigError } from './config-error';
import type { RateLimitConfig } from '../limiter/rules';

/**
 * Where the config lives, and keeping it current. Changes are noticed two ways: fs.watch for
 * speed, and a cheap periodic fingerprint (resolved path, inode, size, mtime of every file) because
 * fs.watch misses some of them, notably the Kubernetes ConfigMap update, which swaps the `..data`
 * symlink rather than writing any file. A reload that fails keeps the previous config.
 */

/** CONFIG_PATH when set, else RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY. */
export function configLocation(settings: Settings): string {
  return settings.configPath ?? join(settings.runtimeRoot, settings.runtimeSubdirectory, settings.runtimeAppDirectory);
}

export interface ConfigSourceOptions {
  /** A config file, or a directory of *.yaml / *.yml files. */
  readonly path: string;
  readonly defaultAlgorithm: Algorithm;
  /** REGION_SYNC_INTERVAL, ms, when regions are on (ParseOptions.regionSyncIntervalMs). */
  readonly regionSyncIntervalMs?: number;
  /** Skip files and directories whose name starts with '.'. */
  readonly ignoreDotFiles?: boolean;
  /** Merge one domain split across files (MERGE_DOMAIN_CONFIG). */
  readonly mergeDomains?: boolean;
  /** Files beside the config directory that are config files too (see ListOptions.beside). */
  readonly beside?: ListOptions['beside'];
  /**
   * Also watch a directory above the config (RUNTIME_WATCH_ROOT): a directory path, or true for the
   * parent of `path`. Changes there are picked up by the fingerprint poll in any case; watching
   * only makes them quicker.
   */
  readonly watchRoot?: boolean | string;
  /** Quiet time after a change event before reloading, ms (editors and ConfigMaps write in bursts). */
  readonly debounceMs?: number;
  /** Fingerprint poll interval, ms. */
  readonly pollMs?: number;
  /** Called whenever a new config becomes current (first load included), with the files it came from. */
  readonly onLoad?: (config: RateLimitConfig, files: readonly string[]) => void;
  /** Called when a reload fails (the previous config stays current) or onLoad throws. */
  readonly onError?: (err: ConfigError | Error) => void;
}

/** ConfigSource options from the settings table: location, default algorithm, region sync interval, dotfiles, watched root. */
export function configSourceOptions(
  settings: Settings,
): Pick<ConfigSourceOptions, 'path' | 'defaultAlgorithm' | 'regionSyncIntervalMs' | 'ignoreDotFiles' | 'mergeDomains' | 'watchRoot' | 'beside'> {
  const runtimeLayout = settings.configPath === undefined;
  return {
    path: configLocation(settings),
    defaultAlgorithm: settings.defaultAlgorithm,
    regionSyncIntervalMs: settings.regions?.syncIntervalMs,
    ignoreDotFiles: settings.runtimeIgnoreDotFiles,
    mergeDomains: settings.mergeDomainConfig,
    watchRoot: runtimeLayout && settings.runtimeWatchRoot ? settings.runtimeRoot : false,
    // The reference's watched-root layout also reads `$RUNTIME_APPDIRECTORY.*` beside the config directory.
    beside:
      runtimeLayout && settings.runtimeWatchRoot
        ? { dir: join(settings.runtimeRoot, settings.runtimeSubdirectory), prefix: `${settings.runtimeAppDirectory}.` }
        : undefined,
  };
}

const MAX_DEBOUNCE_FACTOR = 10; // a directory that never stops changing still reloads this often

interface TextsRead {
  readonly texts: readonly ConfigText[];
  /** What listing the files skipped (links to directories and the like). */
  readonly warnings: readonly string[];
  readonly signature: string;
}

interface Watched {
  readonly dir: string;
  readonly real: string;
  readonly watcher: FSWatcher;
  dead: boolean;
}

/** The current config and its reloads. One instance per process; close() releases every handle. */
export class ConfigSource {
  private readonly opts: ConfigSourceOptions;
  private readonly debounceMs: number;
  private readonly pollMs: number;
  private config: RateLimitConfig | undefined;
  private signature: string | undefined;
  private failedSignature: string | undefined;
  private fingerprint: string | undefined;
  private watched: Watched[] = [];
  private debounceTimer: NodeJS.Timeout | undefined;
  private firstEventAt = 0;
  private pollTimer: NodeJS.Timeout | undefined;
  private polling = false;
  private refreshing = false;
  private reloading = false;
  private pending = false;
  private retriedReadError = false;
  private started = false;
  private closed = false;
  private applied = 0;

  constructor(options: ConfigSourceOptions) {
    this.opts = options;
    this.debounceMs = options.debounceMs ?? 100;
    this.pollMs = options.pollMs ?? 500;
  }

  /** Count of configs that became current (0 before the first load); compare to spot a change. */
  get generation(): number {
    return this.applied;
  }

  /** The config location being read. */
  get path(): string {
    return this.opts.path;
  }

  /** First load: reads and applies the config, or throws ConfigError (nothing is applied). */
  async load(): Promise<RateLimitConfig> {
    const fingerprint = await this.computeFingerprint();
    const read = await this.readTexts();
    const config = configFromTexts(read.texts, this.opts, read.warnings);
    this.fingerprint = fingerprint;
    this.apply(config, read);
    return config;
  }

  /** The config in force; undefined until a load succeeds. */
  current(): RateLimitConfig | undefined {
    return this.config;
  }

  /** Starts watching for changes. Idempotent; works before a successful load too (the first good config wins). */
  start(): void {
    if (this.started || this.closed) return;
    this.started = true;
    this.ensureWatchers();
    this.pollTimer = setInterval(() => void this.poll(), this.pollMs);
    this.pollTimer.unref();
  }

  /** Stops watching; no timer or watcher survives it. */
  close(): void {
    this.closed = true;
    if (this.pollTimer) clearInterval(this.pollTimer);
    if (this.debounceTimer) clearTimeout(this.debounceTimer);
    this.pollTimer = undefined;
    this.debounceTimer = undefined;
    for (const w of this.watched) w.watcher.close();
    this.watched = [];
  }

  private configDir(): Promise<string> {
    return stat(this.opts.path).then(
      (s) => (s.isDirectory() ? this.opts.path : dirname(this.opts.path)),
      () => dirname(this.opts.path),
    );
  }

  private watchDirs(dir: string): string[] {
    const root = this.opts.watchRoot;
    const dirs = [dir];
    if (root === true) dirs.push(dirname(dir));
    else if (typeof root === 'string' && root !== '') dirs.push(root);
    return [...new Set(dirs)];
  }

  /** (Re)creates watchers whose directory is gone or now resolves elsewhere (a swapped symlink). */
  private async refreshWatchers(): Promise<void> {
    if (this.refreshing) return;
    this.refreshing = true;
    try {
      await this.refreshWatchersOnce();
    } finally {
      this.refreshing = false;
    }
  }

  private async refreshWatchersOnce(): Promise<void> {
    const dirs = this.watchDirs(await this.configDir());
    const keep: Watched[] = [];
    for (const w of this.watched) {
      const real = await realpath(w.dir).catch(() => undefined);
      if (!w.dead && real === w.real && dirs.includes(w.dir)) keep.push(w);
      else w.watcher.close();
    }
    if (this.closed) {
      for (const w of keep) w.watcher.close();
      return;
    }
    this.watched = keep;
    for (const dir of dirs) {
      if (keep.some((w) => w.dir === dir)) continue;
      const real = await realpath(dir).catch(() => undefined);
      if (real === undefined || this.closed) continue;
      try {
        const watcher = watch(dir, { persistent: false }, () => this.schedule());
        const entry: Watched = { dir, real, watcher, dead: false };
        watcher.on('error', () => {
          entry.dead = true;
          this.schedule();
        });
        this.watched.push(entry);
      } catch {
        // Unwatchable (gone, or out of inotify watches): the poll still notices changes.
      }
    }
  }

  private ensureWatchers(): void {
    void this.refreshWatchers().catch(() => undefined);
  }

  private schedule(): void {
    if (this.closed) return;
    const now = Date.now();
    if (this.debounceTimer === undefined) this.firstEventAt = now;
    else if (now - this.firstEventAt >= this.debounceMs * MAX_DEBOUNCE_FACTOR)
      return; // let the pending one fire
    else clearTimeout(this.debounceTimer);
    this.debounceTimer = setTimeout(() => {
      this.debounceTimer = undefined;
      void this.reload();
    }, this.debounceMs);
    this.debounceTimer.unref();
  }

  private async poll(): Promise<void> {
    if (this.polling || this.closed) return;
    this.polling = true;
    try {
      await this.refreshWatchers();
      const fingerprint = await this.computeFingerprint();
      if (fingerprint !== this.fingerprint) this.schedule();
    } catch {
      // A transient fs error: the next poll tries again.
    } finally {
      this.polling = false;
    }
  }

  /** Cheap identity of the files on disk: resolved paths, inodes, sizes and times. */
  private async computeFingerprint(): Promise<string> {
    try {
      const files = await listConfigFiles(this.opts.path, this.opts);
      const parts = await Promise.all(
        files.map(async (f) => {
          const [real, s] = await Promise.all([realpath(f), stat(f)]);
          return `${f}>${real}:${s.ino}:${s.size}:${s.mtimeMs}:${s.ctimeMs}`;
        }),
      );
      return parts.join('\n');
    } catch (err) {
      return `unreadable: ${err instanceof Error ? err.message : String(err)}`;
    }
  }

  private async reload(): Promise<void> {
    if (this.reloading) {
      this.pending = true;
      return;
    }
    this.reloading = true;
    try {
      do {
        this.pending = false;
        await this.reloadOnce();
      } while (this.pending && !this.closed);
    } finally {
      this.reloading = false;
    }
  }

  private async reloadOnce(): Promise<void> {
    if (this.closed) return;
    this.fingerprint = await this.computeFingerprint();
    let read: TextsRead;
    try {
      read = await this.readTexts();
    } catch (err) {
      if (this.closed) return;
      if (!this.retriedReadError) {
        // Usually a swap caught halfway (a link into a directory just removed): look again shortly.
        this.retriedReadError = true;
        this.schedule();
        return;
      }
      this.retriedReadError = false;
      this.report(err);
      return;
    }
    this.retriedReadError = false;
    // Same text as in force (a touch, not a change), or the same broken text already reported.
    if (this.closed || read.signature === this.signature || read.signature === this.failedSignature) return;
    let config: RateLimitConfig;
    try {
      config = configFromTexts(read.texts, this.opts, read.warnings);
    } catch (err) {
      this.failedSignature = read.signature;
      this.report(err);
      return;
    }
    this.apply(config, read);
  }

  /** Reads every file; identical text yields the same signature, so no-op reloads are skipped. */
  private async readTexts(): Promise<TextsRead> {
    const { texts, warnings } = await readConfigTexts(this.opts.path, this.opts);
    const hash = createHash('sha256');
    for (const t of texts) hash.update(`${t.file}\u0000${t.text}\u0000`);
    for (const w of warnings) hash.update(`${w}\u0000`);
    return { texts, warnings, signature: hash.digest('hex') };
  }

  private apply(config: RateLimitConfig, read: TextsRead): void {
    this.config = config;
    this.signature = read.signature;
    this.failedSignature = undefined;
    this.applied++;
    if (this.opts.onLoad) {
      try {
        this.opts.onLoad(
          config,
          read.texts.map((t) => t.file),
        );
      } catch (err) {
        this.report(err);
      }
    }
  }

  private report(err: unknown): void {
    this.opts.onError?.(err instanceof Error ? err : new Error(String(err)));
  }
}
