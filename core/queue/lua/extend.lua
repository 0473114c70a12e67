--[[ extend: the worker's heartbeat. Records that the worker lives and renews the leases it
still holds.

KEYS[1..8] queue-level keys (see _base.lua)
Derived:   req:<rid>, workers (zset name -> last beat ms), worker:<name> (hash), hw

ARGV[1] now (ms)   ARGV[2] lease_ms (0 = each request's own lease time)
ARGV[3] worker name ("" = renew leases only)   ARGV[4] registry entry ttl (ms)
ARGV[5] worker info (JSON text)                ARGV[6..] leases

A lease past its expiry that nothing has reaped, claimed or acked yet is renewed too.
A worker's beat also renews the handlers it announced (the "handlers" field of its hash,
written by handlers.announce()) in `hw`, for one lease length (ARGV[2], else 10 s): an
announcement ends with its worker's heartbeat.

Returns one integer per lease: 1 renewed, 2 renewed but its request is being cancelled
(the worker should stop the task and release it), -1 not held (reaped, claimed, released or
finished: the worker must not ack it).
--]]
--@include base tasks

local now, override, worker = now_ms(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
if worker ~= '' then
  local wk = PREFIX .. 'worker:' .. worker
  redis.call('ZADD', PREFIX .. 'workers', now, worker)
  redis.call('HSET', wk, 'info', ARGV[5], 'beat_ms', now, 'leases', #ARGV - 5)
  redis.call('PEXPIRE', wk, ARGV[4])
  local runs = redis.call('HGET', wk, 'handlers')
  if runs then
    local live, args = now + (override > 0 and override or 10000), {}
    for name in string.gmatch(runs, '%S+') do
      args[#args + 1] = live
      args[#args + 1] = name .. '|' .. worker
    end
    if #args > 0 then redis.call('ZADD', PREFIX .. 'hw', unpack(args)) end
  end
end
local out = {}
for i = 6, #ARGV do
  local lease = ARGV[i]
  local rid = split_lease(lease)
  local score = redis.call('ZSCORE', K_LEASES, lease)
  -- Still in `leases` means nothing reaped, claimed, released or acked it: renew it even if
  -- it expired (Redis was away or this worker was paused longer than its lease), rather than
  -- let the reaper hand a task that is still running to another worker.
  if not rid or not score then
    out[#out + 1] = -1
  else
    local r = redis.call('HMGET', req_key(rid), 'state', 'lease_ms')
    local ms = override
    if ms <= 0 then ms = tonumber(r[2]) end
    redis.call('ZADD', K_LEASES, 'XX', now + ms, lease)
    if r[1] == 'cancelling' then out[#out + 1] = 2 else out[#out + 1] = 1 end
  end
end
return out
