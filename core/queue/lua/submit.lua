--[[ submit: create a request, optionally with its first tasks, optionally sealed.

Idempotent on the request id: if the request exists, nothing changes and its current state
is returned (a producer may retry a submit whose reply it lost).

KEYS[1..8] queue-level keys (see _common.lua)
KEYS[9]    <p>:{Q}:req:<rid>         request hash
KEYS[10]   <p>:{Q}:req:<rid>:tasks   task stream (group "g" created here)
Derived:   tr:<prio>:<tenant>, state:open|active|done, done:<rid> (see _common.lua)

ARGV[1]  rid          ARGV[2]  now (ms)      ARGV[3]  priority (0-99)
ARGV[4]  concurrency  ARGV[5]  tenant        ARGV[6]  handler
ARGV[7]  max_attempts ARGV[8]  lease_ms      ARGV[9]  retention_ms
ARGV[10] backoff_ms   ARGV[11] backoff_max_ms
ARGV[12] seal (1 = no more tasks will be added, 0 = open for add)
ARGV[13..] task payloads (JSON text)

Returns {created (1|0), state, total}
--]]
--@include common

local rid, now = ARGV[1], now_ms(ARGV[2])
local rk, sk = KEYS[9], KEYS[10]

if redis.call('EXISTS', rk) == 1 then
  local cur = redis.call('HMGET', rk, 'state', 'total')
  return {0, cur[1], tonumber(cur[2])}
end

local n = #ARGV - 12
redis.call('XGROUP', 'CREATE', sk, GROUP, '0', 'MKSTREAM')
for i = 13, #ARGV do
  redis.call('XADD', sk, '*', 'p', ARGV[i])
end
redis.call('HSET', rk,
  'state', 'open', 'priority', ARGV[3], 'concurrency', ARGV[4], 'tenant', ARGV[5],
  'handler', ARGV[6], 'max_attempts', ARGV[7], 'lease_ms', ARGV[8], 'retention_ms', ARGV[9],
  'backoff_ms', ARGV[10], 'backoff_max_ms', ARGV[11],
  'total', n, 'waiting', n, 'retry', 0, 'leased', 0, 'delayed', 0, 'done', 0, 'dead', 0,
  'cancelled', 0, 'created_ms', now, 'updated_ms', now)
redis.call('ZADD', state_key('open'), now, rid)

local h = load_req(rid)
bump_waiting_stat(h, n)
redis.call('HINCRBY', K_STATS, 'submitted', n)
event('submitted', rid, 'tasks', n, 'priority', ARGV[3], 'tenant', ARGV[5])
if ARGV[12] == '1' then
  set_state(h, 'active', now)
  maybe_complete(h, now)
end
sync_ready(h)
return {1, h.state, n}
