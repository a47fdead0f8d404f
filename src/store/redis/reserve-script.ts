import { DECIDE_BESIDE } from './script';

/** The name under which the store defines RESERVE_SCRIPT on its client (numkeys is passed per call). */
export const RESERVE_COMMAND = 'slidegate_reserve';

/** Outcome codes of RESERVE's reply, in HoldOutcome's words (src/limiter/reservations.ts). */
export const RESERVE_OUTCOMES = ['held', 'denied', 'full', 'again', 'committed', 'unknown', 'duplicate', 'released'] as const;

/**
 * RESERVE: one reservation call (src/limiter/reservations.ts, the Store port's Reservations) on one
 * descriptor, atomic with the decision of its counters. It runs DECIDE_SCRIPT, unchanged, as a local
 * function on the descriptor's counters: with hits 0 (checks) for a reserve, a release and a
 * duplicate commit, with the commit's hits and charged whatever the outcome for a commit.
 *
 * KEYS     KEYS[1..n]: the descriptor's counters' base keys, exactly as DECIDE takes them (n may be 0:
 *          a rule whose only limit is `concurrency`);
 *          KEYS[n+1]: the book, a hash `<prefix>{<tag>}|holds` in the counters' slot. Derived from it
 *          (same slot): `<book>:x`, a sorted set of the book's IDs scored by the ms they lapse at.
 *          Hash fields: `h` the number of holds, `s` the sum of their estimates, `=<ID>` an ID's
 *          estimate while held, or `c` once committed.
 * ARGV     kind ('r' reserve | 'c' commit | 'x' release), ID, hits (the estimate, or the commit's
 *          hits), TTL ms, entries the book may hold, in-flight limit (-1: none), then one DECIDE
 *          counter spec per counter with hits 0 (counterSpec; a commit's charge sets its hits field).
 * Reply    an array of integers: outcome (index in RESERVE_OUTCOMES), holds after the call, holds
 *          found lapsed, then per counter remaining (-1 when denied) and resetMs, then the same pair
 *          for the in-flight limit when there is one.
 *
 * Steps, as src/store/memory-reservations.ts: drop the book's lapsed entries (scores <= now), then
 *   reserve  an ID in the book: nothing held, its counters judged with need = s ('again'). A book of
 *            as many entries as it may hold: refused ('full'), waiting until its oldest entry lapses.
 *            Else each counter's check judged with need = s + estimate (judgeHeld), the in-flight
 *            limit with h + 1 <= limit (judgeInFlight); all admit: the estimate held until now + TTL.
 *   commit   an ID marked `c`: a check of the counters, nothing charged ('duplicate'). Else the
 *            counters charged the hits whatever the outcome (DECIDE with its countDenied flag), the
 *            ID's hold freed, the ID marked `c` until now + TTL (an unknown one only while the book
 *            has room).
 *   release  the ID's hold freed (a committed ID stays marked); a check of the counters.
 * Both keys live TTL from the last write (no entry outlives that); an empty book is deleted. A
 * counter DECIDE fails on fails the call (an error reply), nothing of it written.
 */
export const RESERVE_SCRIPT = `${DECIDE_BESIDE}
local n = #KEYS - 1
local book = KEYS[n + 1]
local lapses = book .. ':x'
local kind, id = ARGV[1], ARGV[2]
local hits, ttl, cap, maxHeld = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local field = '=' .. id
local function fmt(x) return string.format('%d', x) end
local counterKeys = {}
for i = 1, n do counterKeys[i] = KEYS[i] end

-- DECIDE on the counters (flag '1': charged whatever the outcome), with hits h when h > 0 (the specs carry 0).
local specs = {}
for i = 1, n do specs[i] = ARGV[6 + i] end
local function run(flag, h)
  local hits = nil
  if h > 0 then hits = h end
  return decided(counterKeys, flag, specs, hits, 'reservation')
end

-- Lapsed entries: their holds leave the count and the sum.
local lapsed, freed = 0, 0
local gone = redis.call('ZRANGEBYSCORE', lapses, '-inf', fmt(now))
for j = 1, #gone do
  local f = '=' .. gone[j]
  local v = redis.call('HGET', book, f)
  if v and v ~= 'c' then
    lapsed = lapsed + 1
    freed = freed + tonumber(v)
  end
  redis.call('HDEL', book, f)
end
if #gone > 0 then redis.call('ZREMRANGEBYSCORE', lapses, '-inf', fmt(now)) end
if lapsed > 0 then
  redis.call('HINCRBY', book, 'h', fmt(-lapsed))
  redis.call('HINCRBY', book, 's', fmt(-freed))
end

local state = redis.call('HMGET', book, 'h', 's', field)
local held, reserved, entry = tonumber(state[1]) or 0, tonumber(state[2]) or 0, state[3]
local entries = redis.call('ZCARD', lapses)

-- The counters: checked, or (a commit of an ID not committed yet) charged.
local checks, charged = nil, nil
if kind == 'c' and entry ~= 'c' then
  charged = run('1', hits)
  if charged.err then return charged end
else
  checks = run('0', 0)
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
  if entry and entry ~= 'c' then
    redis.call('HINCRBY', book, 'h', -1)
    redis.call('HINCRBY', book, 's', fmt(-tonumber(entry)))
    redis.call('HDEL', book, field)
    redis.call('ZREM', lapses, id)
    held = held - 1
    return true
  end
  return false
end

local out = {0, 0, lapsed}
local outcome
local function judged(need)
  local all = true
  for i = 1, n do
    local r, reset = checks[2 * i - 1], checks[2 * i]
    local spec = ARGV[6 + i]
    if r >= 0 and r >= need then
      out[#out + 1] = r - need
      out[#out + 1] = reset
    else
      all = false
      local alg, w, limit = string.match(spec, '^(%a+):(%d+):(%d+):')
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
    judged(reserved)
    inFlight(false)
    outcome = 3
  elseif entries >= cap then
    local wait = firstLapse()
    if wait == 0 then wait = ttl end
    local count = n
    if maxHeld >= 0 then count = n + 1 end
    for i = 1, count do
      out[#out + 1] = -1
      out[#out + 1] = wait
    end
    outcome = 2
  else
    local ok = judged(reserved + hits)
    if not inFlight(true) then ok = false end
    if ok then
      redis.call('HSET', book, field, fmt(hits))
      redis.call('HINCRBY', book, 'h', 1)
      redis.call('HINCRBY', book, 's', fmt(hits))
      redis.call('ZADD', lapses, fmt(now + ttl), id)
      touch()
      held = held + 1
      outcome = 0
    else
      outcome = 1
    end
  end
elseif kind == 'c' then
  if charged == nil then
    judged(0)
    outcome = 6
  else
    for i = 1, #charged do out[#out + 1] = charged[i] end
    if entry then
      free()
      outcome = 4
    else
      outcome = 5
    end
    -- Remembered, so that a second commit charges nothing (an unknown ID only while the book has room).
    if entry or entries < cap then
      redis.call('HSET', book, field, 'c')
      redis.call('ZADD', lapses, fmt(now + ttl), id)
      touch()
    end
  end
  inFlight(false)
else
  judged(0)
  free()
  inFlight(false)
  outcome = 7
end

if redis.call('ZCARD', lapses) == 0 then redis.call('DEL', book, lapses) end
out[1] = outcome
out[2] = held
return out
`;
