--[[ reclaim: an operator takes back every lease of a dead worker (its last heartbeat is older
than its --dead-after) without waiting for the reaper: each goes back to waiting (dropped as
cancelled if its request is being cancelled) without spending an attempt, as a release does.
Once nothing of it is left, the worker leaves the registry. A worker that beat within its
dead-after is refused: it may still be running its tasks.

With ARGV[6] = "crashed", its supervisor says the worker's process is gone (it saw it exit):
its leases are reaped now, as the reaper would reap them once expired (the delivery counts as
an attempt: a task that kills its worker reaches the dead letters), whatever its last beat.

Its leases are found without scanning the queue: the tasks its last heartbeat listed (the
worker's registry entry, this queue's only), what was handed to it (handoff:<worker>), and
the expired leases (every lease it renewed at its last beat has expired since: a worker
leases for its dead-after), ARGV[4] of them from offset ARGV[5]; each is checked against the
task's pending entry (held by this worker, with the same delivery count). A lease of it that
an operator revoked (claim.lua) moves on now as the operator asked (end_revoked()): the worker
is not running it any more. The revoked leases (a few) are looked at on the first call.

KEYS[1..8] queue-level keys (see _base.lua)
KEYS[9]    <p>:{Q}:workers          zset worker -> last beat (ms)
KEYS[10]   <p>:{Q}:worker:<name>    hash its registry entry (info JSON)
Derived:   req:<rid>, req:<rid>:tasks|rel, tr:<prio>:<handler>:<tenant>, state:<state>, done:<rid>,
           idle (its entries removed), handoff:<worker>, delayed:<prio>, dprio, revoked,
           claimto, handoff:<consumer>

ARGV[1] now (ms)   ARGV[2] worker   ARGV[3] its dead-after (ms; 0 = from its registry entry)
ARGV[4] expired leases to look at   ARGV[5] offset into the expired leases
ARGV[6] "crashed" (optional): reap its leases now, as above
ARGV[7] "0" (optional): count no handler metrics (a dead letter made here counts as the
        handler's failure in metrics:<minute>, see _metrics.lua)

Returns {released, cancelled, next} (released: back to waiting or, for a revoked lease, to
the consumer it was claimed for): next = the offset to call again with when ARGV[4]
expired leases were looked at (there may be more), else -1: the worker was removed from the
registry.
Errors: -8 no such worker, -7 the worker beat within its dead-after (or none is known)
--]]
--@include base requests readiness index tasks completion leasing revoke

local now, worker = now_ms(ARGV[1]), ARGV[2]
local limit, offset = tonumber(ARGV[4]), tonumber(ARGV[5])
local beat = redis.call('ZSCORE', KEYS[9], worker)
if not beat then return -8 end
local info = redis.call('HGET', KEYS[10], 'info')
local decoded = nil
if info then
  local ok, t = pcall(cjson.decode, info)
  if ok and type(t) == 'table' then decoded = t end
end
local crashed = ARGV[6] == 'crashed'
METRICS_ON = ARGV[7] ~= '0'
local dead_after = tonumber(ARGV[3]) or 0
if dead_after <= 0 and decoded then dead_after = tonumber(decoded.dead_after_ms) or 0 end
if not crashed and (dead_after <= 0 or now - tonumber(beat) < dead_after) then return -7 end

local queue = string.match(PREFIX, '{(.*)}:$')
local seen, candidates = {}, {}
local function consider(rid, tid)
  if rid and tid and not seen[rid .. '/' .. tid] then
    seen[rid .. '/' .. tid] = true
    candidates[#candidates + 1] = {rid, tid}
  end
end
if offset == 0 and decoded and type(decoded.tasks) == 'table' then
  for _, t in ipairs(decoded.tasks) do
    if type(t) == 'table' and t.queue == queue then consider(t.request, t.task) end
  end
end
local hk = PREFIX .. 'handoff:' .. worker
if offset == 0 then
  for _, item in ipairs(redis.call('LRANGE', hk, 0, -1)) do
    local ok, t = pcall(cjson.decode, item)
    if ok and type(t) == 'table' and type(t[1]) == 'table' then t = t[1] end  -- {leases, traces}
    if ok and type(t) == 'table' then
      for i = 1, #t, 5 do
        local rid, tid = split_lease(t[i])
        consider(rid, tid)
      end
    end
  end
end
-- A crashed worker's leases may not have expired yet, nor been listed by a beat (one taken
-- since its last): every lease of the queue is looked at (one per running task: a few).
local expired = redis.call('ZRANGEBYSCORE', K_LEASES, '-inf',
                           crashed and '+inf' or ('(' .. text(now)), 'LIMIT', offset, limit)
for _, lease in ipairs(expired) do
  local rid, tid = split_lease(lease)
  consider(rid, tid)
end
if offset == 0 then
  for _, lease in ipairs(redis.call('ZRANGE', K_REVOKED, 0, limit - 1)) do
    local rid, tid = split_lease(lease)
    consider(rid, tid)
  end
end

local released, cancelled, removed = 0, 0, {}
for _, c in ipairs(candidates) do
  local rid, tid = c[1], c[2]
  local deliveries, holder = pending_info(rid, tid)
  local h = holder == worker and load_req(rid)
  local token = h and (rid .. '/' .. tid .. '/' .. deliveries)
  if h and redis.call('ZREM', K_LEASES, token) == 1 then
    removed[token] = true
    if not crashed then write_rel(h, 'HINCRBY', tid, 1) end
    add(h, 'leased', -1)
    local outcome = 'waiting'
    if h.state == 'cancelling' then
      retire(rid, tid)
      add(h, 'cancelled', 1)
      cancelled = cancelled + 1
      outcome = 'cancelled'
    elseif crashed and attempts_of(rid, tid, deliveries) >= h.max_attempts then
      to_dead(h, tid, attempts_of(rid, tid, deliveries),
              'worker ' .. worker .. ' died (its process exited) while it ran the task', '',
              worker, now)
      outcome = 'dead'
    else
      to_waiting(h, tid)
      released = released + 1
    end
    if crashed then
      event('reaped', rid, 'task', tid, 'worker', worker, 'outcome', outcome, 'by', 'supervisor')
    else
      event('released', rid, 'task', tid, 'worker', worker, 'by', 'reclaim')
    end
    sync_ready(h)
    maybe_complete(h, now)
  elseif h then
    local outcome = end_revoked(token, now, 'reclaim')
    if outcome == 'cancelled' then
      cancelled = cancelled + 1
    elseif outcome then
      released = released + 1
    end
  end
end
local next_offset = -1
if #expired == limit then
  -- What this call took out of `leases` no longer shifts the rest: step over what is left.
  next_offset = offset
  for _, lease in ipairs(expired) do
    if not removed[lease] then next_offset = next_offset + 1 end
  end
else
  redis.call('ZREM', KEYS[9], worker)
  redis.call('DEL', KEYS[10], hk)
  -- Its idle entries, whatever lease length they name (one per idle worker: a few), so that
  -- the work it held is not handed straight back to it below.
  local prefix = worker .. '|'
  for _, member in ipairs(redis.call('ZRANGE', K_IDLE, 0, -1)) do
    if string.sub(member, 1, #prefix) == prefix then redis.call('ZREM', K_IDLE, member) end
  end
  event('reclaimed', '', 'worker', worker, 'by', crashed and 'supervisor' or 'operator')
end
dispatch_idle()
return {released, cancelled, next_offset}
