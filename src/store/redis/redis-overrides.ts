import { createHash } from 'node:crypto';
import {
  MAX_REMEMBERED_REMOVALS,
  type OverrideChanges,
  type OverridesStore,
  type OverrideWrite,
  type PutOutcome,
  type RemovedOverride,
  type StoredOverride,
} from '../../limiter/overrides-store';
import { StoreUnavailableError } from '../../limiter/store';
import type { RedisClient } from './connection';
import { redisErrorKind, unavailable, type RedisErrorKind } from './redis-store';

/**
 * Runtime overrides in Redis: seven keys, whatever the number of overrides, all under the hash tag
 * `{slidegate-overrides}` (one slot on a Cluster, so every script is one atomic call on one node):
 *
 *   <prefix>{slidegate-overrides}|version   the last change number (INCR per write and removal)
 *   ...|data     hash: override id -> "<version> <json>"
 *   ...|live     sorted set: override id by the version of its last write
 *   ...|gone     sorted set: removed id by the version of its removal (MAX_REMEMBERED_REMOVALS at most)
 *   ...|floor    the version of the last removal dropped from `gone`
 *   ...|expiry   sorted set: override id by its expiry (ms since the epoch), for those that have one
 *   ...|bytes    bytes of every override (id and JSON), what OVERRIDES_MAX_BYTES bounds
 *
 * Ids are 43 characters (a hash of the descriptor), a JSON at most the API's body cap: every key is
 * bounded by OVERRIDES_MAX and OVERRIDES_MAX_BYTES. A replica polls `version` with one GET; the
 * changes since a version are one script reading `live` and `gone` by score and the JSON of the
 * changed ones. None of these calls is on the decision path: they have a deadline of their own.
 */

const TAG = '{slidegate-overrides}';
const KEY_NAMES = ['version', 'data', 'live', 'gone', 'floor', 'expiry', 'bytes'] as const;

/**
 * The scripts' shared opening. KEYS: the seven keys above, in that order.
 * remove(id, old): removes one override (its stored value `old`) as a new change; returns its version.
 * purge(now, max): removes up to `max` overrides expired at `now`; returns id, version, old value of each, flat.
 */
const prelude = (rememberedRemovals: number): string => `
local function jsonBytes(value)
  return #value - string.find(value, ' ', 1, true)
end
local function remove(id, old)
  local v = redis.call('INCR', KEYS[1])
  redis.call('HDEL', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
  redis.call('ZREM', KEYS[6], id)
  redis.call('ZADD', KEYS[4], v, id)
  redis.call('DECRBY', KEYS[7], #id + jsonBytes(old))
  local over = redis.call('ZCARD', KEYS[4]) - ${rememberedRemovals}
  if over > 0 then
    local dropped = redis.call('ZRANGE', KEYS[4], over - 1, over - 1, 'WITHSCORES')
    redis.call('SET', KEYS[5], dropped[2])
    redis.call('ZREMRANGEBYRANK', KEYS[4], 0, over - 1)
  end
  return v
end
local function purge(now, max)
  local out = {}
  if max <= 0 then return out end
  local ids = redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now, 'LIMIT', 0, max)
  for _, id in ipairs(ids) do
    local old = redis.call('HGET', KEYS[2], id)
    if old then
      out[#out + 1] = id
      out[#out + 1] = remove(id, old)
      out[#out + 1] = old
    else
      redis.call('ZREM', KEYS[6], id)
    end
  end
  return out
end
`;

/**
 * PUT: ARGV id, json, expiry ('' for none), now, maxCount, maxBytes, purgeMax. Purges what expired,
 * then writes, unless the count (a new id) or the bytes after it pass a cap: then nothing.
 * reply {1, version, old value or nil, purged} or {0, 'count'|'bytes', count, bytes, purged}
 */
const PUT_SCRIPT = (prelude: string): string => `${prelude}
local purged = purge(ARGV[4], tonumber(ARGV[7]))
local id = ARGV[1]
local json = ARGV[2]
local old = redis.call('HGET', KEYS[2], id)
local count = redis.call('HLEN', KEYS[2])
local bytes = tonumber(redis.call('GET', KEYS[7]) or '0')
local after = bytes + #id + #json
if old then after = after - #id - jsonBytes(old) end
if not old and count + 1 > tonumber(ARGV[5]) then return {0, 'count', count, bytes, purged} end
if after > tonumber(ARGV[6]) then return {0, 'bytes', count, bytes, purged} end
local v = redis.call('INCR', KEYS[1])
redis.call('HSET', KEYS[2], id, v .. ' ' .. json)
redis.call('ZADD', KEYS[3], v, id)
redis.call('ZREM', KEYS[4], id)
if ARGV[3] == '' then redis.call('ZREM', KEYS[6], id) else redis.call('ZADD', KEYS[6], ARGV[3], id) end
redis.call('SET', KEYS[7], after)
return {1, v, old or false, purged}
`;

