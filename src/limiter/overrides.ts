import { createHash } from 'node:crypto';
import { counterKey, escapeComponent, limitKeyPrefix } from './keys';
import { reachRule } from './match';
import { RULE_SETTINGS, type MatchedRule, type OverrideOrigin, type RateLimitConfig, type RuleNode, type RuleSettings } from './rules';
import type { Entry, Limit, StructFields } from './types';

/**
 * Runtime overrides: a limit set on exactly one descriptor path of a domain, kept as data in the
 * store (./overrides-store.ts), changed through the API (./override-admin.ts), followed by every
 * replica (./override-sync.ts). This module is what the decision sees of them: a table by domain
 * and descriptor, and the rule an override makes of the config's rule at its path.
 *
 * An override replaces the limit(s) of the rule its descriptor reaches and keeps everything else of
 * that rule (shadow mode, quota mode, detailed metrics, metadata, its metrics series). Its counter
 * key is the one the config's rule would use when both limits have the same shape (algorithm,
 * window, sub-windows: see limitKeyPrefix), so hits counted so far count against the new limit; a
 * limit of another shape cannot read the old state and counts on a counter of its own.
 *
 * The planner (./plan.ts) consults the table only when it plans a descriptor it has no memo for,
 * and revalidates a memo when the table's generation moved: the call of a descriptor seen before
 * pays one number compared, whether there are no overrides or 100,000.
 */

/** An override as the API takes and answers it and the store keeps it (its version aside). */
export interface OverrideRecord {
  readonly domain: string;
  /** The descriptor's entries, in order: the path of exactly one rule of the domain. */
  readonly descriptor: readonly Entry[];
  /** The `rate_limit` mapping as given: a config file's `rate_limit`, as JSON. */
  readonly rateLimit: StructFields;
  /** When it stops applying (ms since the epoch); undefined: never. */
  readonly expiresAtMs?: number;
  readonly note?: string;
  /** When it was last written (ms since the epoch), and by whom (the token's name, the import, ...). */
  readonly updatedAtMs: number;
  readonly updatedBy: string;
}

/**
 * The identity of a descriptor's override: a SHA-256 of the domain and its entries, escaped as
 * counter keys are (so that no two descriptors share one), in base64url: 43 characters whatever
 * the descriptor, which keeps the store's key layout bounded.
 */
export function overrideId(domain: string, entries: readonly Entry[]): string {
  return createHash('sha256')
    .update(escapeComponent(domain) + descriptorTail(entries))
    .digest('base64url');
}

/** The entries of a descriptor as they end a counter key (`|k=v|k2=v2`, escaped): the table's key within a domain. */
export function descriptorTail(entries: readonly Entry[]): string {
  return counterKey('', entries);
}

/** The JSON an override is kept as (the API's field names; its version is the store's to add). */
export function overrideJson(r: OverrideRecord): string {
  const out: Record<string, unknown> = {
    domain: r.domain,
    descriptor: r.descriptor.map((e) => ({ key: e.key, value: e.value })),
    rate_limit: r.rateLimit,
  };
  if (r.expiresAtMs !== undefined) out.expires_at = new Date(r.expiresAtMs).toISOString();
  if (r.note !== undefined) out.note = r.note;
  out.updated_at = new Date(r.updatedAtMs).toISOString();
  out.updated_by = r.updatedBy;
  return JSON.stringify(out);
}

