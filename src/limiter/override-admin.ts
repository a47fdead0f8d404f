import { InvalidRequestError, NotReadyError } from './errors';
import { pickRule } from './match';
import {
  ActiveOverride,
  descriptorTail,
  limitsInFlight,
  overrideId,
  overrideJson,
  readOverrideJson,
  type OverrideLimit,
  type OverrideRecord,
  type OverrideTable,
} from './overrides';
import type { OverridesStore, RemovedOverride, StoredOverride } from './overrides-store';
import type { OverrideSync } from './override-sync';
import type { RateLimitConfig, RuleLevel, RuleNode } from './rules';
import { REQUEST_LIMIT_SETTINGS, type Clock, type Entry, type RequestLimits, type StructFields } from './types';

/**
 * What the override API does (the HTTP edge, src/http/overrides-api.ts, only translates): a
 * body read field by field, each error naming its field; the descriptor checked against the rules
 * in force (an override refines a rule, it does not invent one); the write decided by the store
 * against the caps in one step; this process's table brought up to the store before the answer,
 * so that what was just written is what this replica decides with; one change event per change.
 */

/** Bytes of an override's note at most. */
export const MAX_NOTE_BYTES = 1_024;
/** Overrides per page of a listing: by default, and at most. */
export const DEFAULT_PAGE_SIZE = 100;
export const MAX_PAGE_SIZE = 1_000;

/** The fields a PUT body may have, and a DELETE body. */
const PUT_FIELDS = ['domain', 'descriptor', 'rate_limit', 'expires_at', 'note'] as const;
const DELETE_FIELDS = ['domain', 'descriptor'] as const;

/** A cap of the stored overrides refused a write (nothing stored changed): the HTTP edge answers 507 naming it. */
export class OverrideCapError extends Error {
  constructor(
    /** The setting that raises it (OVERRIDES_MAX, OVERRIDES_MAX_BYTES). */
    readonly cap: string,
    message: string,
  ) {
    super(message);
    this.name = 'OverrideCapError';
  }
}

/** An override as the API answers it: the record's fields and the store's change number of it. */
export type OverrideView = Record<string, unknown>;

/** What a change did, for its one log line and its metric. */
export interface OverrideChange {
  readonly action: 'create' | 'update' | 'delete' | 'expire';
  readonly domain: string;
  readonly descriptor: readonly Entry[];
  /** Who made it: a token's name; `expiry` for an override that expired. */
  readonly actor: string;
  /** The store's change number of it. */
  readonly version: number;
  /** The `rate_limit` before and after (undefined: none). */
  readonly before: StructFields | undefined;
  readonly after: StructFields | undefined;
}

export interface OverrideObserver {
  onChange(change: OverrideChange): void;
}

export interface OverrideAdminOptions {
  readonly store: OverridesStore;
  readonly table: OverrideTable;
  readonly sync: OverrideSync;
  /** The rules in force: an override's descriptor must reach one of their rules. */
  readonly config: () => RateLimitConfig | undefined;
  /** A `rate_limit` read by the config's own code; throws InvalidRequestError naming `rate_limit.<field>`. */
  readonly parseLimit: (rateLimit: unknown) => OverrideLimit;
  /** The wall clock: `expires_at` and `updated_at` are times of day. */
  readonly clock: Clock;
  /** OVERRIDES_MAX and OVERRIDES_MAX_BYTES. */
  readonly maxCount: number;
  readonly maxBytes: number;
  /** What a descriptor's entries may hold, as for ShouldRateLimit (DESCRIPTOR_MAX_*). */
  readonly requestLimits: RequestLimits;
  readonly observer?: OverrideObserver;
  /** A sync after a write failed (the write stands; the table follows at the next tick). */
  readonly onSyncError?: (err: unknown) => void;
}

/** The override API's operations, on the store, the table and the rules in force. */
export class OverrideAdmin {
  private readonly options: OverrideAdminOptions;

  constructor(options: OverrideAdminOptions) {
    this.options = options;
  }