/** REMOVE: ARGV id. reply {version, old value}, or nil when there is none. */
const REMOVE_SCRIPT = (prelude: string): string => `${prelude}
local old = redis.call('HGET', KEYS[2], ARGV[1])
if not old then return false end
return {remove(ARGV[1], old), old}
`;

/** PURGE: ARGV now, max. reply: purge's flat list. */
const PURGE_SCRIPT = (prelude: string): string => `${prelude}
return purge(ARGV[1], tonumber(ARGV[2]))
`;

/**
 * CHANGES: ARGV since, max. The writes and removals after `since`, at most `max` of each, cut at
 * the version up to which both are complete.
 * reply {version, floor, upTo, {id, value, ...}, {id, version, ...}}
 */
const CHANGES_SCRIPT = `
local version = tonumber(redis.call('GET', KEYS[1]) or '0')
local floor = tonumber(redis.call('GET', KEYS[5]) or '0')
local from = '(' .. ARGV[1]
local max = tonumber(ARGV[2])
local live = redis.call('ZRANGEBYSCORE', KEYS[3], from, '+inf', 'WITHSCORES', 'LIMIT', 0, max)
local gone = redis.call('ZRANGEBYSCORE', KEYS[4], from, '+inf', 'WITHSCORES', 'LIMIT', 0, max)
local upTo = version
if #live == 2 * max then upTo = math.min(upTo, tonumber(live[#live])) end
if #gone == 2 * max then upTo = math.min(upTo, tonumber(gone[#gone])) end
local ids = {}
for i = 1, #live, 2 do
  if tonumber(live[i + 1]) <= upTo then ids[#ids + 1] = live[i] end
end
local changed = {}
if #ids > 0 then
  local values = redis.call('HMGET', KEYS[2], unpack(ids))
  for i = 1, #ids do
    if values[i] then
      changed[#changed + 1] = ids[i]
      changed[#changed + 1] = values[i]
    end
  end
end
local removed = {}
for i = 1, #gone, 2 do
  if tonumber(gone[i + 1]) <= upTo then
    removed[#removed + 1] = gone[i]
    removed[#removed + 1] = gone[i + 1]
  end
end
return {version, floor, upTo, changed, removed}
`;

const DEFAULT_PRELUDE = prelude(MAX_REMEMBERED_REMOVALS);

const COMMANDS = {
  put: 'slidegateOverridePut',
  remove: 'slidegateOverrideRemove',
  purge: 'slidegateOverridePurge',
  changes: 'slidegateOverrideChanges',
} as const;

/** Expired overrides a write purges first, at most (the ticks of the replicas purge the rest). */
const PURGE_ON_WRITE = 100;
// Not on the decision path: a busy Redis gets longer to answer.
const MIN_TIMEOUT_MS = 1_000;

export interface RedisOverridesOptions {
  /** The store's client: the overrides share its connection, and close nothing. */
  readonly client: RedisClient;
  /** CACHE_KEY_PREFIX. */
  readonly keyPrefix?: string;
  /** STORE_TIMEOUT_MS; each call's deadline is at least MIN_TIMEOUT_MS. */
  readonly timeoutMs: number;
  readonly onError?: (kind: RedisErrorKind) => void;
  /** Removals remembered: MAX_REMEMBERED_REMOVALS unless a test asks fewer. */
  readonly rememberedRemovals?: number;
}

type ScriptCall = (args: (string | number)[]) => Promise<unknown>;

export class RedisOverrides implements OverridesStore {
  private readonly client: RedisClient;
  private readonly keys: string[];
  private readonly deadlineMs: number;
  private readonly onError: (kind: RedisErrorKind) => void;
  private readonly calls: Record<keyof typeof COMMANDS, ScriptCall>;

