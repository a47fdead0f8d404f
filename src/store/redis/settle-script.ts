import { MAX_SETTLE_MEMBERS } from '../../limiter/store';
import { DECIDE_BESIDE } from './script';

/** The name under which the store defines SETTLE_SCRIPT on its client (numkeys is passed per call). */
export const SETTLE_COMMAND = 'slidegate_settle';

/**
 * SETTLE: one settlement (the Store port's Settlements) of a ledger's counters, applied once per
 * member and sequence number, atomic with the decision of those counters. It runs DECIDE_SCRIPT,
 * unchanged, as a local function: with the settlement's hits and every counter charged whatever the
 * outcome when the seq is new, with hits 0 (checks) when it was applied already.
 *
 * KEYS     KEYS[1..n]: the counters' base keys, exactly as DECIDE takes them (n may be 0);
 *          KEYS[n+1]: the ledger, a hash `<prefix>{<tag>}|settled` in the counters' slot. A field
 *          per member, its value `<seq>:<lapse ms>`: the member's last applied seq, and the Redis
 *          time at which that entry lapses (it is then read as absent).
 * ARGV     member, seq (a positive safe integer), TTL ms (a positive integer), then one DECIDE
 *          counter spec per counter with the hits to charge (counterSpec).
 * Reply    an array of integers: applied (1, or 0 when the seq was not above the member's entry),
 *          then per counter remaining (-1 when denied) and resetMs.
 *
 * Steps: the member's live entry read; a seq not above it: a check of the counters, nothing written.
 * Else DECIDE with its countDenied flag and the settlement's hits, then the member's entry written
 * `<seq>:<now + TTL>`: over an entry of the member (live or lapsed), or as a new field while the
 * ledger has fewer than MAX_SETTLE_MEMBERS fields, its lapsed or unreadable
 * fields dropped first when it has that many; a new member beyond is charged, not recorded. The
 * ledger's key then lives at least TTL from that write (PEXPIRE when its TTL is shorter), so it
 * outlives every entry it holds. A counter DECIDE fails on fails the call (an error reply) before
 * the ledger is written: nothing of it recorded, so its resend is charged (at worst twice where a
 * write failure left other counters charged: over-counting, never under-counting).
 */
export const SETTLE_SCRIPT = `${DECIDE_BESIDE}
local n = #KEYS - 1
local ledger = KEYS[n + 1]
local member, seq, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local cap = ${MAX_SETTLE_MEMBERS}
local counterKeys = {}
for i = 1, n do counterKeys[i] = KEYS[i] end

-- The seq of a field value while it has not lapsed; nil for a lapsed or unreadable one.
local function liveSeq(v)
  if not v then return nil end
  local s, lapse = string.match(v, '^(%d+):(%d+)$')
  if s == nil or tonumber(lapse) <= now then return nil end
  return tonumber(s)
end

local entry = redis.call('HGET', ledger, member)
local last = liveSeq(entry)
local applied = last == nil or seq > last

-- DECIDE on the counters: charged whatever the outcome ('1'), or checked with hits 0.
local specs = {}
for i = 1, n do specs[i] = ARGV[3 + i] end
local flag, hits = '1', nil
if not applied then flag, hits = '0', 0 end
local judged = decided(counterKeys, flag, specs, hits, 'settlement')
if judged.err then return judged end
local out = {0}
for i = 1, #judged do out[i + 1] = judged[i] end
if not applied then return out end
out[1] = 1

local room = entry or redis.call('HLEN', ledger) < cap
if not room then
  local all = redis.call('HGETALL', ledger)
  for i = 1, #all, 2 do
    if liveSeq(all[i + 1]) == nil then redis.call('HDEL', ledger, all[i]) end
  end
  room = redis.call('HLEN', ledger) < cap
end
if room then
  redis.call('HSET', ledger, member, ARGV[2] .. ':' .. string.format('%d', now + ttl))
  if redis.call('PTTL', ledger) < ttl then redis.call('PEXPIRE', ledger, ARGV[3]) end
end
return out
`;
