--[[ upgrade: bring a queue written by an engine before issue 33 to this one's layout. Nothing
to do (the usual case, at every worker start: Queue.prepare()) costs three reads.

- `ready` slots of the old form "<prio>:<tenant>" move to one slot per handler,
  "<prio>:<handler>:<tenant>" (migrate_slot(); take_ready() does the same for one it meets);
- the waiting counts per priority ("w:<prio>") become counts per priority and handler
  ("w:<prio>:<handler>"), recounted from the open and active requests' own counters (one walk
  of the state indexes, once: their number bounds its time);
- the announcements' hash ("handlers": handler -> "<ms>/<worker>") is dropped: announcements
  now end with their worker's heartbeat (the zset `hw`, renewed by extend.lua).

KEYS[1..8] queue-level keys (see _base.lua)
KEYS[9]    <p>:{Q}:handlers   the old announcements' hash
Derived:   tr:<prio>:<tenant> (old), tr:<prio>:<handler>:<tenant>, req:<rid>, state:open,
           state:active, state:cancelling

ARGV[1] now (ms)

Returns {slots migrated, requests recounted (-1: none needed), 1 if the old hash was dropped}
--]]
--@include base index

now_ms(ARGV[1])
local slots = 0
for _, slot in ipairs(redis.call('ZRANGE', K_READY, 0, -1)) do
  if not string.match(slot, '^%d+:[^:]*:') then
    migrate_slot(slot)
    slots = slots + 1
  end
end

local recounted = -1
local stats = redis.call('HKEYS', K_STATS)
local legacy = false
for _, f in ipairs(stats) do
  if string.match(f, '^w:%d+$') then legacy = true end
end
if legacy then
  recounted = 0
  local counts = {}
  for _, state in ipairs({'open', 'active', 'cancelling'}) do
    for _, rid in ipairs(redis.call('ZRANGE', state_key(state), 0, -1)) do
      local v = redis.call('HMGET', req_key(rid), 'priority', 'handler', 'waiting')
      local n = tonumber(v[3]) or 0
      if v[1] and n ~= 0 then
        local f = 'w:' .. v[1] .. ':' .. (v[2] or '')
        counts[f] = (counts[f] or 0) + n
      end
      recounted = recounted + 1
    end
  end
  for _, f in ipairs(stats) do
    if string.match(f, '^w:') then redis.call('HDEL', K_STATS, f) end
  end
  for f, n in pairs(counts) do redis.call('HSET', K_STATS, f, n) end
end

local dropped = 0
if redis.call('TYPE', KEYS[9])['ok'] == 'hash' then
  redis.call('DEL', KEYS[9])
  dropped = 1
end
return {slots, recounted, dropped}
