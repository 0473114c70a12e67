--[[ settle: confirm that a claim's slots were submitted (or could not be), and put the
schedule back in the due zset at its next slot.

KEYS[1] schedule hash   KEYS[2] due zset   KEYS[3] runs list
ARGV[1] the claim's pending value (JSON, as claim wrote it)
ARGV[2] now (ms)
ARGV[3] error: "" when submitted; else why the slots could not be submitted (a run entry)
ARGV[4] runs kept
ARGV[5] the schedule's name

Returns 1, or 0 when the claim was settled already (by another scheduler that took it over).
]]
local h = KEYS[1]
if redis.call('HGET', h, 'pending') ~= ARGV[1] then return 0 end
redis.call('HDEL', h, 'pending', 'pending_at')
if ARGV[3] ~= '' then
  redis.call('LPUSH', KEYS[3], cjson.encode({at = tonumber(ARGV[2]), status = 'error',
    note = ARGV[3]}))
  redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[4]) - 1)
  redis.call('HINCRBY', h, 'errors', 1)
end
local cur = redis.call('HMGET', h, 'next', 'paused')
if cur[2] or not cur[1] or cur[1] == '' then
  redis.call('ZREM', KEYS[2], ARGV[5])
else
  redis.call('ZADD', KEYS[2], cur[1], ARGV[5])
end
return 1
