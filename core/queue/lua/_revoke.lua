-- lua/_revoke.lua: leases revoked by an operator's release or claim while the holder may still run.
-- One of the engine's helper files: it includes the helpers it uses, and only those
-- (scripts.py checks both).
-- Defines: revoke, move_on, end_revoked.
--
--@include base requests readiness index tasks completion

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
    local item = {lease, attempts_of(rid, tid, deliv + 1), c[1][2][2], h.handler, h.lease_ms}
    -- With its trace context, as dispatch_idle() hands it (no lease wait: -1).
    if h.tp then item = {item, {lease, string.sub(h.tp, 1, 55), -1}} end
    redis.call('RPUSH', hk, cjson.encode(item))
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
