import { DECIDE_BESIDE } from './script';

/** The name under which the store defines SETTLE_SCRIPT on its client (numkeys is passed per call). */
export const SETTLE_COMMAND = 'slidegate_settle';

/**
 * SETTLE: one settlement (the Store port's Settlements) of a ledger's counters, applied once per
 * member and sequence number, atomic with the decision of those counters. It runs DECIDE_SCRIPT,
 * unchanged, as a local function: with the settlement's hits and every counter charged whatever the
 * outcome when the seq is new, with hits 0 (checks) when it was applied already or the ledger has no
 * room for the member.
 *
 * KEYS     KEYS[1..n]: the counters' base keys, exactly as DECIDE takes them (n may be 0); then the
 *          ledger, a hash in the counters' slot, or nothing when the ledger is the first counter's
 *          own, `KEYS[1] .. '|settled'` (a lease's: its key is sent once). A field per member, its
 *          value `<seq>:<lapse ms>`: the member's last applied seq, and the Redis time at which
 *          that entry lapses (it is then read as absent).
 * ARGV     member, seq (a positive safe integer), TTL ms (a positive integer), the most members the
 *          ledger records, then one DECIDE counter spec per counter with the hits to charge
 *          (counterSpec): n is #ARGV - 4.
 * Reply    an array of integers: the outcome (1 applied, 0 the seq was not above the member's entry,
 *          2 refused: no room for a new member), the member's seq the ledger holds after the call
 *          (0 when none), then per counter remaining (-1 when denied) and resetMs.
 *
 * Steps: the member's live entry read; a seq not above it: a check of the counters, nothing written.
 * A member without an entry (live or lapsed) while the ledger has the most members: its lapsed or
 * unreadable fields dropped; still no room: a check of the counters, nothing written. Else DECIDE
 * with its countDenied flag and the settlement's hits, then the member's entry written
 * `<seq>:<now + TTL>`. The ledger's key then lives at least TTL from that write (PEXPIRE when its
 * TTL is shorter), so it outlives every entry it holds. A counter DECIDE fails on fails the call (an
 * error reply) before the ledger is written: nothing of it recorded, so its resend is charged (at
 * worst twice where a write failure left other counters charged: over-counting, never
 * under-counting).
 */
export const SETTLE_SCRIPT = `${DECIDE_BESIDE}
local n = #ARGV - 4
local ledger = KEYS[n + 1] or (KEYS[1] .. '|settled')
local member, seq, ttl, cap = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
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
local outcome = 1
if last ~= nil and seq <= last then outcome = 0 end
if outcome == 1 and not entry and redis.call('HLEN', ledger) >= cap then
  local all = redis.call('HGETALL', ledger)
  for i = 1, #all, 2 do
    if liveSeq(all[i + 1]) == nil then redis.call('HDEL', ledger, all[i]) end
  end
  if redis.call('HLEN', ledger) >= cap then outcome = 2 end
end

-- DECIDE on the counters: charged whatever the outcome ('1'), or checked with hits 0.
local specs = {}
for i = 1, n do specs[i] = ARGV[4 + i] end
local flag, hits = '1', nil
if outcome ~= 1 then flag, hits = '0', 0 end
local judged = decided(counterKeys, flag, specs, hits, 'settlement')
if judged.err then return judged end
local out = {outcome, 0}
if outcome == 0 then out[2] = last end
if outcome == 1 then out[2] = seq end
for i = 1, #judged do out[i + 2] = judged[i] end
if outcome ~= 1 then return out end
redis.call('HSET', ledger, member, ARGV[2] .. ':' .. string.format('%d', now + ttl))
if redis.call('PTTL', ledger) < ttl then redis.call('PEXPIRE', ledger, ARGV[3]) end
return out
`;
