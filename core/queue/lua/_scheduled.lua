-- lua/_scheduled.lua: delayed requests (state scheduled) and the promotion of due retries and
--   requests (promote_due()).
-- One of the engine's helper files: it includes the helpers it uses, and only those
-- (scripts.py checks both).
-- Defines: schedule_req, unschedule_req, make_due, promote_scheduled, promote_due.
--
--@include base requests readiness index tasks completion

-- A delayed request waits for its due time (submit.lua): in the queue-wide index (listing,
-- counts, next due time), in its priority's (promotion order), and its due time in `delayed`
-- unless an earlier one is there already.
local function schedule_req(h, due)
  local p = text(h.priority)
  redis.call('ZADD', K_SCHED, due, h.id)
  redis.call('ZADD', sched_key(p), due, h.id)
  redis.call('ZADD', K_SPRIO, 99 - h.priority, p)
  -- The new head: idle workers block until the old head's time at most (dequeue's
  -- next_due_ms), so one is woken to learn the new one.
  if redis.call('ZADD', K_DELAYED, 'LT', 'CH', due, SCHED_MARK) == 1 then wake() end
end

-- Out of the scheduled indexes (cancel, run now). The mark in `delayed` may now be early: the
-- next promote_due() that finds nothing due moves it.
local function unschedule_req(h)
  local p = text(h.priority)
  redis.call('ZREM', K_SCHED, h.id)
  local sk = sched_key(p)
  if redis.call('ZREM', sk, h.id) == 1 and redis.call('EXISTS', sk) == 0 then
    redis.call('ZREM', K_SPRIO, p)
  end
end

-- A scheduled request is due: it takes the state it was submitted for (open or active), and
-- its tasks are eligible from now under the usual priorities and rotation.
local function make_due(h, now, by)
  local to = redis.call('HGET', req_key(h.id), 'due_state') or 'active'
  set_state(h, to, now)
  bump_waiting_stat(h, h.waiting)
  event('due', h.id, 'by', by)
  sync_ready(h)
  maybe_complete(h, now)
end

-- Due delayed requests, highest priority first, oldest due first within one, at most
-- SCHED_MAX per priority; then the mark in `delayed` follows the new head. Returns the
-- priority floor, as promote_due() does for retries.
local function promote_scheduled()
  local floor = -1
  for _, p in ipairs(redis.call('ZRANGE', K_SPRIO, 0, -1)) do
    local sk = sched_key(p)
    local due = redis.call('ZRANGE', sk, '-inf', NOW, 'BYSCORE', 'LIMIT', 0, SCHED_MAX)
    if #due > 0 then
      redis.call('ZREM', K_SCHED, unpack(due))
      redis.call('ZREM', sk, unpack(due))
      for _, rid in ipairs(due) do
        local h = load_req(rid)
        if h and h.state == 'scheduled' then make_due(h, NOW, 'time') end
      end
      if redis.call('EXISTS', sk) == 0 then redis.call('ZREM', K_SPRIO, p) end
    end
    if #due == SCHED_MAX then
      floor = tonumber(p)
      break
    end
  end
  local head = redis.call('ZRANGE', K_SCHED, 0, 0, 'WITHSCORES')
  if #head == 0 then
    redis.call('ZREM', K_DELAYED, SCHED_MARK)
  else
    redis.call('ZADD', K_DELAYED, head[2], SCHED_MARK)
  end
  return floor
end

-- Retries whose backoff is over go back to waiting, highest priority first, at most
-- PROMOTE_MAX per priority; due delayed requests become eligible (promote_scheduled()).
-- Returns the priority floor for this call: when a level had more
-- due than that, nothing below it may be leased until they are promoted (-1: no floor), so a
-- due retry or request is never passed over by a lower priority however many there are.
-- Runs once per call (dispatch_idle() or the first take_ready(), whichever comes first).
-- Nothing due (the head of `delayed` is later, or absent): one command, as before delayed
-- requests existed.
local function promote_due()
  if PROMOTED then return FLOOR end
  PROMOTED = true
  local first = redis.call('ZRANGE', K_DELAYED, '0', '0', 'WITHSCORES')
  if #first == 0 or tonumber(first[2]) > NOW then return FLOOR end
  local sfloor = -1
  local mark = redis.call('ZSCORE', K_DELAYED, SCHED_MARK)
  if mark and tonumber(mark) <= NOW then sfloor = promote_scheduled() end
  for _, p in ipairs(redis.call('ZRANGE', K_DPRIO, 0, -1)) do
    local dk = delayed_key(p)
    local due = redis.call('ZRANGEBYSCORE', dk, '-inf', NOW, 'LIMIT', 0, PROMOTE_MAX)
    for _, m in ipairs(due) do
      local rid, tid = string.match(m, '^([^/]+)/([^/]+)$')
      redis.call('ZREM', K_DELAYED, m)
      redis.call('ZREM', dk, m)
      local h = load_req(rid)
      if h then
        add(h, 'delayed', -1)
        to_waiting(h, tid)
        sync_ready(h)
      end
    end
    if redis.call('EXISTS', dk) == 0 then redis.call('ZREM', K_DPRIO, p) end
    if #due == PROMOTE_MAX then
      FLOOR = tonumber(p)
      break
    end
  end
  FLOOR = math.max(FLOOR, sfloor)
  return FLOOR
end
