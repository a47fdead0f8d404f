import { HOLD_ENTRY_BYTES } from '../../limiter/reservations';
import { DECIDE_BESIDE } from './script';

/** The name under which the store defines RESERVE_SCRIPT on its client (numkeys is passed per call). */
export const RESERVE_COMMAND = 'slidegate_reserve';

/** Outcome codes of RESERVE's reply, in HoldOutcome's words (src/limiter/reservations.ts). */
export const RESERVE_OUTCOMES = ['held', 'denied', 'full', 'reused', 'committed', 'unknown', 'released'] as const;

/**
 * RESERVE: one reservation call (src/limiter/reservations.ts, the Store port's Reservations) on one
 * descriptor, atomic with the decision of its counters. It runs DECIDE_SCRIPT, unchanged, as a local
 * function on the descriptor's counters: with hits 0 (checks) for a reserve and a release, and for
 * a commit with min(hits, limit) on each counter (commitCharge), charged whatever the outcome.
 *
 * KEYS     KEYS[1..n]: the descriptor's counters' base keys, exactly as DECIDE takes them (n may be 0:
 *          a rule whose only limit is `concurrency`);
 *          KEYS[n+1]: the book, a hash `<prefix>{<tag>}|holds` in the counters' slot. Derived from it
 *          (same slot): `<book>:x`, a sorted set of the held IDs scored by the ms they lapse at.
 *          Hash fields: `s` the sum of the holds' estimates, `b` the sum of their bytes
 *          (HOLD_ENTRY_BYTES + the ID's bytes each, holdBytes), `=<ID>` a held ID's estimate.
 * ARGV     kind ('r' reserve | 'c' commit | 'x' release), ID, hits (the estimate, or the commit's
 *          hits), hold ms (holdTimeMs: the reserve's hold time), TTL ms (RESERVATION_TTL: how long
 *          the keys live after a write), holds the book may keep, bytes it may keep, in-flight limit
 *          (-1: none), then one DECIDE counter spec per counter with hits 0 (counterSpec).
 * Reply    an array of integers: outcome (index in RESERVE_OUTCOMES), holds after the call, holds
 *          found lapsed, then per counter remaining (-1 when denied) and resetMs, then the same pair
 *          for the in-flight limit when there is one.
 *
 * Steps, as src/store/memory-reservations.ts: drop the book's lapsed holds (scores <= now), then
 *   reserve  an ID the book holds: refused ('reused'), every decision denied until that hold lapses.
 *            A book of as many holds, or bytes, as it may keep (with this ID's): refused ('full'),
 *            waiting until its oldest hold lapses. Else each counter's check judged with need = s +
 *            estimate (judgeHeld), the in-flight limit with holds + 1 <= limit (judgeInFlight); all
 *            admit: the estimate held until now + hold ms.
 *   commit   the counters charged min(hits, limit) each whatever the outcome (DECIDE with its
 *            countDenied flag); the ID's hold freed if it has one ('committed'), else 'unknown'.
 *            Nothing is remembered of it.
 *   release  a check of the counters; the ID's hold freed.
 * Both keys live TTL from the last write (no hold outlives that); an empty book is deleted. A
 * counter DECIDE fails on fails the call (an error reply), nothing of it written.
 */
