-- lua/_limits.lua: limits on keys, decided inside the lease (issue 37). A limit names a key (the
--   whole queue, a handler, a tenant, a resource that requests declare, or each value of a
--   field of the tasks' payloads) and caps how many of its tasks are leased at once, how many
--   start per window, or both. A limited task is never
--   leased: no failure, no backoff, no attempt spent; the dequeue passes over what is held
--   back and serves what is not.
-- One of the engine's helper files: it includes the helpers it uses, and only those
-- (scripts.py checks both).
-- Defines: load_limits, slot_limits, request_limits, allowance, limits_took, flush_limits,
--   field_admits.
--
--@include base

-- The queue's limits, read once per call that leases (LIMITS: false when there are none, so
-- a queue without limits pays one HGETALL of a missing key per such call). Each:
-- {name, on, value, rate, per, conc, held = key, starts = key}; `left` is what this call may
-- still lease under it, once asked (allowance()). LIMITS.slots: some limit applies to slots
-- as a whole (queue, handler, tenant); LIMITS.resource: some to requests' resources.
local function load_limits()
  if LIMITS ~= nil then return LIMITS end
  local raw = redis.call('HGETALL', K_LIMITS)
  if #raw == 0 then
    LIMITS = false
    return false
  end
  LIMITS = {field = nil, per_value = {}, touched = {}}
  for i = 1, #raw, 2 do
    local on, value, rate, per, conc = string.match(raw[i + 1],
                                                    '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
    if on then
      local base = PREFIX .. 'lim:' .. raw[i]
      local lim = {name = raw[i], on = on, value = value, rate = tonumber(rate),
                   per = tonumber(per), conc = tonumber(conc),
                   held = base .. ':held', starts = base .. ':starts'}
      LIMITS[#LIMITS + 1] = lim
      if on == 'resource' then LIMITS.resource = true end
      if on == 'queue' or on == 'handler' or on == 'tenant' then LIMITS.slots = true end
      if on == 'field' then
        LIMITS.field = LIMITS.field or {}
        LIMITS.field[#LIMITS.field + 1] = lim
      end
    end
  end
  if #LIMITS == 0 then LIMITS = false end
  return LIMITS
end

-- The limits on a slot's tasks as a whole: the queue's, its handler's, its tenant's (a slot is
-- "<prio>:<handler>:<tenant>"). Nil when none applies.
local function slot_limits(handler, tenant)
  local all = load_limits()
  if not all or not all.slots then return nil end
  local out
  for _, lim in ipairs(all) do
    if lim.on == 'queue' or (lim.on == 'handler' and lim.value == handler)
        or (lim.on == 'tenant' and lim.value == tenant) then
      out = out or {}
      out[#out + 1] = lim
    end
  end
  return out
end

-- The limits on the resources a request declared ("rs": names separated by spaces). Nil when
-- none applies.
local function request_limits(rs)
  local all = load_limits()
  if not all or not all.resource or not rs or rs == '' then return nil end
  local out
  for _, lim in ipairs(all) do
    if lim.on == 'resource' and string.find(' ' .. rs .. ' ', ' ' .. lim.value .. ' ', 1, true) then
      out = out or {}
      out[#out + 1] = lim
    end
  end
  return out
end

-- A full concurrency set's members that no longer hold a lease (acked, failed, released,
-- reaped: in neither `leases` nor `revoked`) leave it; returns how many stay. Only a full set
-- is checked, so the set may count an ended lease for a while: that holds work back, never
-- lets too much through, and a dead worker's slot comes back once its lease is reaped.
local function held_now(lim)
  local members = redis.call('ZRANGE', lim.held, 0, -1)
  if #members == 0 then return 0 end
  local live = redis.call('ZMSCORE', K_LEASES, unpack(members))
  local revoked = redis.call('ZMSCORE', K_REVOKED, unpack(members))
  local gone = {}
  for i, m in ipairs(members) do
    if not live[i] and not revoked[i] then gone[#gone + 1] = m end
  end
  if #gone > 0 then redis.call('ZREM', lim.held, unpack(gone)) end
  return #members - #gone
end

-- How many more tasks this call may lease under `lims` (math.huge: no limit). A rate limit's
-- window is (now - per, now]: a start leaves it `per` ms after it was made; when a rate holds
-- work back, LIMIT_DUE says when its oldest start leaves (the worker waits no longer).
local function allowance(lims)
  local left = math.huge
  if not lims then return left end
  for _, lim in ipairs(lims) do
    if not lim.left then
      local l = math.huge
      if lim.conc then
        local n = redis.call('ZCARD', lim.held)
        if n >= lim.conc then n = held_now(lim) end
        l = lim.conc - n
      end
      if lim.rate then
        -- Starts older than the window count until trimmed: trimmed when they could matter
        -- (near the cap; a call leases at most 1000) or the set grows, not on every call.
        local n = redis.call('ZCARD', lim.starts)
        if n + 1000 > lim.rate or n >= 1024 then
          n = n - redis.call('ZREMRANGEBYSCORE', lim.starts, '-inf', NOW - lim.per)
        end
        local r = lim.rate - n
        if r <= 0 then
          local first = redis.call('ZRANGE', lim.starts, 0, 0, 'WITHSCORES')
          local due = first[2] and math.max(1, tonumber(first[2]) + lim.per - NOW) or lim.per
          if LIMIT_DUE < 0 or due < LIMIT_DUE then LIMIT_DUE = due end
        end
        l = math.min(l, r)
      end
      lim.left = math.max(l, 0)
    end
    left = math.min(left, lim.left)
  end
  return left
end

-- Count the leases just added to `out` (5 values each, from index `first`, `taken` of them)
-- against `lims`: their allowance now, and their members for the concurrency sets and the
-- windows, written once per limit and call by flush_limits() (a call serves many requests).
local function limits_took(lims, out, first, taken)
  if not lims or taken == 0 then return end
  for _, lim in ipairs(lims) do
    lim.left = lim.left - taken
    local pend = lim.pend
    if not pend then
      pend = {}
      lim.pend = pend
      LIMITS.touched[#LIMITS.touched + 1] = lim
    end
    for i = first, first + 5 * (taken - 1), 5 do
      pend[#pend + 1] = NOW
      pend[#pend + 1] = out[i]
    end
  end
end

-- Write what limits_took() counted in this call: each limit's leases in its concurrency set
-- and its window, in chunks (unpack() has a limit). Called before the call's leases are.
local function flush_limits()
  if not LIMITS or #LIMITS.touched == 0 then return end
  for _, lim in ipairs(LIMITS.touched) do
    local pend = lim.pend
    for i = 1, #pend, 1000 do
      local j = math.min(i + 999, #pend)
      if lim.conc then redis.call('ZADD', lim.held, unpack(pend, i, j)) end
      if lim.rate then redis.call('ZADD', lim.starts, unpack(pend, i, j)) end
    end
    -- A field value's set: one per value seen, gone a day after its last lease; a window:
    -- gone once its last start leaves it.
    if lim.conc and lim.per_value then redis.call('PEXPIRE', lim.held, '86400000') end
    if lim.rate then redis.call('PEXPIRE', lim.starts, lim.per) end
    lim.pend = nil
  end
  LIMITS.touched = {}
end

-- A task's value of a payload field, as a limit on that field counts it: a string or a number
-- at the payload's top level (nil: not an object, no such field, or another kind of value).
local function field_value(text, field)
  local ok, payload = pcall(cjson.decode, text)
  if not ok or type(payload) ~= 'table' then return nil end
  local v = payload[field]
  if type(v) == 'number' then v = string.format('%.17g', v) end
  if type(v) ~= 'string' or #v == 0 or #v > 200 then return nil end
  return v
end

-- Whether a task (its payload text, its lease) may start now under the limits on payload
-- fields: each value of the field is a key of its own (per customer, per account...). If it
-- may, its start is counted; if not, the caller gives the delivery back (lease_tasks()).
local function field_admits(text, lease)
  local lims = LIMITS and LIMITS.field
  if not lims then return true end
  local subs = {}
  for _, lim in ipairs(lims) do
    local v = field_value(text, lim.value)
    if v then
      local id = lim.name .. '=' .. v
      local sub = LIMITS.per_value[id]
      if not sub then
        sub = {name = id, rate = lim.rate, per = lim.per, conc = lim.conc, per_value = true,
               held = lim.held .. ':' .. v, starts = lim.starts .. ':' .. v}
        LIMITS.per_value[id] = sub
      end
      if allowance({sub}) <= 0 then return false end
      subs[#subs + 1] = sub
    end
  end
  if #subs > 0 then limits_took(subs, {lease}, 1, 1) end
  return true
end
