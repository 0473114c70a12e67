-- lua/_unique.lua: a request's unique key let go when its scope ends (issue 37;
--   core/queue/unique.py says what they mean): at its first start ("waiting"), at its
--   completion ("active"), or a while after it completed done ("done+"). _dedupe.lua claims
--   keys at submit.
-- One of the engine's helper files: it includes the helpers it uses, and only those
-- (scripts.py checks both).
-- Defines: uniq_key, uk_key, unique_event, unique_started, unique_completed.
--
--@include base

local function uniq_key(key) return PREFIX .. 'uniq:' .. key end

-- The key of a request's hash field `uk` ("<scope>|<keep ms>|<key>").
local function uk_key(uk) return string.match(uk, '^[^|]*|[^|]*|(.*)$') end

-- The "submitted" event's last fields for a request with the unique field `uk`: its key (the
-- mirror's search takes it as a word of the request); none without one.
local function unique_event(uk)
  if uk then return 'key', uk_key(uk) end
end

-- The key's end, by the request's hash field `uk` ("<scope>|<keep ms>|<key>"), if it still
-- holds it (a later submit may have taken it over once its scope ended).
local function let_go(h, keep_ms)
  local k = uniq_key(uk_key(h.uk))
  if redis.call('GET', k) ~= h.id then return end
  if keep_ms and keep_ms > 0 then redis.call('PEXPIRE', k, keep_ms) else redis.call('DEL', k) end
end

-- A request's first task starts: a "waiting" scope ends.
local function unique_started(h)
  if h.uk and string.sub(h.uk, 1, 8) == 'waiting|' then let_go(h, 0) end
end

-- A request completes (`final` state): "active" and "waiting" scopes end; "done+" keeps the
-- key that long after a done, not after a failure or a cancel.
local function unique_completed(h, final)
  if not h.uk then return end
  local kind, keep = string.match(h.uk, '^([^|]*)|([^|]*)|')
  let_go(h, kind == 'done' and final == 'done' and tonumber(keep) or 0)
end
