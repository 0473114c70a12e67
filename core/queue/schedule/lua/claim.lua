--[[ claim: take one schedule's due slots, once, whatever number of schedulers race.

KEYS[1] schedule hash   P:{Q}:sched:s:<name>
KEYS[2] due zset        P:{Q}:sched:due
KEYS[3] runs list       P:{Q}:sched:s:<name>:runs
Derived: P:{Q}:req:<rid> for each rid of the last run (the hash's last_rids), from KEYS[2]'s
base (same queue, same hash tag), to see whether that run is still running.
ARGV[1] version the caller read
ARGV[2] next slot the caller read (ms)
ARGV[3] next slot after now (ms), "" for none (the schedule has ended)
ARGV[4] now (ms)
ARGV[5] pending lease (ms): if the claimer has not confirmed the submit by then, any
        scheduler submits the claimed slots again (idempotent on their request ids)
ARGV[6] overlap policy: "skip" (skip the slots while the last run is running) or "allow"
ARGV[7] slots to fire, JSON [["slot_ms", rid, "rid rid2"], ...] (the rids of one run; the
        slot as a string, so Lua's numbers never round or print it as 1.7e+12)
ARGV[8] slots skipped as missed (count)
ARGV[9] runs kept in the list
ARGV[10] the schedule's name (its member in the due zset)

Returns {1, slot, rid, slot, rid, ...}: the slots claimed (to submit now, maybe none);
0 when the schedule changed since it was read (another scheduler claimed these slots, or it
was edited, paused, or has a claim still unconfirmed).
]]
local h = KEYS[1]
local cur = redis.call('HMGET', h, 'version', 'next', 'paused', 'pending', 'last_rids')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] or cur[3] or cur[4] then return 0 end
local now = tonumber(ARGV[4])
local fire = cjson.decode(ARGV[7])
local entries = {}
if tonumber(ARGV[8]) > 0 then
  entries[#entries + 1] = cjson.encode({at = now, status = 'missed', count = tonumber(ARGV[8])})
end
if ARGV[6] == 'skip' and #fire > 0 and cur[5] then
  local base = string.sub(KEYS[2], 1, #KEYS[2] - #'sched:due')
  for rid in string.gmatch(cur[5], '%S+') do
    local st = redis.call('HGET', base .. 'req:' .. rid, 'state')
    -- a held follow-up whose parent has ended is not running: it never will be
    if st and st ~= 'done' and st ~= 'failed' and st ~= 'cancelled' and st ~= 'held' then
      for _, f in ipairs(fire) do
        entries[#entries + 1] = cjson.encode({slot = f[1], rid = f[2], at = now,
          status = 'overlap', note = 'previous run ' .. rid .. ' still ' .. st})
      end
      redis.call('HINCRBY', h, 'skipped', #fire)
      fire = {}
      break
    end
  end
end
local out = {1}
local fired = {}
for _, f in ipairs(fire) do
  entries[#entries + 1] = cjson.encode({slot = f[1], rid = f[2], at = now, status = 'fired'})
  out[#out + 1] = f[1]
  out[#out + 1] = f[2]
  fired[#fired + 1] = f
end
redis.call('HSET', h, 'next', ARGV[3])
if tonumber(ARGV[8]) > 0 then redis.call('HINCRBY', h, 'skipped', tonumber(ARGV[8])) end
if #fired > 0 then
  local last = fired[#fired]
  -- all of ARGV[7] fires or none of it, so the claim's pending value is ARGV[7] itself
  redis.call('HSET', h, 'pending', ARGV[7], 'pending_at', ARGV[4],
             'last_slot', last[1], 'last_rids', last[3])
  redis.call('HINCRBY', h, 'fired', #fired)
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[5]), ARGV[10])
elseif ARGV[3] ~= '' then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[10])
else
  redis.call('ZREM', KEYS[2], ARGV[10])
end
for _, e in ipairs(entries) do redis.call('LPUSH', KEYS[3], e) end
if #entries > 0 then redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[9]) - 1) end
return out
