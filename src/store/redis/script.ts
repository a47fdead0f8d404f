import { MAX_BUCKET_AHEAD_MS } from '../../limiter/algorithms';
import { algorithmCode, isBucket, MAX_WINDOW_MS, UNIT_MS } from '../../limiter/types';
import type { CounterRequest } from '../../limiter/store';
import { MAX_CALENDAR_OFFSET_MS } from '../../limiter/calendar';

/**
 * The Redis scripts. DECIDE_SCRIPT mirrors src/limiter/algorithms.ts line by line (same integer-ms
 * arithmetic, same IEEE doubles in Lua and JS), so a Redis decision equals a memory-store decision
 * at the same instant. Time is Redis `TIME`, read once per call (every request of a batch is decided
 * at that one instant): every replica of the service shares Redis's clock, whatever its own clock says.
 */

/**
 * A counter's limit and hits as DECIDE reads them, `<algorithm code>:<W>:<L>:<shape>:<hits>`
 * (shape: sub-windows for sw/ss, burst for tb/lb, the calendar's offset for a calendar window 'fc'
 * whose W is its unit's nominal length, 0 otherwise), and `:d` after it for a counter
 * charged even when its request is denied (CounterRequest.countDenied). One string, not five arguments per
 * counter: the client encodes a third of the arguments, and the script parses each distinct one
 * once per call (a hot descriptor sends the same string in every request).
 */
export function counterSpec(c: CounterRequest): string {
  const charged = c.countDenied === true ? ':d' : '';
  if (c.calendar !== undefined) return `fc:${UNIT_MS[c.calendar.unit]}:${c.limit}:${c.calendar.offsetMs}:${c.hits}${charged}`;
  if (c.algorithm === 'sliding_window') return `${c.strict === true ? 'ss' : 'sw'}:${c.windowMs}:${c.limit}:${c.subWindows ?? 1}:${c.hits}${charged}`;
  const shape = isBucket(c.algorithm) ? (c.burst ?? c.limit) : 0;
  return `${algorithmCode(c.algorithm)}:${c.windowMs}:${c.limit}:${shape}:${c.hits}${charged}`;
}

/**
 * How long a calendar window's key outlives its period, ms. Named by its period, it is read by no
 * call after the end; the margin only keeps a key made in the period's last milliseconds from
 * expiring (on Redis's clock, in real time) before the calls of that same instant are done with it,
 * as a fixed window's key, which lives W from its creation, outlives its window.
 */
export const CALENDAR_KEY_MARGIN_MS = 1_000;

/** A counter's DECIDE argument after its key (counterSpec). */
export function pushCounterArgs(args: (string | number)[], c: CounterRequest): void {
  args.push(counterSpec(c));
}

/** The largest limit and burst the script takes (the wire's uint32). */
const MAX_SCRIPT_COUNT = 4_294_967_295;

/**
 * Why `c` cannot be sent to the script, or undefined when it can: every number an integer in the
 * range that keeps the script's arithmetic exact and every key and TTL it writes valid (W at most
 * MAX_WINDOW_MS, L and burst within uint32, h a safe integer, k dividing W). The config and the
 * wire admit nothing else; this keeps a caller's bug out of a batch that other calls share.
 */
export function counterProblem(c: CounterRequest): string | undefined {
  if (!isCount(c.windowMs, 1, MAX_WINDOW_MS)) return `window ${c.windowMs} ms is not an integer from 1 to ${MAX_WINDOW_MS}`;
  if (!isCount(c.limit, 0, MAX_SCRIPT_COUNT)) return `limit ${c.limit} is not an integer from 0 to ${MAX_SCRIPT_COUNT}`;
  if (!isCount(c.hits, 0, Number.MAX_SAFE_INTEGER)) return `hits ${c.hits} is not a safe integer from 0`;
  // Only the buckets read a burst (the others carry L there); a limit of 0 admits nothing, burst 0 included.
  const minBurst = c.limit === 0 ? 0 : 1;
  if (isBucket(c.algorithm) && c.burst !== undefined && !isCount(c.burst, minBurst, MAX_SCRIPT_COUNT)) {
    return `burst ${c.burst} is not an integer from ${minBurst} to ${MAX_SCRIPT_COUNT}`;
  }
  const k = c.subWindows;
  if (k !== undefined && (!isCount(k, 1, c.windowMs) || c.windowMs % k !== 0)) return `${k} sub-windows do not divide the window of ${c.windowMs} ms`;
  if (c.calendar !== undefined) {
    if (c.algorithm !== 'fixed_window') return `a calendar window is a fixed_window, not a ${c.algorithm}`;
    const offset = c.calendar.offsetMs;
    if (!isCount(Math.abs(offset), 0, MAX_CALENDAR_OFFSET_MS)) return `calendar offset ${offset} ms is not an integer within a day`;
    if (UNIT_MS[c.calendar.unit] === undefined) return `calendar unit ${String(c.calendar.unit)} is not a unit`;
  }
  return undefined;
}

