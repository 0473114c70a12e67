-- lua/_leasing.lua: leasing a request's tasks, take_ready() (by priority and rotation, among
--   the handlers a worker runs) and the handoff to idle workers.
-- One of the engine's helper files: it includes the helpers it uses, and only those
-- (scripts.py checks both).
-- Defines: traced, lease_tasks, runs_set, first_runnable, serve_slot, take_ready,
--   dispatch_idle.
--
--@include base requests readiness index tasks scheduled limits unique

-- Tracing (issue 38): a task leased from a request submitted with a trace context (h.tp)
-- has it returned beside the leases, in `out.tr` (a field, not an element: the reply and
-- the handoff send the elements): lease, traceparent, lease wait (ms: how long the task
-- had been waiting, `since` when, eligible as far as the engine knows), flat, per task.
-- Requests without one pay nothing more than reading the absent field with the others.
-- "tp" is the traceparent (55 characters), then " <due ms>" for a delayed request.
local function traced(h, out, lease, since)
  local tr = out.tr
  if not tr then
    tr = {}
    out.tr = tr
  end
  local n = #tr
  tr[n + 1], tr[n + 2], tr[n + 3] = lease, string.sub(h.tp, 1, 55), math.max(0, NOW - since)
end

-- Lease up to n tasks of request h to consumer: parked retries first (XCLAIM from
-- "~waiting"), then new entries (XREADGROUP). Appends lease, attempt, payload, handler,
-- lease_ms per task to `out`, updates the counters, and returns how many it leased. The
-- leases are added to `leases` by flush_leases(). A task that a limit on a payload field holds
-- back (field_admits()) is parked back in "~waiting" at once, its delivery not counted as an
-- attempt (as a release), and not leased.
local function lease_tasks(h, consumer, n, lease_ms, out)
  local sk = stream_key(h.id)
  local expiry = EXPIRY[lease_ms]
  if not expiry then
    expiry = '' .. (NOW + lease_ms)
    EXPIRY[lease_ms] = expiry
  end
  local prefix = h.id .. '/'
  local o = #out
  local from_retry, held_back, parked_fresh = 0, 0, 0
  if h.retry > 0 then
    local parked = redis.call('XPENDING', sk, GROUP, '-', '+', math.min(n, h.retry), '~waiting')
    for _, e in ipairs(parked) do
      local tid, deliv = e[1], tonumber(e[4]) + 1
      local c = redis.call('XCLAIM', sk, GROUP, consumer, 0, tid)
      local lease = prefix .. tid .. '/' .. deliv
      if field_admits(c[1][2][2], lease) then
        add_lease(expiry, lease)
        out[o + 1], out[o + 2], out[o + 3] = lease, attempts_of(h.id, tid, deliv), c[1][2][2]
        out[o + 4], out[o + 5] = h.handler, lease_ms
        o = o + 5
        from_retry = from_retry + 1
        if h.tp then traced(h, out, lease, NOW - tonumber(e[3])) end  -- idle since parked
      else  -- back to waiting, the delivery not an attempt
        park(h.id, tid, '~waiting')
        write_rel(h, 'HINCRBY', tid, 1)
        held_back = held_back + 1
      end
    end
  end
  local fresh = 0
  local due  -- a delayed request's due time: its new tasks waited from then, not from added
  if from_retry + held_back < n then
    local r = redis.call('XREADGROUP', 'GROUP', GROUP, consumer, 'COUNT',
                         text(n - from_retry - held_back), 'STREAMS', sk, '>')
    if r then
      for _, e in ipairs(r[1][2]) do
        local lease = prefix .. e[1] .. '/1'
        if field_admits(e[2][2], lease) then
          add_lease(expiry, lease)
          out[o + 1], out[o + 2], out[o + 3] = lease, 1, e[2][2]
          out[o + 4], out[o + 5] = h.handler, lease_ms
          o = o + 5
          fresh = fresh + 1
          if h.tp then  -- waiting since added (the ms of its stream id), or due
            due = due or tonumber(string.match(h.tp, ' (%d+)$')) or 0
            traced(h, out, lease, math.max(tonumber(string.match(e[1], '^%d+')), due))
          end
        else  -- parked in "~waiting": a retry now, its delivery not an attempt
          park(h.id, e[1], '~waiting')
          write_rel(h, 'HINCRBY', e[1], 1)
          parked_fresh = parked_fresh + 1
        end
      end
    end
  end
  local taken = from_retry + fresh
  if h.uk and taken > 0 then unique_started(h) end
  add(h, 'waiting', -taken)
  add(h, 'retry', parked_fresh - from_retry)
  add(h, 'leased', taken)
  bump_waiting_stat(h, -taken)
  if taken + held_back + parked_fresh < n then
    -- The counters promised more than the stream holds. Never expected; take the request
    -- out of rotation (so no loop can spin on it) and leave a trace for the operator.
    event('inconsistent', h.id, 'expected', n, 'found', taken)
    h.waiting = 0
  end
  return taken
