-- Shared helpers: the top of the engine's Functions library (scripts.py builds it), run once
-- when Redis loads it. Every operation calls begin(KEYS) first, which sets the queue's keys
-- and resets the state of one call: nothing set by one call is seen by the next.
--
-- Every ARGV "now (ms)" may be 0: the operation then reads the Redis server's clock (TIME).
--
-- Every script receives the same eight queue-level keys first, in this order:
--   KEYS[1] <p>:{Q}:ready    zset  tenant slots "<prio>:<tenant>" -> band(prio) + seq
--   KEYS[2] <p>:{Q}:leases   zset  "<rid>/<task>/<delivery>" -> lease expiry (ms)
--   KEYS[3] <p>:{Q}:delayed  zset  "<rid>/<task>" -> due time (ms)
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
--
-- Pseudo-consumers of a request's group hold the parked entries of its PEL:
--   "~waiting" (back to waiting after a lease expired, a release or a requeue),
--   "~delayed" (retry backoff), "~dead" (dead letter). Real consumers are workers,
--   whose names cannot start with "~".

local GROUP = 'g'
local BAND = 1e12
local EVENTS_MAXLEN = 1000000  -- a safety valve: the mirror (core/mirror) trims behind its groups

-- The state of one call, set by begin().
local K_READY, K_LEASES, K_DELAYED, K_DEAD, K_EVENTS, K_WAKE, K_SEQ, K_STATS
local PREFIX, K_IDLE, K_DPRIO
local NOW  -- set by now_ms(), which every operation calls next
local DISPATCH  -- see sync_ready()
local PROMOTED, FLOOR  -- see promote_due()