  /** PUT: sets the override of one descriptor, and answers it as stored. Throws InvalidRequestError (400), OverrideCapError (507). */
  async put(body: unknown, actor: string): Promise<OverrideView> {
    const o = this.options;
    const fields = objectOf(body, PUT_FIELDS);
    const domain = domainOf(fields.domain);
    const descriptor = descriptorOf(fields.descriptor, o.requestLimits);
    if (fields.rate_limit === undefined) throw new InvalidRequestError('rate_limit: required');
    const limit = o.parseLimit(fields.rate_limit);
    const now = o.clock.nowMs();
    const expiresAtMs = expiryOf(fields.expires_at, now);
    const note = noteOf(fields.note);
    const node = this.ruleOf(domain, descriptor);
    if (limit.limit.concurrency !== undefined && !limitsInFlight(node)) {
      throw new InvalidRequestError(
        'rate_limit.concurrency: only on a descriptor whose rule limits reservations in flight (its other descriptors would have nothing to count)',
      );
    }
    const record: OverrideRecord = {
      domain,
      descriptor,
      rateLimit: fields.rate_limit as StructFields,
      ...(expiresAtMs === undefined ? {} : { expiresAtMs }),
      ...(note === undefined ? {} : { note }),
      updatedAtMs: now,
      updatedBy: actor,
    };
    const id = overrideId(domain, descriptor);
    const json = overrideJson(record);
    const outcome = await o.store.put({ id, json, expiresAtMs, nowMs: now, maxCount: o.maxCount, maxBytes: o.maxBytes });
    for (const r of outcome.purged) this.expired(r);
    if (!outcome.ok) {
      if (outcome.cap === 'count')
        throw new OverrideCapError('OVERRIDES_MAX', `OVERRIDES_MAX: the store holds ${outcome.count} overrides, its cap (${o.maxCount})`);
      throw new OverrideCapError(
        'OVERRIDES_MAX_BYTES',
        `OVERRIDES_MAX_BYTES: this override would take the overrides' bytes past their cap (${o.maxBytes}; ${outcome.bytes} held)`,
      );
    }
    const before = outcome.previous === undefined ? undefined : readOverrideJson(outcome.previous.json).rateLimit;
    o.observer?.onChange({
      action: outcome.previous === undefined ? 'create' : 'update',
      domain,
      descriptor,
      actor,
      version: outcome.version,
      before,
      after: record.rateLimit,
    });
    await this.catchUp();
    return viewOf(json, outcome.version);
  }

  /** DELETE: removes the override of one descriptor and answers it as it was; undefined when there is none (404). */
  async remove(body: unknown, actor: string): Promise<OverrideView | undefined> {
    const o = this.options;
    const fields = objectOf(body, DELETE_FIELDS);
    const domain = domainOf(fields.domain);
    const descriptor = descriptorOf(fields.descriptor, o.requestLimits);
    const removed = await o.store.remove(overrideId(domain, descriptor), o.clock.nowMs());
    if (removed === undefined) return undefined;
    const record = readOverrideJson(removed.previous.json);
    o.observer?.onChange({ action: 'delete', domain, descriptor, actor, version: removed.version, before: record.rateLimit, after: undefined });
    await this.catchUp();
    return viewOf(removed.previous.json, removed.previous.version);
  }

  /** GET of one descriptor: its override in force, undefined when there is none (404). */
  async get(domain: string, entries: readonly Entry[]): Promise<OverrideView | undefined> {
    const descriptor = descriptorOf(entries, this.options.requestLimits);
    await this.options.sync.sync();
    const o = this.options.table.inDomain(domainOf(domain))?.get(descriptorTail(descriptor));
    return o === undefined ? undefined : viewOf(o.json, o.version);
  }

