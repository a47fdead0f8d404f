import { open, readFile, rename, writeFile, type FileHandle } from 'node:fs/promises';
import {
  MAX_REMEMBERED_REMOVALS,
  storedBytes,
  type OverrideChanges,
  type OverridesStore,
  type OverrideWrite,
  type PutOutcome,
  type RemovedOverride,
  type StoredOverride,
} from '../limiter/overrides-store';

/**
 * The overrides port in this process (BACKEND_TYPE=memory, one process: see WORKERS), with
 * OVERRIDES_FILE as its memory across restarts: an append-only file of one JSON line per change,
 * written before the change takes effect and read back at start, rewritten whole (a new file
 * renamed over the old) once it holds twice what is live. Without a file the overrides live as long
 * as the process. Every change is decided, written and applied in turn (one at a time), so a cap
 * is checked against what is there when the change applies.
 */

interface Held {
  readonly version: number;
  readonly json: string;
  readonly expiresAtMs: number;
  readonly bytes: number;
}

/** One line of the file: a write, a removal, or (first line of a rewritten file) the version reached. */
type FileLine =
  | { readonly op: 'put'; readonly id: string; readonly version: number; readonly json: string; readonly expires_at_ms?: number }
  | { readonly op: 'del'; readonly id: string; readonly version: number }
  | { readonly op: 'version'; readonly version: number };

/** A line of OVERRIDES_FILE that cannot be read: the start fails naming the file and the line. */
export class OverridesFileError extends Error {
  constructor(file: string, line: number, detail: string) {
    super(`OVERRIDES_FILE ${file}: line ${line}: ${detail}`);
    this.name = 'OverridesFileError';
  }
}

/** Lines appended beyond what is live before the file is rewritten. */
const REWRITE_SLACK_LINES = 1_000;

export class MemoryOverrides implements OverridesStore {
  private last = 0;
  private readonly live = new Map<string, Held>();
  private bytes = 0;
  /** Each change in version order (a write or a removal); a stale one (its id changed since) is skipped, and compacted away. */
  private log: { readonly version: number; readonly id: string }[] = [];
  /** Remembered removals, oldest first (MAX_REMEMBERED_REMOVALS at most), and the last forgotten one. */
  private readonly removed = new Map<string, number>();
  private floor = 0;
  /** The earliest expiry among the live ones: a purge before it has nothing to do. */
  private nextExpiryMs = Infinity;
  private readonly file: OverridesFile | undefined;
  /** Changes run one at a time (each waits for its line to be written). */
  private turn: Promise<unknown> = Promise.resolve();

  private readonly rememberedRemovals: number;

  private constructor(file: OverridesFile | undefined, rememberedRemovals: number) {
    this.file = file;
    this.rememberedRemovals = rememberedRemovals;
  }

  /**
   * The overrides in this process; with `file`, read from it (created when absent) and kept in it.
   * `rememberedRemovals`: MAX_REMEMBERED_REMOVALS unless a test asks fewer.
   */
  static async open(options: { readonly file?: string; readonly rememberedRemovals?: number } = {}): Promise<MemoryOverrides> {
    const remembered = options.rememberedRemovals ?? MAX_REMEMBERED_REMOVALS;
    if (options.file === undefined) return new MemoryOverrides(undefined, remembered);
    const store = new MemoryOverrides(new OverridesFile(options.file), remembered);
    for (const line of await readLines(options.file)) store.replay(line);
    await store.file!.open(store.linesFor());
    return store;
  }

  version(): Promise<number> {
    return Promise.resolve(this.last);
  }

  put(write: OverrideWrite): Promise<PutOutcome> {
    return this.inTurn(async () => {
      const purged = await this.purgeNow(write.nowMs, Infinity);
      const held = this.live.get(write.id);
      const bytes = storedBytes(write.id, write.json);
      const after = this.bytes - (held?.bytes ?? 0) + bytes;
      if (held === undefined && this.live.size + 1 > write.maxCount) return { ok: false, cap: 'count', count: this.live.size, bytes: this.bytes, purged };
      if (after > write.maxBytes) return { ok: false, cap: 'bytes', count: this.live.size, bytes: this.bytes, purged };
      const version = this.last + 1;
      await this.file?.append({
        op: 'put',
        id: write.id,
        version,
        json: write.json,
        ...(write.expiresAtMs === undefined ? {} : { expires_at_ms: write.expiresAtMs }),
      });
      this.applyPut(write.id, version, write.json, write.expiresAtMs ?? Infinity);
      return { ok: true, version, previous: held === undefined ? undefined : stored(write.id, held), purged };
    });
  }