end

-- The handlers a consumer runs, as a dequeue names them ("a b c"; '' = any handler): a set,
-- parsed once per distinct text (the library's state outlives a call; a few texts per queue,
-- one per kind of worker).
local RUNS_SETS, RUNS_N = {}, 0
local function runs_set(names)
  if names == nil or names == '' then return nil end
  local set = RUNS_SETS[names]
  if not set then
    if RUNS_N >= 256 then RUNS_SETS, RUNS_N = {}, 0 end
    set = {}
    for name in string.gmatch(names, '%S+') do set[name] = true end
    RUNS_SETS[names] = set
    RUNS_N = RUNS_N + 1
  end
  return set
end


-- The first slot of `ready`, from rank `skipped` on, that `ok(slot, handler)` accepts (one of
-- a handler the worker runs, not held back by a limit), and whether it is alone in its band
-- among those: slot, priority, alone, and the ranks known to hold slots it does not accept
-- (the caller reads on from there: within a call only the slot served moves, to its band's
-- tail, and a band renumbered keeps its order, so they keep their ranks; what is refused
-- stays refused for the call). Nil slot when none is left at or above `floor`; false slot
-- when a slot of the old form was migrated (read again from the head).
local function first_runnable(ok, floor, skipped)
  local start, n = skipped, 2
  local found, fprio
  while true do
    local page = redis.call('ZRANGE', K_READY, start, start + n - 1)
    for i = 1, #page do
      local p, hd = string.match(page[i], '^(%d+):([^:]*):')
      if not hd then  -- its requests move to new slots, maybe among those skipped: read again
        migrate_slot(page[i])
        return false, 0, false, 0
      end
      local prio = tonumber(p)
      if not found then
        if prio < floor then return nil, 0, false, skipped end
        if ok(page[i], hd) then found, fprio = page[i], prio else skipped = skipped + 1 end
      elseif prio ~= fprio or ok(page[i], hd) then
        return found, fprio, prio ~= fprio, skipped
      end
    end
    if #page < n then return found, fprio, true, skipped end
    start, n = start + n, 32
  end
end

