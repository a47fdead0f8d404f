import type { DemandExchange, ReplicaDemand } from '../../limiter/replica-exchange';

/**
 * Demand in Redis (quota budgets' and leases'): one hash per budget, a field per replica, the value
 * `expiresAtMs demand admitted proxies [beat]` with the expiry from Redis `TIME`, so replicas whose clocks
 * differ still agree on which entries are live. DEMAND_SCRIPT drops expired entries, publishes or
 * withdraws one replica's entry and returns the live ones in one atomic call; the hash itself
 * expires with its longest-lived entry.
 *
 * KEYS[1]  the budget's demand hash (in the counter's hash slot)
 * ARGV[1]  ttl of the published entry, ms
 * ARGV[2]  most fields kept: a new field is not written while as many live ones are held (expired
 *          ones are dropped first), and the reply then does not hold it
 * ARGV[3]  the replica
 * ARGV[4]  its entry "demand admitted proxies [beat]", or "" to withdraw it
 * reply    flat array: member, "expiresAtMs demand admitted proxies [beat]", ... for every live entry
 */
export const DEMAND_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local cap = tonumber(ARGV[2])
local member = ARGV[3]
local all = redis.call('HGETALL', KEYS[1])
local names, values, held = {}, {}, false
for i = 1, #all, 2 do
  local expires = tonumber(string.match(all[i + 1], '^(%d+)'))
  if expires == nil or expires <= now then
    redis.call('HDEL', KEYS[1], all[i])
  elseif all[i] ~= member then
    names[#names + 1] = all[i]
    values[#values + 1] = all[i + 1]
  else
    held = true
  end
end
if ARGV[4] == '' then
  if held then redis.call('HDEL', KEYS[1], member) end
elseif held or #names < cap then
  local entry = string.format('%.0f', now + ttl) .. ' ' .. ARGV[4]
  redis.call('HSET', KEYS[1], member, entry)
  names[#names + 1] = member
  values[#values + 1] = entry
end
local live = {}
local latest = 0
for i = 1, #names do
  live[#live + 1] = names[i]
  live[#live + 1] = values[i]
  local expires = tonumber(string.match(values[i], '^(%d+)'))
  if expires > latest then latest = expires end
end
if latest > 0 then redis.call('PEXPIREAT', KEYS[1], string.format('%.0f', latest)) end
return live
`;

export const DEMAND_COMMAND = 'slidegateDemand';

/** A demand as a field value (unknown demand, Infinity, is written as -1). */
function encodeDemand(d: ReplicaDemand): string {
  const entry = `${Number.isFinite(d.demand) ? d.demand : -1} ${d.admitted} ${d.proxies}`;
  return d.beat === undefined ? entry : `${entry} ${d.beat}`;
}

/** DEMAND_SCRIPT's arguments after KEYS[1]; `maxReplicas` is ARGV[2]. */
export function demandArgs(exchange: DemandExchange, maxReplicas: number): (string | number)[] {
  const publish = exchange.publish;
  const member = publish?.member ?? exchange.withdraw ?? '';
  return [Math.max(0, Math.round(exchange.ttlMs)), maxReplicas, member, publish === undefined ? '' : encodeDemand(publish)];
}

/** The script's reply as entries (a field that is not one is skipped). */
export function parseDemandReply(reply: unknown): ReplicaDemand[] {
  const flat = reply as string[];
  const out: ReplicaDemand[] = [];
  for (let i = 0; i + 1 < flat.length; i += 2) {
    const [, demand, admitted, proxies, beat] = String(flat[i + 1])
      .split(' ')
      .map(Number);
    if (!(admitted >= 0) || !(proxies >= 0) || Number.isNaN(demand)) continue;
    const entry = { member: String(flat[i]), demand: demand < 0 ? Infinity : demand, admitted, proxies };
    out.push(Number.isFinite(beat) ? { ...entry, beat } : entry);
  }
  return out;
}