local function begin(keys)
  K_READY, K_LEASES, K_DELAYED, K_DEAD = keys[1], keys[2], keys[3], keys[4]
  K_EVENTS, K_WAKE, K_SEQ, K_STATS = keys[5], keys[6], keys[7], keys[8]
  PREFIX = string.sub(K_READY, 1, #K_READY - #'ready')
  K_IDLE = PREFIX .. 'idle'
  K_DPRIO = PREFIX .. 'dprio'
  NOW, DISPATCH, PROMOTED, FLOOR = 0, false, false, -1
end

-- Milliseconds from the caller's clock when it sends one (tests control time that way), else
-- from the Redis server, so that leases mean the same to every host whatever their clocks say.
local function now_ms(arg)
  local n = tonumber(arg)
  if not (n and n > 0) then
    local t = redis.call('TIME')
    n = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  NOW = n
  return n
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

local NUMERIC = {'priority', 'concurrency', 'total', 'waiting', 'retry', 'leased', 'delayed',
                 'done', 'dead', 'cancelled', 'max_attempts', 'lease_ms', 'retention_ms',
                 'backoff_ms', 'backoff_max_ms'}
local FIELDS = {'state', 'tenant', 'handler'}
-- Runs at load, when Redis 7.0 gives a library no globals but `redis` (no ipairs here).
for i = 1, #NUMERIC do FIELDS[#FIELDS + 1] = NUMERIC[i] end

-- The request hash as a table with numbers where numbers belong; nil if absent.
local function load_req(rid)
  local vals = redis.call('HMGET', req_key(rid), unpack(FIELDS))
  if not vals[1] then return nil end
  local h = {id = rid}
  for i, f in ipairs(FIELDS) do h[f] = vals[i] end
  for _, f in ipairs(NUMERIC) do h[f] = tonumber(h[f]) end
  return h
end

local function next_seq(n)
  return redis.call('INCRBY', K_SEQ, n or 1)
end

local function event(kind, rid, ...)
  redis.call('XADD', K_EVENTS, 'MAXLEN', '~', EVENTS_MAXLEN, '*', 'type', kind, 'request', rid, ...)
end

local function wake()
  if redis.call('LLEN', K_WAKE) == 0 then redis.call('RPUSH', K_WAKE, '1') end
end

local function slot_of(h) return h.priority .. ':' .. h.tenant end

local function is_eligible(h)
  return (h.state == 'open' or h.state == 'active') and h.waiting > 0 and h.leased < h.concurrency
end

local function set_state(h, new_state, now)
  if h.state == new_state then return end
  redis.call('ZREM', state_key(h.state), h.id)
  redis.call('ZADD', state_key(new_state), now, h.id)
  redis.call('HSET', req_key(h.id), 'state', new_state, 'updated_ms', now)
  h.state = new_state
end

-- Apply counter deltas to the request hash and the table together.
local function bump(h, deltas)
  local args = {}
  for f, d in pairs(deltas) do
    if d ~= 0 then
      h[f] = h[f] + d
      args[#args + 1] = f
      args[#args + 1] = h[f]
    end
  end
  if #args > 0 then redis.call('HSET', req_key(h.id), unpack(args)) end
end

local function bump_waiting_stat(h, d)
  if d ~= 0 then redis.call('HINCRBY', K_STATS, 'w:' .. h.priority, d) end
end

-- Attempts a task has used: deliveries, less those that did not count (releases, claims).
local function attempts_of(rid, tid, deliveries)
  local rel = tonumber(redis.call('HGET', rel_key(rid), tid) or '0')
  return deliveries - rel
end

-- Lease up to n tasks of request h to consumer: parked retries first (XCLAIM from
-- "~waiting"), then new entries (XREADGROUP). Appends lease, attempt, payload, handler,
-- lease_ms per task to `out`, updates the counters, and returns how many it leased.
local function lease_tasks(h, consumer, n, lease_ms, out)
  local sk = stream_key(h.id)
  local expiry = NOW + lease_ms
  local zargs = {}
  local function lease_out(tid, deliv, attempt, payload)
    local lease = h.id .. '/' .. tid .. '/' .. deliv
    zargs[#zargs + 1] = expiry
    zargs[#zargs + 1] = lease
    if #zargs >= 1000 then  -- unpack() has a limit: flush in chunks
      redis.call('ZADD', K_LEASES, unpack(zargs))
      zargs = {}
    end
    out[#out + 1] = lease
    out[#out + 1] = attempt
    out[#out + 1] = payload
    out[#out + 1] = h.handler
    out[#out + 1] = lease_ms
  end
  local from_retry = 0
  if h.retry > 0 then
    local parked = redis.call('XPENDING', sk, GROUP, '-', '+', math.min(n, h.retry), '~waiting')
    for _, e in ipairs(parked) do
      local tid, deliv = e[1], tonumber(e[4]) + 1
      local c = redis.call('XCLAIM', sk, GROUP, consumer, 0, tid)
      lease_out(tid, deliv, attempts_of(h.id, tid, deliv), c[1][2][2])
      from_retry = from_retry + 1
    end
  end
  local fresh = 0
  if from_retry < n then
    local r = redis.call('XREADGROUP', 'GROUP', GROUP, consumer, 'COUNT', n - from_retry,
                         'STREAMS', sk, '>')
    if r then
      for _, e in ipairs(r[1][2]) do
        lease_out(e[1], 1, 1, e[2][2])
        fresh = fresh + 1
      end
    end
  end
  if #zargs > 0 then redis.call('ZADD', K_LEASES, unpack(zargs)) end
  local taken = from_retry + fresh
  if taken > 0 then
    bump(h, {waiting = -taken, retry = -from_retry, leased = taken})
    bump_waiting_stat(h, -taken)
  end
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
-- A request that becomes eligible also marks the call for dispatch_idle() at its end.
local function sync_ready(h)
  local slot = slot_of(h)
  local tk = tenant_key(slot)
  if is_eligible(h) then
    if not redis.call('ZSCORE', tk, h.id) then
      redis.call('ZADD', tk, next_seq(), h.id)
      if not redis.call('ZSCORE', K_READY, slot) then
        redis.call('ZADD', K_READY, (99 - h.priority) * BAND + next_seq(), slot)
      end
      DISPATCH = true
    end
  elseif redis.call('ZREM', tk, h.id) == 1 and redis.call('EXISTS', tk) == 0 then
    redis.call('ZREM', K_READY, slot)
  end
end

local promote_due  -- defined at the end (it needs to_waiting); take_ready() calls it

-- Lease up to `want` tasks to consumer from the ready index, as dequeue does: the head of
-- `ready` (highest priority band, least recently served tenant) gives a tenant slot, the head
-- of that tenant's zset the least recently served request, and up to
-- min(wanted, concurrency - leased, waiting) of its tasks are leased; request and tenant then
-- go to the back of their rotations. lease_ms 0 = each request's own.
local function take_ready(consumer, want, lease_override, out)
  local floor = promote_due()
  local got = 0
  while got < want do
    local top = redis.call('ZRANGE', K_READY, 0, 0)
    if #top == 0 then break end
    local slot = top[1]
    local prio = tonumber(string.match(slot, '^(%d+):'))
    if prio < floor then break end
    local tk = tenant_key(slot)
    local head = redis.call('ZRANGE', tk, 0, 0)
    local h = nil
    if #head > 0 then h = load_req(head[1]) end
    if h then
      local n = math.min(want - got, h.concurrency - h.leased, h.waiting)
      if n > 0 and (h.state == 'open' or h.state == 'active') then
        local lease_ms = h.lease_ms
        if lease_override > 0 then lease_ms = lease_override end
        got = got + lease_tasks(h, consumer, n, lease_ms, out)
      end
      if is_eligible(h) then
        redis.call('ZADD', tk, 'XX', next_seq(), h.id)
      else
        redis.call('ZREM', tk, h.id)
      end
    elseif #head > 0 then
      redis.call('ZREM', tk, head[1])
    end
    if redis.call('EXISTS', tk) == 1 then
      redis.call('ZADD', K_READY, 'XX', (99 - prio) * BAND + next_seq(), slot)
    else
      redis.call('ZREM', K_READY, slot)
    end
  end
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
  for _ = 1, HANDOFF_MAX do
    if redis.call('EXISTS', K_READY) == 0 then break end
    local top = redis.call('ZPOPMAX', K_IDLE)
    if #top == 0 then break end
    if tonumber(top[2]) >= NOW - HANDOFF_FRESH_MS then
      local consumer, lease_ms = string.match(top[1], '^(.+)|(%d+)$')
      local out = {}
      if take_ready(consumer, 1, tonumber(lease_ms), out) > 0 then
        local hk = handoff_key(consumer)
        redis.call('RPUSH', hk, cjson.encode(out))
        redis.call('PEXPIRE', hk, 10 * math.max(tonumber(out[5]), 1000))
      end
    end
  end
  if redis.call('EXISTS', K_READY) == 1 then
    wake()
  else
    redis.call('DEL', K_WAKE)  -- all handed over: a token would wake a worker for nothing
  end
end

-- Record a request's completion exactly once: stored, then announced. Returns the final state
-- or nil if the request is not finished.
local function maybe_complete(h, now)
  if not (h.state == 'active' or h.state == 'cancelling') then return nil end
  if h.waiting ~= 0 or h.leased ~= 0 or h.delayed ~= 0 then return nil end
  local final = 'done'
  if h.state == 'cancelling' then final = 'cancelled'
  elseif h.dead > 0 then final = 'failed' end
  set_state(h, final, now)
  redis.call('HSET', req_key(h.id), 'finished_ms', now)
  sync_ready(h)
  local ttl = h.retention_ms
  if h.dead > 0 then
    -- Its dead letters can be requeued, which needs the request: kept at least a week.
    ttl = math.max(ttl, KEEP_WITH_DEAD_MS)
  end
  if h.dead == 0 then
    redis.call('DEL', stream_key(h.id), rel_key(h.id), deadmap_key(h.id))
  else
    redis.call('PEXPIRE', stream_key(h.id), ttl)
    redis.call('PEXPIRE', rel_key(h.id), ttl)
    redis.call('PEXPIRE', deadmap_key(h.id), ttl)
  end
  redis.call('PEXPIRE', req_key(h.id), ttl)
  redis.call('ZREMRANGEBYSCORE', state_key(final), '-inf', '(' .. (now - ttl))
  event('completed', h.id, 'state', final, 'done', h.done, 'dead', h.dead, 'cancelled', h.cancelled)
  redis.call('PUBLISH', PREFIX .. 'done:' .. h.id, final)
  return final
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
  bump(h, {dead = 1})
  redis.call('HINCRBY', K_STATS, 'failed', 1)
  event('dead', h.id, 'task', tid, 'error', string.sub(err, 1, 200), 'worker', worker)
end

-- A task goes back to waiting (lease expired, released, requeued, backoff over).
local function to_waiting(h, tid)
  park(h.id, tid, '~waiting')
  bump(h, {waiting = 1, retry = 1})
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

-- Retries whose backoff is over go back to waiting, highest priority first, at most
-- PROMOTE_MAX per priority. Returns the priority floor for this call: when a level had more
-- due than that, nothing below it may be leased until they are promoted (-1: no floor), so a
-- due retry is never passed over by a lower priority however many there are. Runs once per
-- call (dispatch_idle() or the first take_ready(), whichever comes first).
promote_due = function()
  if PROMOTED then return FLOOR end
  PROMOTED = true
  local first = redis.call('ZRANGE', K_DELAYED, 0, 0, 'WITHSCORES')
  if #first == 0 or tonumber(first[2]) > NOW then return FLOOR end
  for _, p in ipairs(redis.call('ZRANGE', K_DPRIO, 0, -1)) do
    local dk = delayed_key(p)
    local due = redis.call('ZRANGEBYSCORE', dk, '-inf', NOW, 'LIMIT', 0, PROMOTE_MAX)
    for _, m in ipairs(due) do
      local rid, tid = string.match(m, '^([^/]+)/([^/]+)$')
      redis.call('ZREM', K_DELAYED, m)
      redis.call('ZREM', dk, m)
      local h = load_req(rid)
      if h then
        bump(h, {delayed = -1})
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
  return FLOOR
end
