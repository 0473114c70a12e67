-- lua/_readiness.lua: the rotation sequence and priority bands, events, pause and wake-up, a
--   request's state and its index, lease bookkeeping.
-- One of the engine's helper files: it includes the helpers it uses, and only those
-- (scripts.py checks both).
-- Defines: next_seq, band_tail, event, utf8_head, append_tasks, tasks_event, trace_event,
--   is_paused, wake, slot_of, set_state, bump_waiting_stat, add_lease, flush_leases.
--
--@include base requests

local function next_seq(n)
  return redis.call('INCRBY', K_SEQ, n or 1)
end

-- The score that puts a slot last in its priority's band of `ready`: one past the band's
-- last slot. Offsets within a band grow only with that band's rotations (not with the
-- queue's sequence, which every request and rotation advances), and when they reach half the
-- band's width the band is renumbered 1..k in its order: a slot never crosses into the next
-- band, so strict priority holds however long the queue lives.
local RENUMBER_AT = BAND / 2
local function band_tail(prio)
  local lo = (99 - prio) * BAND
  local from, to = string.format('%.0f', lo), '(' .. string.format('%.0f', lo + BAND)
  local last = redis.call('ZRANGE', K_READY, to, from, 'BYSCORE', 'REV', 'LIMIT', '0', '1',
                          'WITHSCORES')
  local offset = 1
  if last[2] then offset = tonumber(last[2]) - lo + 1 end
  if offset > RENUMBER_AT then
    local band = redis.call('ZRANGE', K_READY, from, to, 'BYSCORE')
    for i = 1, #band do redis.call('ZADD', K_READY, 'XX', lo + i, band[i]) end
    offset = #band + 1
  end
  return lo + offset
end

local function event(kind, rid, ...)
  redis.call('XADD', K_EVENTS, 'MAXLEN', '~', EVENTS_MAXLEN, '*', 'type', kind, 'request', rid, ...)
end

-- Search (issue 20): the console finds requests by words of their payloads through the
-- database mirror, but a task leaves Redis when it is done, often before the mirror has read
-- the request's first event. So the event that brings a request's first SEARCH_TASKS tasks
-- (submitted, or added while streaming) carries their ids ("ids", separated by spaces) and
-- up to SEARCH_BYTES of their payloads ("text", separated by newlines). Bounded: `events`
-- holds up to EVENTS_MAXLEN entries while no mirror trims it.
local SEARCH_TASKS = 8
local SEARCH_BYTES = 512

-- The first `n` bytes of `s`, fewer if byte n + 1 continues a UTF-8 character.
local function utf8_head(s, n)
  local b = string.byte(s, n + 1)
  while n > 0 and b and b >= 0x80 and b < 0xC0 do
    n = n - 1
    b = string.byte(s, n + 1)
  end
  return string.sub(s, 1, n)
end

-- Append args[first..] (payloads) to the task stream `sk` of a request that had `had` tasks.
-- Returns the search fields for its event (see SEARCH_TASKS): ids, text ('' and '' when
-- these tasks are not among its first).
local function append_tasks(sk, args, first, had)
  local ids, parts, left = {}, {}, SEARCH_BYTES
  local last = first + SEARCH_TASKS - had - 1
  for i = first, #args do
    local id = redis.call('XADD', sk, '*', 'p', args[i])
    if i <= last then
      ids[#ids + 1] = id
      if left > 0 then
        local p = args[i]
        if #p > left then p = utf8_head(p, left) end
        parts[#parts + 1] = p
        left = left - #p - 1
      end
    end
  end
  if #ids == 0 then return '', '' end
  return table.concat(ids, ' '), table.concat(parts, '\n')
end

-- event() for the event that brings tasks: with their search fields, if any.
local function tasks_event(kind, rid, ids, txt, ...)
  if ids == '' then return event(kind, rid, ...) end
  event(kind, rid, 'ids', ids, 'text', txt, ...)
end

-- The fields an event of a request submitted with a trace context adds ("tp", its W3C
-- traceparent: the mirror's search and the request page read its trace id), before `...`.
local function trace_event(tp, ...)
  if tp then return 'tp', tp, ... end
  return ...
end

-- Whether an operator paused the queue (pause.lua): asked once per call, and only where work
-- would be handed out, so that a submit or an ack pays nothing for it.
local function is_paused()
  if PAUSED == nil then PAUSED = redis.call('EXISTS', K_PAUSED) == 1 end
  return PAUSED
end

local function wake()
  if redis.call('LLEN', K_WAKE) == 0 and not is_paused() then redis.call('RPUSH', K_WAKE, '1') end
end

-- A request's slot in `ready`: its priority, handler and tenant. Slots are per handler so that
-- a worker leases only what it runs (take_ready()'s `runs`) by skipping whole slots, never
-- single requests.
local function slot_of(h) return text(h.priority) .. ':' .. h.handler .. ':' .. h.tenant end

-- The state index (state:<state>) follows in finish(): one ZREM and one ZADD per pair of
-- states for the whole call, from where the request was to where it ends.
local function set_state(h, new_state, now)
  if h.state == new_state then return end
  if not h._moved then MOVED[#MOVED + 1] = h end
  h._moved = now
  set_field(h, 'state', new_state)
  set_field(h, 'updated_ms', now)
end

-- Waiting work per priority and handler ("w:<prio>:<handler>"): what can run at each level,
-- and what waits for a handler no live worker runs (introspect.waiting_by_handler()).
local function bump_waiting_stat(h, d)
  stat('w:' .. text(h.priority) .. ':' .. h.handler, d)
end

-- Leases to add to `leases`, written in one ZADD by flush_leases().
local function add_lease(expiry, lease)
  LEASE_ADD[#LEASE_ADD + 1] = expiry
  LEASE_ADD[#LEASE_ADD + 1] = lease
  if #LEASE_ADD >= 1000 then  -- unpack() has a limit: flush in chunks
    redis.call('ZADD', K_LEASES, unpack(LEASE_ADD))
    LEASE_ADD = {}
  end
end

local function flush_leases()
  if #LEASE_ADD > 0 then
    redis.call('ZADD', K_LEASES, unpack(LEASE_ADD))
    LEASE_ADD = {}
  end
end
