--[[ submit_flow: create a request with its first tasks, the follow-ups held behind it, and
optionally a record beside it, in one atomic call: a crash leaves all of it or none of it
(submit, then submit_after, then a record, as separate calls, could leave a request whose
follow-up or record never comes).

- The request as submit.lua makes it: its first tasks, sealed or open for add, maybe delayed
  ("scheduled" until its due time; see _base.lua).
- Each follow-up as submit_after.lua makes one: sealed with its tasks, "held" (its tasks wait,
  not eligible, not in the stats' w:<prio>) until the request completes; the request's hash
  lists them in "then", each names it in "after". The request is new, so it has not
  completed: every follow-up starts held.
- The record (core/queue/records.py), when asked: a hash of fields with a life (EXPIRE) and
  its id in its kind's index at a given time. It replaces a record of that id that is there
  (left by an earlier request of the same id, which expired before its record).

The three scripts create requests with the same helpers (due_of(), create_req() in
_requests.lua); tests/engine/test_engine_flow.py compares what they store.

Idempotent on the request id: if the request exists, nothing changes (neither the follow-ups
nor the record) and the current state of the request and of each follow-up is returned. If it
does not but a follow-up's id is another request's, nothing is written (-10).

KEYS[1..8]   queue-level keys (see _base.lua)
KEYS[9]      <p>:{Q}:req:<rid>              the request's hash
KEYS[10]     <p>:{Q}:req:<rid>:tasks        its task stream (group "g" created here)
KEYS[9+2i]   <p>:{Q}:req:<fid_i>            follow-up i's hash (i = 1..F)
KEYS[10+2i]  <p>:{Q}:req:<fid_i>:tasks      its task stream
then, with a record (ARGV[17] > 0):
KEYS[11+2F]  <p>:{Q}:<kind>:<record id>     the record's hash
KEYS[12+2F]  <p>:{Q}:<kind>s                its kind's index: record id -> time (ms)
Derived:     tr:<prio>:<handler>:<tenant>, state:open|active|scheduled|held, idle, handoff:<consumer>,
             delayed:<prio>, dprio, scheduled, scheduled:<prio>, sprio (see _base.lua)

ARGV[1]  rid          ARGV[2]  now (ms)      ARGV[3]  priority (0-99)
ARGV[4]  concurrency  ARGV[5]  tenant        ARGV[6]  handler
ARGV[7]  max_attempts ARGV[8]  lease_ms      ARGV[9]  retention_ms
ARGV[10] backoff_ms   ARGV[11] backoff_max_ms
ARGV[12] resources it declares ("" = none)
ARGV[13] 1 = sealed now; 0 = open for add (then seal)
ARGV[14] due time, as submit.lua's: "" = now; "+<ms>" = that long after now; "<ms>" = at that
         time (ms since the epoch); not after now is now
ARGV[15] unique key, as submit.lua's ("" = none): a duplicate creates nothing, follow-ups and
         record included, and answers with the holder
ARGV[16] F, the number of follow-ups (0 or more)
ARGV[17] R, the number of the record's fields (0: no record)
ARGV[18] the record's id     ARGV[19] its life (s)     ARGV[20] its time in the index (ms)
ARGV[21] the producer's trace context, as submit.lua's ("" = none): the request's and its
         follow-ups' (field "tp", as submit.lua keeps it, and on their "submitted" events)
ARGV[22..] each follow-up in turn: its id, its ten options (as ARGV[3..12]), its number of
         tasks n (at least 1), its n payloads (JSON text)
then     the record's R fields and values (field, value, field, value, ...)
then     the request's task payloads (JSON text), to the end
The client keeps the whole call within one submit's worth of tasks (SUBMIT_BATCH).

Events: "submitted" for the request, then for each follow-up (with "after"), carrying their
first tasks' ids and payload text (append_tasks()).

Returns {created (1|0), state, total, due (ms; 0 when not scheduled), then for each follow-up
its state and total}; when the request existed, a follow-up that does not exist, or is not
this request's, is false, 0. With a unique key another request holds: {0, its state, total,
due, its id} (nothing created).
Errors: -10 a follow-up's id is taken by an existing request (nothing is written)
--]]
--@include base requests readiness index scheduled leasing unique dedupe

local rid, now = ARGV[1], now_ms(ARGV[2])
local rk, sk = KEYS[9], KEYS[10]
local nf, nr = tonumber(ARGV[16]), tonumber(ARGV[17])

