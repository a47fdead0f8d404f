import type { Algorithm } from '../limiter/types';

/**
 * The Redis scripts. DECIDE_SCRIPT mirrors src/limiter/algorithms.ts line by line (same integer-ms
 * arithmetic, same IEEE doubles in Lua and JS), so a Redis decision equals a memory-store decision
 * at the same instant. Time is Redis `TIME`, read once per call: every replica of the service
 * shares Redis's clock, whatever its own clock says.
 */

/** Algorithm codes passed in ARGV. */
export const ALGORITHM_CODE: Readonly<Record<Algorithm, string>> = {
  sliding_window: 'sw',
  fixed_window: 'fw',
  sliding_log: 'sl',
};

/** Entries per counter in the decide reply: allowed, remaining, resetMs, charge token. */
export const DECIDE_REPLY_STRIDE = 4;
/** ARGV entries per counter in the decide call (after ARGV[1]). */
export const DECIDE_ARGV_STRIDE = 4;

/**
 * DECIDE: decide every counter of one request, then charge them all or none.
 *
 * KEYS[i]  base key of counter i: `<prefix>{<counter key>}`. The braces make the counter key the
 *          Redis Cluster hash tag, so every key derived from a base lives in the base's slot.
 *          Keys derived inside the script (same slot as the declared base):
 *            sliding_window  `<base>:<n>` and `<base>:<n-1>`, n = floor(now / W), string counters
 *            fixed_window    `<base>:<n>`, a string counter
 *            sliding_log     `<base>` itself, a sorted set: score = admission ms,
 *                            member = `<hits>:<redis time in us>:<i>[:<k>]` (unique per admitted batch)
 * ARGV[1]  '1' to charge every counter even when denied (countDenied), else '0'
 * ARGV[2 + 4(i-1)]  algorithm of counter i: 'sw' | 'fw' | 'sl'
 * ARGV[3 + 4(i-1)]  window W, ms (integer)
 * ARGV[4 + 4(i-1)]  limit L
 * ARGV[5 + 4(i-1)]  hits h (0 = check without counting)
 *
 * Reply: 4 entries per counter, in KEYS order:
 *   allowed (1|0), remaining, resetMs, charge token ('' when nothing was added; else the window
 *   number n for sw/fw, or the sorted-set member for sl: exactly what REFUND_SCRIPT takes back).
 *
 * Writes: only when every counter is allowed (or ARGV[1] = '1'), only counters with h > 0.
 * TTLs: sliding_window 2W (a window is still read as "previous" until the end of the next one),
 * fixed_window W, sliding_log W (its newest record leaves the window W after admission).
 */
