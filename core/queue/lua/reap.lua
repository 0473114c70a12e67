--[[ reap: leases whose expiry has passed go back to waiting, or to the dead letters when the
task has used its attempts (the expired delivery counts as one). Tasks of a cancelled request
are dropped as cancelled. Each recovery is an event naming the worker that held the lease.

Then leases an operator revoked (claim.lua) whose expiry has passed and whose holder never
said its run stopped: the run may be presumed over, as that of an expired lease, and the task
moves on as the operator asked (end_revoked()): back to waiting, to the consumer it was
claimed for ("claimed"), or cancelled; no attempt is spent (the operator's move).

KEYS[1..8] queue-level keys (see _base.lua)
Derived:   req:<rid>, req:<rid>:tasks|rel|dead, tr:<prio>:<handler>:<tenant>, state:<state>, done:<rid>,
           delayed:<prio>, dprio, revoked, claimto, handoff:<consumer>, idle

ARGV[1] now (ms)   ARGV[2] at most this many leases (and as many revoked ones)
ARGV[3] "0": count no handler metrics (a dead letter made here counts as the handler's failure
        in metrics:<minute>, see _metrics.lua; absent: counted)

Returns flat: request, task, worker, outcome ("waiting", "dead", "cancelled" or, for a revoked
lease, "claimed") per lease
--]]
--@include base requests readiness index tasks completion leasing revoke

local now, limit = now_ms(ARGV[1]), tonumber(ARGV[2])
METRICS_ON = ARGV[3] ~= '0'
local expired = redis.call('ZRANGEBYSCORE', K_LEASES, '-inf', '(' .. now, 'LIMIT', 0, limit)
local out = {}
for _, lease in ipairs(expired) do
  redis.call('ZREM', K_LEASES, lease)
  local rid, tid, deliv = split_lease(lease)
  local h = load_req(rid)
  local _, worker = pending_info(rid, tid)
  worker = worker or '?'
  add(h, 'leased', -1)
  local outcome
  if h.state == 'cancelling' then
    retire(rid, tid)
    add(h, 'cancelled', 1)
    outcome = 'cancelled'
  else
    local attempts = attempts_of(rid, tid, deliv)
    if attempts >= h.max_attempts then
      to_dead(h, tid, attempts, 'lease expired: worker ' .. worker .. ' stopped renewing it',
              '', worker, now)
      outcome = 'dead'
    else
      to_waiting(h, tid)
      outcome = 'waiting'
    end
  end
  event('reaped', rid, 'task', tid, 'worker', worker, 'outcome', outcome)
  sync_ready(h)
  maybe_complete(h, now)
  out[#out + 1] = rid
  out[#out + 1] = tid
  out[#out + 1] = worker
  out[#out + 1] = outcome
end
for _, lease in ipairs(redis.call('ZRANGEBYSCORE', K_REVOKED, '-inf', '(' .. now,
                                  'LIMIT', 0, limit)) do
  local rid, tid = split_lease(lease)
  local _, worker = pending_info(rid, tid)  -- the holder, before the task moves on
  local outcome = end_revoked(lease, now, 'expiry')
  out[#out + 1] = rid
  out[#out + 1] = tid
  out[#out + 1] = worker or '?'
  out[#out + 1] = outcome
end
dispatch_idle()
return out
