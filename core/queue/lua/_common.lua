-- Shared helpers: the top of the engine's Functions library (scripts.py builds it), run once
-- when Redis loads it. Every operation calls begin(KEYS) first, which sets the queue's keys
-- and resets the state of one call: nothing set by one call is seen by the next.
--
-- Every ARGV "now (ms)" may be 0: the operation then reads the Redis server's clock (TIME).
--
-- Every script receives the same eight queue-level keys first, in this order:
--   KEYS[1] <p>:{Q}:ready    zset  tenant slots "<prio>:<tenant>" -> band(prio) + place in band
--   KEYS[2] <p>:{Q}:leases   zset  "<rid>/<task>/<delivery>" -> lease expiry (ms)
--   KEYS[3] <p>:{Q}:delayed  zset  "<rid>/<task>" -> due time (ms); and the member "~scheduled"
--                                  -> the earliest due time in `scheduled` (or earlier: a
--                                  cancel leaves it behind), so the hot path's one look at its
--                                  head sees both kinds of due work (promote_due())
--   KEYS[4] <p>:{Q}:dead     stream dead letters
--   KEYS[5] <p>:{Q}:events   stream lifecycle events (capped)
--   KEYS[6] <p>:{Q}:wake     list  wake-up tokens for idle workers
--   KEYS[7] <p>:{Q}:seq      string rotation / ordering sequence
--   KEYS[8] <p>:{Q}:stats    hash  waiting per priority ("w:<prio>") and cumulative counters
-- Keys derived here from KEYS[1] (same "{Q}" hash tag, so cluster-safe):
--   <p>:{Q}:req:<rid>            hash   request metadata and counters
--   <p>:{Q}:req:<rid>:tasks      stream the request's tasks, consumer group "g"
--   <p>:{Q}:req:<rid>:rel        hash   task -> deliveries that did not count as attempts
--   <p>:{Q}:req:<rid>:dead       hash   task -> id of its entry in the dead stream
--   <p>:{Q}:tr:<prio>:<tenant>   zset   eligible requests of one tenant at one priority -> seq
--   <p>:{Q}:state:<state>        zset   request index by state -> time of entering it
--   <p>:{Q}:done:<rid>           channel completion announcement
--   <p>:{Q}:idle                 zset   idle workers "<consumer>|<lease_ms>" -> when they
--                                       found nothing (registered by dequeue on request)
--   <p>:{Q}:handoff:<consumer>   list   tasks handed straight to that idle worker
--   <p>:{Q}:delayed:<prio>       zset   the delayed tasks of one priority "<rid>/<task>" -> due
--                                       (KEYS[3] holds them all; these order promotion)
--   <p>:{Q}:dprio                zset   priorities that have delayed tasks -> 99 - prio
--   <p>:{Q}:scheduled            zset   delayed requests (state "scheduled") -> due time (ms)
--   <p>:{Q}:scheduled:<prio>     zset   the same for one priority (these order promotion)
--   <p>:{Q}:sprio                zset   priorities that have scheduled requests -> 99 - prio
--   <p>:{Q}:paused               string when the queue was paused (pause.lua); while it is
--                                       there nothing is leased (take_ready()), handed
--                                       (dispatch_idle()) or woken for (wake())
--   <p>:{Q}:revoked              zset   leases an operator revoked (claim.lua: a release or claim
--                                       while the holder may still run the task) -> their
--                                       old expiry; see revoke()
--   <p>:{Q}:claimto              hash   revoked lease -> the consumer it was claimed for
--
-- Delayed requests (submit.lua with a due time): state "scheduled", hash fields "due_ms" and
-- "due_state" (the state it takes when due: "open" until sealed, then "active"). Its tasks
-- wait in its stream, neither eligible nor in the stats' w:<prio>, until promote_due() (or
-- run_now.lua) makes it due.
--
-- Follow-ups ("then", submit_after.lua): a request created with a parent is "held" (its
-- tasks wait, not eligible) until the parent completes. The parent's hash field "then" lists
-- them (ids separated by spaces), the follow-up's field "after" names the parent;
-- maybe_complete() of the parent decides (follow_on()).
--
-- Pseudo-consumers of a request's group hold the parked entries of its PEL:
--   "~waiting" (back to waiting after a lease expired, a release or a requeue),
--   "~delayed" (retry backoff), "~dead" (dead letter). Real consumers are workers,
--   whose names cannot start with "~".