  remove(id: string, _nowMs: number): Promise<RemovedOverride | undefined> {
    return this.inTurn(async () => {
      const held = this.live.get(id);
      if (held === undefined) return undefined;
      return this.removeNow(id, held);
    });
  }

  purgeExpired(nowMs: number, max: number): Promise<RemovedOverride[]> {
    return this.inTurn(() => this.purgeNow(nowMs, max));
  }

  changes(since: number, max: number): Promise<OverrideChanges> {
    const changed: StoredOverride[] = [];
    const removed: { id: string; version: number }[] = [];
    let upTo = this.last;
    // The first change after `since` (the log is in version order).
    let lo = 0;
    let hi = this.log.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.log[mid].version <= since) lo = mid + 1;
      else hi = mid;
    }
    for (let i = lo; i < this.log.length; i++) {
      const { version, id } = this.log[i];
      const held = this.live.get(id);
      if (held?.version === version) changed.push(stored(id, held));
      else if (this.removed.get(id) === version) removed.push({ id, version });
      else continue;
      if (changed.length === max || removed.length === max) {
        upTo = version;
        break;
      }
    }
    return Promise.resolve({ version: this.last, changed, removed, upTo, floor: this.floor });
  }

  async close(): Promise<void> {
    await this.turn.catch(() => undefined);
    await this.file?.close();
  }

  /** Runs `change` after every change before it; a failed one (the file could not be written) changed nothing. */
  private inTurn<T>(change: () => Promise<T>): Promise<T> {
    const run = this.turn.then(change);
    // The file's rewrite, when due, runs between two changes; a failed one is tried again after the next change.
    this.turn = run.then(
      () => this.file?.rewriteIfStale(this.live.size, () => this.linesFor()).catch(() => undefined),
      () => undefined,
    );
    return run;
  }

  private async purgeNow(nowMs: number, max: number): Promise<RemovedOverride[]> {
    if (nowMs < this.nextExpiryMs) return [];
    const purged: RemovedOverride[] = [];
    let next = Infinity;
    for (const [id, held] of [...this.live]) {
      if (held.expiresAtMs <= nowMs && purged.length < max) purged.push(await this.removeNow(id, held));
      else if (held.expiresAtMs < next) next = held.expiresAtMs;
    }
    this.nextExpiryMs = next;
    return purged;
  }

  private async removeNow(id: string, held: Held): Promise<RemovedOverride> {
    const version = this.last + 1;
    await this.file?.append({ op: 'del', id, version });
    this.applyRemove(id, version);
    return { version, previous: stored(id, held) };
  }

  private applyPut(id: string, version: number, json: string, expiresAtMs: number): void {
    const held = this.live.get(id);
    const bytes = storedBytes(id, json);
    this.bytes += bytes - (held?.bytes ?? 0);
    this.live.set(id, { version, json, expiresAtMs, bytes });
    this.removed.delete(id);
    if (expiresAtMs < this.nextExpiryMs) this.nextExpiryMs = expiresAtMs;
    this.logged(id, version);
  }

  private applyRemove(id: string, version: number): void {
    const held = this.live.get(id);
    if (held !== undefined) {
      this.bytes -= held.bytes;
      this.live.delete(id);
    }
    this.removed.delete(id);
    this.removed.set(id, version);
    if (this.removed.size > this.rememberedRemovals) {
      const [oldest, at] = this.removed.entries().next().value!;
      this.removed.delete(oldest);
      this.floor = at;
    }
    this.logged(id, version);
  }

  private logged(id: string, version: number): void {
    this.last = version;
    this.log.push({ version, id });
    // Stale entries (ids changed since) are dropped once they outnumber the live ones.
    if (this.log.length > 2 * (this.live.size + this.removed.size) + REWRITE_SLACK_LINES) {
      this.log = this.log.filter(({ version: v, id: i }) => this.live.get(i)?.version === v || this.removed.get(i) === v);
    }
  }

  /** One line of the file read back at start. */
  private replay(line: FileLine): void {
    if (line.op === 'put') this.applyPut(line.id, line.version, line.json, line.expires_at_ms ?? Infinity);
    else if (line.op === 'del') this.applyRemove(line.id, line.version);
    else this.last = Math.max(this.last, line.version);
  }

  /** What a rewritten file holds: the version reached, then every live override. */
  private linesFor(): FileLine[] {
    const lines: FileLine[] = [{ op: 'version', version: this.last }];
    for (const [id, held] of this.live) {
      lines.push({
        op: 'put',
        id,
        version: held.version,
        json: held.json,
        ...(Number.isFinite(held.expiresAtMs) ? { expires_at_ms: held.expiresAtMs } : {}),
      });
    }
    return lines;
  }
}