export const DECIDE_SCRIPT = `
-- Redis < 5 replicates scripts verbatim, which forbids writes after TIME; from 5 on this is a no-op.
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nowUs = t[1] .. string.format('%06d', tonumber(t[2]))
local countDenied = ARGV[1] == '1'
local function fmt(x) return string.format('%.0f', x) end

local n = #KEYS
local out = {}
local charge = {}
local allAllowed = true

for i = 1, n do
  local o = 1 + (i - 1) * 4
  local alg = ARGV[o + 1]
  local w = tonumber(ARGV[o + 2])
  local limit = tonumber(ARGV[o + 3])
  local hits = tonumber(ARGV[o + 4])
  local base = KEYS[i]
  local start = now - (now % w)
  local toEnd = start + w - now
  local allowed, remaining, reset = 0, 0, 0
  -- The same counter twice in one call: the later one sees the earlier one's hits.
  local pending = 0
  for j = 1, i - 1 do
    local p = 1 + (j - 1) * 4
    if KEYS[j] == base and ARGV[p + 1] == alg and ARGV[p + 2] == ARGV[o + 2] and (out[(j - 1) * 4 + 1] == 1 or countDenied) then
      pending = pending + tonumber(ARGV[p + 4])
    end
  end

  if alg == 'sw' then
    local win = fmt(start / w)
    local cur = (tonumber(redis.call('GET', base .. ':' .. win)) or 0) + pending
    local prev = tonumber(redis.call('GET', base .. ':' .. fmt(start / w - 1))) or 0
    local used = math.floor((cur * w + prev * toEnd) / w)
    if used + hits <= limit then
      allowed = 1
      remaining = limit - used - hits
      if cur + hits > 0 then reset = toEnd + w
      elseif prev > 0 then reset = toEnd end
    elseif hits > limit then
      reset = w
    else
      local target = limit - hits + 1
      if cur < target then
        reset = toEnd - (math.ceil((target - cur) * w / prev) - 1)
      else
        reset = toEnd + w - (math.ceil(target * w / cur) - 1)
      end
    end
    charge[i] = win

  elseif alg == 'fw' then
    local win = fmt(start / w)
    local count = (tonumber(redis.call('GET', base .. ':' .. win)) or 0) + pending
    if count + hits <= limit then
      allowed = 1
      remaining = limit - count - hits
      reset = toEnd
    elseif hits > limit then
      reset = w
    else
      reset = toEnd
    end
    charge[i] = win

  else -- 'sl'
    local from = now - w
    local recs = redis.call('ZRANGEBYSCORE', base, '(' .. fmt(from), '+inf', 'WITHSCORES')
    local count = 0
    local newest = nil
    for j = 1, #recs, 2 do
      count = count + tonumber(string.match(recs[j], '^%d+'))
      local at = tonumber(recs[j + 1])
      if newest == nil or at > newest then newest = at end
    end
    -- Pending hits act as a record admitted now, after every stored one.
    if pending > 0 then
      count = count + pending
      newest = now
    end
    if count + hits <= limit then
      allowed = 1
      remaining = limit - count - hits
      if hits > 0 then reset = w
      elseif count > 0 then reset = newest + w - now end
    elseif hits > limit then
      reset = w
    else
      -- Drop the oldest records until h fits; if only a pending record is left, it leaves W from now.
      local left = count
      reset = w
      for j = 1, #recs, 2 do
        left = left - tonumber(string.match(recs[j], '^%d+'))
        if left + hits <= limit then
          reset = tonumber(recs[j + 1]) + w - now
          break
        end
      end
    end
  end

  if allowed == 0 then allAllowed = false end
  out[(i - 1) * 4 + 1] = allowed
  out[(i - 1) * 4 + 2] = remaining
  out[(i - 1) * 4 + 3] = reset
  out[(i - 1) * 4 + 4] = ''
end

if allAllowed or countDenied then
  for i = 1, n do
    local o = 1 + (i - 1) * 4
    local alg = ARGV[o + 1]
    local w = tonumber(ARGV[o + 2])
    local hits = tonumber(ARGV[o + 4])
    if hits > 0 then
      local base = KEYS[i]
      if alg == 'sl' then
        local member = ARGV[o + 4] .. ':' .. nowUs .. ':' .. i
        local k = 0
        while redis.call('ZADD', base, 'NX', now, member) == 0 do
          k = k + 1
          member = ARGV[o + 4] .. ':' .. nowUs .. ':' .. i .. ':' .. k
        end
        redis.call('ZREMRANGEBYSCORE', base, '-inf', fmt(now - w))
        redis.call('PEXPIRE', base, w)
        out[(i - 1) * 4 + 4] = member
      else
        local key = base .. ':' .. charge[i]
        redis.call('INCRBY', key, hits)
        if alg == 'sw' then redis.call('PEXPIRE', key, 2 * w) else redis.call('PEXPIRE', key, w) end
        out[(i - 1) * 4 + 4] = charge[i]
      end
    end
  end
end

return out
`;

/**
 * REFUND: take back exactly what one DECIDE call added (used when a multi-slot cluster request was
 * denied in another slot, or failed there).
 *
 * KEYS[i]  base key of counter i, as in DECIDE
 * ARGV[1 + 3(i-1)]  algorithm of counter i: 'sw' | 'fw' | 'sl'
 * ARGV[2 + 3(i-1)]  hits that DECIDE added
 * ARGV[3 + 3(i-1)]  DECIDE's charge token for counter i ('' = nothing to refund)
 *
 * sw/fw decrement `<base>:<token>` only while the key exists (an expired window is not recreated,
 * and the TTL is kept); a counter brought to zero is deleted. sl removes the member.
 * Reply: the number of counters refunded.
 */
export const REFUND_SCRIPT = `
local done = 0
for i = 1, #KEYS do
  local o = (i - 1) * 3
  local alg = ARGV[o + 1]
  local hits = tonumber(ARGV[o + 2])
  local token = ARGV[o + 3]
  if token ~= '' then
    if alg == 'sl' then
      done = done + redis.call('ZREM', KEYS[i], token)
    else
      local key = KEYS[i] .. ':' .. token
      if redis.call('EXISTS', key) == 1 then
        if redis.call('DECRBY', key, hits) <= 0 then redis.call('DEL', key) end
        done = done + 1
      end
    end
  end
end
return done
`;
