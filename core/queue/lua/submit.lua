--[[ submit: create a request, optionally with its first tasks, optionally sealed, optionally
delayed: with a due time still to come it is "scheduled" (see _base.lua) until then.

Idempotent on the request id: if the request exists, nothing changes and its current state
is returned (a producer may retry a submit whose reply it lost).

KEYS[1..8] queue-level keys (see _base.lua)
KEYS[9]    <p>:{Q}:req:<rid>         request hash
KEYS[10]   <p>:{Q}:req:<rid>:tasks   task stream (group "g" created here)
Derived:   tr:<prio>:<handler>:<tenant>, state:open|active|scheduled|done, done:<rid>, delayed:<prio>,
           dprio, scheduled, scheduled:<prio>, sprio (see _base.lua)

ARGV[1]  rid          ARGV[2]  now (ms)      ARGV[3]  priority (0-99)
ARGV[4]  concurrency  ARGV[5]  tenant        ARGV[6]  handler
ARGV[7]  max_attempts ARGV[8]  lease_ms      ARGV[9]  retention_ms
ARGV[10] backoff_ms   ARGV[11] backoff_max_ms
ARGV[12] resources it declares, separated by spaces ("" = none): limits on them apply
ARGV[13] 0 = open for add; 1 = sealed now; for a submit too large for one call, whose client
         appends the rest with add: 2 = then seals it, 3 = leaves it open. 2 and 3 are kept in
         the hash (field "resume") until sealing, so a retry can finish what a crash stopped.
ARGV[14] due time: "" = now; "+<ms>" = that long after now; "<ms>" = at that time (ms since
         the epoch). A due time not after now is now: the request is not scheduled.
ARGV[15] unique key: "" = none, else "<scope>|<on duplicate>|<keep ms>|<key>" (_dedupe.lua)
ARGV[16] the producer's trace context, a W3C traceparent ("" = none; the client checks its
         form): kept in the hash (field "tp"; a delayed request's is followed by " <due ms>",
         its tasks' lease wait counting from then: traced(), _leasing.lua), given to the
         workers with the leases
ARGV[17..] task payloads (JSON text)

Its "submitted" event carries the first tasks' ids and payload text (append_tasks()), its
unique key if it has one ("key": the mirror's search finds the request by it) and its trace
context ("tp": the console shows and finds its trace id).
submit_flow.lua creates a request the same way (this hot path calls no shared helper for
it): keep the two in step; tests/engine/test_engine_flow.py compares what they store.

Returns {created (1|0), state, total, resume (0, or 2|3 for an unfinished large submit), due
(ms; 0 when not scheduled), and with a unique key another request holds: its id (created 0)}
--]]
--@include base requests readiness index completion scheduled leasing unique dedupe

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

local due = due_of(ARGV[14], now)
local holder, uk = unique_claim(ARGV[15], rid, now, due, ARGV, 17)
if holder then  -- a duplicate: nothing is created; the holder answers
  local hdue = holder.state == 'scheduled' and (tonumber(rawget(holder, 'due_ms'))
    or tonumber(redis.call('HGET', req_key(holder.id), 'due_ms'))) or 0
  return {0, holder.state, holder.total, 0, hdue, holder.id}
end

local n = #ARGV - 16
redis.call('XGROUP', 'CREATE', sk, GROUP, '0', 'MKSTREAM')
local ids, txt = append_tasks(sk, ARGV, 17, 0)
-- Sealed at once unless tasks are still to come (mode 0, 2, 3): one state, one index entry.
local state = ARGV[13] == '1' and 'active' or 'open'
local extra = {}
if ARGV[13] == '2' or ARGV[13] == '3' then
  extra = {'resume', ARGV[13]}
end
if uk then
  extra[#extra + 1] = 'uk'
  extra[#extra + 1] = uk
end
local tp = ARGV[16] ~= '' and ARGV[16] or nil
local tp_kept = tp and due and (tp .. ' ' .. text(due)) or tp
if tp then
  extra[#extra + 1] = 'tp'
  extra[#extra + 1] = tp_kept
end
if due then
  extra[#extra + 1] = 'due_state'
  extra[#extra + 1] = state
  extra[#extra + 1] = 'due_ms'
  extra[#extra + 1] = text(due)
  state = 'scheduled'
end
local h = create_req(ARGV, rk, rid, state, 3, n, now, extra)
h.uk, h.tp = uk, tp_kept
stat('submitted', n)
if due then
  -- Not counted in w:<prio> (work that can run) until due, as a held follow-up.
  tasks_event('submitted', rid, ids, txt, 'tasks', text(n), 'priority', ARGV[3],
              'tenant', ARGV[5], 'due', text(due), trace_event(tp, unique_event(uk)))
  schedule_req(h, due)
  return {1, state, n, 0, due}
end
bump_waiting_stat(h, n)
tasks_event('submitted', rid, ids, txt, 'tasks', text(n), 'priority', ARGV[3], 'tenant', ARGV[5],
            trace_event(tp, unique_event(uk)))
if n == 0 then maybe_complete(h, now) end
sync_ready(h)
dispatch_idle()
return {1, h.state, n, 0, 0}
