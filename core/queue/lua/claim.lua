--[[ claim: an operator takes a leased task from its holder, for another consumer or back to
waiting (consumer ""). Only a task that is still leased can be taken: the state is checked
here, not by the caller. Neither move counts as an attempt. An operator's page passes what it
showed (the holder and how long the entry had been idle), so a stale page or a double click
is refused instead of moving a task that changed hands meanwhile (a new delivery resets the
idle time).

The holder's lease stops being valid at once: its renewal, ack and fail are refused, and it
stops the run at its next check. While its lease has not expired the run may still be going
on, so the lease is revoked (revoke() in _revoke.lua): the task stays leased to the holder,
counted against the request's concurrency, until the holder says its run stopped or the
lease runs out; then it moves on (end_revoked()). A lease already past its expiry (a holder
that stopped renewing) moves on now. Moving on: back to waiting, or leased to the consumer
and pushed to its handoff list, where a worker of that name takes it; dropped as cancelled
if the request is being cancelled.

KEYS[1..8] queue-level keys (see _base.lua)
KEYS[9]    <p>:{Q}:req:<rid>         request hash
KEYS[10]   <p>:{Q}:req:<rid>:tasks   task stream
Derived:   req:<rid>:rel, revoked, claimto, handoff:<consumer>, worker:<consumer>,
           tr:<prio>:<handler>:<tenant>, state:<state>, done:<rid>, delayed:<prio>, dprio, idle

ARGV[1] rid   ARGV[2] now (ms)   ARGV[3] task id   ARGV[4] consumer ("" = release)
ARGV[5] expected holder ("" or absent = any)   ARGV[6] least idle time (ms; absent = 0)

Returns {1, previous holder, until}: until = the revoked lease's expiry (ms), when the task
        moves on at the latest, or 0 when it moved on now
Errors: -2 no such request, -5 task is not leased (or was released or claimed already and
        its holder has not stopped yet), -7 held by another consumer than expected, or idle
        less than ARGV[6] (delivered again since), -11 the consumer is a worker that announced
        the handlers it runs (handlers.py) and the request's handler is not among them
--]]
--@include base requests readiness leasing revoke

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
if consumer ~= '' then  -- a worker leases only what it runs: so is it given
  local runs = redis.call('HGET', PREFIX .. 'worker:' .. consumer, 'handlers')
  if runs and not runs_set(runs)[h.handler] then return -11 end
end
local old = rid .. '/' .. tid .. '/' .. deliveries
local expiry = redis.call('ZSCORE', K_LEASES, old)
if not expiry then return -5 end
write_rel(h, 'HINCRBY', tid, 1)
local kind, who = 'released', holder
if consumer ~= '' then kind, who = 'claimed', consumer end
if tonumber(expiry) >= now then
  revoke(old, expiry, consumer)
  event(kind, rid, 'task', tid, 'worker', who, 'from', holder, 'until', expiry)
  return {1, holder, expiry}
end
redis.call('ZREM', K_LEASES, old)
move_on(h, tid, deliveries, consumer, now)
event(kind, rid, 'task', tid, 'worker', who, 'from', holder)
dispatch_idle()
return {1, holder, 0}
