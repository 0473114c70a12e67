--[[ fail: a handler failed its task. Retry after an exponential backoff with jitter, or
dead-letter the task once it has used `max_attempts` (or at once when retry is refused).

A task of a cancelled request is not retried: it is counted cancelled.

KEYS[1..8] queue-level keys (see _base.lua)
Derived:   req:<rid>, req:<rid>:tasks|rel|dead, tr:<prio>:<handler>:<tenant>, state:<state>, done:<rid>,
           delayed:<prio>, dprio, revoked, claimto, handoff:<consumer>, idle

ARGV[1] now (ms)  ARGV[2] lease  ARGV[3] error text  ARGV[4] traceback  ARGV[5] worker
ARGV[6] jitter in [0, 1)  ARGV[7] retry allowed (1|0)
ARGV[8] the run's time for the handler's metrics (see _metrics.lua): "<bucket>:<us>", "-" (not
        timed: counted only) or "" (count nothing; absent: "")

Returns {1, outcome, attempts, delay_ms}; outcome: "delayed", "waiting", "dead" or "cancelled"
Errors: -1 lease not held (expired, reaped, claimed, released or already finished). The fail
        of a lease an operator revoked (claim.lua) is refused too, but says that its run is
        over: its task moves on now (end_revoked()), without spending an attempt.
--]]
--@include base requests metrics readiness index tasks completion leasing revoke

local now, lease = now_ms(ARGV[1]), ARGV[2]
local timing = ARGV[8] or ''
METRICS_ON = timing ~= ''
local rid, tid, deliv = split_lease(lease)
local score = redis.call('ZSCORE', K_LEASES, lease)
if not rid or not score or tonumber(score) < now then
  if rid and not score and end_revoked(lease, now, 'holder') then dispatch_idle() end
  return -1
end
redis.call('ZREM', K_LEASES, lease)
local h = load_req(rid)
add(h, 'leased', -1)
local attempts = attempts_of(rid, tid, deliv)
local outcome, delay = 'dead', 0
if h.state == 'cancelling' then
  retire(rid, tid)
  add(h, 'cancelled', 1)
  outcome = 'cancelled'
elseif ARGV[7] ~= '1' or attempts >= h.max_attempts then
  to_dead(h, tid, attempts, ARGV[3], ARGV[4], ARGV[5], now)
else
  delay = math.min(h.backoff_ms * 2 ^ (attempts - 1), h.backoff_max_ms)
  delay = math.floor(delay * (0.5 + tonumber(ARGV[6]) / 2))
  stat('retried', 1)
  metric(h.handler, 'r', 1)
  event('retried', h.id, 'task', tid, 'attempt', text(attempts), 'delay', text(delay),
        'error', string.sub(ARGV[3], 1, 200), 'worker', ARGV[5])
  if delay <= 0 then
    to_waiting(h, tid)
    outcome = 'waiting'
  else
    park(rid, tid, '~delayed')
    delay_task(h, rid, tid, now + delay)
    add(h, 'delayed', 1)
    outcome = 'delayed'
  end
end
if outcome ~= 'cancelled' then metric_failed_run(h.handler, timing) end
sync_ready(h)
maybe_complete(h, now)
dispatch_idle()
return {1, outcome, attempts, delay}
