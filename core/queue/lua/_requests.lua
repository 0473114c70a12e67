-- lua/_requests.lua: a request's hash loaded once per call (load_req()), its fields and counters
--   changed in memory and written back by finish(); the stats; results kept with an ack.
-- One of the engine's helper files: it includes the helpers it uses, and only those
-- (scripts.py checks both).
-- Defines: is_eligible, set_late, load_req, mark, set_field, write_rel, split_results,
--   store_result, add, stat, due_of, create_req.
--
--@include base

-- The request fields every operation reads (load_req()): those leasing needs (LEASE), then
-- those a completion or a counter change needs (LATE). Leasing, the hot path's half that
-- completes nothing, reads LEASE alone (load_req(rid, true)): a field missing from the hash
-- (most counters of a new request) costs Redis a scan of the whole hash, and LATE fields
-- are read, all at once, only if used. The rare ones (add, seal: total; fail, reap:
-- max_attempts and the backoff) are read when first used.
-- "tp": the producer's trace context (a W3C traceparent), when it sent one (issue 38): a
-- leased task's goes back to the worker with it (traced(), _leasing.lua).
local LEASE = {'state', 'tenant', 'handler', 'priority', 'concurrency', 'waiting', 'retry',
               'leased', 'lease_ms', 'rs', 'uk', 'tp'}
local LATE = {'delayed', 'done', 'dead', 'cancelled', 'retention_ms', 'discarded', 'then', 'rel',
              'prog', 'res'}
local FIELDS, IS_LATE = {}, {retention_text = true}  -- LEASE, then LATE; which are LATE
for i = 1, #LEASE do FIELDS[i] = LEASE[i] end
for i = 1, #LATE do
  FIELDS[#LEASE + i] = LATE[i]
  IS_LATE[LATE[i]] = true
end
local RARE = {'total', 'max_attempts', 'backoff_ms', 'backoff_max_ms'}

-- Whether a request belongs in the ready index: runnable state, waiting work, a free slot.
local function is_eligible(h)
  return (h.state == 'open' or h.state == 'active') and h.waiting > 0 and h.leased < h.concurrency
end

-- The LATE fields of a table loaded for leasing, from their values in the hash (v), except
-- those the call has set since.
local function set_late(h, v)
  rawset(h, '_late', true)
  for i = 1, #LATE do
    local f = LATE[i]
    if rawget(h, f) == nil then
      if f == 'then' or f == 'rel' or f == 'prog' or f == 'res' then
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
    if rawget(h, '_late') then return nil end  -- loaded: absent ('then', 'rel', 'prog')
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
         rs = v[10], uk = v[11], tp = v[12], _late = false, _elig = false, _state0 = v[1],
         _dirty = false, _moved = false}
  else
    h = {id = rid, state = v[1], tenant = v[2], handler = v[3], priority = tonumber(v[4]),
         concurrency = tonumber(v[5]), waiting = tonumber(v[6]) or 0,
         retry = tonumber(v[7]) or 0, leased = tonumber(v[8]) or 0, lease_ms = tonumber(v[9]),
         rs = v[10], uk = v[11], tp = v[12], delayed = tonumber(v[13]) or 0,
         done = tonumber(v[14]) or 0, dead = tonumber(v[15]) or 0,
         cancelled = tonumber(v[16]) or 0, retention_ms = tonumber(v[17]),
         retention_text = v[17], discarded = tonumber(v[18]) or 0, ['then'] = v[19],
         rel = v[20], prog = v[21], res = v[22],
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

-- Results (issue 20). An ack may carry its task's result: "<lease> <json>" (a lease holds no
-- space; the client checks the JSON and its size). split_results() takes them off the acks in
-- place and returns index -> result, or nil when no ack has one (one plain find per ack).
local function split_results(acks)
  local results
  for i = 1, #acks do
    local a = acks[i]
    local sp = string.find(a, ' ', 1, true)
    if sp then
      results = results or {}
      results[i] = string.sub(a, sp + 1)
      acks[i] = string.sub(a, 1, sp - 1)
    end
  end
  return results
end

-- Keep the result of task tid of request h, for an accepted ack only: a redelivered task's
-- result replaces the earlier one. The request's field "res" says the key exists, so that its
-- completion gives it the request's expiry (maybe_complete()) and a requeue keeps it.
local function store_result(h, tid, result)
  redis.call('HSET', results_key(h.id), tid, result)
  if not h.res then set_field(h, 'res', '1') end
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

-- A submit's due time from its argument ("" = now, "+<ms>" = that long after now, "<ms>" = at
-- that time, ms since the epoch): nil when it is not after now.
local function due_of(arg, now)
  if arg == '' then return nil end
  local due
  if string.sub(arg, 1, 1) == '+' then
    due = now + tonumber(string.sub(arg, 2))
  else
    due = tonumber(arg)
  end
  if due <= now then return nil end
  return due
end

-- Create request `rid` with `n` tasks in `state`: its hash `rk` (its options from argv[p..p+8]:
-- priority, concurrency, tenant, handler, max_attempts, lease_ms, retention_ms, backoff_ms,
-- backoff_max_ms; then the field/value pairs of `extra`) and its entry in the state's index.
-- The counters that start at 0 (retry, leased, delayed, done, dead, cancelled, discarded) are
-- not written: every reader takes a missing counter as 0. Returns the table load_req() would
-- read back, without reading it back (kept in REQS).
local function create_req(argv, rk, rid, state, p, n, now, extra)
  -- In the order load_req() reads them: a small hash is searched from its start, field by field.
  local fields = {'state', state, 'tenant', argv[p + 2], 'handler', argv[p + 3],
    'priority', argv[p], 'concurrency', argv[p + 1], 'waiting', text(n),
    'lease_ms', argv[p + 5], 'retention_ms', argv[p + 6], 'total', text(n),
    'max_attempts', argv[p + 4], 'backoff_ms', argv[p + 7], 'backoff_max_ms', argv[p + 8],
    'created_ms', text(now), 'updated_ms', text(now)}
  local rs = argv[p + 9]
  if rs and rs ~= '' then
    fields[#fields + 1] = 'rs'
    fields[#fields + 1] = rs
  end
  for _, v in ipairs(extra) do fields[#fields + 1] = v end
  redis.call('HSET', rk, unpack(fields))
  redis.call('ZADD', state_key(state), text(now), rid)
  local h = {id = rid, state = state, tenant = argv[p + 2], handler = argv[p + 3],
             priority = tonumber(argv[p]), concurrency = tonumber(argv[p + 1]), total = n,
             waiting = n, retry = 0, leased = 0, delayed = 0, done = 0, dead = 0,
             cancelled = 0, discarded = 0, max_attempts = tonumber(argv[p + 4]),
             lease_ms = tonumber(argv[p + 5]), retention_ms = tonumber(argv[p + 6]),
             backoff_ms = tonumber(argv[p + 7]), backoff_max_ms = tonumber(argv[p + 8]),
             retention_text = argv[p + 6], rs = (rs ~= '' and rs) or nil, _elig = false,
             _state0 = state, _dirty = false, _moved = false}
  REQS[rid] = h
  return h
end