function isCount(n: number, min: number, max: number): boolean {
  return Number.isInteger(n) && n >= min && n <= max;
}

/** Why a request failed in the script: a key of another type, a stored value it cannot read, a counter it could not write. */
export const FAILED_WRONG_TYPE = 1;
export const FAILED_UNREADABLE = 2;
export const FAILED_WRITE = 3;

/** A DECIDE reply that does not read as the script writes it: a bug, never a decision. */
export class MalformedReplyError extends Error {
  constructor(reply: string, at: number) {
    super(`malformed DECIDE reply at offset ${at}: ${JSON.stringify(reply.slice(Math.max(0, at - 20), at + 20))}`);
    this.name = 'MalformedReplyError';
  }
}

/**
 * Reads a DECIDE reply counter by counter, without splitting it: `remaining()` then `resetMs()`
 * then `token()` (or `skipToken()`), for each counter in KEYS order. A number field that is not an
 * integer ending at a comma (or at the end) throws MalformedReplyError: the reader never goes on
 * out of step and reads the next calls' fields as something else.
 */
export class DecideReplyReader {
  private pos = 0;
  constructor(private readonly reply: string) {}

  /** The counter's remaining quota, or -1 when it was denied. */
  remaining(): number {
    return this.int();
  }

  /**
   * When the next request (its `n` counters) failed in the script: reads past its fields and
   * returns its FAILED_* code; otherwise undefined, and nothing is read.
   */
  failure(n: number): number | undefined {
    const s = this.reply;
    const p = this.pos;
    if (s.charCodeAt(p) !== 45 /* - */ || s.charCodeAt(p + 1) !== 50 /* 2 */ || s.charCodeAt(p + 2) !== 44 /* , */) return undefined;
    this.pos = p + 3;
    const code = this.int();
    this.skipToken();
    for (let i = 1; i < n; i++) {
      this.int();
      this.int();
      this.skipToken();
    }
    return code;
  }

  resetMs(): number {
    return this.int();
  }

  token(): string {
    const end = this.fieldEnd();
    const token = this.reply.slice(this.pos, end);
    this.pos = end + 1;
    return token;
  }

  skipToken(): void {
    this.pos = this.fieldEnd() + 1;
  }

  private fieldEnd(): number {
    const end = this.reply.indexOf(',', this.pos);
    return end < 0 ? this.reply.length : end;
  }

  private int(): number {
    const s = this.reply;
    const start = this.pos;
    let i = start;
    let sign = 1;
    if (s.charCodeAt(i) === 45 /* - */) {
      sign = -1;
      i++;
    }
    const digits = i;
    let n = 0;
    for (let c = s.charCodeAt(i); c >= 48 && c <= 57; c = s.charCodeAt(++i)) n = n * 10 + (c - 48);
    // A comma or the end must follow at least one digit (an exponent or a fraction does not).
    if (i === digits || (i < s.length && s.charCodeAt(i) !== 44) /* , */) throw new MalformedReplyError(s, start);
    this.pos = i + 1;
    return sign * n;
  }
}

/** The name under which the store defines REFUND_SCRIPT on its client (numkeys is passed per call; DECIDE is sent by ./script-command). */
export const REFUND_COMMAND = 'slidegate_refund';