-- Serve one slot of `ready` (priority `prio`; `alone`: no rival slot in its band): lease up
-- to want - got tasks of its least recently served requests to consumer, within the slot's
-- limits (`lims`) and each request's, rotate them, and rotate or drop the slot. A request its
-- resources' limits hold back is passed over (rotated, not leased). Returns got plus what it
-- leased.
local function serve_slot(slot, prio, alone, lims, consumer, want, got, lease_override, out)
  local tk = tenant_key(slot)
  -- With a rival slot, one request is served, then the slot rotates; the second head read
  -- says whether the tenant has another request to keep the slot in `ready`.
  local fetch = 2
  if alone then fetch = math.max(want - got, 2) end
  -- With limits on resources, the requests held back are passed over: read a few more.
  if LIMITS and LIMITS.resource then fetch = math.max(fetch, 8) end
  local heads = redis.call('ZRANGE', tk, '0', fetch - 1)
  local drop, kept, visited, served = {}, 0, 0, false
  for i = 1, #heads do
    if got >= want or (served and not alone) then break end
    visited = i
    local h = load_req(heads[i], true)
    if h then
      local rlims = LIMITS and h.rs and request_limits(h.rs) or nil
      local n = math.min(want - got, h.concurrency - h.leased, h.waiting, allowance(lims),
                         allowance(rlims))
      if n > 0 and (h.state == 'open' or h.state == 'active') then
        local lease_ms = h.lease_ms
        if lease_override > 0 then lease_ms = lease_override end
        local first = #out + 1
        local taken = lease_tasks(h, consumer, n, lease_ms, out)
        limits_took(lims, out, first, taken)
        limits_took(rlims, out, first, taken)
        got = got + taken
        served = true
      end
      h._elig = is_eligible(h)
    end
    if h and h._elig then
      kept = kept + 1
      if #heads > 1 then redis.call('ZADD', tk, 'XX', next_seq(), h.id) end
    else
      drop[#drop + 1] = heads[i]
    end
  end
  if #drop > 0 then redis.call('ZREM', tk, unpack(drop)) end
  -- Whether the tenant has an eligible request left: one kept or not visited, or one
  -- beyond what was read.
  local left = kept > 0 or visited < #heads
  if not left and #heads == fetch then left = redis.call('EXISTS', tk) == 1 end
  if not left then
    redis.call('ZREM', K_READY, slot)
  elseif not alone then
    redis.call('ZADD', K_READY, 'XX', band_tail(prio), slot)
  end
  return got
end

-- Lease up to `want` tasks to consumer from the ready index, as dequeue does: the head of
-- `ready` (highest priority band, least recently served tenant and handler) gives a slot, the
-- head of that slot's zset the least recently served request, and up to
-- min(wanted, concurrency - leased, waiting) of its tasks are leased; request and slot then
-- go to the back of their rotations (serve_slot()). lease_ms 0 = each request's own.
-- A slot alone in its band has no rival to rotate behind: its next requests are served in a
-- row, from one read of its zset, and the slot keeps its place (the order is the same).
-- `runs` (a set of handler names, nil = any): a worker leases only the tasks of handlers it
-- runs; slots of other handlers are passed over (each read once per call), as if they were
-- not there: priority and rotation hold among the slots it can serve.
local function take_ready(consumer, want, lease_override, out, runs)
  local floor = promote_due()
  READY_HELD = false  -- slots may leave `ready` here
  if want > 0 and is_paused() then return 0 end
  local got = 0
  local skipped = 0  -- with `runs` or limits: ranks at the head of `ready` not accepted
  local all = want > 0 and load_limits()
  local limited = all and all.slots  -- some limit may hold a whole slot back
  local slot_lims, spent = {}, {}  -- slot -> its limits (false: none); slots that gave nothing
  local function ok(slot, hd)
    if (runs and not runs[hd]) or spent[slot] then return false end
    if not limited then return true end
    local lims = slot_lims[slot]
    if lims == nil then
      lims = slot_limits(hd, string.match(slot, '^%d+:[^:]*:(.*)$')) or false
      slot_lims[slot] = lims
    end
    return not lims or allowance(lims) > 0
  end
  while got < want do
    local slot, prio, alone
    if runs or limited or next(spent) then
      slot, prio, alone, skipped = first_runnable(ok, floor, skipped)
      if slot == nil then break end
    else
      local top = redis.call('ZRANGE', K_READY, '0', '1')
      if #top == 0 then break end
      slot = top[1]
      local p, hd = string.match(slot, '^(%d+):([^:]*):')
      if not hd then
        migrate_slot(slot)
        slot = false
      else
        prio = tonumber(p)
        if prio < floor then break end
        alone = not top[2] or tonumber(string.match(top[2], '^(%d+):')) ~= prio
      end
    end
    if slot then
      local before = got
      got = serve_slot(slot, prio, alone, slot_lims[slot] or nil, consumer, want, got,
                       lease_override, out)
      -- All its requests held back by their resources' limits: not again in this call.
      if got == before then spent[slot] = true end
    end
  end
  flush_limits()
  flush_leases()
  return got
end

-- Called last by every script that can make work eligible: promotes due retries, then, if any
-- work became eligible, hands one task each to
-- idle workers that registered recently, taken from the ready index exactly as a dequeue
-- would (so by priority), and pushed to their handoff lists, which they block on. Saves them
-- the wake-up and dequeue round trips. Done at the end, not as each request becomes
-- eligible, so that a higher-priority request made eligible later in the same script is
-- not passed over. Then a wake-up token only if work is left: one pushed before a handoff
-- would reach the idle worker's BLPOP first and leave its handed task unclaimed.
local function dispatch_idle()
  promote_due()
  if not DISPATCH then return end
  DISPATCH = false
  local ready = READY_HELD or redis.call('EXISTS', K_READY) == 1
  local unfit = {}  -- idle workers that run none of the ready work: idle again after the loop
  for _ = 1, HANDOFF_MAX do
    if not ready then break end
    local top = redis.call('ZPOPMAX', K_IDLE)
    if #top == 0 then break end
    if tonumber(top[2]) >= NOW - HANDOFF_FRESH_MS then
      if is_paused() then  -- it stays idle, and is handed work when the queue resumes
        redis.call('ZADD', K_IDLE, top[2], top[1])
        break
      end
      -- "<consumer>|<lease_ms>" or "<consumer>|<lease_ms>|<handlers it runs>"
      local consumer, lease_ms, runs = string.match(top[1], '^([^|]+)|(%d+)|?(.*)$')
      local out = {}
      if take_ready(consumer, 1, tonumber(lease_ms), out, runs_set(runs)) > 0 then
        local hk = handoff_key(consumer)
        -- With a trace context: {leases, out.tr} (see traced()), read by the worker.
        local tr = out.tr
        out.tr = nil
        redis.call('RPUSH', hk, cjson.encode(tr and {out, tr} or out))
        redis.call('PEXPIRE', hk, 10 * math.max(tonumber(out[5]), 1000))
      else
        unfit[#unfit + 1] = top[2]
        unfit[#unfit + 1] = top[1]
      end
      ready = redis.call('EXISTS', K_READY) == 1
    end
  end
  if #unfit > 0 then redis.call('ZADD', K_IDLE, unpack(unfit)) end
  if ready then
    wake()
  else
    redis.call('DEL', K_WAKE)  -- all handed over: a token would wake a worker for nothing
  end
end

