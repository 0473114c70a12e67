--[[ control: an operator asks a running worker to go quiet (take no new task, finish the
running ones), to stop (quiet, then exit once they are done or its grace time has passed),
or to resume taking work after a quiet. The request is the field `control` of the worker's
registry entry; the worker reads it at every heartbeat and acts on it (core/worker).

A stop cannot be undone: a resume or quiet of a stopping worker changes nothing. The
worker's own exit after a stop leaves its entry as {control = "stop"} out of the registry for
an hour (Consumer.unregister(stopped=True)), so that its supervisor can tell that it was
asked to stop and must not start it again.

KEYS[1..8] queue-level keys (see _base.lua)
KEYS[9]    <p>:{Q}:workers          zset worker -> last beat (ms)
KEYS[10]   <p>:{Q}:worker:<name>    hash its registry entry (info JSON, control)

ARGV[1] now (ms)   ARGV[2] worker   ARGV[3] "quiet", "stop" or "resume"   ARGV[4] who asks

Returns {changed (1 or 0), the worker's control afterwards: "quiet", "stop" or ""}.
Errors: -8 no such worker (not in the registry, or its entry expired)
--]]
--@include base

local now, worker, command = now_ms(ARGV[1]), ARGV[2], ARGV[3]
if not redis.call('ZSCORE', KEYS[9], worker) or redis.call('EXISTS', KEYS[10]) == 0 then
  return -8
end
local current = redis.call('HGET', KEYS[10], 'control') or ''
local wanted = command
if command == 'resume' then wanted = '' end
if current == wanted or current == 'stop' then return {0, current} end
if wanted == '' then
  redis.call('HDEL', KEYS[10], 'control', 'control_by', 'control_ms')
else
  redis.call('HSET', KEYS[10], 'control', wanted, 'control_by', ARGV[4], 'control_ms', text(now))
end
return {1, wanted}
