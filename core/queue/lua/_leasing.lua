-- lua/_leasing.lua: attempts, leasing a request's tasks, keeping `ready` and the tenant zsets in
--   step (sync_ready()), take_ready() and the handoff to idle workers.
-- One of the engine's helper files (`--@include common` brings them all, in the order of
-- scripts.py's HELPERS); it may use what the files before it define (_base.lua, _requests.lua,
--   _metrics.lua, _readiness.lua, _finish.lua).
-- Defines: attempts_of, lease_tasks, sync_ready, take_ready, dispatch_idle.
--

-- Attempts a task has used: deliveries, less those that did not count (releases, claims).
local function attempts_of(rid, tid, deliveries)
  local rel = tonumber(redis.call('HGET', rel_key(rid), tid) or '0')
  return deliveries - rel
end

-- Lease up to n tasks of request h to consumer: parked retries first (XCLAIM from
-- "~waiting"), then new entries (XREADGROUP). Appends lease, attempt, payload, handler,
-- lease_ms per task to `out`, updates the counters, and returns how many it leased. The
-- leases are added to `leases` by flush_leases().
local function lease_tasks(h, consumer, n, lease_ms, out)
  local sk = stream_key(h.id)
  local expiry = EXPIRY[lease_ms]
  if not expiry then
    expiry = '' .. (NOW + lease_ms)
    EXPIRY[lease_ms] = expiry
  end
  local prefix = h.id .. '/'
  local o = #out
  local from_retry = 0
  if h.retry > 0 then
    local parked = redis.call('XPENDING', sk, GROUP, '-', '+', math.min(n, h.retry), '~waiting')
    for _, e in ipairs(parked) do
      local tid, deliv = e[1], tonumber(e[4]) + 1
      local c = redis.call('XCLAIM', sk, GROUP, consumer, 0, tid)
      local lease = prefix .. tid .. '/' .. deliv
      add_lease(expiry, lease)
      out[o + 1], out[o + 2], out[o + 3] = lease, attempts_of(h.id, tid, deliv), c[1][2][2]
      out[o + 4], out[o + 5] = h.handler, lease_ms
      o = o + 5
      from_retry = from_retry + 1
    end
  end
  local fresh = 0
  if from_retry < n then
    local r = redis.call('XREADGROUP', 'GROUP', GROUP, consumer, 'COUNT', text(n - from_retry),
                         'STREAMS', sk, '>')
    if r then
      for _, e in ipairs(r[1][2]) do
        local lease = prefix .. e[1] .. '/1'
        add_lease(expiry, lease)
        out[o + 1], out[o + 2], out[o + 3] = lease, 1, e[2][2]
        out[o + 4], out[o + 5] = h.handler, lease_ms
        o = o + 5
        fresh = fresh + 1
      end
    end
  end
  local taken = from_retry + fresh
  add(h, 'waiting', -taken)
  add(h, 'retry', -from_retry)
  add(h, 'leased', taken)
  bump_waiting_stat(h, -taken)
  if taken < n then
    -- The counters promised more than the stream holds. Never expected; take the request
    -- out of rotation (so no loop can spin on it) and leave a trace for the operator.
    event('inconsistent', h.id, 'expected', n, 'found', taken)
    h.waiting = 0
  end
  return taken
end

-- Keep the ready index true for one request: present in its tenant's zset (and the tenant
-- in `ready`) exactly when it has waiting work, a free slot and is not cancelled or finished.
-- h._elig says whether it is there now: every change of the index goes through this table.
-- A request that becomes eligible also marks the call for dispatch_idle() at its end.
local function sync_ready(h)
  local elig = is_eligible(h)
  if elig == h._elig then return end
  h._elig = elig
  local slot = slot_of(h)
  local tk = tenant_key(slot)
  if elig then
    redis.call('ZADD', tk, next_seq(), h.id)
    if not redis.call('ZSCORE', K_READY, slot) then
      redis.call('ZADD', K_READY, band_tail(h.priority), slot)
    end
    DISPATCH, READY_HELD = true, true
  elseif redis.call('ZREM', tk, h.id) == 1 and redis.call('EXISTS', tk) == 0 then
    redis.call('ZREM', K_READY, slot)
    READY_HELD = false
  end
end

local promote_due  -- defined at the end (it needs to_waiting); take_ready() calls it

-- Lease up to `want` tasks to consumer from the ready index, as dequeue does: the head of
-- `ready` (highest priority band, least recently served tenant) gives a tenant slot, the head
-- of that tenant's zset the least recently served request, and up to
-- min(wanted, concurrency - leased, waiting) of its tasks are leased; request and tenant then
-- go to the back of their rotations. lease_ms 0 = each request's own.
-- A slot alone in its band has no rival to rotate behind: its next requests are served in a
-- row, from one read of its zset, and the slot keeps its place (the order is the same).
local function take_ready(consumer, want, lease_override, out)
  local floor = promote_due()
  READY_HELD = false  -- slots may leave `ready` here
  if want > 0 and is_paused() then return 0 end
  local got = 0
  while got < want do
    local top = redis.call('ZRANGE', K_READY, '0', '1')
    if #top == 0 then break end
    local slot = top[1]
    local prio = tonumber(string.match(slot, '^(%d+):'))
    if prio < floor then break end
    local alone = not top[2] or tonumber(string.match(top[2], '^(%d+):')) ~= prio
    local tk = tenant_key(slot)
    -- With a rival slot, one request is served, then the slot rotates; the second head read
    -- says whether the tenant has another request to keep the slot in `ready`.
    local fetch = 2
    if alone then fetch = math.max(want - got, 2) end
    local heads = redis.call('ZRANGE', tk, '0', fetch - 1)
    local drop, kept, visited = {}, 0, 0
    for i = 1, #heads do
      if got >= want or (i > 1 and not alone) then break end
      visited = i
      local h = load_req(heads[i], true)
      if h then
        local n = math.min(want - got, h.concurrency - h.leased, h.waiting)
        if n > 0 and (h.state == 'open' or h.state == 'active') then
          local lease_ms = h.lease_ms
          if lease_override > 0 then lease_ms = lease_override end
          got = got + lease_tasks(h, consumer, n, lease_ms, out)
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
  end
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
  for _ = 1, HANDOFF_MAX do
    if not ready then break end
    local top = redis.call('ZPOPMAX', K_IDLE)
    if #top == 0 then break end
    if tonumber(top[2]) >= NOW - HANDOFF_FRESH_MS then
      if is_paused() then  -- it stays idle, and is handed work when the queue resumes
        redis.call('ZADD', K_IDLE, top[2], top[1])
        break
      end
      local consumer, lease_ms = string.match(top[1], '^(.+)|(%d+)$')
      local out = {}
      if take_ready(consumer, 1, tonumber(lease_ms), out) > 0 then
        local hk = handoff_key(consumer)
        redis.call('RPUSH', hk, cjson.encode(out))
        redis.call('PEXPIRE', hk, 10 * math.max(tonumber(out[5]), 1000))
      end
      ready = redis.call('EXISTS', K_READY) == 1
    end
  end
  if ready then
    wake()
  else
    redis.call('DEL', K_WAKE)  -- all handed over: a token would wake a worker for nothing
  end
end

local follow_on  -- defined after maybe_complete(), which calls it
