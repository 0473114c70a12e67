--[[ dequeue: acknowledge finished leases, then lease up to `count` new tasks. The hot path.

Both halves are optional (count 0 = ack only; no leases = dequeue only), so a worker makes
one round trip per batch: ack what it finished and take the next tasks.

Ack: a lease "<rid>/<task>/<delivery>" is accepted only while it is held: present in `leases`
with an expiry not yet past. An ack of an expired, reaped, claimed or already acked lease is
refused and changes nothing, so a task is counted done once; but a refused ack of a lease an
operator revoked (claim.lua) says its run is over, so that task moves on now (end_revoked()).

Dequeue: tasks handed to this consumer but not yet picked up come first; then take_ready()
(promote_due(), _scheduled.lua) promotes due retries (highest priority first) and leases up to `count` tasks
by priority and rotation: parked retries first (XCLAIM from
"~waiting"), then new entries (XREADGROUP). Work left over goes to idle workers
(dispatch_idle()).

KEYS[1..8] queue-level keys (see _base.lua)
Derived:   req:<rid>, req:<rid>:tasks, req:<rid>:rel, req:<rid>:results, tr:<prio>:<handler>:<tenant>, state:<state>,
           done:<rid>, idle, handoff:<consumer>, delayed:<prio>, dprio, revoked, claimto
           (see _base.lua)

ARGV[1] now (ms)   ARGV[2] consumer   ARGV[3] count
ARGV[4] lease_ms (0 = each request's own; a worker passes how soon it must be presumed dead)
ARGV[5] idle handoff: "1" = if nothing is leased, register the consumer as idle, so that work
        arriving while it blocks on its handoff list is pushed there (see dispatch_idle() in
        _leasing.lua); any call with "1" first takes the consumer off the idle set
ARGV[6] timings of the acks, for the handlers' metrics (see _metrics.lua): "" = count nothing
        (the client turned metrics off); else one token per ack, separated by spaces, in the
        order of the leases: "<bucket>:<us>" (the run's time) or "-" (counted, not timed).
        Only accepted acks count.
ARGV[7] a worker's tally (core/queue/metrics.py Tally): counts of acks this consumer had
        accepted earlier, "<handler>|<field> <n>" pairs separated by spaces, added to this
        minute's metrics (metric_tally()); "" = none. A worker sends its acks' times this way,
        about once a second, instead of one token per ack in ARGV[6].
ARGV[8] the handlers this consumer runs, separated by spaces ("" = any): only tasks of these
        are leased to it, here and in handoffs while it is idle (take_ready()'s `runs`), so a
        worker never leases a task it has no handler for; another's waits for a worker that has
ARGV[9..] leases to acknowledge, each alone or "<lease> <result JSON>": an accepted ack keeps
        the task's result with its request (req:<rid>:results; split_results() and
        store_result() in _requests.lua), a refused one keeps nothing

Returns {ack_results, next_due_ms, tasks[, traces]}
  ack_results  one integer per lease: 1 acked, -1 lease not held
  next_due_ms  when nothing was leased: ms until the next delayed task is due, or until a
               rate limit lets held-back work start, else -1
  tasks        flat: lease, attempt, payload, handler, lease_ms for each leased task
  traces       only when some leased task's request has a trace context (field "tp", issue
               38): flat, lease, traceparent, lease wait (ms; -1 unknown) for each of those
               (traced(), _leasing.lua)

A handoff list's item is a `tasks` list as JSON, or {tasks, traces} when it has traces.
--]]
--@include base requests metrics index tasks completion leasing revoke

local now, consumer, want = now_ms(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local lease_override = tonumber(ARGV[4])
local runs = runs_set(ARGV[8])
local idle_member = nil
if ARGV[5] == '1' and want > 0 then
  idle_member = consumer .. '|' .. ARGV[4]
  if runs then idle_member = idle_member .. '|' .. ARGV[8] end
  redis.call('ZREM', K_IDLE, idle_member)
end

-- Acks, grouped by request: one ZMSCORE for all, then per request one XACK, one XDEL (none
-- when the request completes) and one update of its counters, whatever the batch size.
local acks = {}
if ARGV[7] ~= '' then metric_tally(ARGV[7]) end
if #ARGV >= 9 then
  local leases = {unpack(ARGV, 9)}
  local results = split_results(leases)
  local timing  -- ack index -> its token, if metrics are counted
  if ARGV[6] == '' then
    METRICS_ON = false
  else
    timing = {}
    local n = 0
    for t in string.gmatch(ARGV[6], '%S+') do
      n = n + 1
      timing[n] = t
    end
  end
  local times = {}  -- rid -> tokens of its accepted acks
  local scores = redis.call('ZMSCORE', K_LEASES, unpack(leases))
  local valid, seen, by_req, order = {}, {}, {}, {}
  for i, lease in ipairs(leases) do
    local rid, tid = split_lease(lease)
    local score = scores[i]
    if rid and score and tonumber(score) >= now and not seen[lease] then
      seen[lease] = true
      acks[i] = 1
      valid[#valid + 1] = lease
      local tids = by_req[rid]
      if not tids then
        tids = {}
        by_req[rid] = tids
        order[#order + 1] = rid
        if timing then times[rid] = {} end
      end
      tids[#tids + 1] = tid
      if results and results[i] then store_result(load_req(rid), tid, results[i]) end
      if timing then
        local ts = times[rid]
        ts[#ts + 1] = timing[i] or '-'
      end
    else
      acks[i] = -1
      if rid and not score then end_revoked(lease, now, 'holder') end
    end
  end
  if #valid > 0 then
    redis.call('ZREM', K_LEASES, unpack(valid))
    for _, rid in ipairs(order) do
      local tids = by_req[rid]
      local h = load_req(rid)
      add(h, 'leased', -#tids)
      add(h, 'done', #tids)
      if timing then
        for _, t in ipairs(times[rid]) do metric_done(h.handler, t) end
      end
      -- A request that completes here without dead letters loses its stream at once
      -- (maybe_complete()): no need to take the tasks out of it first.
      if not (completes(h) and h.dead == 0) then
        local sk = stream_key(rid)
        redis.call('XACK', sk, GROUP, unpack(tids))
        redis.call('XDEL', sk, unpack(tids))
      end
      sync_ready(h)
      maybe_complete(h, now)
    end
    stat('done', #valid)
  end
end

-- Tasks already handed to this consumer that it has not picked up (its BLPOP returned
-- something else): delivered here, renewed, so none waits unrenewed on the list.
local out = {}
local got = 0
if idle_member then
  local hk = handoff_key(consumer)
  local items = redis.call('LRANGE', hk, 0, -1)
  if #items > 0 then
    redis.call('DEL', hk)
    for _, item in ipairs(items) do
      local t = cjson.decode(item)
      local tr
      if type(t[1]) == 'table' then t, tr = t[1], t[2] end
      for i = 1, #t, 5 do
        local score = redis.call('ZSCORE', K_LEASES, t[i])
        if score then  -- not reaped, claimed or released meanwhile
          redis.call('ZADD', K_LEASES, 'XX', now + tonumber(t[i + 4]), t[i])
          for j = i, i + 4 do out[#out + 1] = t[j] end
          got = got + 1
          for j = 1, tr and #tr or 0, 3 do  -- its trace context, as handed
            if tr[j] == t[i] then
              local o = out.tr or {}
              out.tr = o
              o[#o + 1], o[#o + 2], o[#o + 3] = tr[j], tr[j + 1], tr[j + 2]
            end
          end
        else  -- never started here: if an operator revoked it, it moves on now
          end_revoked(t[i], now, 'holder')
        end
      end
    end
  end
end
got = got + take_ready(consumer, math.max(want - got, 0), lease_override, out, runs)

local next_due = -1
if got > 0 then
  -- Work left over goes to idle workers, and a token wakes others, both in dispatch_idle():
  -- a token pushed here, before the handoffs, would reach a blocked idle worker first.
  if redis.call('EXISTS', K_READY) == 1 then
    DISPATCH, READY_HELD = true, true
  else
    redis.call('DEL', K_WAKE)  -- this call took what a token announced: none is left to wake for
  end
else
  if idle_member then redis.call('ZADD', K_IDLE, now, idle_member) end
  local first = redis.call('ZRANGE', K_DELAYED, 0, 0, 'WITHSCORES')
  if #first > 0 then next_due = math.max(0, tonumber(first[2]) - now) end
  -- Work a rate limit held back starts again when its window's oldest start leaves it.
  if LIMIT_DUE >= 0 and (next_due < 0 or LIMIT_DUE < next_due) then next_due = LIMIT_DUE end
end
dispatch_idle()
local tr = out.tr
if tr then
  out.tr = nil
  return {acks, next_due, out, tr}
end
return {acks, next_due, out}
