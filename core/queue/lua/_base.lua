-- lua/_base.lua: the queue's keys (the contract below), the state of one call (begin()), the
--   clock, numbers as text, the derived key names.
-- One of the engine's helper files: it includes the helpers it uses, and only those
-- (scripts.py checks both).
-- Defines: begin, now_ms, text, req_key, stream_key, rel_key, deadmap_key, progress_key,
--   progress_at_key, results_key, tenant_key, state_key, handoff_key, delayed_key, sched_key.
--
-- Shared helpers: the top of the engine's Functions library (scripts.py builds it), run once
-- when Redis loads it. Every operation calls begin(KEYS) first, which sets the queue's keys
-- and resets the state of one call: nothing set by one call is seen by the next.
--
-- Every ARGV "now (ms)" may be 0: the operation then reads the Redis server's clock (TIME).
--
-- Every script receives the same eight queue-level keys first, in this order:
--   KEYS[1] <p>:{Q}:ready    zset  slots "<prio>:<handler>:<tenant>" -> band(prio) + place in
--                                  band (a worker skips the slots of handlers it does not run)
--   KEYS[2] <p>:{Q}:leases   zset  "<rid>/<task>/<delivery>" -> lease expiry (ms)
--   KEYS[3] <p>:{Q}:delayed  zset  "<rid>/<task>" -> due time (ms); and the member "~scheduled"
--                                  -> the earliest due time in `scheduled` (or earlier: a
--                                  cancel leaves it behind), so the hot path's one look at its
--                                  head sees both kinds of due work (promote_due())
--   KEYS[4] <p>:{Q}:dead     stream dead letters
--   KEYS[5] <p>:{Q}:events   stream lifecycle events (capped)
--   KEYS[6] <p>:{Q}:wake     list  wake-up tokens for idle workers
--   KEYS[7] <p>:{Q}:seq      string rotation / ordering sequence
--   KEYS[8] <p>:{Q}:stats    hash  waiting per priority and handler ("w:<prio>:<handler>") and
--                                  cumulative counters
-- Keys derived here from KEYS[1] (same "{Q}" hash tag, so cluster-safe):
--   <p>:{Q}:req:<rid>            hash   request metadata and counters
--   <p>:{Q}:req:<rid>:tasks      stream the request's tasks, consumer group "g"
--   <p>:{Q}:req:<rid>:rel        hash   task -> deliveries that did not count as attempts
--   <p>:{Q}:req:<rid>:dead       hash   task -> id of its entry in the dead stream
--   <p>:{Q}:req:<rid>:results    hash   task -> its handler's result (JSON), written with its
--                                       ack (store_result()); expires with the request
--   <p>:{Q}:tr:<prio>:<handler>:<tenant>
--                                zset   eligible requests of one tenant and handler at one
--                                       priority -> seq
--   <p>:{Q}:state:<state>        zset   request index by state -> time of entering it
--   <p>:{Q}:done:<rid>           channel completion announcement
--   <p>:{Q}:idle                 zset   idle workers "<consumer>|<lease_ms>", or
--                                       "<consumer>|<lease_ms>|<handlers it runs>" -> when
--                                       they found nothing (registered by dequeue on request)
--   <p>:{Q}:hw                   zset   "<handler>|<worker>" -> until when that worker is
--                                       presumed alive (ms): the handlers live workers run,
--                                       renewed by each heartbeat (extend.lua) from the
--                                       "handlers" field of worker:<name>
--   <p>:{Q}:handoff:<consumer>   list   tasks handed straight to that idle worker
--   <p>:{Q}:delayed:<prio>       zset   the delayed tasks of one priority "<rid>/<task>" -> due
--                                       (KEYS[3] holds them all; these order promotion)
--   <p>:{Q}:dprio                zset   priorities that have delayed tasks -> 99 - prio
--   <p>:{Q}:scheduled            zset   delayed requests (state "scheduled") -> due time (ms)
--   <p>:{Q}:scheduled:<prio>     zset   the same for one priority (these order promotion)
--   <p>:{Q}:sprio                zset   priorities that have scheduled requests -> 99 - prio
--   <p>:{Q}:limits               hash   limit name -> "<on>|<value>|<rate>|<per_ms>|<conc>": a
--                                       cap on the tasks of a key leased at once and/or a
--                                       number of starts per window (_limits.lua); on is
--                                       queue, handler, tenant or resource
--   <p>:{Q}:lim:<name>:held      zset   the leases counted against a limit's concurrency ->
--                                       when leased (pruned of ended leases when full)
--   <p>:{Q}:lim:<name>:starts    zset   the leases started within a limit's window -> when
--   <p>:{Q}:paused               string when the queue was paused (pause.lua); while it is
--                                       there nothing is leased (take_ready()), handed
--                                       (dispatch_idle()) or woken for (wake())
--   <p>:{Q}:revoked              zset   leases an operator revoked (claim.lua: a release or claim
--                                       while the holder may still run the task) -> their
--                                       old expiry; see revoke()
--   <p>:{Q}:claimto              hash   revoked lease -> the consumer it was claimed for
--   <p>:{Q}:req:<rid>:progress   hash   a task's last progress "<task>" -> JSON {done, total,
--                                       msg, worker, ts}, and its last log lines
--                                       "<task>:log" -> JSON [[ts, line], ...] (progress.lua)
--   <p>:{Q}:req:<rid>:progress:at zset  task -> its last progress write (ms): the request
--                                       keeps the most recent PROGRESS_TASKS tasks' entries.
--                                       The request's field "prog" says both keys exist, so
--                                       a completion expires them with the request
--   <p>:{Q}:metrics:<minute>     hash   per-handler counts of one minute (minutes since the
--                                       epoch, from the call's time), kept a day (PEXPIRE when
--                                       a field is created): "<handler>|<i>" timed runs done in
--                                       run-time bucket i (core/queue/metrics.py has the
--                                       bounds), "|us" their summed run time (us), "|d" done
--                                       untimed, "|f" dead-lettered, "|r" retried, "|fus"
--                                       summed run time (us) of the timed failed runs; written
--                                       by finish(), see metric()
--
-- Delayed requests (submit.lua or submit_flow.lua with a due time): state "scheduled", hash
-- fields "due_ms" and "due_state" (the state it takes when due: "open" until sealed, then
-- "active"). Its tasks wait in its stream, neither eligible nor in the stats' w:<prio>, until
-- promote_due() (or run_now.lua) makes it due.
--
-- Follow-ups ("then", submit_after.lua; or created with their parent, submit_flow.lua): a
-- request created with a parent is "held" (its tasks wait, not eligible) until the parent
-- completes. The parent's hash field "then" lists them (ids separated by spaces), the
-- follow-up's field "after" names the parent; maybe_complete() of the parent decides
-- (follow_on()).
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
local PREFIX, K_IDLE, K_DPRIO, K_PAUSED, K_REVOKED, K_CLAIMTO, K_SCHED, K_SPRIO, K_LIMITS
local LIMITS  -- the queue's limits, read once per call that leases (_limits.lua); nil: not yet
local LIMIT_DUE  -- ms until a rate limit that held work back lets it start again, or -1
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
local METRICS  -- handler -> {field suffix -> increment} for this minute's metrics hash
local METRICS_ON  -- whether this call counts (an operation turns it off from its ARGV)
local METRICS_TTL = '86400000'  -- a minute's hash lives a day (core/queue/metrics.py KEEP_MS)
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
    K_LIMITS = PREFIX .. 'limits'
  end
  K_LEASES, K_DELAYED, K_DEAD = keys[2], keys[3], keys[4]
  K_EVENTS, K_WAKE, K_SEQ, K_STATS = keys[5], keys[6], keys[7], keys[8]
  NOW, NOW_TEXT, DISPATCH, PROMOTED, FLOOR, READY_HELD = 0, nil, false, false, -1, false
  PAUSED, LIMITS, LIMIT_DUE = nil, nil, -1
  METRICS_ON = true
  -- finish() leaves these empty; a call that failed part-way may not have: start clean.
  if not REQS or next(REQS) then REQS = {} end
  if not EXPIRY or next(EXPIRY) then EXPIRY = {} end
  if not DIRTY or next(DIRTY) then DIRTY = {} end
  if not STATS or next(STATS) then STATS = {} end
  if not TRIM or next(TRIM) then TRIM = {} end
  if not LEASE_ADD or next(LEASE_ADD) then LEASE_ADD = {} end
  if not MOVED or next(MOVED) then MOVED = {} end
  if not METRICS or next(METRICS) then METRICS = {} end
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
local function progress_key(rid) return PREFIX .. 'req:' .. rid .. ':progress' end
local function progress_at_key(rid) return PREFIX .. 'req:' .. rid .. ':progress:at' end
local function results_key(rid) return PREFIX .. 'req:' .. rid .. ':results' end
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