  constructor(options: RedisOverridesOptions) {
    this.client = options.client;
    const prefix = options.keyPrefix ?? '';
    this.keys = KEY_NAMES.map((name) => `${prefix}${TAG}|${name}`);
    this.deadlineMs = Math.max(options.timeoutMs, MIN_TIMEOUT_MS);
    this.onError = options.onError ?? (() => {});
    const shared = prelude(options.rememberedRemovals ?? MAX_REMEMBERED_REMOVALS);
    const scripts = { put: PUT_SCRIPT(shared), remove: REMOVE_SCRIPT(shared), purge: PURGE_SCRIPT(shared), changes: CHANGES_SCRIPT };
    const commands = this.client as unknown as Record<string, ScriptCall>;
    const calls: Partial<Record<keyof typeof COMMANDS, ScriptCall>> = {};
    for (const which of Object.keys(COMMANDS) as (keyof typeof COMMANDS)[]) {
      // One name per script text: stores on one client with another count of removals keep their own.
      const name = `${COMMANDS[which]}${shared === DEFAULT_PRELUDE ? '' : createHash('sha1').update(shared).digest('hex').slice(0, 8)}`;
      this.client.defineCommand(name, { lua: scripts[which], numberOfKeys: KEY_NAMES.length });
      calls[which] = (args) => commands[name]([...this.keys, ...args]);
    }
    this.calls = calls as Record<keyof typeof COMMANDS, ScriptCall>;
  }

  async put(write: OverrideWrite): Promise<PutOutcome> {
    const reply = (await this.within(
      this.calls.put([
        write.id,
        write.json,
        write.expiresAtMs === undefined ? '' : String(write.expiresAtMs),
        String(write.nowMs),
        write.maxCount,
        write.maxBytes,
        PURGE_ON_WRITE,
      ]),
    )) as unknown[];
    if (Number(reply[0]) === 1) {
      const old = reply[2] as string | null;
      return { ok: true, version: Number(reply[1]), previous: old === null ? undefined : storedOf(write.id, old), purged: purgedOf(reply[3]) };
    }
    return { ok: false, cap: reply[1] as 'count' | 'bytes', count: Number(reply[2]), bytes: Number(reply[3]), purged: purgedOf(reply[4]) };
  }

  async remove(id: string, _nowMs: number): Promise<RemovedOverride | undefined> {
    const reply = (await this.within(this.calls.remove([id]))) as [number, string] | null;
    return reply === null ? undefined : { version: Number(reply[0]), previous: storedOf(id, reply[1]) };
  }

  async purgeExpired(nowMs: number, max: number): Promise<RemovedOverride[]> {
    return purgedOf(await this.within(this.calls.purge([String(nowMs), max])));
  }

  async version(): Promise<number> {
    const v = await this.within(this.client.get(this.keys[0]));
    return v === null ? 0 : Number(v);
  }

  async changes(since: number, max: number): Promise<OverrideChanges> {
    const reply = (await this.within(this.calls.changes([since, max]))) as [number, number, number, string[], string[]];
    const changed: StoredOverride[] = [];
    for (let i = 0; i < reply[3].length; i += 2) changed.push(storedOf(reply[3][i], reply[3][i + 1]));
    const removed: { id: string; version: number }[] = [];
    for (let i = 0; i < reply[4].length; i += 2) removed.push({ id: reply[4][i], version: Number(reply[4][i + 1]) });
    return { version: Number(reply[0]), floor: Number(reply[1]), upTo: Number(reply[2]), changed, removed };
  }

  /** The connection is the counters' store's: closed with it. */
  close(): Promise<void> {
    return Promise.resolve();
  }

  private within<T>(pending: Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.onError('timeout');
        reject(new StoreUnavailableError(`redis did not answer within ${this.deadlineMs} ms`));
      }, this.deadlineMs);
      pending.then(
        (value) => {
          clearTimeout(timer);
          resolve(value);
        },
        (err: unknown) => {
          clearTimeout(timer);
          const kind = redisErrorKind(this.client, err);
          this.onError(kind);
          reject(unavailable(kind, err));
        },
      );
    });
  }
}

/** A stored value "<version> <json>" as the port's StoredOverride. */
function storedOf(id: string, value: string): StoredOverride {
  const space = value.indexOf(' ');
  return { id, version: Number(value.slice(0, space)), json: value.slice(space + 1) };
}

function purgedOf(flat: unknown): RemovedOverride[] {
  const list = (flat ?? []) as (string | number)[];
  const out: RemovedOverride[] = [];
  for (let i = 0; i < list.length; i += 3) out.push({ version: Number(list[i + 1]), previous: storedOf(String(list[i]), String(list[i + 2])) });
  return out;
}
