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

local due = nil
if ARGV[13] ~= '' then
  if string.sub(ARGV[13], 1, 1) == '+' then
    due = now + tonumber(string.sub(ARGV[13], 2))
  else
    due = tonumber(ARGV[13])
  end
  if due <= now then due = nil end
end

local n = #ARGV - 13
redis.call('XGROUP', 'CREATE', sk, GROUP, '0', 'MKSTREAM')
local ids, txt = append_tasks(sk, ARGV, 14, 0)
-- Sealed at once unless tasks are still to come (mode 0, 2, 3): one state, one index entry.
local state = ARGV[12] == '1' and 'active' or 'open'
-- The counters that start at 0 (retry, leased, delayed, done, dead, cancelled) are not
-- written: every reader takes a missing counter as 0.
-- In the order load_req() reads them: a small hash is searched from its start, field by field.
local fields = {'state', state, 'tenant', ARGV[5], 'handler', ARGV[6], 'priority', ARGV[3],
  'concurrency', ARGV[4], 'waiting', text(n), 'lease_ms', ARGV[8], 'retention_ms', ARGV[9],
  'total', text(n), 'max_attempts', ARGV[7], 'backoff_ms', ARGV[10], 'backoff_max_ms', ARGV[11],
  'created_ms', text(now), 'updated_ms', text(now)}
if ARGV[12] == '2' or ARGV[12] == '3' then
  fields[#fields + 1] = 'resume'
  fields[#fields + 1] = ARGV[12]
end
if due then
  fields[2] = 'scheduled'
  fields[#fields + 1] = 'due_state'
  fields[#fields + 1] = state
  fields[#fields + 1] = 'due_ms'
  fields[#fields + 1] = text(due)
  state = 'scheduled'
end
redis.call('HSET', rk, unpack(fields))
redis.call('ZADD', state_key(state), text(now), rid)

-- The table load_req() would read back, without reading it back.
local h = {id = rid, state = state, tenant = ARGV[5], handler = ARGV[6],
           priority = tonumber(ARGV[3]), concurrency = tonumber(ARGV[4]), total = n,
           waiting = n, retry = 0, leased = 0, delayed = 0, done = 0, dead = 0, cancelled = 0,
           max_attempts = tonumber(ARGV[7]), lease_ms = tonumber(ARGV[8]),
           retention_ms = tonumber(ARGV[9]), backoff_ms = tonumber(ARGV[10]),
           backoff_max_ms = tonumber(ARGV[11]), retention_text = ARGV[9], _elig = false,
           _state0 = state, _dirty = false, _moved = false}
REQS[rid] = h
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