/**
 * DECIDE: decide a batch of requests, one after the other, each all-or-nothing on its own: a
 * request's counters are charged together or not at all, and a request sees the charges of the
 * requests before it in the batch, exactly as if each had been a call of its own at the same instant.
 *
 * KEYS     base keys of every counter of every request, request after request: `<prefix>{<counter
 *          key>}`, or `<prefix>{<tag>}<counter key>` for a counter tagged with another identity
 *          (CounterRequest.tag: the limits of one descriptor). The braces make the counter key, or
 *          the tag, the Redis Cluster hash tag, so every key derived from a base lives in the base's
 *          slot, and tagged counters in their tag's (a batch sent to a cluster holds one slot's keys).
 *          Keys derived inside the script (same slot as the declared base):
 *            sliding_window  `<base>:<n>` and `<base>:<n-1>`, n = floor(now / W), string counters;
 *                            with k sub-windows `<base>:<n-k>` .. `<base>:<n>`, n = floor(now / (W / k))
 *            fixed_window    `<base>:<n>`, a string counter; a calendar window ('fc') `<base>:<start>`,
 *                            start = its period's first ms (src/limiter/calendar.ts calendarPeriod)
 *            token/leaky bucket `<base>` itself, a string `<tatMs>:<tatRem>`: the GCRA theoretical
 *                            arrival time tatMs + tatRem / L (absent: the bucket has drained)
 *            sliding_log     `<base>` itself, a sorted set: score = admission ms,
 *                            member = `<hits>:<redis time in us>:<i>[:<k>]` (unique per admitted batch)
 * ARGV     for each request, in KEYS order:
 *            countDenied ('1' to charge every counter even when one is denied, else '0'),
 *            number of counters c, then for each of its c counters one string
 *              `<algorithm>:<W>:<L>:<p>:<h>` (counterSpec): algorithm 'sw' | 'ss' (strict sliding
 *              window) | 'fw' | 'fc' (calendar window) | 'sl' | 'tb' | 'lb', window W in ms (integer,
 *              1..MAX_WINDOW_MS; for fc the nominal length of its unit, which names the unit), limit L
 *              (integer, 0..2^32-1), shape p: sub-windows k for sw/ss (dividing W), burst for tb/lb
 *              (1..2^32-1), for fc the calendar's offset from UTC in ms (signed, within a day), 0
 *              otherwise; hits h (a safe integer; 0 = check only); then `:d` when
 *              the counter is charged whatever the request's outcome (its rule counts denied requests)
 *            (counterProblem() checks all this before a counter joins a batch)
 *
 * Reply: one string, 3 comma-separated fields per counter in KEYS order (one bulk string is far
 *   cheaper for the client to read than an array of 4 entries per counter; see DecideReplyReader):
 *   remaining (-1 when denied: a denied counter's remaining is 0), resetMs, charge token ('' when
 *   nothing was added; else the (sub-)window number n for sw/ss/fw, the period start for fc (REFUND
 *   takes it back as a 'fw' counter), the sorted-set member for sl, or
 *   `<W>:<L>` for tb/lb: exactly what REFUND_SCRIPT needs to take it back). Numbers are written as
 *   integers in full, never in exponent form; tokens hold digits and ':' only.
 *   A request that fails on its own (a key of another type, a bucket value it cannot read, a
 *   string counter INCRBY refuses) has every counter answered `-2,<code>,` (code: FAILED_*): a read
 *   failure charges none of it; a write failure leaves its other counters charged (over-counting,
 *   never under-counting). The batch's other requests are decided and charged as if it were absent.
 *
 * Work per counter: a hot counter costs one read and one write per call, not per request: string
 * counters are read once per call (one MGET of both windows) and written once per call (INCRBY of
 * the batch's total); a limit's spec is parsed, and a window counter's keys derived, once per call.
 * A sliding window of one sub-window (the common counter) is decided from one table per (base key,
 * spec) holding all of that, and counts its hits into the call's value at once (taken back when its
 * request is not charged); counts are printed with '%d', several times cheaper than Lua's '%.14g'.
 * What is left per counter is arithmetic on tables the call keeps (bench/lua-cost.ts measures it).
 *
 * Writes: only for a request whose counters are all allowed (or with countDenied), and for the
 * counters marked `:d` whatever the outcome; only counters with h > 0.
 * TTLs, set when a key is created (INCRBY returns exactly what was added), never refreshed:
 *   sliding_window W + W/k: `<base>:<n>` is created inside sub-window n and read until the end of
 *     sub-window n+k (as the oldest), so at most (k+1) x W/k after its creation (2W for k = 1);
 *   fixed_window W: created inside window n, read only until its end; a calendar window: until its
 *     period's end and CALENDAR_KEY_MARGIN_MS;
 *   sliding_log W, renewed on every admission: the newest record must stay W after it was added
 *     (records older than W are trimmed at the same time, so the set stays O(L)).
 *   token/leaky bucket: until it has drained (tatMs - now, plus 1 ms for a fraction), set on every write;
 *     a TAT never lies more than MAX_BUCKET_AHEAD_MS ahead (countDenied can push it past the burst).
 * A key that expires is simply created again, with its TTL, by the next write.
 */
