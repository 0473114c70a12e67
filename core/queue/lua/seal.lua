--[[ seal: declare that an open request gets no more tasks; it completes when they are done.

A scheduled request that is not sealed yet is sealed for when it is due: it stays scheduled,
and becomes active, not open, then.

Sealing twice is harmless: a sealed request's state is returned unchanged.

KEYS[1..8] queue-level keys (see _base.lua)
KEYS[9]    <p>:{Q}:req:<rid>   request hash
Derived:   state:<state>, tr:<prio>:<handler>:<tenant>, req:<rid>:tasks|rel|dead, done:<rid>

ARGV[1] rid   ARGV[2] now (ms)

Returns the request's state after sealing (active, or done/failed if nothing is left).
Errors: -2 no such request
--]]
--@include base requests readiness completion

local rid, now = ARGV[1], now_ms(ARGV[2])
local h = load_req(rid)
if not h then return -2 end
if h.state == 'open' then
  set_state(h, 'active', now)
  redis.call('HDEL', KEYS[9], 'resume')
  event('sealed', rid, 'tasks', h.total)
  maybe_complete(h, now)
elseif h.state == 'scheduled' and redis.call('HGET', KEYS[9], 'due_state') == 'open' then
  redis.call('HSET', KEYS[9], 'due_state', 'active')
  redis.call('HDEL', KEYS[9], 'resume')
  event('sealed', rid, 'tasks', h.total)
end
return h.state
