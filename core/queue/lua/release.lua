--[[ release: a worker gives leases back without finishing them (graceful shutdown, or a task
stopped because its request was cancelled). A release is not counted as an attempt.

KEYS[1..8] queue-level keys (see _base.lua)
Derived:   req:<rid>, req:<rid>:tasks|rel, tr:<prio>:<handler>:<tenant>, state:<state>, done:<rid>,
           delayed:<prio>, dprio, revoked, claimto, handoff:<consumer>, idle

ARGV[1] now (ms)   ARGV[2..] leases

A worker also releases a lease it learned was taken from it (a run stopped by LeaseGone, or
never started): if an operator revoked it (claim.lua), its task moves on now instead of when
the lease would have expired (end_revoked()).

Returns one integer per lease: 1 back to waiting, 2 dropped as cancelled, -1 not held.
--]]
--@include base requests readiness index tasks completion leasing revoke

local now = now_ms(ARGV[1])
local out = {}
for i = 2, #ARGV do
  local lease = ARGV[i]
  local rid, tid = split_lease(lease)
  local score = redis.call('ZSCORE', K_LEASES, lease)
  if not rid or not score or tonumber(score) < now then
    if rid and not score then end_revoked(lease, now, 'holder') end
    out[#out + 1] = -1
  else
    redis.call('ZREM', K_LEASES, lease)
    local h = load_req(rid)
    add(h, 'leased', -1)
    if h.state == 'cancelling' then
      retire(rid, tid)
      add(h, 'cancelled', 1)
      out[#out + 1] = 2
    else
      local _, holder = pending_info(rid, tid)
      write_rel(h, 'HINCRBY', tid, 1)
      to_waiting(h, tid)
      event('released', rid, 'task', tid, 'worker', holder or '?', 'by', 'worker')
      out[#out + 1] = 1
    end
    sync_ready(h)
    maybe_complete(h, now)
  end
end
dispatch_idle()
return out