export const DECIDE_SCRIPT = `
-- Redis < 5 replicates scripts verbatim, which forbids writes after TIME; from 5 on this is a no-op.
if redis.replicate_commands then redis.replicate_commands() end
-- Locals: read once per counter, globals cost a table lookup each time.
local KEYS, ARGV = KEYS, ARGV
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nowUs = t[1] .. string.format('%06d', tonumber(t[2]))
local function fmt(x) return string.format('%.0f', x) end
local floor, ceil = math.floor, math.ceil
-- A count as text: '%d' prints an integer several times faster than Lua's own number-to-string ('%.14g').
local sfmt = string.format
-- What redis.pcall returns for a command that failed (wrong type, bad argument).
local function isErr(r) return type(r) == 'table' and r.err ~= nil end
-- The furthest a bucket's TAT may lie ahead of now, ms (MAX_BUCKET_AHEAD_MS).
local AHEAD = ${MAX_BUCKET_AHEAD_MS}
-- A sorted-set member's hits (a member this script did not write counts none).
local function recHits(m) return tonumber(string.match(m, '^%d+')) or 0 end

-- Calendar periods (src/limiter/calendar.ts, step by step): day numbers from civil dates and back,
-- years counted from March so that February, with its leap day, ends each one.
local DAY, WEEK, MONTH, YEAR = ${UNIT_MS.day}, ${UNIT_MS.week}, ${UNIT_MS.month}, ${UNIT_MS.year}
local function daysFromCivil(year, month)
  local y = year
  if month <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local doy = math.floor((153 * ((month + 9) % 12) + 2) / 5)
  return era * 146097 + yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy - 719468
end
local function civilFromDays(days)
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local month = mp - 9
  if mp < 10 then month = mp + 3 end
  local year = yoe + era * 400
  if month <= 2 then year = year + 1 end
  return year, month
end
-- The period of the unit of nominal length w containing now, on a clock off ms ahead of UTC.
local function calendarPeriod(w, off)
  local l = now + off
  local s, e
  if w == MONTH or w == YEAR then
    local y, m = civilFromDays(math.floor(l / DAY))
    if w == YEAR then
      s, e = daysFromCivil(y, 1) * DAY, daysFromCivil(y + 1, 1) * DAY
    elseif m == 12 then
      s, e = daysFromCivil(y, 12) * DAY, daysFromCivil(y + 1, 1) * DAY
    else
      s, e = daysFromCivil(y, m) * DAY, daysFromCivil(y, m + 1) * DAY
    end
  else
    -- Lua's % is a floor modulo: a Monday (day 4) is on a week's boundary, the local epoch on the others'.
    local anchor = 0
    if w == WEEK then anchor = 4 * DAY end
    s = l - (l - anchor) % w
    e = s + w
  end
  return s - off, e - off
end

-- Counter arguments as this call has parsed them: {alg, W, L, shape, TTL of a window key, hits,
-- bucket charge token, charged even when its request is denied, and for fc its period's start and end}.
local specs = {}
local function parseSpec(s)
  local alg, w, limit, shape, hits, charged = string.match(s, '^(%a+):(%d+):(%d+):(%-?%d+):(%d+)(:?d?)$')
  w, limit, shape = tonumber(w), tonumber(limit), tonumber(shape)
  local life = w
  if alg == 'sw' or alg == 'ss' then life = w + w / shape end
  local sp = {alg, w, limit, shape, life, tonumber(hits), fmt(w) .. ':' .. fmt(limit), charged == ':d'}
  if alg == 'fc' then
    -- Every counter of this spec is in the same period at this instant: derived once per call.
    local start, finish = calendarPeriod(w, shape)
    sp[5] = finish - now + ${CALENDAR_KEY_MARGIN_MS}
    sp[9] = start
    sp[10] = finish
  end
  specs[s] = sp
  return sp
end
-- String counters as this call sees them (read once, then kept current here); what the call adds
-- to each, and the TTL it gets if the call creates it, written once at the end in first-charge order.
local val, added, ttl, written = {}, {}, {}, {}
local function addCharge(key, hits, life)
  local sum = added[key]
  if sum == nil then
    written[#written + 1] = key
    added[key] = hits
    ttl[key] = life
  else
    added[key] = sum + hits
    if life > ttl[key] then ttl[key] = life end
  end
end
-- Per base key of a fixed window: its current window number n (the charge token) and key, derived
-- once per call (for the window W they were derived with: a counter key names its window, but a
-- caller's base need not), and the end and length of that window (a calendar period's are its own).
local fwWinOf, fwKeyOf, fwWOf, fwEndOf, fwLenOf = {}, {}, {}, {}, {}
-- Sorted sets this call appended to: longest window, trimmed and expired once at the end.
local logs, logKeys = {}, {}
-- Buckets as this call sees them ({tatMs, tatRem}), and the ones it charged, written once at the end.
local bkt, bktKeys, bktWritten = {}, {}, {}
local function bcharge(st, h, w, limit)
  if limit == 0 then return st end
  local after = (st[1] - now) * limit + st[2]
  if after < 0 then after = 0 end
  after = after + h * w
  if after > limit * AHEAD then return {now + AHEAD, 0} end
  return {now + math.floor(after / limit), after % limit}
end
-- Hits a request has charged so far, by key: a later counter of the same request on the same key
-- sees them. pendAt[key] names the request (its first counter's index); stale entries are ignored.
-- (A sliding window of one sub-window adds its hits to val at once instead, and takes them back.)
local pendAt, pendHits = {}, {}
-- Per counter of the batch: its spec, hits, the key it charges, its charge token.
local specAt, hitsAt, chargeKey, chargeTok = {}, {}, {}, {}
-- A sliding window of one sub-window ('sw', k = 1), the common counter, decided from one table per
-- (base key, spec) built once per call: {spec string, key of window n, key of window n - 1, n (the
-- charge token), hits, W, L, time to window n's end, TTL, charged when denied}. swOf[base] is the
-- last one built for the base; swAt[i] is counter i's (nil for every other kind of counter).
local swOf, swAt = {}, {}
local function swSlot(base, specArg, sp)
  local w = sp[2]
  local nw = (now - now % w) / w
  local win = fmt(nw)
  local key, prevKey = base .. ':' .. win, base .. ':' .. fmt(nw - 1)
  if val[key] == nil or val[prevKey] == nil then
    local got = redis.call('MGET', key, prevKey)
    if val[key] == nil then val[key] = tonumber(got[1]) or 0 end
    if val[prevKey] == nil then val[prevKey] = tonumber(got[2]) or 0 end
  end
  local c = {specArg, key, prevKey, win, sp[6], w, sp[3], w - now % w, sp[5], sp[8]}
  swOf[base] = c
  return c
end

local out = {}
local resetStr = {}
local a = 1
local k = 0
local nargs = #ARGV
while a <= nargs do
  local countDenied = ARGV[a] == '1'
  local n = tonumber(ARGV[a + 1])
  a = a + 2
  local nextCall = a + n
  local first, last = k + 1, k + n
  local allAllowed = true
  -- Why this request failed on its own (FAILED_* codes), nil while it has not.
  local failed = nil

  for i = first, last do
    local specArg = ARGV[a]
    a = a + 1
    local base = KEYS[i]
    local c = swOf[base]
    if c == nil or c[1] ~= specArg then
      c = nil
      local sp = specs[specArg] or parseSpec(specArg)
      if sp[1] == 'sw' and sp[4] == 1 then c = swSlot(base, specArg, sp) end
    end
    local o = (i - 1) * 3
    local reset = 0
    if c ~= nil then
      swAt[i] = c
      local key, hits = c[2], c[5]
      local w, limit, toEnd = c[6], c[7], c[8]
      local p = 0
      if pendAt[key] == first then p = pendHits[key] end
      local cur, prev = val[key] + p, val[c[3]]
      local used = floor((cur * w + prev * toEnd) / w)
      if used + hits <= limit then
        -- Counted at once, for the requests after this one and this one's later counters; taken
        -- back if the request is denied or fails.
        val[key] = val[key] + hits
        out[o + 1] = sfmt('%d', limit - used - hits)
        if cur + hits > 0 then reset = toEnd + w
        elseif prev > 0 then reset = toEnd end
      else
        allAllowed = false
        if countDenied or c[10] then val[key] = val[key] + hits end
        out[o + 1] = '-1'
        if hits > limit then
          reset = w
        else
          local target = limit - hits + 1
          if cur < target then
            reset = toEnd - (ceil((target - cur) * w / prev) - 1)
          else
            reset = toEnd + w - (ceil(target * w / cur) - 1)
          end
        end
      end
    else
      local sp = specs[specArg] or parseSpec(specArg)
      local hits = sp[6]
      specAt[i] = sp
      hitsAt[i] = hits
      local alg, w, limit = sp[1], sp[2], sp[3]
      local allowed, remaining = 0, 0
      local key
      local p = 0

      -- One pass; a failed read breaks out of it, and then out of the request.
      repeat
      if alg == 'fw' or alg == 'fc' then
        key = fwKeyOf[base]
        -- A calendar window's W is nominal: tagged negative, it never passes for an epoch-aligned one.
        local wTag = w
        if alg == 'fc' then wTag = -w end
        if key == nil or fwWOf[base] ~= wTag then
          local win, start, finish
          if alg == 'fw' then
            start = now - now % w
            win, finish = fmt(start / w), start + w
          else
            -- Named by its first ms, a period is told apart from every other of any calendar.
            start, finish = sp[9], sp[10]
            win = fmt(start)
          end
          key = base .. ':' .. win
          if val[key] == nil then
            local v = redis.pcall('GET', key)
            if isErr(v) then failed = 1 break end
            val[key] = tonumber(v) or 0
          end
          fwWinOf[base] = win
          fwKeyOf[base] = key
          fwWOf[base] = wTag
          fwEndOf[base] = finish
          fwLenOf[base] = finish - start
        end
        if pendAt[key] == first then p = pendHits[key] end
        local cur = val[key] + p
        local toEnd = fwEndOf[base] - now
        if cur + hits <= limit then
          allowed = 1
          remaining = limit - cur - hits
          reset = toEnd
        elseif hits > limit then
          reset = fwLenOf[base]
        else
          reset = toEnd
        end
        chargeTok[i] = fwWinOf[base]

      elseif alg == 'sl' then
        key = base
        local from = now - w
        local recs = redis.pcall('ZRANGEBYSCORE', base, '(' .. fmt(from), '+inf', 'WITHSCORES')
        if isErr(recs) then failed = 1 break end
        local count = 0
        local newest = nil
        for j = 1, #recs, 2 do
          count = count + recHits(recs[j])
          local at = tonumber(recs[j + 1])
          if newest == nil or at > newest then newest = at end
        end
        if pendAt[key] == first then p = pendHits[key] end
        if p > 0 then
          count = count + p
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
          local left = count
          reset = w
          for j = 1, #recs, 2 do
            left = left - recHits(recs[j])
            if left + hits <= limit then
              reset = tonumber(recs[j + 1]) + w - now
              break
            end
          end
        end

      elseif alg == 'tb' or alg == 'lb' then
        key = base
        local st = bkt[key]
        if st == nil then
          local v = redis.pcall('GET', key)
          if isErr(v) then failed = 1 break end
          st = {0, 0}
          if v then
            local ms, rem = string.match(v, '^(%d+):(%d+)$')
            if ms == nil then failed = 2 break end
            st = {tonumber(ms), tonumber(rem)}
          end
          bkt[key] = st
        end
        if pendAt[key] == first then p = pendHits[key] end
        if p > 0 then st = bcharge(st, p, w, limit) end
        local burst = sp[4]
        if limit == 0 or hits > burst then
          if hits == 0 then allowed = 1 else reset = w end
        else
          local e = (st[1] - now) * limit + st[2]
          if e < 0 then e = 0 end
          local after = e + hits * w
          local cap = burst * w
          if after <= cap then
            allowed = 1
            remaining = math.floor((cap - after) / w)
            reset = math.ceil(after / limit)
          else
            reset = math.ceil((after - cap) / limit)
          end
        end
        chargeTok[i] = sp[7]

      else
        -- Sliding window over k sub-windows ('ss', or 'sw' with k > 1; src/limiter/algorithms.ts subWindowCounter).
        local k = sp[4]
        local s = w / k
        local subStart = now - (now % s)
        local toEndS = subStart + s - now
        local nsub = subStart / s
        local win = fmt(nsub)
        key = base .. ':' .. win
        chargeTok[i] = win
        local ks, missing = {}, {}
        for j = 0, k do
          local kj = base .. ':' .. fmt(nsub - k + j)
          ks[j] = kj
          if val[kj] == nil then missing[#missing + 1] = kj end
        end
        if #missing > 0 then
          local got = redis.call('MGET', unpack(missing))
          for j = 1, #missing do val[missing[j]] = tonumber(got[j]) or 0 end
        end
        if pendAt[key] == first then p = pendHits[key] end
        local c = {}
        local full = 0
        for j = 0, k do
          c[j] = val[ks[j]]
          if j > 0 then full = full + c[j] end
        end
        c[k] = c[k] + p
        full = full + p
        local used
        if alg == 'ss' then used = full + c[0] else used = math.floor((full * s + c[0] * toEndS) / s) end
        if used + hits <= limit then
          allowed = 1
          remaining = limit - used - hits
          local newest = -1
          if c[k] + hits > 0 then newest = k else
            for j = k - 1, 0, -1 do
              if c[j] > 0 then newest = j break end
            end
          end
          if newest >= 0 then reset = toEndS + newest * s end
        elseif hits > limit then
          reset = k * s
        else
          local target = limit - hits + 1
          reset = toEndS + k * s
          for j = 0, k do
            if j > 0 then full = full - c[j] end
            local oldest = c[j]
            if alg == 'ss' then
              if j > 0 and full + oldest < target then
                reset = toEndS + (j - 1) * s
                break
              end
            elseif full < target then
              local startD = s
              if j == 0 then startD = toEndS end
              local dMax = startD
              if oldest ~= 0 then dMax = math.min(startD, math.ceil((target - full) * s / oldest) - 1) end
              reset = toEndS + j * s - dMax
              break
            end
          end
        end
      end
      until true
      if failed then break end

      chargeKey[i] = key
      if allowed == 1 then out[o + 1] = sfmt('%d', remaining)
      else
        allAllowed = false
        out[o + 1] = '-1'
      end
      if n > 1 and hits > 0 and (allowed == 1 or countDenied or sp[8]) then
        if pendAt[key] == first then pendHits[key] = pendHits[key] + hits
        else
          pendAt[key] = first
          pendHits[key] = hits
        end
      end
    end

    local rs = resetStr[reset]
    if rs == nil then
      -- Lua prints a number of 1e14 or more in exponent form (remaining is at most L < 2^32).
      if reset < 1e14 then rs = tostring(reset) else rs = fmt(reset) end
      resetStr[reset] = rs
    end
    out[o + 2] = rs
  end

  if failed then
    -- Nothing of it is charged; the other requests of the batch go on.
    for i = first, last do
      local o = (i - 1) * 3
      local c = swAt[i]
      -- What the sliding windows decided before the failure counted at once (out[o + 1] is not yet overwritten).
      if c ~= nil and (out[o + 1] ~= '-1' or countDenied or c[10]) then
        val[c[2]] = val[c[2]] - c[5]
      end
      out[o + 1] = -2
      out[o + 2] = failed
      out[o + 3] = ''
    end
  else
    for i = first, last do
      local c = swAt[i]
      out[i * 3] = ''
      if c ~= nil then
        local hits = c[5]
        if allAllowed or countDenied or c[10] then
          if hits > 0 then
            addCharge(c[2], hits, c[9])
            out[i * 3] = c[4]
          end
        elseif out[i * 3 - 2] ~= '-1' then
          -- Counted at once when it was allowed: its request was denied.
          val[c[2]] = val[c[2]] - hits
        end
      else
        local hits = hitsAt[i]
        if hits > 0 and (allAllowed or countDenied or specAt[i][8]) then
          local key = chargeKey[i]
          local sp = specAt[i]
          local alg, w = sp[1], sp[2]
          if alg == 'tb' or alg == 'lb' then
            if bktWritten[key] == nil then
              bktWritten[key] = true
              bktKeys[#bktKeys + 1] = key
            end
            bkt[key] = bcharge(bkt[key], hits, w, sp[3])
            out[i * 3] = chargeTok[i]
          elseif alg == 'sl' then
            -- Written at once: the next request of the batch reads this set again.
            local member = hits .. ':' .. nowUs .. ':' .. i
            local m = member
            local j = 0
            while redis.call('ZADD', key, 'NX', now, m) == 0 do
              j = j + 1
              m = member .. ':' .. j
            end
            local lw = logs[key]
            if lw == nil then
              logKeys[#logKeys + 1] = key
              logs[key] = w
            elseif w > lw then
              logs[key] = w
            end
            out[i * 3] = m
          else
            val[key] = val[key] + hits
            addCharge(key, hits, sp[5])
            out[i * 3] = chargeTok[i]
          end
        end
      end
    end
  end
  a = nextCall
  k = last
end

-- A string counter that cannot take the increment (a key of another type, a value that is not an
-- integer): the requests that charged it fail, each on its own.
local unwritten = nil
for j = 1, #written do
  local key = written[j]
  local sum = added[key]
  local r = redis.pcall('INCRBY', key, sum)
  if isErr(r) then
    unwritten = unwritten or {}
    unwritten[key] = true
  elseif r == sum then
    redis.call('PEXPIRE', key, ttl[key])
  end
end
for j = 1, #bktKeys do
  local key = bktKeys[j]
  local st = bkt[key]
  local life = st[1] - now
  if st[2] > 0 then life = life + 1 end
  if life > 0 then
    redis.call('SET', key, fmt(st[1]) .. ':' .. fmt(st[2]), 'PX', fmt(life))
  else
    redis.call('DEL', key)
  end
end
for j = 1, #logKeys do
  local key = logKeys[j]
  local w = logs[key]
  redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now - w))
  redis.call('PEXPIRE', key, w)
end

if unwritten then
  -- Their other counters stay charged: over-counting, never under-counting.
  local at, last = 1, 0
  while at <= nargs do
    local first = last + 1
    last = last + tonumber(ARGV[at + 1])
    at = at + 2 + (last - first + 1)
    local hit = false
    for i = first, last do
      local key = chargeKey[i]
      if swAt[i] ~= nil then key = swAt[i][2] end
      if out[i * 3] ~= '' and unwritten[key] then hit = true end
    end
    if hit then
      for i = first, last do
        local o = (i - 1) * 3
        out[o + 1] = -2
        out[o + 2] = 3
        out[o + 3] = ''
      end
    end
  end
end

return table.concat(out, ',')
`;

