-- lua/_dedupe.lua: unique keys claimed at submit (issue 37; core/queue/unique.py): a submit
--   that names a key another request holds creates nothing and answers with that request
--   (maybe replacing its tasks or delaying it, as asked).
-- One of the engine's helper files: it includes the helpers it uses, and only those
-- (scripts.py checks both).
-- Defines: unique_claim.
--
--@include base requests readiness scheduled unique

-- Whether `h` (the holder) still holds its key: its scope has not ended.
local function holds(h, kind)
  if h.state == 'done' or h.state == 'failed' or h.state == 'cancelled' then
    return kind == 'done' and h.state == 'done'  -- kept a while after done (its key's TTL)
  end
  if kind == 'waiting' then return h.leased == 0 and (h.done or 0) == 0 end
  return true
end

-- The holder's tasks replaced by `payloads` (args[first..]) while none has started: its
-- stream's entries, its counts; the event says so. False if one has started.
local function replace_tasks(h, args, first, now)
  if h.leased > 0 or h.retry > 0 or (h.done or 0) > 0 or (h.dead or 0) > 0
      or (h.delayed or 0) > 0 or (h.state ~= 'open' and h.state ~= 'active'
                                  and h.state ~= 'scheduled') then
    return false
  end
  local sk = stream_key(h.id)
  local old = redis.call('XRANGE', sk, '-', '+')
  local ids = {}
  for i, e in ipairs(old) do ids[i] = e[1] end
  for i = 1, #ids, 500 do redis.call('XDEL', sk, unpack(ids, i, math.min(i + 499, #ids))) end
  local n = #args - first + 1
  append_tasks(sk, args, first, 0)
  local d = n - h.waiting
  add(h, 'waiting', d)
  set_field(h, 'total', n)
  if h.state ~= 'scheduled' then bump_waiting_stat(h, d) end
  event('replaced', h.id, 'tasks', text(n), 'was', text(#ids))
  return true
end

-- A submit naming unique spec `spec` ("<scope>|<on_dup>|<keep ms>|<key>"): nil when the key is
-- this request's now (create it, with the returned field value for its hash), or the holder's
-- table when another request holds it (after replacing or delaying it, as asked). One SET
-- when the key is free.
local function unique_claim(spec, rid, now, due, args, first)
  if spec == '' then return nil end
  local kind, dup, keep, key = string.match(spec, '^([^|]*)|([^|]*)|([^|]*)|(.*)$')
  local k = uniq_key(key)
  local holder = redis.call('SET', k, rid, 'NX', 'GET')
  local field = kind .. '|' .. keep .. '|' .. key
  if not holder then return nil, field end
  local h = holder ~= rid and load_req(holder)
  if not h or not holds(h, kind) then  -- the holder is gone or its scope has ended
    redis.call('SET', k, rid)
    return nil, field
  end
  stat('duplicates', 1)
  if dup == 'replace' then
    replace_tasks(h, args, first, now)
  elseif dup == 'delay' and h.state == 'scheduled' and due then
    local was = tonumber(redis.call('HGET', req_key(h.id), 'due_ms'))
    if due > was then
      set_field(h, 'due_ms', due)
      schedule_req(h, due)
      event('delayed', h.id, 'due', text(due), 'was', text(was))
    end
  end
  return h
end

