--[[ resume: a paused queue hands out work again: idle workers are handed tasks and the
others woken, as after a submit (dispatch_idle()).

KEYS[1..8] queue-level keys (see _base.lua)
KEYS[9]    <p>:{Q}:paused   string (see pause.lua)
Derived:   idle, handoff:<consumer>, tr:<prio>:<handler>:<tenant>, req:<rid>, req:<rid>:tasks|rel,
           delayed:<prio>, dprio (dispatch_idle(), see _leasing.lua)

ARGV[1] now (ms)   ARGV[2] who resumed it (text for the event)

Returns 1 if the queue was paused and now runs, 0 if it was running already.
--]]
--@include base readiness leasing

now_ms(ARGV[1])
if redis.call('DEL', KEYS[9]) == 0 then return 0 end
event('resumed', '', 'by', ARGV[2])
-- Whatever waits was eligible all along: offer it as if it had just become so.
DISPATCH = true
dispatch_idle()
return 1