/**
 * REFUND: take back exactly what DECIDE added for one request (used when a multi-slot cluster
 * request was denied in another slot, or failed there).
 *
 * KEYS[i]  base key of counter i, as in DECIDE
 * ARGV[1 + 3(i-1)]  algorithm of counter i: 'sw' | 'fw' | 'sl' | 'tb' | 'lb' ('ss' is refunded as 'sw')
 * ARGV[2 + 3(i-1)]  hits that DECIDE added
 * ARGV[3 + 3(i-1)]  DECIDE's charge token for counter i ('' = nothing to refund)
 *
 * sw/fw decrement `<base>:<token>` only while the key exists (an expired window is not recreated,
 * and the TTL is kept); a counter brought to zero is deleted. sl removes the member. tb/lb move the
 * TAT back by h x W / L (token `<W>:<L>`), at Redis time; a bucket that has drained by then is deleted.
 * Reply: the number of counters refunded.
 */
export const REFUND_SCRIPT = `
if redis.replicate_commands then redis.replicate_commands() end
local now = nil
local done = 0
for i = 1, #KEYS do
  local o = (i - 1) * 3
  local alg = ARGV[o + 1]
  local hits = tonumber(ARGV[o + 2])
  local token = ARGV[o + 3]
  if token ~= '' then
    if alg == 'sl' then
      done = done + redis.call('ZREM', KEYS[i], token)
    elseif alg == 'tb' or alg == 'lb' then
      local v = redis.call('GET', KEYS[i])
      if v then
        if now == nil then
          local t = redis.call('TIME')
          now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        end
        local w, limit = string.match(token, '^(%d+):(%d+)$')
        w, limit = tonumber(w), tonumber(limit)
        local ms, rem = string.match(v, '^(%d+):(%d+)$')
        local e = (tonumber(ms) - now) * limit + tonumber(rem) - hits * w
        if e <= 0 then
          redis.call('DEL', KEYS[i])
        else
          local tat, frac = now + math.floor(e / limit), e % limit
          local life = tat - now
          if frac > 0 then life = life + 1 end
          redis.call('SET', KEYS[i], string.format('%.0f', tat) .. ':' .. string.format('%.0f', frac), 'PX', string.format('%.0f', life))
        end
        done = done + 1
      end
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

/**
 * The opening of a script that decides counters beside a structure of its own (RESERVE, SETTLE):
 * `decide`, DECIDE_SCRIPT as a local function; `decided(keys, flag, specs, hits, what)`, DECIDE on
 * `keys` with the counter specs `specs` (each one's hits field set to `hits` unless it is nil),
 * charged whatever the outcome when `flag` is '1', returning {remaining, resetMs} per counter in one
 * flat list (remaining -1 when denied), or an error reply naming `what` when a counter could not be
 * read or written; and `now`, Redis's time in ms (the script then replicates its effects).
 */
export const DECIDE_BESIDE = `
local function decide(KEYS, ARGV)
${DECIDE_SCRIPT}
end

local function decided(keys, flag, specs, hits, what)
  local argv = {flag, tostring(#keys)}
  for i = 1, #keys do
    local spec = specs[i]
    if hits ~= nil then
      local head, tail = string.match(spec, '^(%a+:%d+:%d+:%-?%d+:)%d+(.*)$')
      spec = head .. string.format('%d', hits) .. tail
    end
    argv[2 + i] = spec
  end
  local out = {}
  if #keys == 0 then return out end
  local reply = decide(keys, argv)
  local j = 0
  for f in string.gmatch(reply .. ',', '([^,]*),') do
    j = j + 1
    local m = j % 3
    if m == 1 then
      local r = tonumber(f)
      if r == -2 then return redis.error_reply('a counter of this ' .. what .. ' could not be read or written') end
      out[#out + 1] = r
    elseif m == 2 then
      out[#out + 1] = tonumber(f)
    end
  end
  return out
end

if redis.replicate_commands then redis.replicate_commands() end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
`;
