-- lua/_index.lua: the ready index kept true for a request (sync_ready()), and a slot of an
--   older engine's form moved to this one's (migrate_slot()).
-- One of the engine's helper files: it includes the helpers it uses, and only those
-- (scripts.py checks both).
-- Defines: sync_ready, migrate_slot.
--
--@include base requests readiness

-- Keep the ready index true for one request: present in its tenant's zset (and the tenant
-- in `ready`) exactly when it has waiting work, a free slot and is not cancelled or finished.
-- h._elig says whether it is there now: every change of the index goes through this table.
-- A request that becomes eligible also marks the call for dispatch_idle() at its end.
local function sync_ready(h)
  local elig = is_eligible(h)
  if elig == h._elig then return end
  h._elig = elig
  local slot = slot_of(h)
  local tk = tenant_key(slot)
  if elig then
    redis.call('ZADD', tk, next_seq(), h.id)
    if not redis.call('ZSCORE', K_READY, slot) then
      redis.call('ZADD', K_READY, band_tail(h.priority), slot)
    end
    DISPATCH, READY_HELD = true, true
  elseif redis.call('ZREM', tk, h.id) == 1 and redis.call('EXISTS', tk) == 0 then
    redis.call('ZREM', K_READY, slot)
    READY_HELD = false
  end
end

-- A slot written before slots named their handler ("<prio>:<tenant>", an engine before issue
-- 33): its requests go to the slots of their handlers, so no work waits in a slot nobody
-- reads. Found by take_ready() (and upgrade.lua) when a slot does not parse.
local function migrate_slot(slot)
  local tk = tenant_key(slot)
  local rids = redis.call('ZRANGE', tk, 0, -1)
  redis.call('DEL', tk)
  redis.call('ZREM', K_READY, slot)
  for _, rid in ipairs(rids) do
    local h = load_req(rid, true)
    if h then
      h._elig = false
      sync_ready(h)
    end
  end
end
