import type { DemandExchange, ProxyDemand } from '../../limiter/store';

/**
 * RLQS demand in Redis: one hash per budget, a field per proxy (its stream and bucket), the value
 * `expiresAtMs demand allowed` with the expiry from Redis `TIME`, so replicas whose clocks differ
 * still agree on which entries are live. DEMAND_SCRIPT publishes, removes, drops expired entries and
 * returns the live ones in one atomic call; the hash itself expires with its longest-lived entry.
 *
 * KEYS[1]  the budget's demand hash (the counter's hash tag, so it lives in the counter's slot)
 * ARGV[1]  ttl of the published entries, ms
 * ARGV[2]  most fields kept; a new field beyond it is not written
 * ARGV[3]  n, the number of published entries, then n pairs: member, "demand allowed"
 * then     m, the number of removed members, then m members
 * reply    flat array: member, "expiresAtMs demand allowed", ... for every live entry
 */
export const DEMAND_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local cap = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local at = 4
for i = 1, n do
  local member = ARGV[at]
  if redis.call('HEXISTS', KEYS[1], member) == 1 or redis.call('HLEN', KEYS[1]) < cap then
    redis.call('HSET', KEYS[1], member, string.format('%.0f', now + ttl) .. ' ' .. ARGV[at + 1])
  end
  at = at + 2
end
local m = tonumber(ARGV[at])
for i = 1, m do
  redis.call('HDEL', KEYS[1], ARGV[at + i])
end
local all = redis.call('HGETALL', KEYS[1])
local live = {}
local latest = 0
for i = 1, #all, 2 do
  local expires = tonumber(string.match(all[i + 1], '^(%d+)'))
  if expires == nil or expires <= now then
    redis.call('HDEL', KEYS[1], all[i])
  else
    live[#live + 1] = all[i]
    live[#live + 1] = all[i + 1]
    if expires > latest then latest = expires end
  end
end
if latest > 0 then redis.call('PEXPIREAT', KEYS[1], string.format('%.0f', latest)) end
return live
`;

export const DEMAND_COMMAND = 'slidegateDemand';

/** Most proxies kept per budget in Redis. */
export const REDIS_DEMAND_MAX_MEMBERS = 1_000;

/** A demand as a field value (unknown demand, Infinity, is written as -1). */
function encodeDemand(p: ProxyDemand): string {
  return `${Number.isFinite(p.demand) ? p.demand : -1} ${p.allowed}`;
}

/** DEMAND_SCRIPT's arguments after KEYS[1]. */
export function demandArgs(exchange: DemandExchange): (string | number)[] {
  const args: (string | number)[] = [Math.max(0, Math.round(exchange.ttlMs)), REDIS_DEMAND_MAX_MEMBERS, exchange.publish.length];
  for (const p of exchange.publish) args.push(p.member, encodeDemand(p));
  args.push(exchange.remove.length, ...exchange.remove);
  return args;
}

/** The script's reply as entries. */
export function parseDemandReply(reply: unknown): ProxyDemand[] {
  const flat = reply as string[];
  const out: ProxyDemand[] = [];
  for (let i = 0; i + 1 < flat.length; i += 2) {
    const [, demand, allowed] = String(flat[i + 1]).split(' ');
    const d = Number(demand);
    out.push({ member: String(flat[i]), demand: d < 0 ? Infinity : d, allowed: Number(allowed) });
  }
  return out;
}
