--[[ claim: an operator moves a leased task to another consumer, or releases it back to
waiting (consumer ""). Only a task that is still leased can be claimed: the state is checked
here, not by the caller. The old lease stops being valid, so its holder's ack is refused.
Neither move counts as an attempt. An operator's page passes what it showed (the holder and
how long the entry had been idle), so a stale page or a double click is refused instead of
moving a task that changed hands meanwhile (a new delivery resets the idle time).

KEYS[1..8] queue-level keys (see _common.lua)
KEYS[9]    <p>:{Q}:req:<rid>         request hash
KEYS[10]   <p>:{Q}:req:<rid>:tasks   task stream
Derived:   req:<rid>:rel, tr:<prio>:<tenant>, state:<state>, done:<rid>, delayed:<prio>, dprio

ARGV[1] rid   ARGV[2] now (ms)   ARGV[3] task id   ARGV[4] consumer ("" = release)
ARGV[5] expected holder ("" or absent = any)   ARGV[6] least idle time (ms; absent = 0)

Returns {1, lease, attempt, payload, handler, lease_ms, previous holder} for a claim,
        {1, "", 0, "", "", 0, previous holder} for a release
Errors: -2 no such request, -5 task is not leased, -7 held by another consumer than
        expected, or idle less than ARGV[6] (delivered again since)
--]]
--@include common

local rid, now, tid, consumer = ARGV[1], now_ms(ARGV[2]), ARGV[3], ARGV[4]
local sk = KEYS[10]
local h = load_req(rid)
if not h then return -2 end
if redis.call('EXISTS', sk) == 0 then return -5 end  -- finished: its stream is gone
local p = redis.call('XPENDING', sk, GROUP, 'IDLE', tonumber(ARGV[6]) or 0, tid, tid, 1)
if #p == 0 then
  if #redis.call('XPENDING', sk, GROUP, tid, tid, 1) == 0 then return -5 end
  return -7  -- pending, but delivered again more recently than the caller saw
end
local holder, deliveries = p[1][2], tonumber(p[1][4])
if string.sub(holder, 1, 1) == '~' then return -5 end
local expect = ARGV[5] or ''
if expect ~= '' and holder ~= expect then return -7 end
local old = rid .. '/' .. tid .. '/' .. deliveries
if redis.call('ZREM', K_LEASES, old) == 0 then return -5 end
write_rel(h, 'HINCRBY', tid, 1)
if consumer == '' then
  add(h, 'leased', -1)
  if h.state == 'cancelling' then
    retire(rid, tid)
    add(h, 'cancelled', 1)
  else
    to_waiting(h, tid)
  end
  event('released', rid, 'task', tid, 'worker', holder)
  sync_ready(h)
  maybe_complete(h, now)
  dispatch_idle()
  return {1, '', 0, '', '', 0, holder}
end
local c = redis.call('XCLAIM', sk, GROUP, consumer, 0, tid)
local lease = rid .. '/' .. tid .. '/' .. (deliveries + 1)
redis.call('ZADD', K_LEASES, now + h.lease_ms, lease)
event('claimed', rid, 'task', tid, 'worker', consumer, 'from', holder)
return {1, lease, attempts_of(rid, tid, deliveries + 1), c[1][2][2], h.handler, h.lease_ms, holder}
