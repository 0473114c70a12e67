-- lua/_tasks.lua: one task's moves between the PEL's pseudo-consumers: parked, retired,
--   dead-lettered, waiting, delayed.
-- One of the engine's helper files: it includes the helpers it uses, and only those
-- (scripts.py checks both).
-- Defines: split_lease, pending_info, park, retire, to_dead, to_waiting, delay_task, undelay_task,
--   attempts_of.
--
--@include base requests metrics readiness

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
  metric(h.handler, 'f', 1)
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

-- Attempts a task has used: deliveries, less those that did not count (releases, claims).
local function attempts_of(rid, tid, deliveries)
  local rel = tonumber(redis.call('HGET', rel_key(rid), tid) or '0')
  return deliveries - rel
end
