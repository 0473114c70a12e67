--[[ run_now: a scheduled (delayed) request is due now, whatever its due time said: its tasks
become eligible at once under the usual priorities and rotation (an operator's "run now").
A request that is not scheduled (due already, cancelled, finished) is left as it is.

KEYS[1..8] queue-level keys (see _base.lua)
KEYS[9]    <p>:{Q}:req:<rid>   request hash
Derived:   scheduled, scheduled:<prio>, sprio, tr:<prio>:<handler>:<tenant>, state:<state>, done:<rid>,
           idle, handoff:<consumer>, delayed:<prio>, dprio (see _base.lua)

ARGV[1] rid   ARGV[2] now (ms)

Returns {state, changed}: changed 1 when this call made the request due, 0 when it was not
scheduled (state says what it is)
Errors: -2 no such request
--]]
--@include base requests scheduled leasing

local rid, now = ARGV[1], now_ms(ARGV[2])
local h = load_req(rid)
if not h then return -2 end
if h.state ~= 'scheduled' then return {h.state, 0} end
unschedule_req(h)
make_due(h, now, 'operator')
dispatch_idle()
return {h.state, 1}
