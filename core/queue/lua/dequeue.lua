--[[ dequeue: acknowledge finished leases, then lease up to `count` new tasks. The hot path.

Both halves are optional (count 0 = ack only; no leases = dequeue only), so a worker makes
one round trip per batch: ack what it finished and take the next tasks.

Ack: a lease "<rid>/<task>/<delivery>" is accepted only while it is held: present in `leases`
with an expiry not yet past. An ack of an expired, reaped, claimed or already acked lease is
refused and changes nothing, so a task is counted done once.

Dequeue: first due retries are promoted from `delayed`; then, while tasks are wanted, the
head of `ready` (highest priority band, least recently served tenant) gives a tenant slot,
the head of that tenant's zset the least recently served request, and up to
min(wanted, concurrency - leased, waiting) of its tasks are leased: parked retries first
(XCLAIM from "~waiting"), then new entries (XREADGROUP). Request and tenant then go to the
back of their rotations.

KEYS[1..8] queue-level keys (see _common.lua)
Derived:   req:<rid>, req:<rid>:tasks, req:<rid>:rel, tr:<prio>:<tenant>, state:<state>,
           done:<rid>, idle, handoff:<consumer> (see _common.lua)

ARGV[1] now (ms)   ARGV[2] consumer   ARGV[3] count
ARGV[4] lease_ms (0 = each request's own; a worker passes how soon it must be presumed dead)
ARGV[5] idle handoff: "1" = if nothing is leased, register the consumer as idle, so that work
        arriving while it blocks on its handoff list is pushed there (see handoff() in
        _common.lua); any call with "1" first takes the consumer off the idle set
ARGV[6..] leases to acknowledge

Returns {ack_results, next_due_ms, tasks}
  ack_results  one integer per lease: 1 acked, -1 lease not held
  next_due_ms  when nothing was leased: ms until the next delayed task is due, else -1
  tasks        flat: lease, attempt, payload, handler, lease_ms for each leased task
--]]
--@include common

local now, consumer, want = now_ms(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local lease_override = tonumber(ARGV[4])
local idle_member = nil
if ARGV[5] == '1' and want > 0 then
  idle_member = consumer .. '|' .. ARGV[4]
  redis.call('ZREM', K_IDLE, idle_member)
end

-- Acks, grouped by request: one ZMSCORE for all, then per request one XACK, one XDEL and
-- one update of its counters, whatever the batch size.
local acks = {}
if #ARGV >= 6 then
  local leases = {unpack(ARGV, 6)}
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
      end
      tids[#tids + 1] = tid
    else
      acks[i] = -1
    end
  end
  if #valid > 0 then
    redis.call('ZREM', K_LEASES, unpack(valid))
    for _, rid in ipairs(order) do
      local tids = by_req[rid]
      local sk = stream_key(rid)
      redis.call('XACK', sk, GROUP, unpack(tids))
      redis.call('XDEL', sk, unpack(tids))
      local h = load_req(rid)
      bump(h, {leased = -#tids, done = #tids})
      sync_ready(h)
      maybe_complete(h, now)
    end
    redis.call('HINCRBY', K_STATS, 'done', #valid)
  end
end

-- Promote retries whose backoff is over.
local due = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', now, 'LIMIT', 0, 100)
for _, m in ipairs(due) do
  redis.call('ZREM', K_DELAYED, m)
  local rid, tid = string.match(m, '^([^/]+)/([^/]+)$')
  local h = load_req(rid)
  if h then
    bump(h, {delayed = -1})
    to_waiting(h, tid)
    sync_ready(h)
  end
end

local out = {}
local got = 0
while got < want do
  local top = redis.call('ZRANGE', K_READY, 0, 0)
  if #top == 0 then break end
  local slot = top[1]
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
    local prio = tonumber(string.match(slot, '^(%d+):'))
    redis.call('ZADD', K_READY, 'XX', (99 - prio) * BAND + next_seq(), slot)
  else
    redis.call('ZREM', K_READY, slot)
  end
end

local next_due = -1
if got > 0 then
  if redis.call('EXISTS', K_READY) == 1 then wake() end
else
  if idle_member then redis.call('ZADD', K_IDLE, now, idle_member) end
  local first = redis.call('ZRANGE', K_DELAYED, 0, 0, 'WITHSCORES')
  if #first > 0 then next_due = math.max(0, tonumber(first[2]) - now) end
end
return {acks, next_due, out}
