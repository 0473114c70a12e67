--[[ submit_after: create a request that runs only once another one (its parent) completes
as done: a "then" between requests, like a BullMQ flow. Sealed with its tasks, it is "held"
(its tasks wait but are not eligible) until the parent's completion decides, in
maybe_complete() (follow_on(), _completion.lua):
  done      -> the follow-up becomes active (eligible)
  cancelled -> the follow-up is cancelled (its tasks counted cancelled)
  failed    -> it stays held: requeuing the parent's dead letters reopens the parent, and
               its next completion decides again
A parent that has completed already decides at once. An operator may cancel a held request.

Idempotent on the request id, as submit: if the request exists, nothing changes and its
current state is returned.

KEYS[1..8] queue-level keys (see _base.lua)
KEYS[9]    <p>:{Q}:req:<rid>           the follow-up's hash (field "after": the parent)
KEYS[10]   <p>:{Q}:req:<rid>:tasks     its task stream (group "g" created here)
KEYS[11]   <p>:{Q}:req:<parent>        the parent's hash (field "then": its follow-ups,
                                       ids separated by spaces)
Derived:   tr:<prio>:<handler>:<tenant>, state:held|active|cancelling|cancelled, done:<rid>,
           delayed:<prio>, dprio (see _base.lua)

ARGV[1]  rid          ARGV[2]  now (ms)      ARGV[3]  priority (0-99)
ARGV[4]  concurrency  ARGV[5]  tenant        ARGV[6]  handler
ARGV[7]  max_attempts ARGV[8]  lease_ms      ARGV[9]  retention_ms
ARGV[10] backoff_ms   ARGV[11] backoff_max_ms
ARGV[12] resources it declares ("" = none)
ARGV[13] parent request id
ARGV[14] the producer's trace context, as submit.lua's ("" = none): kept in the hash (field
         "tp") and on its "submitted" event (issue 38)
ARGV[15..] task payloads (JSON text): at least one, at most one call's worth (the client
         refuses more)

Its "submitted" event carries the first tasks' ids and payload text (append_tasks()).
submit_flow.lua creates follow-ups the same way, with their parent: keep the two in step;
tests/engine/test_engine_flow.py compares what they store.

Returns {created (1|0), state, total}
Errors: -2 no such parent request (nothing is written)
--]]
--@include base requests readiness index completion leasing

local rid, now, parent = ARGV[1], now_ms(ARGV[2]), ARGV[13]
local rk, sk = KEYS[9], KEYS[10]

if redis.call('EXISTS', rk) == 1 then
  local cur = redis.call('HMGET', rk, 'state', 'total')
  return {0, cur[1], tonumber(cur[2])}
end
local p = load_req(parent)
if not p then return -2 end

local tp = ARGV[14] ~= '' and ARGV[14] or nil
local n = #ARGV - 14
redis.call('XGROUP', 'CREATE', sk, GROUP, '0', 'MKSTREAM')
local ids, txt = append_tasks(sk, ARGV, 15, 0)
local extra = {'after', parent}
if tp then extra = {'after', parent, 'tp', tp} end
local h = create_req(ARGV, rk, rid, 'held', 3, n, now, extra)
h.tp = tp
if p['then'] then set_field(p, 'then', p['then'] .. ' ' .. rid) else set_field(p, 'then', rid) end

stat('submitted', n)  -- w:<prio> counts work that can run: a held request's, once released
tasks_event('submitted', rid, ids, txt, 'tasks', text(n), 'priority', ARGV[3],
            'tenant', ARGV[5], 'after', parent, trace_event(tp))
-- The parent has completed already: decide now, as its completion would have.
if p.state == 'done' then
  set_state(h, 'active', now)
  bump_waiting_stat(h, n)
  event('unheld', rid, 'after', parent)
  sync_ready(h)
  maybe_complete(h, now)
elseif p.state == 'cancelled' then
  cancel_held(h, now, parent)
end
dispatch_idle()
return {1, h.state, n}
