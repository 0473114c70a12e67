--[[ submit: create a request, optionally with its first tasks, optionally sealed, optionally
delayed: with a due time still to come it is "scheduled" (see _base.lua) until then.

Idempotent on the request id: if the request exists, nothing changes and its current state
is returned (a producer may retry a submit whose reply it lost).

KEYS[1..8] queue-level keys (see _base.lua)
KEYS[9]    <p>:{Q}:req:<rid>         request hash
KEYS[10]   <p>:{Q}:req:<rid>:tasks   task stream (group "g" created here)
Derived:   tr:<prio>:<tenant>, state:open|active|scheduled|done, done:<rid>, delayed:<prio>,
           dprio, scheduled, scheduled:<prio>, sprio (see _base.lua)

ARGV[1]  rid          ARGV[2]  now (ms)      ARGV[3]  priority (0-99)
ARGV[4]  concurrency  ARGV[5]  tenant        ARGV[6]  handler
ARGV[7]  max_attempts ARGV[8]  lease_ms      ARGV[9]  retention_ms
ARGV[10] backoff_ms   ARGV[11] backoff_max_ms
ARGV[12] 0 = open for add; 1 = sealed now; for a submit too large for one call, whose client
         appends the rest with add: 2 = then seals it, 3 = leaves it open. 2 and 3 are kept in
         the hash (field "resume") until sealing, so a retry can finish what a crash stopped.
ARGV[13] due time: "" = now; "+<ms>" = that long after now; "<ms>" = at that time (ms since
         the epoch). A due time not after now is now: the request is not scheduled.
ARGV[14..] task payloads (JSON text)

Its "submitted" event carries the first tasks' ids and payload text (append_tasks()).
submit_flow.lua creates a request the same way (this hot path calls no shared helper for
it): keep the two in step; tests/engine/test_engine_flow.py compares what they store.

Returns {created (1|0), state, total, resume (0, or 2|3 for an unfinished large submit), due
(ms; 0 when not scheduled)}
--]]
--@include common

local rid, now = ARGV[1], now_ms(ARGV[2])
local rk, sk = KEYS[9], KEYS[10]

if redis.call('EXISTS', rk) == 1 then
  local cur = redis.call('HMGET', rk, 'state', 'total', 'resume', 'due_state', 'due_ms')
  local resume = 0
  if (cur[1] == 'open' or (cur[1] == 'scheduled' and cur[4] == 'open')) and cur[3] then resume = tonumber(cur[3]) end
  local due = 0
  if cur[1] == 'scheduled' then due = tonumber(cur[5]) end
  return {0, cur[1], tonumber(cur[2]), resume, due}
end

local due = due_of(ARGV[13], now)

local n = #ARGV - 13
redis.call('XGROUP', 'CREATE', sk, GROUP, '0', 'MKSTREAM')
local ids, txt = append_tasks(sk, ARGV, 14, 0)
-- Sealed at once unless tasks are still to come (mode 0, 2, 3): one state, one index entry.
local state = ARGV[12] == '1' and 'active' or 'open'
local extra = {}
if ARGV[12] == '2' or ARGV[12] == '3' then
  extra = {'resume', ARGV[12]}
end
if due then
  extra[#extra + 1] = 'due_state'
  extra[#extra + 1] = state
  extra[#extra + 1] = 'due_ms'
  extra[#extra + 1] = text(due)
  state = 'scheduled'
end
local h = create_req(ARGV, rk, rid, state, 3, n, now, extra)
stat('submitted', n)
if due then
  -- Not counted in w:<prio> (work that can run) until due, as a held follow-up.
  tasks_event('submitted', rid, ids, txt, 'tasks', text(n), 'priority', ARGV[3],
              'tenant', ARGV[5], 'due', text(due))
  schedule_req(h, due)
  return {1, state, n, 0, due}
end
bump_waiting_stat(h, n)
tasks_event('submitted', rid, ids, txt, 'tasks', text(n), 'priority', ARGV[3], 'tenant', ARGV[5])
if n == 0 then maybe_complete(h, now) end
sync_ready(h)
dispatch_idle()
return {1, h.state, n, 0, 0}