local GROUP = 'g'
local BAND = 1e12
-- A safety valve: the mirror (core/mirror) trims behind its groups. Text, as every constant
-- passed to Redis at each call: Lua 5.1 would format a number each time.
local EVENTS_MAXLEN = '1000000'

-- The state of one call, set by begin().
local K_READY, K_LEASES, K_DELAYED, K_DEAD, K_EVENTS, K_WAKE, K_SEQ, K_STATS
local PREFIX, K_IDLE, K_DPRIO, K_PAUSED, K_REVOKED, K_CLAIMTO, K_SCHED, K_SPRIO
local PAUSED  -- is_paused(): nil until asked in this call
local NOW, NOW_TEXT  -- set by now_ms(), which every operation calls next
local DISPATCH  -- see sync_ready()
local READY_HELD  -- true: `ready` is known to hold a slot (saves dispatch_idle() asking)
local PROMOTED, FLOOR  -- see promote_due()
-- Written once, by finish(), instead of at every change (each write command inside a function
-- costs a call and an entry in the append-only file):
local REQS  -- rid -> the request's table, loaded once per call (load_req())
local DIRTY  -- tables with fields to write back: h._dirty = {field = true}
local STATS  -- stats hash field -> increment
local TRIM  -- state -> cutoff: the state index drops requests that entered it before
local LEASE_ADD  -- ZADD arguments for `leases` (expiry, lease, ...)
local MOVED  -- requests whose state changed: h._state0 is the index they are in
local EXPIRY  -- lease_ms -> the text of NOW + lease_ms, made once per call