/** An override read back from its JSON (overrideJson's). Throws an Error naming what is missing in a record it cannot read. */
export function readOverrideJson(json: string): OverrideRecord {
  const v = JSON.parse(json) as Record<string, unknown>;
  const fail = (what: string): never => {
    throw new Error(`a stored override without ${what}`);
  };
  if (typeof v !== 'object' || v === null) fail('a body');
  if (typeof v.domain !== 'string') fail('a domain');
  if (!Array.isArray(v.descriptor) || v.descriptor.length === 0) fail('a descriptor');
  const descriptor = (v.descriptor as unknown[]).map((e) => {
    const entry = e as Record<string, unknown>;
    if (typeof entry?.key !== 'string' || typeof entry.value !== 'string') fail('a descriptor of keys and values');
    return Object.freeze({ key: entry.key as string, value: entry.value as string });
  });
  if (typeof v.rate_limit !== 'object' || v.rate_limit === null || Array.isArray(v.rate_limit)) fail('a rate_limit');
  const updatedAtMs = typeof v.updated_at === 'string' ? Date.parse(v.updated_at) : NaN;
  if (!Number.isFinite(updatedAtMs)) fail('updated_at');
  const expiresAtMs = typeof v.expires_at === 'string' ? Date.parse(v.expires_at) : undefined;
  if (expiresAtMs !== undefined && !Number.isFinite(expiresAtMs)) fail('a readable expires_at');
  return {
    domain: v.domain as string,
    descriptor: Object.freeze(descriptor),
    rateLimit: v.rate_limit as StructFields,
    ...(expiresAtMs === undefined ? {} : { expiresAtMs }),
    ...(typeof v.note === 'string' ? { note: v.note } : {}),
    updatedAtMs,
    updatedBy: typeof v.updated_by === 'string' ? v.updated_by : '',
  };
}

/** One `rate_limit` read by the config's own code: its limit and the names it replaces. */
export interface OverrideLimit {
  readonly limit: Limit;
  readonly replaces: readonly string[];
}

/** A runtime override in force on this process: what the planner matches and counts with. */
export class ActiveOverride {
  readonly id: string;
  /** The store's change number of its last write: a newer one replaces it, an older one never does. */
  readonly version: number;
  readonly domain: string;
  readonly entries: readonly Entry[];
  /** descriptorTail(entries): its key in the table. */
  readonly tail: string;
  readonly limit: Limit;
  readonly replaces: readonly string[];
  /** When it stops applying (ms since the epoch); Infinity: never. */
  readonly expiresAtMs: number;
  /** The record as stored (overrideJson), read again only to answer the API. */
  readonly json: string;
  // The rule it makes of the node it was last resolved at (a config's node lives as long as its config).
  private node: RuleNode | undefined;
  private rule: MatchedRule | undefined;

  constructor(options: { id: string; version: number; record: OverrideRecord; json: string; limit: OverrideLimit }) {
    const { record } = options;
    this.id = options.id;
    this.version = options.version;
    this.domain = record.domain;
    this.entries = record.descriptor;
    this.tail = descriptorTail(record.descriptor);
    this.limit = options.limit.limit;
    this.replaces = options.limit.replaces;
    this.expiresAtMs = record.expiresAtMs ?? Infinity;
    this.json = options.json;
  }

  /** The record as stored, read again. */
  record(): OverrideRecord {
    return readOverrideJson(this.json);
  }

  /**
   * The rule this override makes at `node` (the node its descriptor reaches under some config):
   * the node's settings with this limit. Undefined where it does not apply: an in-flight limit
   * (`concurrency`) on a rule that limits no reservations would make its ordinary descriptors invalid.
   */
  ruleAt(node: RuleNode): MatchedRule | undefined {
    if (node !== this.node) {
      this.node = node;
      this.rule = overrideRule(this, node);
    }
    return this.rule;
  }
}

/** Whether a rule limits reservations in flight (`concurrency`, alone or among its `rate_limits`). */
export function limitsInFlight(node: Pick<RuleNode, 'limit' | 'limits'>): boolean {
  if (node.limits !== undefined) return node.limits.some((l) => l.limit.concurrency !== undefined);
  return node.limit?.concurrency !== undefined;
}

const SETTING_FIELDS = Object.keys(RULE_SETTINGS) as (keyof RuleSettings)[];

function overrideRule(o: ActiveOverride, node: RuleNode): MatchedRule | undefined {
  if (o.limit.concurrency !== undefined && !limitsInFlight(node)) return undefined;
  const settings: Record<string, unknown> = {};
  for (const field of SETTING_FIELDS) settings[field] = node[field];
  const origin: OverrideOrigin = Object.freeze({ id: o.id, version: o.version, configRule: node.limit === undefined ? undefined : (node as MatchedRule) });
  return Object.freeze({
    ...(settings as RuleSettings),
    limit: o.limit,
    limits: undefined,
    requestKeyed: node.requestKeyed,
    metadata: node.metadata,
    replaces: o.replaces,
    statKey: node.statKey,
    keyPrefix: limitKeyPrefix(o.domain, o.limit),
    overridden: origin,
  });
}