  /**
   * GET of a domain: a page of its overrides in force, in the order they were last written; `next`
   * continues it (null: the last page). An override written again during a listing comes again at its end.
   */
  async list(domain: string, cursor: string | undefined, limit: number): Promise<{ overrides: OverrideView[]; next: string | null }> {
    domainOf(domain);
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_PAGE_SIZE) throw new InvalidRequestError(`limit: expected an integer from 1 to ${MAX_PAGE_SIZE}`);
    if (cursor !== undefined && !/^v[0-9]{1,15}$/.test(cursor)) throw new InvalidRequestError('cursor: not one this API gave');
    await this.options.sync.sync();
    const page = this.options.table.page(domain, cursor === undefined ? 0 : Number(cursor.slice(1)), limit);
    return { overrides: page.overrides.map((o) => viewOf(o.json, o.version)), next: page.next === undefined ? null : `v${page.next}` };
  }

  /** An expired override removed from the store (by this process): its change event. */
  expired(r: RemovedOverride): void {
    const record = readOverrideJson(r.previous.json);
    this.options.observer?.onChange({
      action: 'expire',
      domain: record.domain,
      descriptor: record.descriptor,
      actor: 'expiry',
      version: r.version,
      before: record.rateLimit,
      after: undefined,
    });
  }

  /** After a write: the table holds it before the answer goes (a failed sync leaves it to the next tick). */
  private async catchUp(): Promise<void> {
    try {
      await this.options.sync.sync();
    } catch (err) {
      this.options.onSyncError?.(err);
    }
  }

  /** The rule node `descriptor` reaches in `domain` under the rules in force; InvalidRequestError naming where it stops. */
  private ruleOf(domain: string, descriptor: readonly Entry[]): RuleNode {
    const config = this.options.config();
    if (config === undefined) throw new NotReadyError('no rate limit configuration loaded');
    const d = config.domains.get(domain);
    if (d === undefined) throw new InvalidRequestError(`domain: ${JSON.stringify(domain)} is not a domain of the loaded config`);
    let level: RuleLevel = d.rules;
    let node: RuleNode | undefined;
    for (let i = 0; i < descriptor.length; i++) {
      const { key, value } = descriptor[i];
      const rules = level.get(key);
      const where = i === 0 ? `domain ${JSON.stringify(domain)}` : `the rule of descriptor[${i - 1}]`;
      if (rules === undefined) throw new InvalidRequestError(`descriptor[${i}].key: no rule for key ${JSON.stringify(key)} under ${where}`);
      node = pickRule(rules, value);
      if (node === undefined)
        throw new InvalidRequestError(`descriptor[${i}].value: no rule for ${JSON.stringify(key)} = ${JSON.stringify(value)} under ${where}`);
      level = node.children;
    }
    return node!;
  }
}

/** The API's answer for a stored override: its record and its change number. */
function viewOf(json: string, version: number): OverrideView {
  return { ...(JSON.parse(json) as OverrideView), version };
}

/** Levels of nesting a body may have: an override needs four; the config's reader recurses through them. */
export const MAX_BODY_DEPTH = 32;

/** Whether `value` nests deeper than `max` levels (walked without recursion: the depth is the caller's to pick). */
function deeperThan(value: unknown, max: number): boolean {
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop()!;
    if (typeof v !== 'object' || v === null) continue;
    if (depth > max) return true;
    for (const child of Object.values(v)) stack.push([child, depth + 1]);
  }
  return false;
}

/** `body` as a JSON object of `allowed` fields; InvalidRequestError naming the first other field. */
function objectOf(body: unknown, allowed: readonly string[]): Record<string, unknown> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new InvalidRequestError('body: expected a JSON object');
  if (deeperThan(body, MAX_BODY_DEPTH)) throw new InvalidRequestError(`body: nested deeper than ${MAX_BODY_DEPTH} levels`);
  for (const key of Object.keys(body)) {
    if (!allowed.includes(key)) throw new InvalidRequestError(`${key}: unknown field (expected one of: ${allowed.join(', ')})`);
  }
  return body as Record<string, unknown>;
}

function domainOf(value: unknown): string {
  if (value === undefined) throw new InvalidRequestError('domain: required');
  if (typeof value !== 'string' || value === '') throw new InvalidRequestError('domain: expected a non-empty string');
  return value;
}