local function begin(keys)
  if keys[1] ~= K_READY then  -- another queue than the last call's: derive its key names
    K_READY = keys[1]
    PREFIX = string.sub(K_READY, 1, #K_READY - #'ready')
    K_IDLE = PREFIX .. 'idle'
    K_DPRIO = PREFIX .. 'dprio'
    K_PAUSED = PREFIX .. 'paused'
    K_REVOKED = PREFIX .. 'revoked'
    K_CLAIMTO = PREFIX .. 'claimto'
    K_SCHED = PREFIX .. 'scheduled'
    K_SPRIO = PREFIX .. 'sprio'
  end
  K_LEASES, K_DELAYED, K_DEAD = keys[2], keys[3], keys[4]
  K_EVENTS, K_WAKE, K_SEQ, K_STATS = keys[5], keys[6], keys[7], keys[8]
  NOW, NOW_TEXT, DISPATCH, PROMOTED, FLOOR, READY_HELD = 0, nil, false, false, -1, false
  PAUSED = nil
  -- finish() leaves these empty; a call that failed part-way may not have: start clean.
  if not REQS or next(REQS) then REQS = {} end
  if not EXPIRY or next(EXPIRY) then EXPIRY = {} end
  if not DIRTY or next(DIRTY) then DIRTY = {} end
  if not STATS or next(STATS) then STATS = {} end
  if not TRIM or next(TRIM) then TRIM = {} end
  if not LEASE_ADD or next(LEASE_ADD) then LEASE_ADD = {} end
  if not MOVED or next(MOVED) then MOVED = {} end
end

-- Milliseconds from the caller's clock when it sends one (tests control time that way), else
-- from the Redis server, so that leases mean the same to every host whatever their clocks say.
local function now_ms(arg)
  local n = tonumber(arg)
  if not (n and n > 0) then
    local t = redis.call('TIME')
    n = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  NOW, NOW_TEXT = n, nil
  return n
end

-- Numbers become text whenever they are passed to Redis, through sprintf("%.14g") in Lua 5.1;
-- the small ones, which most counters are, are looked up instead.
local DIGITS = {}
for i = 0, 1024 do DIGITS[i] = '' .. i end
local function text(v)
  if v == NOW then  -- the call's time, often written several times
    if not NOW_TEXT then NOW_TEXT = '' .. v end
    return NOW_TEXT
  end
  return DIGITS[v] or v
end

local function req_key(rid) return PREFIX .. 'req:' .. rid end
local function stream_key(rid) return PREFIX .. 'req:' .. rid .. ':tasks' end
local function rel_key(rid) return PREFIX .. 'req:' .. rid .. ':rel' end
local function deadmap_key(rid) return PREFIX .. 'req:' .. rid .. ':dead' end
local function tenant_key(slot) return PREFIX .. 'tr:' .. slot end
local function state_key(state) return PREFIX .. 'state:' .. state end
local function handoff_key(consumer) return PREFIX .. 'handoff:' .. consumer end
local HANDOFF_FRESH_MS = 1500  -- an idle registration older than this is not trusted
local HANDOFF_MAX = 16  -- idle workers served by one call; the rest wake up and dequeue
local function delayed_key(prio) return K_DELAYED .. ':' .. prio end
local KEEP_WITH_DEAD_MS = 7 * 86400000  -- a finished request with dead letters, at least
local PROMOTE_MAX = 100  -- due retries promoted per priority level by one call
local SCHED_MARK = '~scheduled'  -- its member in `delayed` (see the header)
local SCHED_MAX = 200  -- due delayed requests promoted per priority level by one call
local function sched_key(prio) return K_SCHED .. ':' .. prio end

-- The request fields every operation reads (load_req()): those leasing needs (LEASE), then
-- those a completion or a counter change needs (LATE). Leasing, the hot path's half that
-- completes nothing, reads LEASE alone (load_req(rid, true)): a field missing from the hash
-- (most counters of a new request) costs Redis a scan of the whole hash, and LATE fields
-- are read, all at once, only if used. The rare ones (add, seal: total; fail, reap:
-- max_attempts and the backoff) are read when first used.
local LEASE = {'state', 'tenant', 'handler', 'priority', 'concurrency', 'waiting', 'retry',
               'leased', 'lease_ms'}
local LATE = {'delayed', 'done', 'dead', 'cancelled', 'retention_ms', 'discarded', 'then', 'rel'}
local FIELDS, IS_LATE = {}, {retention_text = true}  -- LEASE, then LATE; which are LATE
for i = 1, #LEASE do FIELDS[i] = LEASE[i] end
for i = 1, #LATE do
  FIELDS[#LEASE + i] = LATE[i]
  IS_LATE[LATE[i]] = true
end
local RARE = {'total', 'max_attempts', 'backoff_ms', 'backoff_max_ms'}

local is_eligible

-- The LATE fields of a table loaded for leasing, from their values in the hash (v), except
-- those the call has set since.
local function set_late(h, v)
  rawset(h, '_late', true)
  for i = 1, #LATE do
    local f = LATE[i]
    if rawget(h, f) == nil then
      if f == 'then' or f == 'rel' then
        rawset(h, f, v[i])  -- text, absent from most hashes
      elseif f == 'retention_ms' then
        rawset(h, f, tonumber(v[i]))
        rawset(h, 'retention_text', v[i])
      else
        rawset(h, f, tonumber(v[i]) or 0)
      end
    end
  end
end

-- A request table's missing field: the LATE ones of a table loaded for leasing, or the rare
-- ones, read from its hash, each group at once.
local REQ_META = {__index = function(h, f)
  if IS_LATE[f] then
    if rawget(h, '_late') then return nil end  -- loaded: absent from the hash ('then', 'rel')
    set_late(h, redis.call('HMGET', req_key(h.id), unpack(LATE)))
    return rawget(h, f)
  end
  if f == 'total' or f == 'max_attempts' or f == 'backoff_ms' or f == 'backoff_max_ms' then
    local v = redis.call('HMGET', req_key(h.id), unpack(RARE))
    for i = 1, #RARE do
      if rawget(h, RARE[i]) == nil then rawset(h, RARE[i], tonumber(v[i]) or 0) end
    end
    return rawget(h, f)
  end
end}

-- The request hash as a table with numbers where numbers belong; nil if absent. A counter
-- that is not in the hash is 0 (submit writes none that is). Loaded once per call: every
-- change goes through this table (add(), set_field()) and finish() writes it back.
-- h._elig: whether the request is in its tenant's ready zset (see sync_ready()).
-- for_lease: read the LEASE fields only (the others follow if used).
local function load_req(rid, for_lease)
  local h = REQS[rid]
  if h then return h end
  local v = redis.call('HMGET', req_key(rid), unpack(for_lease and LEASE or FIELDS))
  if not v[1] then return nil end
  -- One constructor, so the table is made at its size instead of grown key by key.
  if for_lease then
    h = {id = rid, state = v[1], tenant = v[2], handler = v[3], priority = tonumber(v[4]),
         concurrency = tonumber(v[5]), waiting = tonumber(v[6]) or 0,
         retry = tonumber(v[7]) or 0, leased = tonumber(v[8]) or 0, lease_ms = tonumber(v[9]),
         _late = false, _elig = false, _state0 = v[1], _dirty = false, _moved = false}
  else
    h = {id = rid, state = v[1], tenant = v[2], handler = v[3], priority = tonumber(v[4]),
         concurrency = tonumber(v[5]), waiting = tonumber(v[6]) or 0,
         retry = tonumber(v[7]) or 0, leased = tonumber(v[8]) or 0, lease_ms = tonumber(v[9]),
         delayed = tonumber(v[10]) or 0, done = tonumber(v[11]) or 0,
         dead = tonumber(v[12]) or 0, cancelled = tonumber(v[13]) or 0,
         retention_ms = tonumber(v[14]), retention_text = v[14],
         discarded = tonumber(v[15]) or 0, ['then'] = v[16], rel = v[17],
         _late = true, _elig = false, _state0 = v[1], _dirty = false, _moved = false}
  end
  setmetatable(h, REQ_META)
  h._elig = is_eligible(h)
  REQS[rid] = h
  return h
end

local function mark(h, f)
  local d = h._dirty
  if not d then
    d = {}
    h._dirty = d
    DIRTY[#DIRTY + 1] = h
  end
  d[f] = true
end

local function set_field(h, f, v)
  h[f] = v
  mark(h, f)
end

-- Deliveries of task tid that did not count as attempts (release, claim; requeue sets them),
-- in req:<rid>:rel. The request's field "rel" says that key exists, so that the many requests
-- that complete without one do not ask Redis to delete it (a missing key costs as much).
local function write_rel(h, cmd, tid, v)
  redis.call(cmd, rel_key(h.id), tid, v)
  if not h.rel then set_field(h, 'rel', '1') end
end

-- Add d to a counter of the request (written back by finish()).
local function add(h, f, d)
  if d ~= 0 then
    h[f] = h[f] + d
    mark(h, f)
  end
end

-- Add d to a field of the queue's stats hash (written by finish(), one HINCRBY per field).
local function stat(f, d)
  if d ~= 0 then STATS[f] = (STATS[f] or 0) + d end
end

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

-- Whether an operator paused the queue (pause.lua): asked once per call, and only where work
-- would be handed out, so that a submit or an ack pays nothing for it.
local function is_paused()
  if PAUSED == nil then PAUSED = redis.call('EXISTS', K_PAUSED) == 1 end
  return PAUSED
end

local function wake()
  if redis.call('LLEN', K_WAKE) == 0 and not is_paused() then redis.call('RPUSH', K_WAKE, '1') end
end

local function slot_of(h) return text(h.priority) .. ':' .. h.tenant end

is_eligible = function(h)
  return (h.state == 'open' or h.state == 'active') and h.waiting > 0 and h.leased < h.concurrency
end

-- The state index (state:<state>) follows in finish(): one ZREM and one ZADD per pair of
-- states for the whole call, from where the request was to where it ends.
local function set_state(h, new_state, now)
  if h.state == new_state then return end
  if not h._moved then MOVED[#MOVED + 1] = h end
  h._moved = now
  set_field(h, 'state', new_state)
  set_field(h, 'updated_ms', now)
end

local function bump_waiting_stat(h, d)
  stat('w:' .. text(h.priority), d)
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

-- The end of every operation (scripts.py calls it with the operation's result): the changed
-- request fields, one HSET per request; the stats, one HINCRBY per field; the state indexes
-- trimmed once.
local function finish(result)
  flush_leases()
  if #DIRTY > 0 then
    for _, h in ipairs(DIRTY) do
      local args, n = {}, 0
      for f in pairs(h._dirty) do
        args[n + 1] = f
        args[n + 2] = text(h[f])
        n = n + 2
      end
      redis.call('HSET', req_key(h.id), unpack(args))
      h._dirty = false
    end
    DIRTY = {}
  end
  if #MOVED > 0 then
    -- State indexes: the requests that left each state, and entered each, in one call each.
    local out_of, into = {}, {}
    for _, h in ipairs(MOVED) do
      if h.state ~= h._state0 then
        local o, i = out_of[h._state0], into[h.state]
        if not o then o = {}; out_of[h._state0] = o end
        if not i then i = {}; into[h.state] = i end
        o[#o + 1] = h.id
        i[#i + 1] = text(h._moved)
        i[#i + 1] = h.id
        h._state0 = h.state
      end
      h._moved = false
    end
    MOVED = {}
    for state, ids in pairs(out_of) do
      for j = 1, #ids, 500 do
        redis.call('ZREM', state_key(state), unpack(ids, j, math.min(j + 499, #ids)))
      end
    end
    for state, args in pairs(into) do
      for j = 1, #args, 1000 do
        redis.call('ZADD', state_key(state), unpack(args, j, math.min(j + 999, #args)))
      end
    end
  end
  if next(STATS) then
    for f, d in pairs(STATS) do
      if d ~= 0 then redis.call('HINCRBY', K_STATS, f, d) end
    end
    STATS = {}
  end
  if next(TRIM) then
    for state, cutoff in pairs(TRIM) do
      redis.call('ZREMRANGEBYSCORE', state_key(state), '-inf', '(' .. cutoff)
    end
    TRIM = {}
  end
  return result
end

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

-- Whether the request is finished once its counters say so (maybe_complete() records it).
local function completes(h)
  return (h.state == 'active' or h.state == 'cancelling')
    and h.waiting == 0 and h.leased == 0 and h.delayed == 0
end

-- Record a request's completion exactly once: stored, then announced. Returns the final state
-- or nil if the request is not finished.
local function maybe_complete(h, now)
  if not completes(h) then return nil end
  local final = 'done'
  if h.state == 'cancelling' then final = 'cancelled'
  elseif h.dead > 0 or h.discarded > 0 then final = 'failed' end
  set_state(h, final, now)
  set_field(h, 'finished_ms', now)
  sync_ready(h)
  local ttl = h.retention_ms
  if h.dead > 0 then
    -- Its dead letters can be requeued, which needs the request: kept at least a week.
    ttl = math.max(ttl, KEEP_WITH_DEAD_MS)
  end
  if h.dead == 0 then
    -- No dead-letter map: its entries leave with the letters (requeue, delete_dead).
    if h.rel then
      redis.call('DEL', stream_key(h.id), rel_key(h.id))
    else
      redis.call('DEL', stream_key(h.id))
    end
  else
    redis.call('PEXPIRE', stream_key(h.id), ttl)
    redis.call('PEXPIRE', rel_key(h.id), ttl)
    redis.call('PEXPIRE', deadmap_key(h.id), ttl)
  end
  if ttl == h.retention_ms and h.retention_text then
    redis.call('PEXPIRE', req_key(h.id), h.retention_text)  -- as stored: no number to write
  else
    redis.call('PEXPIRE', req_key(h.id), ttl)
  end
  -- The index forgets requests whose hash has expired: once per call (finish()).
  local cutoff = now - ttl
  if not TRIM[final] or TRIM[final] < cutoff then TRIM[final] = cutoff end
  event('completed', h.id, 'state', final, 'done', text(h.done), 'dead', text(h.dead),
        'cancelled', text(h.cancelled))
  redis.call('PUBLISH', PREFIX .. 'done:' .. h.id, final)
  if h['then'] then follow_on(h, final, now) end
  return final
end

-- A held follow-up is cancelled with its parent: its tasks were never delivered (a held
-- request is never eligible), so moving the group's cursor past them drops them all. A held
-- request's tasks are not in the stats' waiting counts (w:<prio>: work that can run).
local function cancel_held(c, now, parent)
  redis.call('XGROUP', 'SETID', stream_key(c.id), GROUP, '$')
  local n = c.waiting
  add(c, 'waiting', -n)
  add(c, 'cancelled', n)
  set_state(c, 'cancelling', now)
  event('cancelled', c.id, 'dropped', text(n), 'running', '0', 'after', parent)
  maybe_complete(c, now)
end

-- The parent h completed as `final`: its held follow-ups start (done) or are cancelled
-- (cancelled), and so on down a chain. A failed parent leaves them held: requeuing its dead
-- letters reopens it, and its next completion decides again. Follow-ups no longer held
-- (cancelled by an operator, or started by an earlier completion) are left alone.
follow_on = function(h, final, now)
  if final == 'failed' then return end
  for cid in string.gmatch(h['then'], '[^ ]+') do
    local c = load_req(cid)
    if c and c.state == 'held' then
      if final == 'done' then
        set_state(c, 'active', now)
        bump_waiting_stat(c, c.waiting)
        event('unheld', cid, 'after', h.id)
        sync_ready(c)
        maybe_complete(c, now)
      else
        cancel_held(c, now, h.id)
      end
    end
  end
end

local function split_lease(lease)
  local rid, tid, deliv = string.match(lease, '^([^/]+)/([^/]+)/(%d+)$')
  return rid, tid, tonumber(deliv)
end

-- Deliveries so far of one pending entry, and who holds it.
local function pending_info(rid, tid)
  local sk = stream_key(rid)
  if redis.call('EXISTS', sk) == 0 then return nil, nil end  -- finished: its stream is gone
  local p = redis.call('XPENDING', sk, GROUP, tid, tid, 1)
  if #p == 0 then return nil, nil end
  return tonumber(p[1][4]), p[1][2]
end


-- Move a pending entry to a pseudo-consumer without counting a delivery.
local function park(rid, tid, who)
  redis.call('XCLAIM', stream_key(rid), GROUP, who, 0, tid, 'JUSTID')
end

-- A task leaves the queue for good (done or cancelled): out of the PEL and the stream.
local function retire(rid, tid)
  local sk = stream_key(rid)
  redis.call('XACK', sk, GROUP, tid)
  redis.call('XDEL', sk, tid)
end

-- Dead-letter a pending task of request h (already counted out of leased/delayed by the caller).
local function to_dead(h, tid, attempts, err, tb, worker, now)
  park(h.id, tid, '~dead')
  local payload = redis.call('XRANGE', stream_key(h.id), tid, tid)
  local body = ''
  if #payload > 0 then body = payload[1][2][2] end
  local did = redis.call('XADD', K_DEAD, '*', 'request', h.id, 'task', tid, 'payload', body,
    'error', err, 'traceback', tb, 'attempts', attempts, 'worker', worker, 'ts', now,
    'handler', h.handler, 'tenant', h.tenant)
  redis.call('HSET', deadmap_key(h.id), tid, did)
  add(h, 'dead', 1)
  stat('failed', 1)
  event('dead', h.id, 'task', tid, 'error', string.sub(err, 1, 200), 'worker', worker)
end

-- A task goes back to waiting (lease expired, released, requeued, backoff over).
local function to_waiting(h, tid)
  park(h.id, tid, '~waiting')
  add(h, 'waiting', 1)
  add(h, 'retry', 1)
  bump_waiting_stat(h, 1)
end

-- A task waits out its retry backoff: in the queue-wide due index (next due time, counts) and
-- in its priority's, which promote_due() walks from the highest priority down.
local function delay_task(h, rid, tid, due)
  local m = rid .. '/' .. tid
  redis.call('ZADD', K_DELAYED, due, m)
  redis.call('ZADD', delayed_key(h.priority), due, m)
  redis.call('ZADD', K_DPRIO, 99 - h.priority, h.priority)
end

local function undelay_task(h, rid, tid)
  local m = rid .. '/' .. tid
  redis.call('ZREM', K_DELAYED, m)
  local dk = delayed_key(h.priority)
  if redis.call('ZREM', dk, m) == 1 and redis.call('EXISTS', dk) == 0 then
    redis.call('ZREM', K_DPRIO, h.priority)
  end
end

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
promote_due = function()
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

-- An operator took a task from a holder that may still be running it (claim.lua: a release,
-- or a claim for `consumer`): the holder's lease is revoked. Its token moves from `leases` to
-- `revoked` with its expiry, so a renewal, ack or fail of it is refused (the holder learns at
-- its next renewal and stops the run at its next check), yet the task stays leased to its
-- holder and counted in the request's `leased` (no field to read on the hot path): neither it
-- nor another task of the request is handed out in its place while the old run may go on
-- (invariant 2). It moves on (end_revoked()) once the run is known to be over: the holder's
-- release, ack or fail of the revoked lease (refused, but each says the run stopped), a
-- reclaim of the holder, or the reaper once the old expiry has passed.
local function revoke(lease, expiry, consumer)
  redis.call('ZREM', K_LEASES, lease)
  redis.call('ZADD', K_REVOKED, expiry, lease)
  if consumer ~= '' then redis.call('HSET', K_CLAIMTO, lease, consumer) end
end

-- A task taken from its holder moves on, its lease already out of `leases` (delivery `deliv`):
-- dropped as cancelled if its request is being cancelled; else back to waiting (consumer "")
-- or leased to `consumer` and pushed to its handoff list, which a worker of that name reads
-- first at its next dequeue or idle wait (it expires unrenewed, and is reaped, if none does).
-- Returns "cancelled", "waiting" or "claimed".
local function move_on(h, tid, deliv, consumer, now)
  local rid = h.id
  local outcome = 'claimed'
  if h.state == 'cancelling' then
    add(h, 'leased', -1)
    retire(rid, tid)
    add(h, 'cancelled', 1)
    outcome = 'cancelled'
  elseif consumer == '' then
    add(h, 'leased', -1)
    to_waiting(h, tid)
    outcome = 'waiting'
  else
    local c = redis.call('XCLAIM', stream_key(rid), GROUP, consumer, 0, tid)
    local lease = rid .. '/' .. tid .. '/' .. (deliv + 1)
    redis.call('ZADD', K_LEASES, now + h.lease_ms, lease)
    local hk = handoff_key(consumer)
    redis.call('RPUSH', hk, cjson.encode({lease, attempts_of(rid, tid, deliv + 1), c[1][2][2],
                                          h.handler, h.lease_ms}))
    redis.call('PEXPIRE', hk, 10 * math.max(h.lease_ms, 1000))
  end
  sync_ready(h)
  maybe_complete(h, now)
  return outcome
end

-- The run of a revoked lease is over (see revoke()): its task moves on as the operator asked.
-- `by`: "holder" (it said its run stopped), "expiry" (the reaper) or "reclaim". Returns the
-- outcome (move_on()) and the request id, or nil if `lease` is not a revoked lease.
local function end_revoked(lease, now, by)
  if redis.call('ZREM', K_REVOKED, lease) == 0 then return nil end
  local consumer = redis.call('HGET', K_CLAIMTO, lease)
  if consumer then redis.call('HDEL', K_CLAIMTO, lease) end
  local rid, tid, deliv = split_lease(lease)
  local h = rid and load_req(rid)
  -- Never expected: a revoked lease keeps its request from completing, so its hash stays.
  if not h then return 'gone', rid end
  local outcome = move_on(h, tid, deliv, consumer or '', now)
  event('moved', rid, 'task', tid, 'outcome', outcome, 'by', by, 'to', consumer or '')
  return outcome, rid
end