/** Holes a domain's version-ordered list keeps before it is compacted (and at most as many as its live overrides). */
const MIN_HOLES = 1_024;

/** The inverse of escapeComponent (./keys.ts). */
function unescapeComponent(s: string): string {
  return s.indexOf('%') < 0 ? s : s.replace(/%([0-9A-F]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)));
}

/** What the planner reads of the overrides in force. */
export interface OverrideLookup {
  /** Moves whenever an override is added, changed or removed: a plan made under another generation is checked again. */
  readonly generation: number;
  /** The overrides of `domain` by descriptorTail; undefined when it has none. */
  inDomain(domain: string): ReadonlyMap<string, ActiveOverride> | undefined;
}

/**
 * The rule that decides `entries` in `domain`: the override's (when it is given and applies at the
 * node its entries reach), else the config's (matchDescriptor). The planner and /rlmatch both ask it.
 */
export function overriddenRule(config: RateLimitConfig, domain: string, entries: readonly Entry[], override: ActiveOverride): MatchedRule | undefined {
  const node = reachRule(config, domain, entries);
  if (node === undefined) return undefined;
  return override.ruleAt(node) ?? (node.limit === undefined ? undefined : (node as MatchedRule));
}

/** A removal as the store reports it: the override and the change number of its removal. */
export interface OverrideRemoval {
  readonly id: string;
  readonly version: number;
}

/** The overrides in force on this process, by id and by domain and descriptor; changed by the sync only (./override-sync.ts). */
export class OverrideTable implements OverrideLookup {
  private gen = 0;
  private readonly byId = new Map<string, ActiveOverride>();
  private readonly byDomain = new Map<string, Map<string, ActiveOverride>>();
  /** The earliest expiry among the overrides (Infinity: none expires); a sweep before it has nothing to do. */
  private nextExpiryMs = Infinity;
  /**
   * Each domain's overrides in version order, for paging: appended as they come (the sync applies
   * changes in version order), a removed or replaced one left as a hole until holes outnumber the
   * live ones. A page costs a binary search and its own length, never a sort of the domain.
   */
  private readonly ordered = new Map<string, { list: ActiveOverride[]; holes: number }>();

  get generation(): number {
    return this.gen;
  }

  get size(): number {
    return this.byId.size;
  }

  inDomain(domain: string): ReadonlyMap<string, ActiveOverride> | undefined {
    return this.byDomain.get(domain);
  }

  get(id: string): ActiveOverride | undefined {
    return this.byId.get(id);
  }

  /** The override of exactly `entries` in `domain`, if any. */
  find(domain: string, entries: readonly Entry[]): ActiveOverride | undefined {
    return this.byDomain.get(domain)?.get(descriptorTail(entries));
  }

  /**
   * The override a counter key was counted for (a key of the live view, src/top), or undefined:
   * none, a key of another limit's counter, or one whose entries a rule rewrote (share_threshold).
   */
  byCounterKey(key: string): ActiveOverride | undefined {
    // `<domain>|<algorithm and window>|k=v...`: the components are escaped, so '|' only separates.
    const first = key.indexOf('|');
    const second = first < 0 ? -1 : key.indexOf('|', first + 1);
    if (second < 0) return undefined;
    const o = this.byDomain.get(unescapeComponent(key.slice(0, first)))?.get(key.slice(second));
    return o !== undefined && limitKeyPrefix(o.domain, o.limit) === key.slice(0, second) ? o : undefined;
  }

  values(): IterableIterator<ActiveOverride> {
    return this.byId.values();
  }

  /**
   * Adds or replaces `upserts` (each only over an older version of itself) and removes `removals`
   * (each only over an older version); the generation moves once when anything changed. Returns
   * whether it did.
   */
  apply(upserts: readonly ActiveOverride[], removals: readonly OverrideRemoval[]): boolean {
    let changed = false;
    for (const o of upserts) {
      const held = this.byId.get(o.id);
      if (held !== undefined && held.version >= o.version) continue;
      if (held !== undefined) this.drop(held);
      this.add(o);
      changed = true;
    }
    for (const r of removals) {
      const held = this.byId.get(r.id);
      if (held === undefined || held.version >= r.version) continue;
      this.drop(held);
      changed = true;
    }
    if (changed) this.gen++;
    return changed;
  }