/** A descriptor's entries, each within the caps ShouldRateLimit holds descriptors to. */
function descriptorOf(value: unknown, limits: RequestLimits): readonly Entry[] {
  if (value === undefined) throw new InvalidRequestError('descriptor: required');
  if (!Array.isArray(value) || value.length === 0) throw new InvalidRequestError('descriptor: expected a non-empty list of {"key": K, "value": V}');
  if (value.length > limits.maxEntries) {
    throw new InvalidRequestError(`descriptor: ${value.length} entries, over the cap of ${limits.maxEntries} (${REQUEST_LIMIT_SETTINGS.maxEntries})`);
  }
  return Object.freeze(
    value.map((item: unknown, i) => {
      const at = `descriptor[${i}]`;
      if (typeof item !== 'object' || item === null || Array.isArray(item)) throw new InvalidRequestError(`${at}: expected {"key": K, "value": V}`);
      const { key, value: v, ...rest } = item as Record<string, unknown>;
      const extra = Object.keys(rest)[0];
      if (extra !== undefined) throw new InvalidRequestError(`${at}.${extra}: unknown field (expected key, value)`);
      if (typeof key !== 'string' || key === '') throw new InvalidRequestError(`${at}.key: expected a non-empty string`);
      if (typeof v !== 'string') throw new InvalidRequestError(`${at}.value: expected a string`);
      if (Buffer.byteLength(key) > limits.maxKeyBytes) {
        throw new InvalidRequestError(`${at}.key: over the cap of ${limits.maxKeyBytes} bytes (${REQUEST_LIMIT_SETTINGS.maxKeyBytes})`);
      }
      if (Buffer.byteLength(v) > limits.maxValueBytes) {
        throw new InvalidRequestError(`${at}.value: over the cap of ${limits.maxValueBytes} bytes (${REQUEST_LIMIT_SETTINGS.maxValueBytes})`);
      }
      return Object.freeze({ key, value: v });
    }),
  );
}

// RFC 3339: a date, 'T', a time with optional fractions, and 'Z' or an offset.
const RFC_3339 = /^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$/;

function expiryOf(value: unknown, nowMs: number): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string' || !RFC_3339.test(value)) throw new InvalidRequestError('expires_at: expected an RFC 3339 time, such as 2026-12-01T00:00:00Z');
  const ms = Date.parse(value);
  if (!Number.isFinite(ms)) throw new InvalidRequestError('expires_at: not a valid time');
  if (ms <= nowMs) throw new InvalidRequestError('expires_at: already past');
  return ms;
}

function noteOf(value: unknown): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string') throw new InvalidRequestError('note: expected a string');
  if (Buffer.byteLength(value) > MAX_NOTE_BYTES) throw new InvalidRequestError(`note: over ${MAX_NOTE_BYTES} bytes`);
  return value;
}

/** Distinct `rate_limit` texts kept read, and the longest kept: at most 10 MB. */
const MAX_KEPT_LIMITS = 10_000;
const MAX_KEPT_LIMIT_CHARS = 1_024;

/** Reads stored overrides into ActiveOverrides, each `rate_limit` read once per distinct text (most overrides share a few). */
export class OverrideReader {
  private readonly parseLimit: (rateLimit: unknown) => OverrideLimit;
  private readonly limits = new Map<string, OverrideLimit>();

  constructor(parseLimit: (rateLimit: unknown) => OverrideLimit) {
    this.parseLimit = parseLimit;
  }

  /** An override as this process counts with it; throws on one it cannot read (its id not its descriptor's, a limit it refuses). */
  read(stored: StoredOverride): ActiveOverride {
    const record = readOverrideJson(stored.json);
    if (overrideId(record.domain, record.descriptor) !== stored.id) throw new Error("a stored override under another descriptor's id");
    return new ActiveOverride({ id: stored.id, version: stored.version, record, json: stored.json, limit: this.limitOf(record.rateLimit) });
  }

  /** A `rate_limit` read by the config's code (InvalidRequestError naming the field), read once per distinct text. */
  limitOf(rateLimit: unknown): OverrideLimit {
    const key = JSON.stringify(rateLimit);
    let limit = this.limits.get(key);
    if (limit === undefined) {
      limit = this.parseLimit(rateLimit);
      // Bounded in entries and bytes: a long one (a name of kilobytes) is read each time, never kept.
      if (key.length <= MAX_KEPT_LIMIT_CHARS) {
        if (this.limits.size >= MAX_KEPT_LIMITS) this.limits.clear();
        this.limits.set(key, limit);
      }
    }
    return limit;
  }
}
