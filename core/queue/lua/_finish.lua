-- lua/_finish.lua: finish(): the end of every operation, writing what the call kept back.
-- One of the engine's helper files: it includes the helpers it uses, and only those
-- (scripts.py checks both).
-- Defines: finish.
--
--@include base readiness

-- The end of every operation (scripts.py calls it with the operation's result): the changed
-- request fields, one HSET per request; the stats, one HINCRBY per field; the state indexes
-- trimmed once.
local function finish(result)
  flush_leases()
  if #DIRTY > 0 then
    for _, h in ipairs(DIRTY) do
      local args, n = {}, 0
      for f in pairs(h._dirty) do
        args[n + 1] = f
        args[n + 2] = text(h[f])
        n = n + 2
      end
      redis.call('HSET', req_key(h.id), unpack(args))
      h._dirty = false
    end
    DIRTY = {}
  end
  if #MOVED > 0 then
    -- State indexes: the requests that left each state, and entered each, in one call each.
    local out_of, into = {}, {}
    for _, h in ipairs(MOVED) do
      if h.state ~= h._state0 then
        local o, i = out_of[h._state0], into[h.state]
        if not o then o = {}; out_of[h._state0] = o end
        if not i then i = {}; into[h.state] = i end
        o[#o + 1] = h.id
        i[#i + 1] = text(h._moved)
        i[#i + 1] = h.id
        h._state0 = h.state
      end
      h._moved = false
    end
    MOVED = {}
    for state, ids in pairs(out_of) do
      for j = 1, #ids, 500 do
        redis.call('ZREM', state_key(state), unpack(ids, j, math.min(j + 499, #ids)))
      end
    end
    for state, args in pairs(into) do
      for j = 1, #args, 1000 do
        redis.call('ZADD', state_key(state), unpack(args, j, math.min(j + 999, #args)))
      end
    end
  end
  if next(STATS) then
    for f, d in pairs(STATS) do
      if d ~= 0 then redis.call('HINCRBY', K_STATS, f, d) end
    end
    STATS = {}
  end
  if next(METRICS) then
    local key = PREFIX .. 'metrics:' .. string.format('%d', math.floor(NOW / 60000))
    local fresh = false
    for handler, m in pairs(METRICS) do
      for f, d in pairs(m) do
        -- A field just created: maybe the key too, which then needs its TTL. A few times
        -- per handler and minute (each field's first write), not at every call.
        if redis.call('HINCRBY', key, handler .. '|' .. f, d) == d then fresh = true end
      end
    end
    if fresh then redis.call('PEXPIRE', key, METRICS_TTL) end
    METRICS = {}
  end
  if next(TRIM) then
    for state, cutoff in pairs(TRIM) do
      redis.call('ZREMRANGEBYSCORE', state_key(state), '-inf', '(' .. cutoff)
    end
    TRIM = {}
  end
  return result
end