/**
 * Writes an OVERRIDES_FILE holding `overrides` (numbered 1, 2, ... in order), as a rewrite leaves
 * it: what a memory store opened on it starts with (`make bench` loads its overrides so).
 */
export async function writeOverridesFile(file: string, overrides: readonly { readonly id: string; readonly json: string }[]): Promise<void> {
  const lines: FileLine[] = [{ op: 'version', version: overrides.length }];
  overrides.forEach((o, i) => lines.push({ op: 'put', id: o.id, version: i + 1, json: o.json }));
  await writeFile(file, lines.map((l) => `${JSON.stringify(l)}\n`).join(''));
}

function stored(id: string, held: Held): StoredOverride {
  return { id, version: held.version, json: held.json };
}

/** The lines of OVERRIDES_FILE (none when it does not exist yet); a last line cut short by a crash is left out. */
async function readLines(file: string): Promise<FileLine[]> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw new OverridesFileError(file, 0, (err as Error).message);
  }
  const raw = text.split('\n');
  // A complete file ends with a newline: whatever follows the last one was being written.
  const complete = raw.slice(0, -1);
  return complete.map((line, i) => {
    try {
      const v = JSON.parse(line) as FileLine;
      if ((v.op === 'put' && typeof v.json === 'string' && typeof v.id === 'string') || (v.op === 'del' && typeof v.id === 'string') || v.op === 'version') {
        if (Number.isSafeInteger(v.version) && v.version >= (v.op === 'version' ? 0 : 1)) return v;
      }
    } catch {
      // Reported below.
    }
    throw new OverridesFileError(file, i + 1, 'not an override line (was the file edited by hand?)');
  });
}

/** OVERRIDES_FILE open for appending, and its rewrite once mostly stale. */
class OverridesFile {
  private handle: FileHandle | undefined;
  /** Lines in the file. */
  private lines = 0;

  constructor(private readonly path: string) {}

  /** Rewrites the file with `lines` (what was read, compacted) and opens it for appending. */
  async open(lines: readonly FileLine[]): Promise<void> {
    await this.rewrite(lines);
  }

  async append(line: FileLine): Promise<void> {
    if (this.handle === undefined) throw new Error(`OVERRIDES_FILE ${this.path} is closed`);
    await this.handle.write(`${JSON.stringify(line)}\n`);
    this.lines++;
  }

  /** Rewrites the file with `lines()` once it holds more than twice the `live` overrides' lines (and some slack). */
  async rewriteIfStale(live: number, lines: () => readonly FileLine[]): Promise<void> {
    if (this.lines > 2 * live + REWRITE_SLACK_LINES) await this.rewrite(lines());
  }

  async close(): Promise<void> {
    await this.handle?.close();
    this.handle = undefined;
  }

  private async rewrite(lines: readonly FileLine[]): Promise<void> {
    const next = `${this.path}.new`;
    const out = await open(next, 'w');
    try {
      await out.writeFile(lines.map((l) => `${JSON.stringify(l)}\n`).join(''));
      await out.sync();
    } finally {
      await out.close();
    }
    await rename(next, this.path);
    await this.handle?.close();
    this.handle = await open(this.path, 'a');
    this.lines = lines.length;
  }
}