if redis.call('EXISTS', rk) == 1 then
  local cur = redis.call('HMGET', rk, 'state', 'total', 'due_ms')
  local due = 0
  if cur[1] == 'scheduled' then due = tonumber(cur[3]) end
  local out = {0, cur[1], tonumber(cur[2]), due}
  for i = 1, nf do
    local f = redis.call('HMGET', KEYS[9 + 2 * i], 'state', 'total', 'after')
    if f[3] == rid then
      out[#out + 1] = f[1]
      out[#out + 1] = tonumber(f[2])
    else  -- absent, or not a follow-up of this request
      out[#out + 1] = false
      out[#out + 1] = 0
    end
  end
  return out
end
for i = 1, nf do
  if redis.call('EXISTS', KEYS[9 + 2 * i]) == 1 then return -10 end
end

local due = due_of(ARGV[14], now)

-- Where each part of ARGV starts: the follow-ups, the record's fields, the request's tasks.
local follows, at = {}, 22
for i = 1, nf do
  local n = tonumber(ARGV[at + 11])
  follows[i] = {id = ARGV[at], opt = at, n = n, first = at + 12}
  at = at + 12 + n
end
local record_at, first = at, at + 2 * nr
local ids_then = {}
for i = 1, nf do ids_then[i] = follows[i].id end

local holder, uk = unique_claim(ARGV[15], rid, now, due, ARGV, first)
if holder then  -- a duplicate: nothing is created; the holder answers
  local hdue = holder.state == 'scheduled' and (tonumber(rawget(holder, 'due_ms'))
    or tonumber(redis.call('HGET', req_key(holder.id), 'due_ms'))) or 0
  return {0, holder.state, holder.total, hdue, holder.id}
end

-- The request, as submit.lua creates it, with its follow-ups in "then".
local n = #ARGV - first + 1
redis.call('XGROUP', 'CREATE', sk, GROUP, '0', 'MKSTREAM')
local ids, txt = append_tasks(sk, ARGV, first, 0)
local state = ARGV[13] == '1' and 'active' or 'open'
local extra = {}
if uk then extra = {'uk', uk} end
local tp = ARGV[21] ~= '' and ARGV[21] or nil
local tp_kept = tp and due and (tp .. ' ' .. text(due)) or tp
if tp then
  extra[#extra + 1] = 'tp'
  extra[#extra + 1] = tp_kept
end
local then_text = nil
if nf > 0 then
  then_text = table.concat(ids_then, ' ')
  extra[#extra + 1] = 'then'
  extra[#extra + 1] = then_text
end
if due then
  extra[#extra + 1] = 'due_state'
  extra[#extra + 1] = state
  extra[#extra + 1] = 'due_ms'
  extra[#extra + 1] = text(due)
  state = 'scheduled'
end
local h = create_req(ARGV, rk, rid, state, 3, n, now, extra)
h['then'] = then_text
h.uk, h.tp = uk, tp_kept
stat('submitted', n)
if due then
  tasks_event('submitted', rid, ids, txt, 'tasks', text(n), 'priority', ARGV[3],
              'tenant', ARGV[5], 'due', text(due), trace_event(tp, unique_event(uk)))
  schedule_req(h, due)
else
  bump_waiting_stat(h, n)
  tasks_event('submitted', rid, ids, txt, 'tasks', text(n), 'priority', ARGV[3],
              'tenant', ARGV[5], trace_event(tp, unique_event(uk)))
end

-- The follow-ups, as submit_after.lua creates them behind a parent that has not completed.
local out = {1, h.state, n, due or 0}
for i = 1, nf do
  local f = follows[i]
  local o = f.opt
  local fk, fsk = KEYS[9 + 2 * i], KEYS[10 + 2 * i]
  local payloads = {}
  for j = 1, f.n do payloads[j] = ARGV[f.first + j - 1] end
  redis.call('XGROUP', 'CREATE', fsk, GROUP, '0', 'MKSTREAM')
  local fids, ftxt = append_tasks(fsk, payloads, 1, 0)
  local fextra = {'after', rid}
  if tp then fextra = {'after', rid, 'tp', tp} end
  create_req(ARGV, fk, f.id, 'held', o + 1, f.n, now, fextra)
  stat('submitted', f.n)  -- w:<prio> counts work that can run: a held request's, once released
  tasks_event('submitted', f.id, fids, ftxt, 'tasks', text(f.n), 'priority', ARGV[o + 1],
              'tenant', ARGV[o + 3], 'after', rid, trace_event(tp))
  out[#out + 1] = 'held'
  out[#out + 1] = f.n
end

-- The record: what is left of an earlier one of this id goes, so its fields are these alone.
if nr > 0 then
  local key, index = KEYS[11 + 2 * nf], KEYS[12 + 2 * nf]
  local values = {}
  for j = 1, 2 * nr do values[j] = ARGV[record_at + j - 1] end
  redis.call('DEL', key)
  redis.call('HSET', key, unpack(values))
  redis.call('EXPIRE', key, ARGV[19])
  redis.call('ZADD', index, ARGV[20], ARGV[18])
end

if not due then
  sync_ready(h)
  dispatch_idle()
end
return out
