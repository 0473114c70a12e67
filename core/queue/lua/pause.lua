--[[ pause: workers lease nothing from the queue until it is resumed. A dequeue leases
nothing (it still acks, and still delivers what was handed to its consumer before the
pause), no idle worker is handed a task and no wake-up token is pushed (the helpers check
the key in take_ready(), dispatch_idle() and wake()). Tasks already leased run on and are
acked, failed, renewed and reaped as usual; producers may still submit.

KEYS[1..8] queue-level keys (see _base.lua)
KEYS[9]    <p>:{Q}:paused   string: when the queue was paused (ms); absent = running

ARGV[1] now (ms)   ARGV[2] who paused it (text for the event)

Returns 1 if the queue was running and is now paused, 0 if it was paused already.
--]]
--@include base readiness

local now = now_ms(ARGV[1])
if not redis.call('SET', KEYS[9], text(now), 'NX') then return 0 end
event('paused', '', 'by', ARGV[2])
return 1
