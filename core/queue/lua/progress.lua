--[[ progress: a running task reports how far it is and what it logs (ctx.progress, ctx.log).
Only the holder of a live lease writes: a run whose lease was reaped, claimed, released or
acked is refused, so a stale run never overwrites what the task's new run reports.

KEYS[1..8] queue-level keys (see _base.lua)
Derived:   req:<rid> (field "prog": the progress keys exist), req:<rid>:progress,
           req:<rid>:progress:at

ARGV[1] now (ms)   ARGV[2] lease   ARGV[3] worker name
ARGV[4] done ("" = no progress in this write)   ARGV[5] total ("" = unknown)
ARGV[6] message    ARGV[7] log lines, JSON [[age_ms, line], ...] oldest first ("" = none);
                   each line's time is now - age_ms (the server's clock, not the worker's)

Bounded: at most PROGRESS_TASKS tasks per request (the least recently written task's entry
and log are dropped for a new one), LOG_LINES lines per task (the oldest go). The caller
caps the message and line lengths; over MAX_TEXT bytes is refused.

Returns 1 written, -1 lease not held (the write is dropped)
Errors: -9 invalid input (numbers, or text over MAX_TEXT bytes)
--]]
--@include base tasks

local PROGRESS_TASKS = 64
local LOG_LINES = 20
local MAX_TEXT = 4096

local now, lease = now_ms(ARGV[1]), ARGV[2]
local rid, tid = split_lease(lease)
if not rid or not redis.call('ZSCORE', K_LEASES, lease) then return -1 end
local done, total, msg, lines = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local function number(s)
  return s == '' or string.match(s, '^%d+$') ~= nil or string.match(s, '^%d+%.%d+$') ~= nil
end
if not (number(done) and number(total)) or #msg > MAX_TEXT or #ARGV[3] > 256 then
  return -9
end
local pk, ak = progress_key(rid), progress_at_key(rid)
if redis.call('ZADD', ak, now, tid) == 1 then  -- the task's first write
  if redis.call('ZCARD', ak) == 1 then
    redis.call('HSET', req_key(rid), 'prog', '1')  -- its completion expires the keys
  else
    local over = redis.call('ZCARD', ak) - PROGRESS_TASKS
    if over > 0 then
      for _, old in ipairs(redis.call('ZRANGE', ak, 0, over - 1)) do
        redis.call('HDEL', pk, old, old .. ':log')
      end
      redis.call('ZREMRANGEBYRANK', ak, 0, over - 1)
    end
  end
end
if done ~= '' then
  if total == '' then total = 'null' end
  redis.call('HSET', pk, tid, '{"done":' .. done .. ',"total":' .. total .. ',"msg":' ..
    cjson.encode(msg) .. ',"worker":' .. cjson.encode(ARGV[3]) .. ',"ts":' .. text(now) .. '}')
end
if lines ~= '' then
  local ok, new = pcall(cjson.decode, lines)
  if not ok or type(new) ~= 'table' then return -9 end
  local lk = tid .. ':log'
  local kept = redis.call('HGET', pk, lk)
  local log = kept and cjson.decode(kept) or {}
  for _, e in ipairs(new) do
    local age, line = tonumber(e[1]), e[2]
    if not age or type(line) ~= 'string' or #line > MAX_TEXT then return -9 end
    log[#log + 1] = {now - math.max(0, math.floor(age)), line}
  end
  if #log > LOG_LINES then
    local keep = {}
    for i = #log - LOG_LINES + 1, #log do keep[#keep + 1] = log[i] end
    log = keep
  end
  if #log > 0 then redis.call('HSET', pk, lk, cjson.encode(log)) end
end
return 1