  /** Replaces every override by `all` (a full read of the store); the generation moves when anything differs. */
  replaceAll(all: readonly ActiveOverride[]): boolean {
    const next = new Map(all.map((o) => [o.id, o]));
    let changed = false;
    for (const held of [...this.byId.values()]) {
      const o = next.get(held.id);
      if (o !== undefined && o.version === held.version) {
        next.delete(held.id);
        continue;
      }
      this.drop(held);
      changed = true;
    }
    for (const o of next.values()) {
      this.add(o);
      changed = true;
    }
    if (changed) this.gen++;
    return changed;
  }

  /** Removes every override whose expiry is at or before `nowMs`, and returns them (the generation moves when there are any). */
  sweep(nowMs: number): ActiveOverride[] {
    if (nowMs < this.nextExpiryMs) return [];
    const expired: ActiveOverride[] = [];
    let next = Infinity;
    for (const o of this.byId.values()) {
      if (o.expiresAtMs <= nowMs) expired.push(o);
      else if (o.expiresAtMs < next) next = o.expiresAtMs;
    }
    for (const o of expired) this.drop(o);
    this.nextExpiryMs = next;
    if (expired.length > 0) this.gen++;
    return expired;
  }

  /** How many overrides each domain has. */
  countsByDomain(): Map<string, number> {
    const counts = new Map<string, number>();
    for (const [domain, byTail] of this.byDomain) counts.set(domain, byTail.size);
    return counts;
  }

  /**
   * Up to `limit` overrides of `domain` in the order they were last written (version order), after
   * version `after`; `next` is the version to continue after (undefined: none is left). One
   * written again while a listing goes on moves to its end.
   */
  page(domain: string, after: number, limit: number): { readonly overrides: ActiveOverride[]; readonly next: number | undefined } {
    const ord = this.ordered.get(domain);
    if (ord === undefined) return { overrides: [], next: undefined };
    const list = ord.list;
    let lo = 0;
    let hi = list.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (list[mid].version <= after) lo = mid + 1;
      else hi = mid;
    }
    const overrides: ActiveOverride[] = [];
    let i = lo;
    for (; i < list.length && overrides.length < limit; i++) if (this.byId.get(list[i].id) === list[i]) overrides.push(list[i]);
    // More only when a live one follows.
    while (i < list.length && this.byId.get(list[i].id) !== list[i]) i++;
    return { overrides, next: i < list.length && overrides.length > 0 ? overrides[overrides.length - 1].version : undefined };
  }

  private add(o: ActiveOverride): void {
    this.byId.set(o.id, o);
    let byTail = this.byDomain.get(o.domain);
    if (byTail === undefined) {
      byTail = new Map();
      this.byDomain.set(o.domain, byTail);
    }
    byTail.set(o.tail, o);
    if (o.expiresAtMs < this.nextExpiryMs) this.nextExpiryMs = o.expiresAtMs;
    let ord = this.ordered.get(o.domain);
    if (ord === undefined) {
      ord = { list: [], holes: 0 };
      this.ordered.set(o.domain, ord);
    }
    const list = ord.list;
    if (list.length === 0 || list[list.length - 1].version < o.version) list.push(o);
    else {
      // Out of order (a full read): in its place.
      let lo = 0;
      let hi = list.length;
      while (lo < hi) {
        const mid = (lo + hi) >>> 1;
        if (list[mid].version < o.version) lo = mid + 1;
        else hi = mid;
      }
      list.splice(lo, 0, o);
    }
  }

  private drop(o: ActiveOverride): void {
    this.byId.delete(o.id);
    const byTail = this.byDomain.get(o.domain);
    if (byTail === undefined) return;
    byTail.delete(o.tail);
    const ord = this.ordered.get(o.domain)!;
    if (byTail.size === 0) {
      this.byDomain.delete(o.domain);
      this.ordered.delete(o.domain);
      return;
    }
    ord.holes++;
    if (ord.holes > MIN_HOLES && ord.holes > byTail.size) {
      ord.list = ord.list.filter((x) => this.byId.get(x.id) === x);
      ord.holes = 0;
    }
  }
}
