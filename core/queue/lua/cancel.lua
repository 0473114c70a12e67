--[[ cancel: a request delivers no more tasks. Waiting and delayed tasks are dropped and
counted as cancelled; leased ones keep running until their workers see the cancellation
(extend answers 2) and release, ack or fail them (a lease an operator revoked: until its run
is over, see revoke() in _revoke.lua). The request completes as "cancelled" when
none is leased any more: at once if none is. Cancelling a finished request changes nothing.
A held follow-up (submit_after.lua) is cancelled as an active request is: it had run nothing;
so is a scheduled (delayed) request, which leaves the scheduled indexes: nothing of it runs.

KEYS[1..8] queue-level keys (see _base.lua)
KEYS[9]    <p>:{Q}:req:<rid>         request hash
KEYS[10]   <p>:{Q}:req:<rid>:tasks   task stream
Derived:   req:<rid>:rel|dead, tr:<prio>:<handler>:<tenant>, state:<state>, done:<rid>, delayed:<prio>, dprio,
           scheduled, scheduled:<prio>, sprio

ARGV[1] rid   ARGV[2] now (ms)

Returns {state, dropped, running, changed}: changed 0 when the request was not open, active,
held or scheduled
(cancelled already, or finished), 1 when this call cancelled it
Errors: -2 no such request
--]]
--@include base requests readiness index tasks completion scheduled

local rid, now = ARGV[1], now_ms(ARGV[2])
local sk = KEYS[10]
local h = load_req(rid)
if not h then return -2 end
if h.state ~= 'open' and h.state ~= 'active' and h.state ~= 'held' and h.state ~= 'scheduled' then
  return {h.state, 0, h.leased, 0}
end
if h.state == 'scheduled' then unschedule_req(h) end

-- Entries never delivered: move the group's cursor past them.
redis.call('XGROUP', 'SETID', sk, GROUP, '$')
-- Parked entries, waiting or in backoff: out of the PEL and the stream.
for _, who in ipairs({'~waiting', '~delayed'}) do
  while true do
    local p = redis.call('XPENDING', sk, GROUP, '-', '+', 500, who)
    if #p == 0 then break end
    local ids = {}
    for i, e in ipairs(p) do
      ids[i] = e[1]
      if who == '~delayed' then undelay_task(h, rid, e[1]) end
    end
    redis.call('XACK', sk, GROUP, unpack(ids))
    redis.call('XDEL', sk, unpack(ids))
  end
end
local dropped = h.waiting + h.delayed
-- Held or scheduled: never counted there.
if h.state ~= 'held' and h.state ~= 'scheduled' then bump_waiting_stat(h, -h.waiting) end
add(h, 'waiting', -h.waiting)
add(h, 'retry', -h.retry)
add(h, 'delayed', -h.delayed)
add(h, 'cancelled', dropped)
set_state(h, 'cancelling', now)
event('cancelled', rid, 'dropped', dropped, 'running', h.leased)
sync_ready(h)
maybe_complete(h, now)
return {h.state, dropped, h.leased, 1}