export const RESERVE_SCRIPT = `${DECIDE_BESIDE}
local n = #KEYS - 1
local book = KEYS[n + 1]
local lapses = book .. ':x'
local kind, id = ARGV[1], ARGV[2]
local hits, hold, ttl = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local maxEntries, maxBytes, maxHeld = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local cost = ${HOLD_ENTRY_BYTES} + #id
local field = '=' .. id
local function fmt(x) return string.format('%d', x) end
local counterKeys, specs = {}, {}
for i = 1, n do
  counterKeys[i] = KEYS[i]
  specs[i] = ARGV[8 + i]
end

-- Lapsed holds: they leave the sum and the bytes.
local gone = redis.call('ZRANGEBYSCORE', lapses, '-inf', fmt(now))
local lapsed = #gone
if lapsed > 0 then
  local freed, freedBytes = 0, 0
  for j = 1, lapsed do
    local f = '=' .. gone[j]
    freed = freed + (tonumber(redis.call('HGET', book, f)) or 0)
    freedBytes = freedBytes + ${HOLD_ENTRY_BYTES} + #gone[j]
    redis.call('HDEL', book, f)
  end
  redis.call('ZREMRANGEBYSCORE', lapses, '-inf', fmt(now))
  redis.call('HINCRBY', book, 's', fmt(-freed))
  redis.call('HINCRBY', book, 'b', fmt(-freedBytes))
end

local state = redis.call('HMGET', book, 's', 'b', field)
local reserved, bytes, entry = tonumber(state[1]) or 0, tonumber(state[2]) or 0, state[3]
local held = redis.call('ZCARD', lapses)

-- The counters: checked, or (a commit) charged min(hits, limit) each.
local checks, charged = nil, nil
if kind == 'c' then
  local capped = {}
  for i = 1, n do
    local head, limit, mid, tail = string.match(specs[i], '^(%a+:%d+:)(%d+)(:%-?%d+:)%d+(.*)$')
    capped[i] = head .. limit .. mid .. fmt(math.min(hits, tonumber(limit))) .. tail
  end
  charged = decided(counterKeys, '1', capped, nil, 'reservation')
  if charged.err then return charged end
else
  checks = decided(counterKeys, '0', specs, nil, 'reservation')
  if checks.err then return checks end
end
local function firstLapse()
  local first = redis.call('ZRANGE', lapses, 0, 0, 'WITHSCORES')
  if #first == 0 then return 0 end
  return math.max(0, tonumber(first[2]) - now)
end
local function touch()
  redis.call('PEXPIRE', book, fmt(ttl))
  redis.call('PEXPIRE', lapses, fmt(ttl))
end
-- Frees the ID's hold, if it has one.
local function free()
  if not entry then return false end
  redis.call('HINCRBY', book, 's', fmt(-tonumber(entry)))
  redis.call('HINCRBY', book, 'b', fmt(-cost))
  redis.call('HDEL', book, field)
  redis.call('ZREM', lapses, id)
  held = held - 1
  return true
end

local out = {0, 0, lapsed}
local outcome
local count = n
if maxHeld >= 0 then count = n + 1 end
local function refuse(wait)
  for i = 1, count do
    out[#out + 1] = -1
    out[#out + 1] = wait
  end
end
local function judged(need)
  local all = true
  for i = 1, n do
    local r, reset = checks[2 * i - 1], checks[2 * i]
    if r >= 0 and r >= need then
      out[#out + 1] = r - need
      out[#out + 1] = reset
    else
      all = false
      local alg, w, limit = string.match(specs[i], '^(%a+):(%d+):(%d+):')
      out[#out + 1] = -1
      if alg == 'fc' and need <= tonumber(limit) then out[#out + 1] = reset else out[#out + 1] = tonumber(w) end
    end
  end
  return all
end
local function inFlight(adding)
  if maxHeld < 0 then return true end
  if not adding then
    out[#out + 1] = math.max(0, maxHeld - held)
    out[#out + 1] = 0
    return true
  end
  if held + 1 <= maxHeld then
    out[#out + 1] = maxHeld - held - 1
    out[#out + 1] = 0
    return true
  end
  out[#out + 1] = -1
  out[#out + 1] = firstLapse()
  return false
end

if kind == 'r' then
  if entry then
    refuse(math.max(0, tonumber(redis.call('ZSCORE', lapses, id)) - now))
    outcome = 3
  elseif held >= maxEntries or bytes + cost > maxBytes then
    local wait = firstLapse()
    if wait == 0 then wait = hold end
    refuse(wait)
    outcome = 2
  else
    local ok = judged(reserved + hits)
    if not inFlight(true) then ok = false end
    if ok then
      redis.call('HSET', book, field, fmt(hits))
      redis.call('HINCRBY', book, 's', fmt(hits))
      redis.call('HINCRBY', book, 'b', fmt(cost))
      redis.call('ZADD', lapses, fmt(now + hold), id)
      touch()
      held = held + 1
      outcome = 0
    else
      outcome = 1
    end
  end
elseif kind == 'c' then
  for i = 1, #charged do out[#out + 1] = charged[i] end
  if free() then outcome = 4 else outcome = 5 end
  inFlight(false)
else
  judged(0)
  free()
  inFlight(false)
  outcome = 6
end

if held <= 0 then redis.call('DEL', book, lapses) end
out[1] = outcome
out[2] = held
return out
`;
